"""The verdict's policy: the one home of every default the acceptance test and tune judge by.

validate, power, history, tune and the CLI read `POLICY`; the docs quote it (tests/test_docs.py
compares each quote with it). Nothing here computes: stats.py holds the method.
"""

from dataclasses import dataclass, field
from types import MappingProxyType


def _per_set(quick, short, full):
    return MappingProxyType({"quick": quick, "short": short, "full": full})


@dataclass(frozen=True)
class Policy:
    alpha: float = 0.05  # the chance of any false win or loss in a family
    tolerance: float = 0.05  # the smallest gain (and loss) that counts
    # "host too noisy" (report.md, results.json `noise`) above this median per-size CV of the runs
    # (stats.median_cv): quiet archived campaigns measured 0.18-0.22, busy ones 0.35-0.39
    noisy_cv: float = 0.30
    # Pairs per module at the first look, per set (--repetitions overrides). --full starts at
    # paired_min so its first look is judged by the crossover test (validate/README.md, "Why
    # --full defaults to 15 pairs"); on 5 pairs that test has 3 degrees of freedom, so the quick
    # sets stay unpaired.
    first_look: MappingProxyType = field(default_factory=lambda: _per_set(5, 5, 15))
    extension_factor: int = 2  # the one extension measures undecided benchmarks up to this x look 1
    # validate --budget/--max-pairs: looks at look 1's pairs times 1, 2, 4, ... (stats.Design.budgeted),
    # this many looks without --max-pairs; alpha is split evenly over the looks
    budget_growth: int = 2
    budget_looks: int = 5
    # the seed figure drops the largest and the smallest run; with 2 a t test cannot decide
    min_pairs: int = 3
    # The crossover test from this many pairs at the first look: with fewer it has half the unpaired
    # test's degrees of freedom. A rule of the design, never of the data.
    paired_min: int = 10
    timeout_s: MappingProxyType = field(default_factory=lambda: _per_set(120.0, 900.0, 900.0))
    retries: int = 1  # extra attempts for a failed run

    def looks(self, first, extend=True):
        """(first, final) pairs of a design whose first look has `first` pairs."""
        return first, first * self.extension_factor if extend else first


POLICY = Policy()
