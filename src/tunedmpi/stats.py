"""Repetition statistics and the tuned-vs-baseline verdict (documented in validate/README.md).

Per message size the reported figure is the seed studies' own: of the repetitions, drop the
largest and the smallest and average the rest. Whether a difference is real is decided per
message-size band: each repetition's band time is the geometric mean over the band's sizes, and a
two-sided exact Mann-Whitney test over those band times (baseline vs tuned) says whether the two
differ beyond the noise of the repetitions. A band wins when the tuned module is better by at
least the tolerance *and* the test is significant, loses in the mirror case, ties otherwise.
"""
import itertools
import math
from dataclasses import dataclass, field
from typing import List, Optional

KB, MB = 1024, 1024 * 1024
# (name, lowest size, highest size) inclusive; size 0 moves no data and is left out of verdicts.
BANDS = (("<=1KB", 1, KB), ("1KB-64KB", KB + 1, 64 * KB), ("64KB-1MB", 64 * KB + 1, MB),
         (">1MB", MB + 1, None))
DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.05
LOWER_IS_BETTER = {"latency_us": True, "bandwidth_MBps": False}


def band_of(size):
    for name, lo, hi in BANDS:
        if size >= lo and (hi is None or size <= hi):
            return name
    return None


def seed_figure(values):
    """The studies' figure: drop the max and the min, mean of the rest (plain mean below 3 values)."""
    vals = sorted(values)
    if not vals:
        return None
    if len(vals) >= 3:
        vals = vals[1:-1]
    return sum(vals) / len(vals)


def geomean(values):
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _ranks(values):
    """Mid-ranks (1-based) so that ties share their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1
        i = j + 1
    return ranks


def mann_whitney_p(a, b):
    """Two-sided p-value of the Mann-Whitney U test of samples a and b.

    Exact (all splits of the pooled ranks, ties included) when there are at most 20,000 splits,
    which covers the 5-vs-5 default (252 splits, smallest possible p = 2/252 = 0.0079); a normal
    approximation with tie correction above that.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    ranks = _ranks(list(a) + list(b))
    observed = sum(ranks[:n1])
    mean = n1 * (n1 + n2 + 1) / 2.0
    dev = abs(observed - mean)
    if math.comb(n1 + n2, n1) <= 20000:
        total = extreme = 0
        for idx in itertools.combinations(range(n1 + n2), n1):
            total += 1
            if abs(sum(ranks[i] for i in idx) - mean) >= dev - 1e-9:
                extreme += 1
        return extreme / total
    n = n1 + n2
    ties = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    var = n1 * n2 / 12.0 * ((n + 1) - sum(t ** 3 - t for t in ties.values()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(dev - 0.5, 0) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


@dataclass
class BandResult:
    benchmark: str
    band: str
    sizes: List[int]
    gain: Optional[float]        # > 1: tuned better (baseline time / tuned time, or bandwidth ratio)
    p_value: Optional[float]
    verdict: str                 # win | tie | lose | no-data
    reason: str
    baseline_band: List[float] = field(default_factory=list)   # per repetition
    tuned_band: List[float] = field(default_factory=list)


def common_sizes(reps_a, reps_b):
    """Sizes present in every successful repetition of both modules (a truncated run drops sizes)."""
    sets = [set(r) for r in list(reps_a) + list(reps_b)]
    return sorted(set.intersection(*sets)) if sets else []


def compare_bands(benchmark, metric, baseline_reps, tuned_reps,
                  tolerance=DEFAULT_TOLERANCE, alpha=DEFAULT_ALPHA):
    """baseline_reps / tuned_reps: one {size: value} per successful repetition.

    Returns one BandResult per band that has sizes in common.
    """
    sizes = common_sizes(baseline_reps, tuned_reps)
    rel = relative_times(baseline_reps, tuned_reps, metric) if baseline_reps and tuned_reps else {}
    out = []
    for name, _, _ in BANDS:
        in_band = [s for s in sizes if band_of(s) == name]
        if not in_band:
            continue
        if len(baseline_reps) < 2 or len(tuned_reps) < 2:
            out.append(BandResult(benchmark, name, in_band, None, None, "no-data",
                                  "fewer than 2 successful repetitions of a module"))
            continue
        # gain > 1: tuned better; the inverse of the tuned module's relative time
        ratios = [1 / rel[s] for s in in_band if s in rel]
        gain = geomean(ratios)
        band_a = [geomean([r[s] for s in in_band]) for r in baseline_reps]
        band_b = [geomean([r[s] for s in in_band]) for r in tuned_reps]
        band_a, band_b = [v for v in band_a if v], [v for v in band_b if v]
        p = mann_whitney_p(band_a, band_b)
        if gain is None:
            verdict, reason = "no-data", "no positive values to compare"
        elif gain >= 1 + tolerance and p < alpha:
            verdict, reason = "win", "tuned better by %.1f%%, p=%.3f" % ((gain - 1) * 100, p)
        elif gain <= 1 / (1 + tolerance) and p < alpha:
            verdict, reason = "lose", "tuned worse by %.1f%%, p=%.3f" % ((1 - gain) * 100, p)
        elif p >= alpha:
            verdict, reason = "tie", "difference %+.1f%% within noise (p=%.3f >= %.2f)" % ((gain - 1) * 100, p, alpha)
        else:
            verdict, reason = "tie", "difference %+.1f%% below the %.0f%% tolerance" % ((gain - 1) * 100, tolerance * 100)
        out.append(BandResult(benchmark, name, in_band, gain, p, verdict, reason, band_a, band_b))
    return out


def reliability(benchmark, baseline_failed, baseline_runs, tuned_failed, tuned_runs):
    """A crash or failure is a decisive outcome, not noise: fewer failures wins."""
    if tuned_failed > baseline_failed:
        verdict = "lose"
    elif baseline_failed > tuned_failed:
        verdict = "win"
    else:
        verdict = "tie"
    reason = "failed runs: baseline %d/%d, tuned %d/%d" % (baseline_failed, baseline_runs, tuned_failed, tuned_runs)
    return BandResult(benchmark, "reliability", [], None, None, verdict, reason)


def module_verdict(results):
    """PASS when no band loses and at least one wins; FAIL otherwise; NO-DATA when nothing compared."""
    verdicts = [r.verdict for r in results if r.verdict != "no-data"]
    if not verdicts:
        return "NO-DATA"
    if "lose" in verdicts:
        return "FAIL"
    return "PASS" if "win" in verdicts else "FAIL"


def relative_times(baseline_reps, candidate_reps, metric):
    """{size: candidate figure / baseline figure} as a time ratio (< 1: candidate better), sizes >= 1
    that every repetition of both has; bandwidths are inverted so that lower is always better."""
    lower = LOWER_IS_BETTER[metric]
    out = {}
    for s in common_sizes(baseline_reps, candidate_reps):
        if s < 1:
            continue
        a = seed_figure([r[s] for r in baseline_reps])
        b = seed_figure([r[s] for r in candidate_reps])
        if a and b and a > 0 and b > 0:
            out[s] = b / a if lower else a / b
    return out
