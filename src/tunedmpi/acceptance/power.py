"""`tunedmpi power`: how often the verdict is wrong, and how often it finds a real gain, on this
machine's own noise (method: docs/design.md, "Statistics"; use: validate/README.md).

Reads validate result directories (results.json) and results-store campaigns (campaign.json plus
one record per run), or directories holding either, and pools their runs:

- **same-configuration pools**: every successful run of one configuration and benchmark (one
  module in validate campaigns of the same suite, set and size; one store configuration across
  a campaign's stages, e.g. the baseline every stage measures again);
- **residual pools**: per campaign and benchmark, each run's log values minus its group's mean
  (module, or configuration x stage), scaled by sqrt(n/(n-1)) to undo the centring: each run's
  noise without the modules' difference, so A/B campaigns give A/A data too (approximately).

A/A: runs drawn without replacement, half to each side, judged as validate judges (any band that
wins or loses is a false call); power: the same draws with one side's band `gain` times faster.
Also measured: run-to-run noise, how much sizes share a run's slowness (intra-class
correlation), drift, and the effect of running second in a pair.
"""

import dataclasses
import math
import os
import random
import statistics
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tunedmpi import stats
from tunedmpi.acceptance import results
from tunedmpi.bench import store
from tunedmpi.errors import InputError
from tunedmpi.policy import POLICY


@dataclass
class Run:
    source: str  # campaign directory name
    bench: str
    metric: str
    suite: str
    config: tuple  # identity of the configuration: same value = same configuration
    group: tuple  # runs centred together for residual pools
    role: str  # validate: baseline | tuned; store: the config id
    rep: int
    order: float  # execution order: validate, position in the run list; store, minutes since the first record
    points: dict
    state: Optional[str] = None  # host state (stats.host_labels) where the run recorded it
    baseline_first: Optional[bool] = None  # validate: the baseline ran first in this run's pair
    run_name: str = ""  # validate: the run (benchmark process) that measured it, e.g. collectives


@dataclass
class Source:
    name: str
    kind: str  # validate | store
    runs: list
    timed: bool  # order is in minutes (store records' times), not positions
    aa: bool = False  # a validate campaign with the same module on both sides
    design: Optional[stats.Design] = None  # validate: the looks it was run with (results.looks_of)


# ---- loading ---------------------------------------------------------------------------------


RESULTS_FIX = (
    "give the --out directory of a finished validate/run.sh (a damaged results.json: run "
    "validate again)"
)


def _validate_source(path):
    where = path / "results.json"
    res = store.read_json(where, RESULTS_FIX)
    results.check_runs(res, where)
    final, first = OrderedDict(), {}
    # later attempts replace earlier ones; list order = run order
    for i, r in enumerate(res.get("runs", [])):
        final[(r["run"], r["role"], r["rep"])] = (i, r)
        first.setdefault((r["run"], r["rep"]), r["role"])  # who ran first, as validate reads it
    geo = res.get("geometry", {})
    # as validate labels them
    labels, _ = stats.host_labels([r.get("host") for _, r in final.values()])
    state = {id(r): label for (_, r), label in zip(final.values(), labels)}
    runs = []
    for i, r in sorted(final.values(), key=lambda x: x[0]):
        if r["status"] != "ok":
            continue
        module = r.get("module") or res["modules"][r["role"]]
        for bench, s in r["series"].items():
            config = ("validate", s["suite"], res.get("set"), geo.get("np"), module, bench)
            key = "runs[%d].series.%s.points" % (i, bench)
            points = store.checked_points(s["points"], where, key, RESULTS_FIX)
            runs.append(
                Run(
                    path.name,
                    bench,
                    s["metric"],
                    s["suite"],
                    config,
                    (path.name, module, bench),
                    r["role"],
                    r["rep"],
                    float(i),
                    points,
                    state[id(r)],
                    first[(r["run"], r["rep"])] == "baseline",
                    r["run"],
                )
            )
    mods = res.get("modules", {})
    aa = bool(mods) and mods.get("baseline") == mods.get("tuned")
    looks = results.looks_of(res) if "design" in res or "repetitions" in res else None
    return Source(
        path.name, "validate", runs, False, aa, looks and results.design_from(looks, where)
    )


def _store_source(path):
    """Runs of a store campaign, ordered by round (stage in campaign order, then repetition); in
    minutes when the records' file times confirm that order (copies and checkouts lose them)."""
    meta, records = store.load_campaign(path)
    stages = [st["stage"] for st in meta.get("stages", [])]
    stages += sorted({r["stage"] for r in records} - set(stages))
    top = max([r["rep"] for r in records] or [1]) + 1
    runs, times, rounds = [], [], {}
    labels, _ = stats.host_labels([r.get("host") for r in records])
    for r, state in zip(records, labels):
        if r["status"] != "ok":
            continue
        rnd = stages.index(r["stage"]) * top + r["rep"]
        rec = store.record_path(path, r["stage"], r["config"], r["run"], r["rep"])
        t = os.path.getmtime(rec) if rec.is_file() else 0.0
        rounds.setdefault(rnd, []).append(t)
        for bench, s in r["series"].items():
            config = ("store", path.name, r["config_id"], bench)
            runs.append(
                Run(
                    path.name,
                    bench,
                    s["metric"],
                    s["suite"],
                    config,
                    (path.name, r["config_id"], r["stage"], bench),
                    r["config_id"],
                    r["rep"],
                    float(rnd),
                    s["points"],
                    state,
                )
            )
            times.append(t)
    means = [sum(rounds[k]) / len(rounds[k]) for k in sorted(rounds)]
    timed = len(means) > 2 and all(b - a > 1.0 for a, b in zip(means, means[1:]))
    if timed:
        t0 = min(times)
        for run, t in zip(runs, times):
            run.order = (t - t0) / 60.0
    return Source(path.name, "store", runs, timed)


def _campaigns_under(path, depth):
    if (path / "results.json").is_file():
        return [_validate_source(path)]
    if (path / "campaign.json").is_file():
        return [_store_source(path)]
    if depth == 0 or not path.is_dir():
        return []
    children = [child for child in sorted(path.iterdir()) if child.is_dir()]
    return [src for child in children for src in _campaigns_under(child, depth - 1)]


def load(paths):
    """Sources from validate result directories, store campaigns, or directories holding them (two
    levels down at most: validate-results/, a results-store/, or a folder of either)."""
    out = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise InputError(
                str(p),
                None,
                None,
                "no such directory",
                "give validate or results-store directories",
            )
        found = _campaigns_under(p, 2)
        if not found:
            raise InputError(
                str(p),
                None,
                None,
                "neither a validate result directory (results.json) nor a "
                "results-store campaign (campaign.json), and holds none",
                "give validate-results/<site>-<time>/ or results-store/<campaign>/ directories",
            )
        out += found
    return out


# ---- per-run scores, noise -------------------------------------------------------------------


def bands_of(runs):
    return stats.sizes_by_band(stats.common_sizes([r.points for r in runs], []))


def _by_bench(runs, key=lambda r: r.bench):
    """{benchmark (or key(item)): [runs (items)]} in first-seen order."""
    by = OrderedDict()
    for r in runs:
        by.setdefault(key(r), []).append(r)
    return by


def _groups(runs, min_size=2):
    """The runs centred together (Run.group), groups of at least min_size."""
    return [v for v in _by_bench(runs, lambda r: r.group).values() if len(v) >= min_size]


def noise(runs, bands):
    """Per band: run-to-run SD of the log band score within groups, its robust (MAD) twin, and the
    intra-class correlation of sizes within runs."""
    out = OrderedDict()
    groups = _groups(runs)
    for name, sizes in bands.items():
        resid, cells, dof = [], [], 0
        for grp in groups:
            scores = stats.band_scores([r.points for r in grp], sizes, grp[0].metric)
            mean = sum(scores) / len(scores)
            resid += [x - mean for x in scores]
            dof += len(grp) - 1
            logs = [[stats._cost(r.points[s], r.metric) for s in sizes] for r in grp]
            col = [sum(row[j] for row in logs) / len(logs) for j in range(len(sizes))]
            cells += [[x - m for x, m in zip(row, col)] for row in logs]
        runmeans = [sum(c) / len(c) for c in cells]
        if dof < 2:
            continue
        sd = math.sqrt(sum(x * x for x in resid) / dof)
        scale = math.sqrt(len(resid) / dof)
        mad = _robust_sd(x * scale for x in resid)
        m = len(sizes)
        icc = None
        if m > 1:
            msb = m * sum(x * x for x in runmeans) / dof
            within = sum((c[j] - rm) ** 2 for c, rm in zip(cells, runmeans) for j in range(m))
            msw = within / (dof * (m - 1))
            icc = (msb - msw) / (msb + (m - 1) * msw) if msb + (m - 1) * msw > 0 else None
        out[name] = dict(sd=sd, mad=mad, icc=icc, sizes=m, runs=len(resid))
    return out


def _robust_sd(deviations):
    """The SD of normal noise from its deviations' median absolute value (the MAD's 1.4826)."""
    return 1.4826 * statistics.median(abs(x) for x in deviations)


def reps_needed(sd, gain, alpha, bands, target=0.8, limit=200):
    """Runs per module for `target` power on one band of `bands` at this SD, in one look."""
    return next(
        (n for n in range(2, limit + 1) if design_power(sd, gain, alpha, bands, None, n) >= target),
        None,
    )


def design_power(sd, gain, alpha, bands, design, repetitions):
    """Power for a true `gain` on one band at this SD under the design (None: one look of
    `repetitions` runs), at Holm's first level for `bands` bands, the looks' statistics bivariate
    normal with correlation sqrt(first/final): a model, for noise the pools cannot resample."""
    if sd <= 0:
        return 1.0
    n1 = design.first if design else repetitions
    c1 = stats.t_quantile(design.level(alpha / bands, 1) if design else alpha / bands, 2 * n1 - 2)
    d1 = math.log(gain) / (sd * math.sqrt(2.0 / n1))
    first = 1 - stats.normal_cdf(c1 - d1)
    if not design or design.final <= design.first:
        return first
    n2 = design.final
    c2 = stats.t_quantile(design.level(alpha / bands, 2), 2 * n2 - 2)
    d2 = math.log(gain) / (sd * math.sqrt(2.0 / n2))
    rho = math.sqrt(n1 / float(n2))
    s = math.sqrt(1 - rho * rho)
    lo = d1 - 9.0
    if c1 <= lo:
        return first
    return first + stats.simpson(
        lambda z: stats.normal_pdf(z - d1) * (1 - stats.normal_cdf((c2 - d2 - rho * (z - d1)) / s)),
        lo,
        c1,
    )


# ---- order and time effects ------------------------------------------------------------------


def _slope(points):
    """Pooled within-group least-squares slope of [(group, x, y)] and its standard error."""
    groups = _by_bench(points, lambda p: p[0]).values()
    cent = []
    for pts in groups:
        if len(pts) < 2:
            continue
        mx = sum(p[1] for p in pts) / len(pts)
        my = sum(p[2] for p in pts) / len(pts)
        cent += [(x - mx, y - my) for _, x, y in pts]
    sxx = sum(x * x for x, _ in cent)
    sxy = sum(x * y for x, y in cent)
    if sxx <= 0 or len(cent) < 3:
        return None, None
    b = sxy / sxx
    rss = sum((y - b * x) ** 2 for x, y in cent)
    return b, math.sqrt(rss / max(1, len(cent) - len(groups) - 1) / sxx)


def order_effects(source):
    """Drift, serial correlation and the effect of running second, for one source."""
    out = OrderedDict()
    drift_pts, across, lag, pair_x, pair_y, reps = [], [], [], [], [], {}
    second = OrderedDict()
    for bench, runs in _by_bench(source.runs).items():
        for name, sizes in bands_of(runs).items():
            seq = []
            for grp in _groups(runs):
                scores = stats.band_scores([r.points for r in grp], sizes, grp[0].metric)
                mean = sum(scores) / len(scores)
                for r, x in zip(grp, scores):
                    seq.append((r.order, x - mean, r))
                    drift_pts.append(((bench, name) + tuple(grp[0].group), r.order, x - mean))
                    across.append(((bench, name) + tuple(r.config), r.order, x + mean))
                    reps.setdefault(r.rep, []).append(x - mean)
            seq.sort(key=lambda t: t[0])
            if len(seq) > 3:
                v = [t[1] for t in seq]
                m = sum(v) / len(v)
                den = sum((x - m) ** 2 for x in v)
                if den > 0:
                    lag.append(sum((v[i] - m) * (v[i + 1] - m) for i in range(len(v) - 1)) / den)
            if source.kind == "validate":
                for rep, pr in _by_bench(seq, lambda t: t[2].rep).items():
                    if len(pr) != 2 or pr[0][2].role == pr[1][2].role:
                        continue
                    (_, x1, r1), (_, x2, r2) = sorted(pr, key=lambda t: t[0])
                    pair_x.append(x1)
                    pair_y.append(x2)
                    raw1, raw2 = stats.band_scores([r1.points, r2.points], sizes, r1.metric)
                    # second minus first (log cost; > 0: the second run is slower), with who was second
                    second.setdefault(bench, {}).setdefault(rep, []).append((raw2 - raw1, r2.role))
    unit = "minute" if source.timed else "round" if source.kind == "store" else "run"
    out["drift"] = _slope(drift_pts) + (unit,)
    if source.kind == "store":  # the same configuration measured again in later stages
        out["drift_across"] = _slope(across)
    out["lag1"] = statistics.mean(lag) if lag else None
    out["rep_effect"] = {k: statistics.mean(v) for k, v in sorted(reps.items()) if v}
    if len(pair_x) > 2:
        mx, my = statistics.mean(pair_x), statistics.mean(pair_y)
        num = sum((x - mx) * (y - my) for x, y in zip(pair_x, pair_y))
        den = math.sqrt(sum((x - mx) ** 2 for x in pair_x) * sum((y - my) ** 2 for y in pair_y))
        out["pair_corr"] = num / den if den > 0 else None
    if second:
        out["second"] = second_effect(second, source.aa)
    return out


def second_effect(second, aa):
    """Per benchmark: the effect of running second in a pair (mean log cost difference, one value per
    pair averaged over the bands) with a 95% interval, or why it cannot be told from the module."""
    out = OrderedDict()
    for bench, pairs in second.items():
        vals, signs = [], []
        for rep, items in sorted(pairs.items()):
            vals.append(sum(d for d, _ in items) / len(items))
            signs.append(1 if items[0][1] == "tuned" else -1)  # +1: tuned ran second
        if aa:
            if len(vals) >= 2:
                se = statistics.stdev(vals) / math.sqrt(len(vals))
                out[bench] = (statistics.mean(vals), se, len(vals))
        elif 0 < signs.count(1) < len(signs):
            # second-minus-first = o + s * (tuned-minus-baseline): o is the mean of the two order groups
            plus, minus = ([v for v, s in zip(vals, signs) if s == side] for side in (1, -1))
            est = (statistics.mean(plus) + statistics.mean(minus)) / 2
            parts = [statistics.variance(v) / len(v) if len(v) > 1 else 0 for v in (plus, minus)]
            se = 0.5 * math.sqrt(parts[0] + parts[1])
            out[bench] = (est, se, len(vals))
        else:
            out[bench] = None  # the tuned module always ran second: order and module are confounded
    return out


# ---- pools -----------------------------------------------------------------------------------


DEFAULT_DESIGN = stats.Design()  # where neither the campaign nor --repetitions gives one (POLICY)


@dataclass
class Pool:
    label: str
    family: str  # same-config | A/A pairs | residual | residual pairs
    bench: str
    metric: str
    suite: str
    units: list  # {size: value}; paired pools: (baseline's run, tuned's run) per repetition
    bands: OrderedDict
    paired: bool = False
    states: Optional[list] = None  # the host state of each unit, where every run recorded one
    design: Optional[stats.Design] = None  # the verdict's design simulated (None: one look)
    baseline_first: Optional[list] = None  # paired pools: the baseline ran first in the pair

    @property
    def by_crossover(self):
        """Judged as validate judges this design: by the crossover test over resampled pairs."""
        return self.paired and stats.paired(self.design)


def _pairs(runs):
    """[(baseline's run, tuned's run)] of one benchmark's runs, by repetition, in repetition order."""
    by = OrderedDict()
    for r in runs:
        by.setdefault(r.rep, {})[r.role] = r
    return [(v["baseline"], v["tuned"]) for _, v in sorted(by.items()) if len(v) == 2]


def _design_of(src, design):
    return design or src.design or DEFAULT_DESIGN


def _pool(label, family, runs, unit, bands, design, pairs=None):
    """A Pool of `runs` (unit(run): what is resampled of it), or of their `pairs` (_pairs), each
    pair keeping which of its runs ran first."""
    if pairs is None:
        units, states, first = [unit(r) for r in runs], _states(runs), None
    else:
        units = [(unit(a), unit(b)) for a, b in pairs]
        states = _states([r for pr in pairs for r in pr]) and [(a.state, b.state) for a, b in pairs]
        first = [a.baseline_first for a, _ in pairs]
    one, paired = runs[0], pairs is not None
    return Pool(
        label, family, one.bench, one.metric, one.suite, units, bands, paired, states, design, first
    )


def pools(sources, minimum=None, design=None):
    """The resampling pools. design: the one every pool is judged by (--repetitions); None: each
    campaign's own (validate's results.json), else DEFAULT_DESIGN. Paired designs
    (stats.paired) resample pairs, so a campaign judged by the crossover test gives pools of
    pairs only: A/A pairs, and residual pairs of A/B campaigns; its same-configuration runs hold
    no pairs and are not resampled. minimum: runs a pool needs (default 2 x the first look)."""

    def least(d):
        return 2 * d.first if minimum is None else minimum

    # every run of one configuration (validate: one module in campaigns of the same suite, set and
    # size; store: one configuration), for the sources whose design is not paired
    out, same = [], OrderedDict()
    for src in sources:
        d = _design_of(src, design)
        if stats.paired(d):
            continue
        for r in src.runs:
            same.setdefault((r.config, d), []).append(r)
    for (config, d), runs in same.items():
        bands = len(runs) >= least(d) and bands_of(runs)
        if not bands:
            continue
        names = sorted({r.source for r in runs})
        if config[0] == "validate":  # suite, set, np, module (campaigns)
            where = names[0] if len(names) == 1 else "%d campaigns" % len(names)
            label = "%s %s np=%s %s (%s)" % (config[1:5] + (where,))
        else:  # campaign, configuration id
            cid = config[2] if len(config[2]) <= 40 else config[2][:37] + "..."
            label = "%s %s" % (config[1], cid)
        out.append(_pool(label, "same-config", runs, lambda r: r.points, bands, d))
    for src in sources:
        if not src.aa:
            continue
        d = _design_of(src, design)
        for runs in _by_bench(src.runs).values():
            pairs = _pairs(runs)
            if len(pairs) < (d.first if stats.paired(d) else least(d) // 2):
                continue
            bands = bands_of([r for pr in pairs for r in pr])
            if bands:
                label = "%s (A/A repetitions, order kept)" % src.name
                out.append(_pool(label, "A/A pairs", runs, lambda r: r.points, bands, d, pairs))
    for src in sources:
        d = _design_of(src, design)
        crossover = src.kind == "validate" and stats.paired(d)
        for runs in _by_bench(src.runs).values():
            bands = bands_of(runs)
            sizes = [s for b in bands.values() for s in b]
            if not sizes:
                continue
            resid = _residuals(runs, sizes)
            kept = [r for r, _ in resid.values()]

            def unit(r):
                return resid[id(r)][1]

            if crossover:  # each repetition's two residuals kept together, with their order
                pairs = _pairs(kept)
                if len(pairs) >= d.first:
                    label = "%s (residual pairs)" % src.name
                    out.append(_pool(label, "residual pairs", kept, unit, bands, d, pairs))
            elif len(kept) >= least(d):
                out.append(_pool("%s (residuals)" % src.name, "residual", kept, unit, bands, d))
    return out


def _residuals(runs, sizes):
    """{id(run): (run, points)}: each run's log values minus the mean of its group (module, or
    configuration x stage; groups of 3 runs or more), scaled by sqrt(n/(n-1)), put back on the
    level of all the runs: the run's own noise without the modules' difference."""
    resid = OrderedDict()
    for grp in _groups(runs, 3):
        n = len(grp)
        k = math.sqrt(n / (n - 1.0))
        mean = {s: sum(math.log(r.points[s]) for r in grp) / n for s in sizes}
        for r in grp:
            resid[id(r)] = (r, {s: (math.log(r.points[s]) - mean[s]) * k for s in sizes})
    level = {s: sum(math.log(r.points[s]) for r in runs) / len(runs) for s in sizes}
    return OrderedDict(
        (key, (r, {s: math.exp(u[s] + level[s]) for s in sizes})) for key, (r, u) in resid.items()
    )


def _states(runs):
    """The runs' host states when every run has one, else None (the pool is judged without them)."""
    states = [r.state for r in runs]
    return states if all(states) else None


def _scaled(unit, sizes, factor, metric):
    """The run made `factor` times faster on `sizes` (bandwidth factor times higher)."""
    lower = stats.LOWER_IS_BETTER[metric]
    return {s: (v / factor if lower else v * factor) if s in sizes else v for s, v in unit.items()}


def _test_upto(n, bench, metric, base, tuned, design, previous, strata, pairs, look):
    """stats.test_bands on each side's first n runs (and the pairs among them)."""
    if pairs is not None:
        pairs = [p for p in pairs if p[0] < n and p[1] < n]
    return stats.test_bands(
        bench, metric, base[:n], tuned[:n], design, previous, strata, pairs=pairs, look=look
    )


def procedure(pool, base, tuned, design, tolerance, alpha, states=None, pairs=None):
    """stats.Procedure, per benchmark, on one draw (later looks while the draw holds the runs);
    within host `states` (each side's), or by the crossover test over `pairs`. Returns ({band:
    verdict}, extended, look-1 estimates)."""

    def test(bench, look, previous):
        n = design.sizes()[look - 1] if design else len(base)
        strata = None
        if states is not None:
            strata = stats.host_strata(states[0][:n], states[1][:n], alpha)[0]
        return _test_upto(n, bench, pool.metric, base, tuned, design, previous, strata, pairs, look)

    def extend(undecided, look):
        return list(undecided) if len(base) >= design.sizes()[look - 1] else []

    out = stats.Procedure(design, tolerance, alpha, stats.PER_BENCHMARK).run(
        [pool.bench], test, extend
    )
    verdicts = {r.band: r.verdict for r in out.bands}
    return verdicts, bool(out.extended), [r.estimate for r in out.look1 if r.estimate]


def _validate_order(drawn):
    """Drawn pairs [(first run, second run)] given the modules as validate gives them: the k-th
    pair's first run is the baseline's when validate's k-th repetition runs the baseline first
    (stats.pair_order, ABBA). Returns (baseline runs, tuned runs, compare_bands' pairs)."""
    first = [stats.pair_order(k + 1)[0] == "baseline" for k in range(len(drawn))]
    base = [u[0] if f else u[1] for u, f in zip(drawn, first)]
    tuned = [u[1] if f else u[0] for u, f in zip(drawn, first)]
    return base, tuned, stats.pairs_of(range(len(drawn)), range(len(drawn)), lambda k: first[k])


def _draw_pairs(pool, rng, n):
    """n of the pool's pairs, drawn as whole pairs in random order (which come at look 1 is random
    too), each keeping its two runs and which ran first, in validate's order (_validate_order).
    Returns (baseline runs, tuned runs, their host states or None, compare_bands' pairs)."""
    drawn = []
    for i in rng.sample(range(len(pool.units)), n):
        (a, b), (sa, sb) = pool.units[i], pool.states[i] if pool.states else (None, None)
        drawn.append(((a, sa), (b, sb)) if pool.baseline_first[i] else ((b, sb), (a, sa)))
    base, tuned, pairs = _validate_order(drawn)
    states = ([s for _, s in base], [s for _, s in tuned]) if pool.states else None
    return [x for x, _ in base], [y for y, _ in tuned], states, pairs


def study(pool, rng, draws, gain, design, repetitions, tolerance, alpha):
    """False win-or-lose rate, per-band power, extension rate and the p95 apparent gain of one pool;
    within host states where the pool has them, by the crossover test where the design pairs
    (pool.by_crossover), as validate judges."""
    need = 1 if pool.paired else 2  # units per repetition of both sides
    per_side = drawn(design, len(pool.units) // need) if design else repetitions
    pairs = None
    two_looks = design is not None and per_side > design.first
    false = extended = 0
    wins = OrderedDict((b, 0) for b in pool.bands)
    apparent = []
    for _ in range(draws):
        states = None
        if pool.by_crossover:
            base, tuned, states, pairs = _draw_pairs(pool, rng, per_side)
        # whole repetitions of an A/A campaign, in time order: alternation and order kept
        elif pool.paired:
            idx = sorted(rng.sample(range(len(pool.units)), per_side))
            base, tuned = ([pool.units[i][k] for i in idx] for k in (0, 1))
            if pool.states:
                states = tuple([pool.states[i][k] for i in idx] for k in (0, 1))
        else:
            idx = rng.sample(range(len(pool.units)), 2 * per_side)
            base, tuned = ([pool.units[i] for i in idx[k::2]] for k in (0, 1))
            if pool.states:
                states = tuple([pool.states[i] for i in idx[k::2]] for k in (0, 1))
        verdicts, ext, est = procedure(pool, base, tuned, design, tolerance, alpha, states, pairs)
        false += any(v in ("win", "lose") for v in verdicts.values())
        extended += ext
        apparent += [abs(math.log(e)) for e in est]
        for name, sizes in pool.bands.items():
            faster = [_scaled(u, set(sizes), gain, pool.metric) for u in tuned]
            v, _, _ = procedure(pool, base, faster, design, tolerance, alpha, states, pairs)
            wins[name] += v.get(name) == "win"
    apparent.sort()
    return dict(
        false=false / float(draws),
        power=OrderedDict((b, w / float(draws)) for b, w in wins.items()),
        extended=extended / float(draws),
        two_looks=two_looks,
        per_side=per_side,
        p95=math.exp(apparent[int(0.95 * (len(apparent) - 1))]) - 1 if apparent else None,
    )


# ---- the campaign, as validate judges it ------------------------------------------------------
# validate's family is the whole campaign (stats.judge_family over every benchmark x band), so its error
# rates are a campaign's: whole repetitions (every benchmark's pair) are drawn together and the
# campaign is judged at once, with its looks.

LOSS = 0.90  # the power scenario: one band's true gain (10 % slower); every other band at --gain


@dataclass
class Campaign:
    name: str
    design: stats.Design
    benches: OrderedDict  # benchmark -> (metric, {band: sizes})
    reps: list  # per repetition, {benchmark: (first run's points, second's)}
    aa: bool
    sd_pair: dict  # (benchmark, band) -> robust SD of a pair's difference of band scores
    run_of: dict  # benchmark -> the run that measures it (validate extends whole runs)


def campaign_of(src, design):
    """A validate campaign's repetitions (those every benchmark has) as A/A data: an A/A campaign's
    runs, else residuals, each pair in the order it ran; None with fewer than the first look's."""
    if src.kind != "validate":
        return None
    benches, per_rep = OrderedDict(), OrderedDict()
    for bench, runs in _by_bench(src.runs).items():
        bands = bands_of(runs)
        sizes = [x for b in bands.values() for x in b]
        if not sizes:
            continue
        units = (
            {id(r): r.points for r in runs}
            if src.aa
            else {k: u for k, (_, u) in _residuals(runs, sizes).items()}
        )
        benches[bench] = (runs[0].metric, bands)
        for a, b in _pairs([r for r in runs if id(r) in units]):
            (x, y) = (a, b) if a.baseline_first else (b, a)
            per_rep.setdefault(a.rep, {})[bench] = (units[id(x)], units[id(y)])
    reps = [v for _, v in sorted(per_rep.items()) if len(v) == len(benches)]
    if not benches or len(reps) < design.first:
        return None
    sd = {}
    for bench, (metric, bands) in benches.items():
        units = [rep[bench] for rep in reps]
        for band, sizes in bands.items():
            a, b = (stats.band_scores([u[k] for u in units], sizes, metric) for k in (0, 1))
            d = [y - x for x, y in zip(a, b)]
            # robust SD: a few slow-state pairs would swamp a plain SD. Welch's t does see them,
            # so the pairs it is said to need are a lower bound (the report: optimistic)
            mid = statistics.median(d) if d else None
            sd[(bench, band)] = _robust_sd(x - mid for x in d) if len(d) > 2 else None
    run_of = {bench: runs[0].run_name for bench, runs in _by_bench(src.runs).items()}
    return Campaign(src.name, design, benches, reps, src.aa, sd, run_of)


def _campaign_draw(camp, rng, n):
    """n whole repetitions in random order, in validate's order (_validate_order): {benchmark:
    (baseline runs, tuned runs, pairs or None)} (validate's verdict has no host strata, so the
    runs' states are not drawn)."""
    idx = rng.sample(range(len(camp.reps)), n)
    out = OrderedDict()
    for bench in camp.benches:
        base, tuned, pairs = _validate_order([camp.reps[i][bench] for i in idx])
        out[bench] = (base, tuned, pairs if stats.paired(camp.design) else None)
    return out


def judge_campaign(camp, draw, gains, tolerance, alpha, cache):
    """validate's verdict (stats.Procedure, one family) on one drawn campaign. gains: {(benchmark,
    band): true gain of the tuned module}; cache: tests already made on this draw. Returns
    ({(benchmark, band): BandResult}, extended)."""
    design = camp.design
    n = len(next(iter(draw.values()))[0])

    def test(bench, look, previous):
        upto = design.sizes()[look - 1]
        metric, bands = camp.benches[bench]
        own = tuple(sorted((b, g) for (bn, b), g in gains.items() if bn == bench))
        key = (bench, upto, own)
        if key not in cache:
            base, tuned, pairs = draw[bench]
            for band, g in own:
                tuned = [_scaled(u, set(bands[band]), g, metric) for u in tuned]
            before = None if look == 1 else []
            cache[key] = _test_upto(
                upto, bench, metric, base, tuned, design, before, None, pairs, look
            )
        # the cache holds later looks without earlier rejections: those are final, as test_bands keeps them
        kept = {r.band: r for r in previous or [] if stats.rejected(r)}
        return [
            (kept[r.band], None) if r.band in kept else (dataclasses.replace(r), res)
            for r, res in cache[key]
        ]

    def extend(undecided, look):  # as validate: every benchmark of a run holding an undecided one
        runs = {camp.run_of[b] for b in undecided}
        fits = n >= design.sizes()[look - 1]  # a draw too short for the look: a budget spent
        return [b for b in camp.benches if camp.run_of[b] in runs] if fits else []

    out = stats.Procedure(design, tolerance, alpha).run(list(camp.benches), test, extend)
    return {(r.benchmark, r.band): r for r in out.bands}, bool(out.extended)


def drawn(design, held):
    """Repetitions a draw takes: the design's last look that `held` repetitions hold (the looks
    beyond are not made, as when validate's budget stops them)."""
    return max([k for k in design.sizes() if k <= held] or [design.first])


# campaign_study's rates over the draws: A/A false FAIL, false PASS, either, extended, INCONCLUSIVE;
# PASS with every band at --gain
RATES = ("fail", "pass_", "any", "extended", "win_all", "inconclusive")


def campaign_study(camp, rng, draws, gain, tolerance, alpha, loss=LOSS):
    """The campaign's rates over `draws` drawn campaigns: A/A (false FAIL, false PASS, the share
    INCONCLUSIVE), every band at `gain` (P(PASS), each band's power), and each band at `loss` with
    every other at `gain` (P(FAIL by a loss): the power to catch a real loss among real wins)."""
    n = drawn(camp.design, len(camp.reps))
    keys = [(b, band) for b, (_, bands) in camp.benches.items() for band in bands]
    c = dict.fromkeys(RATES, 0)
    c.update(n=n, tests=len(keys), bench_false=dict.fromkeys(camp.benches, 0))
    c.update({rate: dict.fromkeys(keys, 0) for rate in ("power", "caught", "lost")})
    c["level"] = {k: [] for k in keys}
    for _ in range(draws):
        draw = _campaign_draw(camp, rng, n)
        cache = {}
        res, ext = judge_campaign(camp, draw, {}, tolerance, alpha, cache)
        verdict = stats.module_verdict(list(res.values()))
        c["fail"] += verdict == stats.FAIL
        c["pass_"] += verdict == stats.PASS
        called = {b for (b, _), r in res.items() if r.verdict in ("win", "lose")}
        c["any"] += bool(called)
        c["inconclusive"] += verdict == stats.INCONCLUSIVE
        c["extended"] += ext
        for b in called:
            c["bench_false"][b] += 1
        everyone = {k: gain for k in keys}
        res, _ = judge_campaign(camp, draw, everyone, tolerance, alpha, cache)
        c["win_all"] += stats.module_verdict(list(res.values())) == stats.PASS
        for k in keys:
            c["power"][k] += res[k].verdict == "win"
            one, _ = judge_campaign(camp, draw, {**everyone, k: loss}, tolerance, alpha, cache)
            c["caught"][k] += any(r.verdict == "lose" for r in one.values())
            c["lost"][k] += one[k].verdict == "lose"
            c["level"][k].append(one[k].level)
    for key in RATES:
        c[key] /= float(draws)
    for key in ("bench_false", "power", "caught", "lost"):
        c[key] = OrderedDict((k, v / float(draws)) for k, v in c[key].items())
    c["level"] = OrderedDict((k, statistics.median(v)) for k, v in c["level"].items())
    return c


def drift_study(src, rng, draws, tolerance, alpha):
    """history's drift rule (stats.drifted) on one validate campaign cut into two back-to-back
    campaigns: its first and second halves, and `draws` random halvings with half of each pair
    order's repetitions each (as balanced as validate's ABBA). Every drift is false. Returns (bands
    tested, repetitions, drifts of the time split, share of halvings with a drift) or None."""
    if src.kind != "validate":
        return None
    benches, orders = [], {}  # (metric, {band: sizes}, {rep: (baseline, tuned)}); rep -> orders
    for runs in _by_bench(src.runs).values():
        pairs = {a.rep: (a.points, b.points) for a, b in _pairs(runs)}
        benches.append((runs[0].metric, bands_of(runs), pairs))
        for a, _ in _pairs(runs):
            orders.setdefault(a.rep, []).append(a.baseline_first)
    strata = _by_bench(sorted(orders), lambda k: tuple(orders[k]))
    if len(orders) < 2 * POLICY.min_pairs:
        return None

    def drifts(first):  # the drifts of the pseudo-campaign of reps `first` followed by the rest
        changes = []
        for metric, bands, pairs in benches:
            ref, now = ([], []), ([], [])
            for k, (base, tuned) in sorted(pairs.items()):
                side = ref if k in first else now
                side[0].append(base)
                side[1].append(tuned)
            for sizes in bands.values():
                t = stats.gain_change(ref, now, sizes, metric)
                gains = [
                    stats.band_gain(stats.relative_times(*c, metric), sizes) for c in (ref, now)
                ]
                if t is not None and all(gains):
                    changes.append((gains[1] / gains[0], t))
        return len(changes), sum(d for _, d in stats.drifted(changes, tolerance, alpha))

    tests, timed = drifts(set(sorted(orders)[: len(orders) // 2]))
    rand = 0
    for _ in range(draws):
        first = [k for reps in strata.values() for k in rng.sample(reps, len(reps) // 2)]
        rand += drifts(set(first))[1] > 0
    return tests, len(orders), timed, rand / float(draws)


def pairs_needed(sd, gain, level, target=0.8, limit=400):
    """Pairs for `target` power to find a true `gain` at two-sided `level` with a paired test whose
    estimate's SE is the SD of a pair's difference over sqrt(pairs) (normal model)."""
    if not sd:
        return None
    z = stats.t_quantile(level, 1e6)
    for n in range(4, limit + 1):
        if 1 - stats.normal_cdf(z - abs(math.log(gain)) / (sd / math.sqrt(n))) >= target:
            return n
    return None


@dataclass
class Study:
    """What `tunedmpi power` found, computed before anything is written (power_report renders
    it)."""

    gain: float
    alpha: float
    tolerance: float
    draws: int
    seed: int
    every: bool  # --repetitions: one design for every campaign, else each campaign's own
    designs: list  # [(source name, stats.Design)]
    noise: list  # [(source name, benchmark, band, noise(), runs/module for 80 %, power 1 look, 2 looks)]
    order: list  # [(Source, order_effects())]
    campaigns: list  # [(Campaign, campaign_study())]
    pools: list  # [(Pool, study())]
    drift: list  # [(source name, drift_study())]


def _noise_rows(src, d, gain, alpha):
    rows = []
    for bench, runs in _by_bench(src.runs).items():
        bands = bands_of(runs)
        for band, n in noise(runs, bands).items():
            sd, k = n["sd"], len(bands)
            one = design_power(sd, gain, alpha, k, None, d.first)
            two = design_power(sd, gain, alpha, k, d, d.first) if d.final > d.first else None
            rows.append((src.name, bench, band, n, reps_needed(sd, gain, alpha, k), one, two))
    return rows


def compute(
    paths,
    gain=1.3,
    repetitions=None,
    final=None,
    draws=200,
    seed=1,
    alpha=POLICY.alpha,
    tolerance=POLICY.tolerance,
    max_pairs=None,
):
    """The Study of these directories (InputError on bad input). max_pairs: simulate validate
    --max-pairs (a budget design from each campaign's first look, or --repetitions)."""
    sources = load(paths)
    if max_pairs is not None and final is not None:
        raise InputError(
            "--max-pairs",
            None,
            None,
            "with --max-repetitions",
            "give one: --max-pairs simulates a budget campaign, --max-repetitions two looks",
        )
    if repetitions is None and final is not None:
        raise InputError(
            "--max-repetitions",
            None,
            None,
            "without --repetitions",
            "give --repetitions too (without both: each campaign's own design)",
        )
    # the design simulated: --repetitions for every campaign, else each validate campaign's own
    design = None
    if repetitions is not None:
        looks = POLICY.looks(repetitions)[1] if final is None else final
        design = stats.Design(repetitions, max(repetitions, looks))
    if max_pairs is not None:  # a time budget only stops looks sooner: no more false verdicts
        design = design and stats.Design.budgeted(repetitions, max_pairs)
        for src in sources:
            src.design = stats.Design.budgeted((src.design or DEFAULT_DESIGN).first, max_pairs)

    if not any(s.runs for s in sources):
        raise InputError(
            " ".join(map(str, paths)),
            None,
            None,
            "no successful run in these directories",
            "give validate or results-store directories with measured runs",
        )
    rng = random.Random(seed)
    camps = [
        c for c in (campaign_of(src, _design_of(src, design)) for src in sources) if c is not None
    ]
    return Study(
        gain,
        alpha,
        tolerance,
        draws,
        seed,
        design is not None,
        [(src.name, _design_of(src, design)) for src in sources],
        [row for src in sources for row in _noise_rows(src, _design_of(src, design), gain, alpha)],
        [(src, order_effects(src)) for src in sources],
        [(c, campaign_study(c, rng, draws, gain, tolerance, alpha)) for c in camps],
        [
            (pool, study(pool, rng, draws, gain, pool.design, pool.design.first, tolerance, alpha))
            for pool in pools(sources, design=design)
        ],
        [(src.name, drift_study(src, rng, draws, tolerance, alpha)) for src in sources],
    )
