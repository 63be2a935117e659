"""Repetition statistics and the tuned-vs-baseline verdict.

The one statistics layer: validate, history and power (acceptance/) and tune, persize and regret
(regenerate/) take every rule from here, so each is written once: the bands and their labels, the
seed figure, the band score, Welch's side variance, Welch-Satterthwaite degrees of freedom, Holm's
step-down, the looks, the verdict. The method, step by step and why: docs/design.md,
"Statistics". Distributions and Fisher's exact test are SciPy's.
"""

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from tunedmpi.policy import POLICY


def _scipy():
    """(scipy.special, scipy.stats), imported at the first test: render and install-module, which
    Spack and EasyBuild run with only PyYAML and Jinja2, import this module for its constants."""
    from scipy import special, stats

    return special, stats


KB, MB = 1024, 1024 * 1024
# (name, lowest size, highest size) inclusive; size 0 moves no data and is left out of verdicts.
BANDS = (
    ("<=1KB", 1, KB),
    ("1KB-64KB", KB + 1, 64 * KB),
    ("64KB-1MB", 64 * KB + 1, MB),
    (">1MB", MB + 1, None),
)
LOWER_IS_BETTER = {"latency_us": True, "bandwidth_MBps": False}
TEST_NAME = "Welch t on per-run log band scores"


def band_of(size):
    for name, lo, hi in BANDS:
        if size >= lo and (hi is None or size <= hi):
            return name
    return None


def sizes_by_band(sizes):
    """{band: its sizes} of ascending sizes, in BANDS' order (size 0 is in none)."""
    out = {}
    for s in sizes:
        if s >= 1:
            out.setdefault(band_of(s), []).append(s)
    return out


def _size_label(n):
    for unit, scale in (("MB", MB), ("KB", KB)):
        if n >= scale and n % scale == 0:
            return n // scale, unit
    return n, "B"


def band_labels():
    """BANDS as people read them: "≤ 1 KB, 1–64 KB, 64 KB–1 MB, > 1 MB" (reports and docs)."""
    out = []
    for i, (_, lo, hi) in enumerate(BANDS):
        if i == 0:
            out.append("≤ %d %s" % _size_label(hi))
        elif hi is None:
            out.append("> %d %s" % _size_label(lo - 1))
        else:
            (a, ua), (b, ub) = _size_label(lo - 1), _size_label(hi)
            out.append("%d–%d %s" % (a, b, ub) if ua == ub else "%d %s–%d %s" % (a, ua, b, ub))
    return ", ".join(out)


def seed_figure(values):
    """The studies' figure: drop the max and the min, mean of the rest (plain mean below 3 values)."""
    vals = sorted(values)
    if len(vals) >= 3:
        vals = vals[1:-1]
    return sum(vals) / len(vals) if vals else None


def geomean(values):
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


# ---- distributions (SciPy) -------------------------------------------------------------------
# scipy.special's kernels are the ones scipy.stats.t and .norm use, without their per-call
# overhead (power and tune call these tens of thousands of times).


def t_two_sided(t, df):
    """P(|T| >= |t|) for Student's t with df (> 0, not necessarily whole) degrees of freedom."""
    return float(2.0 * _scipy()[0].stdtr(df, -abs(t)))


def t_quantile(p_two_sided, df):
    """The t > 0 with P(|T| >= t) = p_two_sided."""
    return float(-_scipy()[0].stdtrit(df, p_two_sided / 2.0))


def normal_cdf(z):
    return float(_scipy()[0].ndtr(z))


def normal_pdf(z):
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def fisher_two_sided(a, b, c, d):
    """Fisher's exact test of the 2 x 2 table [[a, b], [c, d]]: two-sided p (tables at most as likely)."""
    return float(_scipy()[1].fisher_exact([[a, b], [c, d]]).pvalue)


def holm(p_values, alpha, m=None, done=0, nominal=None):
    """Holm's step-down: the level each of `p_values` had to reach (rejected: p <= level); at the
    first p above its level Holm stops, every p left gets that level. m: the family's size
    (default these plus `done`, members rejected at an earlier look, whose shares of alpha pass
    on); nominal(share): the level a share is tested at (a look's Pocock level)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values) + done if m is None else m
    levels, rejected = [None] * len(p_values), done
    for k, i in enumerate(order):
        share = alpha / (m - rejected)
        levels[i] = share if nominal is None else nominal(share)
        if p_values[i] > levels[i]:
            for j in order[k + 1 :]:
                levels[j] = levels[i]
            break
        rejected += 1
    return levels


# ---- the test --------------------------------------------------------------------------------


@dataclass
class TestResult:
    diff: float  # mean of the tuned module's scores minus the baseline's (log cost; < 0: tuned better)
    se: float
    df: float
    p: float  # two-sided


def welch_side(values, floor=0.0):
    """(mean, its squared standard error) of one side of Welch's test (at least 2 values); the
    sample variance is at least `floor`, what printed digits alone can hide (resolution_floor)."""
    n = len(values)
    mean = sum(values) / n
    var = sum((x - mean) ** 2 for x in values) / (n - 1)
    return mean, max(var, floor) / n


def _t(diff, parts, df_if_exact):
    """The TestResult of an estimate `diff` whose variance is the sum of independent parts
    [(variance, its df)]: Welch-Satterthwaite df, two-sided; no variance: p 1 or 0, df_if_exact."""
    se2 = sum(v for v, _ in parts)
    if se2 <= 0:
        return TestResult(diff, 0.0, df_if_exact, 1.0 if diff == 0 else 0.0)
    den = sum(v * v / df for v, df in parts if v)
    df = (se2**2 / den if den > 0 else None) or df_if_exact
    return TestResult(diff, math.sqrt(se2), df, t_two_sided(diff / math.sqrt(se2), df))


def contrast(sides):
    """Welch's t for a signed sum of independent sides' means, sides = [(sign, values, floor)] of at
    least 2 values each: two samples (welch), or a gain's change between campaigns (gain_change)."""
    diff, parts = 0.0, []
    for sign, values, floor in sides:
        mean, d = welch_side(values, floor)
        diff += sign * mean
        parts.append((d, len(values) - 1))
    return _t(diff, parts, float(sum(n for _, n in parts)))


def welch(a, b, floor_a=0.0, floor_b=0.0):
    """Welch's two-sided t test of b against a (each at least 2 values); without the floors
    (welch_side's) SciPy's ttest_ind(b, a, equal_var=False), which has no place for them."""
    return contrast([(-1, a, floor_a), (1, b, floor_b)])


def _cost(value, metric):
    """Log cost of one value: log time, or log 1/bandwidth, so that lower is always better."""
    return math.log(value) if LOWER_IS_BETTER[metric] else -math.log(value)


def band_scores(reps, sizes, metric):
    """One score per run: the mean over the band's sizes of its log cost (the log of the geometric
    mean band time). Sizes are centred implicitly: every run has the same sizes."""
    return [sum(_cost(r[s], metric) for s in sizes) / len(sizes) for r in reps]


@functools.lru_cache(maxsize=65536)
def _decimals(value):
    text = repr(float(value))
    if "e" in text or "E" in text:
        mant, exp = text.lower().split("e")
        return max(0, min(12, (len(mant.split(".")[1]) if "." in mant else 0) - int(exp)))
    return min(12, len(text.split(".")[1]) if "." in text else 0)


def resolution_floor(reps, sizes, all_reps):
    """Variance of a run's band score that printed digits alone can hide: a value printed as 0.04
    is only known to +-0.005. Per size, the resolution is the finest seen among all_reps (both
    modules); rounding error is uniform, so its relative variance is (step/value)^2 / 12."""
    if not reps:
        return 0.0
    total = 0.0
    for s in sizes:
        step = 10.0 ** -max(_decimals(r[s]) for r in all_reps)
        mean = sum(r[s] for r in reps) / len(reps)
        total += (step / mean) ** 2 / 12.0
    return total / len(sizes) ** 2


def median_cv(series):
    """The runs' noise: the median coefficient of variation (SD / mean) over every (benchmark,
    module, size) of 2 or more runs (series: lists of runs, each {size: figure}), or None."""
    cvs = []
    for reps in series:
        for size in common_sizes(reps, []) if len(reps) >= 2 else ():
            values = [r[size] for r in reps]
            mean = sum(values) / len(values)
            if mean > 0:
                var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
                cvs.append(math.sqrt(var) / mean)
    return statistics.median(cvs) if cvs else None


# ---- the host's state ------------------------------------------------------------------------
# The runner records a cache-line round trip between two CPUs just before and after every run
# (bench/probes.py, probe_host). A host can have slow spells that slow every run in them, under
# either module (measured: results-archive/notes/2026-11-23-host-slow-state.md); comparing the
# modules within each state removes that from the comparison (tune; validate only reports it).
SLOW_FACTOR = 2.0  # a figure this many times the campaign's fast level is the slow state
FAST_QUANTILE = 0.1  # the fast level: this quantile of all the campaign's figures
HOST_TEST_NAME = "Welch t on per-run log band scores within each host state, weighted by runs"


def host_labels(hosts):
    """(one label per run, slow limit in ns) from the runs' host figures ({"before_ns", "after_ns"}
    or None): above SLOW_FACTOR x the campaign's FAST_QUANTILE is slow; a run is "fast", "slow",
    "changed" (during the run) or None (no figures; limit None when no run has any)."""

    def figures(h):
        return [v for v in ((h or {}).get("before_ns"), (h or {}).get("after_ns")) if v]

    values = sorted(v for h in hosts for v in figures(h))
    if not values:
        return [None] * len(hosts), None
    limit = SLOW_FACTOR * values[int(FAST_QUANTILE * (len(values) - 1))]
    labels = []
    for h in hosts:
        states = {"slow" if v > limit else "fast" for v in figures(h)}
        labels.append(None if not states else states.pop() if len(states) == 1 else "changed")
    return labels, limit


def host_strata(labels_a, labels_b, alpha=POLICY.alpha):
    """(labels_a, labels_b) to hold the host state equal by, or (None, why not). Not when no run has
    a state, and not when the share of fast runs differs between the modules (Fisher's exact test at
    alpha): the state may then be the module's own doing, and holding it equal would hide that cost."""
    if not any(labels_a) and not any(labels_b):
        return None, "no host state recorded"
    fa, fb = sum(label == "fast" for label in labels_a), sum(label == "fast" for label in labels_b)
    p = fisher_two_sided(fa, len(labels_a) - fa, fb, len(labels_b) - fb)
    if p <= alpha:
        return None, (
            "the host state depends on the module (fast in %d/%d baseline and %d/%d tuned runs, "
            "Fisher p=%.2g): compared without holding it equal"
            % (fa, len(labels_a), fb, len(labels_b), p)
        )
    return (list(labels_a), list(labels_b)), ""


class RunPoints(dict):
    """One run's {size: value} that also knows the host state the run met (host_labels; None: not
    known), for callers that carry runs as lists of points (tune's choices)."""

    __slots__ = ("state",)

    def __init__(self, points, state=None):
        super().__init__(points)
        self.state = state


def strata_of(reps_a, reps_b, alpha=POLICY.alpha):
    """host_strata's labels for two sides' runs (RunPoints), or None: plain dicts, no state, or a
    state that depends on the side."""
    a, b = ([getattr(r, "state", None) for r in reps] for reps in (reps_a, reps_b))
    return host_strata(a, b, alpha)[0]


def stratified(a, b, labels_a, labels_b, floor_a=0.0, floor_b=0.0):
    """welch within each label that has >= 2 runs of each side, weighted by runs (post-
    stratification). Returns (TestResult, {label: [runs a, runs b]} used), or without such a
    label the test over all runs and {}."""
    groups = {}
    for side, values, labels in ((0, a, labels_a), (1, b, labels_b)):
        for v, label in zip(values, labels):
            groups.setdefault(label, ([], []))[side].append(v)
    used = {label: g for label, g in groups.items() if len(g[0]) >= 2 and len(g[1]) >= 2}
    if not used:
        return welch(a, b, floor_a, floor_b), {}
    total = float(sum(len(ga) + len(gb) for ga, gb in used.values()))
    diff, parts = 0.0, []
    for ga, gb in used.values():
        res = welch(ga, gb, floor_a, floor_b)
        w = (len(ga) + len(gb)) / total
        diff += w * res.diff
        parts.append(((w * res.se) ** 2, res.df))
    counts = {
        ("none" if label is None else label): [len(ga), len(gb)]
        for label, (ga, gb) in sorted(used.items(), key=lambda kv: str(kv[0]))
    }
    return _t(diff, parts, total - 2), counts


# ---- pairs: the crossover test --------------------------------------------------------------
# validate measures the modules in pairs, one right after the other, in ABBA order (pair_order).
# Neighbouring runs share much of a host's run-to-run noise, which the crossover test cancels
# (measured: results-archive/notes/2026-11-24-crossover-test.md). With few pairs it has half the
# unpaired test's degrees of freedom, so it is used from POLICY.paired_min pairs at the first look.
PAIRED_TEST_NAME = (
    "crossover t on paired log band scores (Welch between the A-B and B-A pairs' differences)"
)


def paired(design):
    """Whether a campaign of this design is judged by the crossover test over its pairs: from
    POLICY.paired_min pairs at the first look (validate judges so, power simulates so)."""
    return design is not None and design.first >= POLICY.paired_min


def pairs_of(baseline_keys, tuned_keys, baseline_first):
    """compare_bands' `pairs`: [(i, j, baseline_first(key))] where baseline_keys[i] ==
    tuned_keys[j] == key (their repetition); runs without their pair are left out."""
    where = {k: j for j, k in enumerate(tuned_keys)}
    return [(i, where[k], baseline_first(k)) for i, k in enumerate(baseline_keys) if k in where]


def crossover(a, b, baseline_first, floor_a=0.0, floor_b=0.0):
    """The 2 x 2 crossover analysis of pairs (a[i], b[i]) run in the order baseline_first[i] says:
    d = b - a is the module effect plus running second's (baseline first), or minus it, so welch
    between the two groups' d and -d is twice the module effect with running second cancelled.
    A TestResult on welch(a, b)'s scale, or None when a group has fewer than 2 pairs."""
    first = [y - x for x, y, f in zip(a, b, baseline_first) if f]
    second = [x - y for x, y, f in zip(a, b, baseline_first) if not f]
    if len(first) < 2 or len(second) < 2:
        return None
    floor = floor_a + floor_b  # a difference of two runs varies at least as much as both
    res = welch(second, first, floor, floor)
    return TestResult(res.diff / 2, res.se / 2, res.df, res.p)


# ---- sequential design -----------------------------------------------------------------------


def simpson(f, lo, hi, steps=400):
    """Simpson's rule: the integral of f over [lo, hi] (steps even)."""
    h = (hi - lo) / steps
    weights = (1 if i in (0, steps) else 4 if i % 2 else 2 for i in range(steps + 1))
    return sum(f(lo + i * h) * w for i, w in enumerate(weights)) * h / 3


@functools.lru_cache(maxsize=256)
def _pocock_nominal(alpha, fraction):
    """Two-sided nominal level c such that two looks at information fractions `fraction` and 1,
    each rejecting at p <= c, reject a true null with probability alpha (Pocock's boundary)."""
    rho = math.sqrt(fraction)
    s = math.sqrt(1 - rho * rho)

    def inside(c):  # P(|Z1| < c and |Z2| < c)
        return simpson(
            lambda z: (
                normal_pdf(z) * (normal_cdf((c - rho * z) / s) - normal_cdf((-c - rho * z) / s))
            ),
            -c,
            c,
        )

    lo, hi = 0.5, 8.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1 - inside(mid) > alpha:
            lo = mid
        else:
            hi = mid
    return math.erfc((lo + hi) / 2 / math.sqrt(2))


@dataclass(frozen=True)
class Design:
    """Group-sequential plan: `first` repetitions, then at most one extension to `final` for the
    benchmarks with an undecided band, both looks at Pocock's nominal level for the information
    fraction first/final. A budget campaign (`budgeted`) has a `schedule` instead: every look's
    repetitions fixed in advance, each look at alpha / looks (Bonferroni: valid under any
    dependence, and a look the budget stops spends nothing)."""

    first: int = POLICY.first_look["quick"]
    final: int = POLICY.looks(POLICY.first_look["quick"])[1]
    schedule: Optional[Tuple[int, ...]] = None

    @classmethod
    def budgeted(cls, first, max_pairs=None):
        """Looks at first, then doubling (POLICY.budget_growth) up to max_pairs, the last look
        (default: POLICY.budget_looks looks)."""
        cap = max_pairs or first * POLICY.budget_growth ** (POLICY.budget_looks - 1)
        sizes = [first]
        while sizes[-1] < cap:
            sizes.append(min(sizes[-1] * POLICY.budget_growth, cap))
        return cls(first, sizes[-1], tuple(sizes))

    def sizes(self):
        """Repetitions per module at each look."""
        if self.schedule:
            return self.schedule
        return (self.first, self.final) if self.final > self.first else (self.first,)

    def level(self, alpha, look):
        """Nominal two-sided level at a look for overall level alpha."""
        if self.schedule:
            return alpha / len(self.schedule)
        if self.final <= self.first:
            return alpha
        return _pocock_nominal(round(alpha, 12), self.first / float(self.final))

    def levels(self, alpha=POLICY.alpha):
        return tuple(self.level(alpha, k + 1) for k in range(len(self.sizes())))

    def describe(self, alpha):
        """The looks as reports name them."""
        if self.schedule:
            return (
                "up to %d looks at %s runs per module while a band is undecided, within the "
                "budget (Bonferroni over looks: level %.3g per look)"
                % (len(self.schedule), "/".join(map(str, self.schedule)), self.level(alpha, 1))
            )
        if self.final <= self.first:
            return "one look"
        return (
            "two looks: %d runs per module, then one extension to %d runs for benchmarks with an "
            "undecided band (Pocock levels %.3g per look)"
            % (self.first, self.final, self.level(alpha, 1))
        )


# ---- verdicts --------------------------------------------------------------------------------


@dataclass
class BandResult:
    benchmark: str
    band: str
    sizes: List[int]
    # > 1: tuned better (seed figures: baseline time / tuned time, or bandwidth ratio)
    gain: Optional[float]
    p_value: Optional[float]  # two-sided p of the test, before any adjustment
    verdict: str  # win | tie | lose | no-data
    reason: str
    # per run: geometric mean over the band's sizes
    baseline_band: List[float] = field(default_factory=list)
    tuned_band: List[float] = field(default_factory=list)
    # the test's gain: ratio of the geometric means of run band times
    estimate: Optional[float] = None
    ci: Optional[List[float]] = None  # [low, high] of the estimate at the band's level
    level: Optional[float] = None  # the p-value the band had to reach (Holm step, look)
    look: Optional[int] = None  # 1 or 2 with a Design; None for a single fixed-size look
    n_baseline: int = 0
    n_tuned: int = 0
    undecided: bool = False  # not significant and the interval reaches beyond the tolerance
    test: str = ""
    # {host state: [baseline runs, tuned runs]} the test held equal
    host_strata: Optional[dict] = None
    # {"baseline first": n, "tuned first": n}: the crossover test's pairs
    pairs: Optional[dict] = None


def common_sizes(reps_a, reps_b):
    """Sizes present in every successful repetition of both modules (a truncated run drops sizes)."""
    sets = [set(r) for r in list(reps_a) + list(reps_b)]
    return sorted(set.intersection(*sets)) if sets else []


def _decide(r, tolerance):
    """Set verdict, reason and undecided of a tested band from p, level, estimate and gain."""
    tol_hi, tol_lo = 1 + tolerance, 1 / (1 + tolerance)
    where = "" if r.look is None else ", look %d" % r.look
    r.verdict = "tie"
    if r.p_value <= r.level:
        better = r.estimate > 1 and r.gain >= tol_hi
        if better or (r.estimate < 1 and r.gain <= tol_lo):
            r.verdict = "win" if better else "lose"
            word = "better" if better else "worse"
            r.reason = "tuned %s by %.1f%%" % (word, abs(r.gain - 1) * 100)
            r.reason += ", p=%.2g <= %.2g%s" % (r.p_value, r.level, where)
        elif (r.estimate > 1) != (r.gain > 1):
            r.reason = (
                f"the test (x{r.estimate:.3f}) and the seed figures (x{r.gain:.3f}) disagree in "
                "direction"
            )
        else:
            r.reason = (
                f"real difference {(r.gain - 1) * 100:+.1f}% below the {tolerance * 100:.0f}% "
                f"tolerance (p={r.p_value:.2g})"
            )
        return r
    lo, hi = r.ci
    if tol_lo < lo and hi < tol_hi:
        r.reason = (
            "difference %+.1f%% within noise (p=%.2g > %.2g%s); interval x%.3f-x%.3f inside the tolerance"
            % ((r.gain - 1) * 100, r.p_value, r.level, where, lo, hi)
        )
    else:
        r.undecided = True
        r.reason = (
            "difference %+.1f%% within noise (p=%.2g > %.2g%s); undecided: interval x%.3f-x%.3f"
            % ((r.gain - 1) * 100, r.p_value, r.level, where, lo, hi)
        )
    return r


def compare_bands(
    benchmark,
    metric,
    baseline_reps,
    tuned_reps,
    tolerance=POLICY.tolerance,
    alpha=POLICY.alpha,
    design=None,
    previous=None,
    strata=None,
    pairs=None,
):
    """One look of the per-benchmark variant (Procedure scope PER_BENCHMARK: tune, history): this
    benchmark's bands are their own Holm family. Without `design`: one look at alpha; with it, look
    1, or look 2 when `previous` holds this benchmark's look-1 results."""
    tested = test_bands(
        benchmark, metric, baseline_reps, tuned_reps, design, previous, strata, pairs
    )
    return Procedure(design, tolerance, alpha, PER_BENCHMARK).look(tested, previous)


def test_bands(
    benchmark,
    metric,
    baseline_reps,
    tuned_reps,
    design=None,
    previous=None,
    strata=None,
    pairs=None,
    look=None,
):
    """Each band's test, not yet decided: [(BandResult, TestResult or None)], None for bands
    without data and for bands rejected at an earlier look (kept as they were).
    baseline_reps / tuned_reps: one {size: value} per successful run (all runs so far); strata:
    host_strata's labels of both sides: the test is made within each state (`stratified`).
    pairs: pairs_of's pairs: the `crossover` test over them (strata unused).
    design: look 1, or look 2 when `previous` holds this benchmark's look-1 results; `look` names
    a later look of a budget design, `previous` then holding the bands at the look before."""
    rel = relative_times(baseline_reps, tuned_reps, metric) if baseline_reps and tuned_reps else {}
    if design is None:
        look = None
    elif look is None:
        look = 2 if previous is not None else 1
    before = {r.band: r for r in (previous or []) if r.benchmark == benchmark}
    out = []  # (band, its test result: None when there is nothing to decide)
    # the name a band gets before it is tested (no-data bands); each tested band's comes from its test
    test_name = (
        PAIRED_TEST_NAME if pairs is not None else TEST_NAME if strata is None else HOST_TEST_NAME
    )
    for name, in_band in sizes_by_band(common_sizes(baseline_reps, tuned_reps)).items():
        why = "fewer than 2 successful repetitions of a module"
        r = BandResult(benchmark, name, in_band, None, None, "no-data", why, test=test_name)
        if len(baseline_reps) < 2 or len(tuned_reps) < 2:
            out.append((r, None))
            continue
        a, b = (band_scores(reps, in_band, metric) for reps in (baseline_reps, tuned_reps))
        sign = 1 if LOWER_IS_BETTER[metric] else -1
        r.gain, r.reason = band_gain(rel, in_band), "no positive values to compare"
        r.baseline_band, r.tuned_band = ([math.exp(sign * x) for x in v] for v in (a, b))
        r.look, r.n_baseline, r.n_tuned = look, len(a), len(b)
        if r.gain is None:
            out.append((r, None))
            continue
        old = before.get(name)
        if rejected(old):
            out.append((old, None))  # rejected at look 1: that decision is final
            continue
        everyone = list(baseline_reps) + list(tuned_reps)
        floors = [resolution_floor(reps, in_band, everyone) for reps in (baseline_reps, tuned_reps)]
        res = None
        if pairs:  # (none: crossover has no group of 2 pairs either)
            ia, ib, order = zip(*pairs)
            res = crossover([a[i] for i in ia], [b[j] for j in ib], order, *floors)
        # the name says which test gave p: a fallback (too few pairs of an order, no state with 2
        # runs of each module) is named as the test it fell back to
        if res is not None:
            r.test = PAIRED_TEST_NAME
            first = sum(1 for p in pairs if p[2])
            r.pairs = {"baseline first": first, "tuned first": len(pairs) - first}
        elif strata is None:
            res = welch(a, b, *floors)
            r.test = TEST_NAME
        else:
            res, r.host_strata = stratified(a, b, strata[0], strata[1], *floors)
            r.test = HOST_TEST_NAME if r.host_strata else TEST_NAME
        r.p_value, r.estimate = res.p, math.exp(-res.diff)
        out.append((r, res))
    return out


def rejected(r):
    """Whether a decided band's test rejected "no difference" (at look 1: final, its share of
    alpha passes on to the look-2 tests)."""
    return r is not None and r.p_value is not None and r.level is not None and r.p_value <= r.level


def judge_family(
    tested, tolerance=POLICY.tolerance, alpha=POLICY.alpha, design=None, previous=None
):
    """The verdict of every band in `tested` (test_bands' pairs): one family, Holm's step-down over
    all its tests (a win and a loss are both rejections) at the look's nominal levels. previous:
    the family at the look before; its rejections keep their verdict and pass their share of alpha
    on, and bands not tested again stay members, not rejected. Returns the bands."""
    pending = [(r, res) for r, res in tested if res is not None]
    look = pending[0][0].look if pending else None
    family = [r for r in (previous or []) if r.p_value is not None and r.level is not None]
    done = sum(1 for r in family if rejected(r))
    nominal = None if design is None else lambda share: design.level(share, look)
    ps = [r.p_value for r, _ in pending]
    levels = holm(ps, alpha, m=max(len(family), done + len(pending)), done=done, nominal=nominal)
    for (r, res), level in zip(pending, levels):
        r.level = level
        q = t_quantile(r.level, res.df) * res.se if res.se > 0 else 0.0
        r.ci = sorted([math.exp(-(res.diff + q)), math.exp(-(res.diff - q))])
        _decide(r, tolerance)
        if r.pairs:
            n = sum(r.pairs.values())
            first = (r.pairs["baseline first"], r.pairs["tuned first"])
            r.reason += "; paired: %d pairs (%d baseline first, %d tuned first)" % ((n,) + first)
            left = r.n_baseline + r.n_tuned - 2 * n
            if left:
                r.reason += "; %d run(s) without their pair left out" % left
        if r.host_strata:
            left = r.n_baseline + r.n_tuned - sum(sum(n) for n in r.host_strata.values())
            held = ", ".join("%s %d+%d" % (s, na, nb) for s, (na, nb) in r.host_strata.items())
            if left:
                held += "; %d run(s) left out: their state has fewer than 2 runs of a module" % left
            r.reason += "; host state held equal (%s)" % held
    return [r for r, _ in tested]


def extension(band_results, design, look=1):
    """{benchmark: [undecided bands]} judged at `look` that the design's next look would measure
    again; empty after its last look."""
    out = {}
    for r in band_results:
        if r.undecided and r.look == look and design is not None and look < len(design.sizes()):
            out.setdefault(r.benchmark, []).append(r.band)
    return out


CAMPAIGN, PER_BENCHMARK = "campaign", "benchmark"  # Procedure.scope: what one Holm family is


@dataclass
class Outcome:
    """What the Procedure decided: every band at its last look (reliability bands too), the look-1
    bands, the benchmarks judged again at any later look, the verdict."""

    bands: List[BandResult]
    look1: List[BandResult]
    extended: List[str]
    verdict: str


@dataclass(frozen=True)
class Procedure:
    """The verdict's procedure, written once: look 1 -> extension -> the next look -> ... -> Holm
    family -> module verdict. validate runs it on measured runs, power on drawn ones,
    compare_bands (tune, history) makes one look of it. scope CAMPAIGN (validate): one family of
    every benchmark x band; PER_BENCHMARK: each benchmark's bands a family of their own."""

    design: Optional[Design] = None
    tolerance: float = POLICY.tolerance
    alpha: float = POLICY.alpha
    scope: str = CAMPAIGN

    def look(self, tested, previous=None):
        """Decide `tested` (test_bands' pairs, in order) at one look; previous: every band at the
        look before (judge_family). Returns the bands in the order given."""
        if self.scope == CAMPAIGN:
            return judge_family(tested, self.tolerance, self.alpha, self.design, previous)
        by = {}
        for t in tested:
            by.setdefault(t[0].benchmark, []).append(t)
        out = []
        for bench, mine in by.items():
            before = None if previous is None else [r for r in previous if r.benchmark == bench]
            out += judge_family(mine, self.tolerance, self.alpha, self.design, before)
        return out

    def run(self, benchmarks, test, extend=None):
        """The whole procedure, an Outcome. test(benchmark, look, previous) -> test_bands' list on
        the runs of `look`, previous its bands at the look before. extend(undecided {benchmark:
        bands}, look) -> the benchmarks measured up to that look (default: the undecided ones);
        none ends the looks (all decided, a budget spent)."""
        one = self.look([t for b in benchmarks for t in test(b, 1, None)])
        final = {(r.benchmark, r.band): r for r in one}
        extended = {}  # ordered set
        looks = len(self.design.sizes()) if self.design is not None else 1
        for look in range(2, looks + 1):
            undecided = extension(list(final.values()), self.design, look - 1)
            again = list(undecided) if extend is None else list(extend(undecided, look))
            if not again:
                break
            before = list(final.values())
            tested = [
                t for b in again for t in test(b, look, [r for r in before if r.benchmark == b])
            ]
            final.update(((r.benchmark, r.band), r) for r in self.look(tested, before))
            extended.update(dict.fromkeys(again))
        bands = list(final.values())
        return Outcome(bands, one, list(extended), module_verdict(bands))


def pair_order(rep, run_index=0):
    """Which module runs first in repetition `rep` (1-based) of the run at position `run_index` of
    the repetition: counterbalanced (ABBA), so an effect of running second cancels over every two
    repetitions instead of always favouring one module."""
    return ("baseline", "tuned") if (rep + run_index) % 2 == 1 else ("tuned", "baseline")


def reliability(benchmark, baseline_failed, baseline_runs, tuned_failed, tuned_runs):
    """A crash or failure is a decisive outcome, not noise: fewer failures wins."""
    verdict = "tie"
    if tuned_failed != baseline_failed:
        verdict = "lose" if tuned_failed > baseline_failed else "win"
    counts = (baseline_failed, baseline_runs, tuned_failed, tuned_runs)
    reason = "failed runs: baseline %d/%d, tuned %d/%d" % counts
    return BandResult(benchmark, "reliability", [], None, None, verdict, reason)


# The module's verdicts, one meaning each (module_verdict; docs/design.md, "Statistics" step 10;
# validate.EXIT_CODES gives each its exit code). NO-GAIN: shown equivalent within the tolerance.
PASS, FAIL, NO_GAIN, INCONCLUSIVE, NO_DATA = "PASS", "FAIL", "NO-GAIN", "INCONCLUSIVE", "NO-DATA"


def module_verdict(results):
    """PASS, FAIL, NO-GAIN, INCONCLUSIVE or NO-DATA (above) from the bands' verdicts."""
    decided = [r for r in results if r.verdict != "no-data"]
    verdicts = [r.verdict for r in decided]
    if not verdicts:
        return NO_DATA
    if "lose" in verdicts:
        return FAIL
    if "win" in verdicts:
        return PASS
    return INCONCLUSIVE if any(r.undecided for r in decided) else NO_GAIN


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


def band_gain(relative, sizes):
    """The gain a band reports (> 1: tuned better): the geometric mean over its sizes of the inverse
    relative_times; None without one."""
    return geomean([1 / relative[s] for s in sizes if s in relative])


# ---- drift: the change of a gain between two campaigns (history) ------------------------------


def gain_change(ref, now, sizes, metric):
    """Welch's t for the change of one band's log gain (baseline's mean band score minus tuned's)
    from campaign `ref` to `now`, each (baseline runs, tuned runs); diff < 0: the gain fell. The
    four sides count as independent, overstating the variance where pairs share the host's noise:
    a change must be clear to be called. None without a shared size or 2 runs a side."""
    if min(len(runs) for runs in ref + now) < 2:
        return None
    shared = set(common_sizes(ref[0] + now[0], ref[1] + now[1]))
    sizes = [s for s in sizes if s in shared]
    if not sizes:
        return None
    sides = []
    for sign, (base, tuned) in ((-1, ref), (1, now)):
        for direction, runs in ((1, base), (-1, tuned)):
            floor = resolution_floor(runs, sizes, base + tuned)
            sides.append((sign * direction, band_scores(runs, sizes, metric), floor))
    return contrast(sides)


def drifted(changes, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """Which of a campaign's band changes are drift, one Holm family. changes: [(reported gain now /
    before, gain_change's TestResult)]. Drift mirrors a band's loss (_decide): p reaches its level,
    the estimate is a fall and the reported gain fell by the tolerance. Returns [(level, drift)]."""
    levels = holm([t.p for _, t in changes], alpha)
    return [
        (level, t.p <= level and t.diff < 0 and ratio <= 1 / (1 + tolerance))
        for (ratio, t), level in zip(changes, levels)
    ]


def per_size_best(relative):
    """{size: lowest relative time} over several {size: relative time} (the per-size oracle)."""
    best = {}
    for rels in relative:
        for size, rel in rels.items():
            best[size] = min(best.get(size, rel), rel)
    return best
