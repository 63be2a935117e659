"""`tunedmpi regret`: how far a validated module is from the per-size oracle of a separate run.

The module's gain per size comes from a validate result (tuned against baseline, same rounds);
the oracle per size is the best configuration a sweep campaign measured at that size (relative
to that stage's own baseline, same rounds). Both are times relative to the untuned baseline of
their own run, so run-to-run drift cancels; the campaign should be a separate run from the one
the table was tuned on, so the oracle is not the optimistic minimum over the choosing runs.

    regret(size) = (tuned / baseline)(size) / min over configurations (config / baseline)(size)

That oracle is picked and measured on the same runs: at each size it is the lowest of many noisy
figures, so it is biased up (the winner's curse), the more so the more configurations and the
fewer runs. Each row therefore also has a **cross-fitted oracle**: the campaign's runs are split
into two halves (alternate runs, so each half spans the whole campaign and every configuration's
halves are the same rounds); at each size the best configuration is picked on one half and its
relative time is measured on the other, both ways round, and the two measurements are averaged
(geometric mean). Its picks never see the runs that measure them, so it is not biased up; picked
on half the runs it may miss a small true difference, so it errs low. The true per-size oracle lies
between the two; how often the halves pick the same winner says how real the per-size winners are.

A table's choice can also be measured inside the separate campaign itself (table_regret): its job
configuration and, per collective, the algorithm its bands give at each size, looked up among the
campaign's measured configurations. Same rounds as the oracle, so no validate noise on top; but
only where the campaign measured exactly what the table picks.

Every figure comes with a 95 % bootstrap interval: the runs of each configuration (and of each
validate module) are drawn again with replacement, whole runs so that a run's sizes stay together,
and every figure is recomputed from the redrawn runs (DRAWS times, fixed seed: the same input gives
the same interval). On this kind of host whole runs are fast or slow together for a few runs at a
time, so a gain over all sizes moves by 10 % or more from one 10-30-run campaign to the next; the
interval says whether "within 5 % of the oracle" is a measured statement or a draw.

With `state` ("fast", "slow" or "changed"), only the runs that met that host state count, in the
validate result and in the campaigns alike (stats.host_labels, per campaign): the module and the
oracle are then compared in the same state of the host, which on these machines decides much of a
run's speed (docs/design.md, "Statistics", item 5).
"""

import random
from pathlib import Path
from typing import NamedTuple, Optional, Tuple

from tunedmpi import stats
from tunedmpi.acceptance.results import load_doc
from tunedmpi.bench import store
from tunedmpi.errors import InputError
from tunedmpi.regenerate import choice
from tunedmpi.tables.operations import OPERATIONS
from tunedmpi.tables.units import SizeError, parse_size

DRAWS = 400  # bootstrap redraws behind every interval
COVERAGE = 0.95
SEED = 12  # fixed: the same runs give the same intervals


class Row(NamedTuple):
    benchmark: str
    sizes: int
    gain: float  # the module's (table choice's) gain over all sizes: 1 / geomean relative time
    oracle: float  # the per-size oracle's gain over the same sizes
    regret_mean: float  # %: geomean over sizes of chosen / oracle, minus 1
    worst: float  # %: the largest of those ratios, minus 1
    worst_size: int
    gain_ci: Optional[Tuple[float, float]] = None  # 95 % bootstrap intervals of the three above
    oracle_ci: Optional[Tuple[float, float]] = None
    regret_ci: Optional[Tuple[float, float]] = None
    fitted: Optional[float] = None  # the cross-fitted oracle's gain (None: too few runs to halve)
    fitted_regret: Optional[float] = None  # %: the regret mean against it
    # (sizes where both halves picked the same winner, sizes)
    agree: Optional[Tuple[int, int]] = None
    fitted_ci: Optional[Tuple[float, float]] = None
    fitted_regret_ci: Optional[Tuple[float, float]] = None


def _as_measured(reps):
    return reps


def _redrawn(rng):
    """The bootstrap's draw: a configuration's runs drawn again with replacement, whole runs."""
    return lambda reps: [reps[rng.randrange(len(reps))] for _ in reps]


def _module_runs(results_dir, state=None):
    """({benchmark: (metric, baseline runs, tuned runs)}, results.json) of a validate result directory;
    with `state`, only its runs in that host state."""
    path = Path(results_dir) / "results.json"
    doc = load_doc(results_dir)
    out = {}
    for bench, d in doc.get("per_size", {}).items():
        if state and "host_states" not in d:
            raise InputError(
                str(path),
                None,
                "per_size.%s.host_states" % bench,
                "this result records no host state",
                "leave out --state, or give a result of a validate that recorded it (probe_host)",
            )
        base, tuned = (
            [
                store.checked_points(
                    r,
                    str(path),
                    "per_size.%s.%s[%d]" % (bench, role, i),
                    "give the --out directory of a finished validate/run.sh",
                )
                for i, r in enumerate(d.get(role) or [])
                if state is None or d["host_states"][role][i] == state
            ]
            for role in ("baseline", "tuned")
        )
        if len(base) >= 2 and len(tuned) >= 2:
            out[bench] = (d["metric"], base, tuned)
    return out, doc


def _module(runs, draw=_as_measured):
    """{benchmark: {size: tuned/baseline time}} of a validate result's runs (as `draw` gives them)."""
    return {
        bench: stats.relative_times(draw(base), draw(tuned), metric)
        for bench, (metric, base, tuned) in runs.items()
    }


def _geometry_data(campaign_dirs, nodes, ppn, state=None):
    records = []
    for d in campaign_dirs:
        recs = store.load_campaign(d)[1]
        if state:
            labels, limit = stats.host_labels([r.get("host") for r in recs])
            if limit is None:
                raise InputError(
                    str(d),
                    None,
                    "host",
                    "no run of this campaign records the host state",
                    "leave out --state, or give campaigns swept since the runner records it (probe_host)",
                )
            recs = [r for r, label in zip(recs, labels) if label == state]
        records += recs
    return choice.collect(choice.one_program(records)[0]).get((nodes, ppn), {})


def _relative(geo, draw=_as_measured):
    """{(stage, config_id): {benchmark: {size: config/baseline time}}} of every measured configuration.
    A stage's baseline runs are drawn once per call, so every configuration of the stage is set
    against the same baseline, as measured."""
    out, bases = {}, {}
    for (stage, cid), e in geo.items():
        base = geo.get((stage, "baseline"))
        if not base:
            continue
        for bench, (metric, reps, _) in e["bench"].items():
            if bench in base["bench"] and len(reps) >= 2 and len(base["bench"][bench][1]) >= 2:
                if (stage, bench) not in bases:
                    bases[(stage, bench)] = draw(base["bench"][bench][1])
                runs = bases[(stage, bench)] if cid == "baseline" else draw(reps)
                if len(runs) >= 2 and len(bases[(stage, bench)]) >= 2:  # a half may hold fewer
                    out.setdefault((stage, cid), {})[bench] = stats.relative_times(
                        bases[(stage, bench)], runs, metric
                    )
    return out


def _best(rel):
    """The per-size oracle: {benchmark: {size: best config/baseline time over every configuration}}."""
    measured = {}
    for per in rel.values():
        for bench, r in per.items():
            measured.setdefault(bench, []).append(r)
    return {bench: stats.per_size_best(rels) for bench, rels in measured.items()}


def _halves(draw):
    """Two draws that keep alternate runs of a configuration (positions 0, 2, 4, … and 1, 3, 5, …),
    each then drawn as `draw` gives them."""
    return [lambda reps, h=h: draw(reps[h::2]) for h in (0, 1)]


def _cross_fitted(geo, draw=_as_measured):
    """The cross-fitted oracle (module docstring): ({benchmark: {size: oracle/baseline}},
    {benchmark: {size: True where both halves picked the same configuration}}). Sizes where a half
    has no configuration measured on both halves are left out."""
    rel = [_relative(geo, half) for half in _halves(draw)]
    oracle, agree = {}, {}
    for bench in sorted({b for per in rel[0].values() for b in per}):
        both = [k for k in rel[0] if bench in rel[0][k] and k in rel[1] and bench in rel[1][k]]
        sizes = (
            set.intersection(*(set(rel[h][k][bench]) for h in (0, 1) for k in both)) if both else ()
        )
        for size in sorted(sizes):
            at = [
                {k: rel[h][k][bench][size] for k in both if rel[h][k][bench][size] > 0}
                for h in (0, 1)
            ]
            if not at[0] or not at[1]:
                continue
            picks = [min(sorted(at[h], key=str), key=at[h].get) for h in (0, 1)]
            if any(p not in at[1 - h] for h, p in enumerate(picks)):
                continue
            oracle.setdefault(bench, {})[size] = stats.geomean(
                [at[1 - h][p] for h, p in enumerate(picks)]
            )
            agree.setdefault(bench, {})[size] = picks[0] == picks[1]
    return oracle, agree


def _oracles(geo, draw=_as_measured):
    """(every configuration's relative times, {benchmark: (same-runs oracle, cross-fitted oracle,
    halves agree)}) of the runs as `draw` gives them: what _row takes after the chosen times."""
    rel = _relative(geo, draw)
    fitted, agree = _cross_fitted(geo, draw)
    return rel, {
        bench: (orc, fitted.get(bench), agree.get(bench)) for bench, orc in _best(rel).items()
    }


def _row(bench, chosen, orc, fitted=None, agree=None):
    """One report row from {size: chosen/baseline} and {size: oracle/baseline}, or None; with the
    cross-fitted oracle's {size: oracle/baseline} and {size: picks agree} where it covers every size.
    Size 0 moves no data (its time is the call's overhead alone): left out, as validate's bands do."""
    sizes = sorted(s for s in chosen if s >= 1 and s in orc and orc[s] > 0 and chosen[s] > 0)
    if not sizes:
        return None
    ratios = {s: chosen[s] / orc[s] for s in sizes}
    worst = max(ratios, key=ratios.get)
    row = Row(
        bench,
        len(sizes),
        1 / stats.geomean([chosen[s] for s in sizes]),
        1 / stats.geomean([orc[s] for s in sizes]),
        (stats.geomean(ratios.values()) - 1) * 100,
        (ratios[worst] - 1) * 100,
        worst,
    )
    if fitted and all(s in fitted for s in sizes):
        row = row._replace(
            fitted=1 / stats.geomean([fitted[s] for s in sizes]),
            fitted_regret=(stats.geomean([chosen[s] / fitted[s] for s in sizes]) - 1) * 100,
            agree=(sum(bool(agree[s]) for s in sizes), len(sizes)),
        )
    return row


def _percentiles(values):
    v = sorted(values)
    tail = (1 - COVERAGE) / 2
    return v[int(tail * (len(v) - 1))], v[int(round((1 - tail) * (len(v) - 1)))]


# the figures each row carries a bootstrap interval of: {Row field: its interval's field}
INTERVALS = {"gain": "gain_ci", "oracle": "oracle_ci", "regret_mean": "regret_ci"}
FITTED_INTERVALS = {"fitted": "fitted_ci", "fitted_regret": "fitted_regret_ci"}


def _with_intervals(rows_of, draws):
    """rows_of(draw) -> [Row or None] computed from the runs as `draw` gives them. The rows as
    measured, each with the bootstrap intervals of its figures (INTERVALS, FITTED_INTERVALS)."""

    def rows(draw):
        return [r for r in rows_of(draw) if r]

    measured = rows(_as_measured)
    if draws < 2:
        return measured
    rng = random.Random(SEED)
    seen = {r.benchmark: [] for r in measured}
    for _ in range(draws):
        for r in rows(_redrawn(rng)):
            if r.benchmark in seen:
                seen[r.benchmark].append(r)
    out = []
    for r in measured:
        drawn = seen[r.benchmark]
        fitted = [d for d in drawn if d.fitted is not None] if r.fitted is not None else []
        for fields, some in ((INTERVALS, drawn), (FITTED_INTERVALS, fitted)):
            if len(some) >= 2:
                r = r._replace(
                    **{ci: _percentiles([getattr(d, f) for d in some]) for f, ci in fields.items()}
                )
        out.append(r)
    return out


def regret(results_dir, campaign_dirs, draws=DRAWS, state=None):
    """[Row]: the validated module against the per-size oracle of the campaign(s)."""
    runs, doc = _module_runs(results_dir, state)
    where = doc.get("geometry", {})
    geo = _geometry_data(campaign_dirs, where.get("nodes", 1), where.get("ppn", 2), state)

    def rows_of(draw):
        module = _module(runs, draw)
        oracles = _oracles(geo, draw)[1]
        return [
            _row(bench, module[bench], *oracles[bench])
            for bench in sorted(set(module) & set(oracles))
        ]

    return _with_intervals(rows_of, draws)


def _same(a, b):
    """Two configurations equal knob by knob (sizes compared as bytes: '64kb' == 65536)."""

    def norm(v):
        try:
            return parse_size(str(v))
        except SizeError:
            return str(v)

    return a.keys() == b.keys() and all(norm(a[k]) == norm(b[k]) for k in a)


def table_regret(table, campaign_dirs, nodes, ppn, draws=DRAWS, state=None):
    """Rows as regret(), for the table's choice at (nodes, ppn) measured inside the campaign(s).

    Per collective: at each size, the table's job configuration plus the algorithm (and segment
    size) of the band holding that size. Its relative time is taken from one stage: the one that
    measured the collective's algorithms if there is one, else any stage that measured the job
    configuration on the benchmark. Sizes where that stage lacks the configuration are left out."""
    geo = _geometry_data(campaign_dirs, nodes, ppn, state)
    rel = _relative(geo)
    measured = _best(rel)  # the sizes measured, per benchmark
    picks = []  # (benchmark, {size: (stage, config_id) measuring the table's choice there})
    for case in sorted(
        (c for c in table.cases if (c.nodes, c.ppn) == (nodes, ppn)),
        key=lambda c: list(OPERATIONS).index(c.collective),  # a loaded table names no other
    ):
        if "none" not in case.settings:
            continue
        bench, coll = OPERATIONS[case.collective].benchmarks[0], case.collective
        job = dict(case.settings["none"])
        alg_knob = OPERATIONS[coll].knob  # None for a one-sided operation: no stage forces it
        stages = sorted(
            {st for (st, cid) in rel if bench in rel[(st, cid)]},
            key=lambda st: (not any(alg_knob in geo[k]["config"] for k in geo if k[0] == st), st),
        )
        if not stages:
            continue
        keys = [k for k in rel if k[0] == stages[0] and bench in rel[k]]
        where = {}
        for size in measured.get(bench, {}):
            want = dict(job)
            for band in case.bands or []:
                if size >= band.lo and (band.hi is None or size < band.hi) and band.algorithm:
                    want[alg_knob] = band.algorithm
                    if band.segsize:
                        want[alg_knob + "_segmentsize"] = band.segsize
            got = [k for k in keys if _same(geo[k]["config"], want) and size in rel[k][bench]]
            if got:
                where[size] = got[0]
        picks.append((bench, where))

    def rows_of(draw):
        drawn, oracles = _oracles(geo, draw)
        return [
            _row(
                bench,
                {s: drawn[k][bench][s] for s, k in where.items() if s in drawn[k][bench]},
                *oracles[bench],
            )
            for bench, where in picks
            if bench in oracles
        ]

    return _with_intervals(rows_of, draws)


def _figure(value, ci, fmt):
    """A figure, with its bootstrap interval in brackets where one was drawn."""
    return fmt % value + ("" if ci is None else " (%s–%s)" % (fmt % ci[0], fmt % ci[1]))


def report(rows, what="module", draws=DRAWS):
    """Markdown table; each figure with its 95 % bootstrap interval in brackets where one was drawn."""
    lines = [
        "| benchmark | sizes | %s gain (geomean) | oracle gain (geomean) | regret mean | worst (size) "
        "| cross-fitted oracle | regret against it | halves agree |" % what,
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            r.benchmark,
            "%d" % r.sizes,
            _figure(r.gain, r.gain_ci, "%.2fx"),
            _figure(r.oracle, r.oracle_ci, "%.2fx"),
            _figure(r.regret_mean, r.regret_ci, "%+.1f%%"),
            "%+.1f%% (%d B)" % (r.worst, r.worst_size),
        ]
        if r.fitted is None:
            cells += ["-"] * 3
        else:
            cells += [
                _figure(r.fitted, r.fitted_ci, "%.2fx"),
                _figure(r.fitted_regret, r.fitted_regret_ci, "%+.1f%%"),
                "%d of %d sizes" % r.agree,
            ]
        lines.append("| %s |" % " | ".join(cells))
    lines.append("")
    lines.append(
        "Oracle: at each size the best configuration of the campaign, picked and measured on the same runs "
        "(biased up: the lowest of many noisy figures). Cross-fitted oracle: picked on alternate runs and "
        "measured on the others, both ways round (not biased up; errs low). The per-size oracle lies "
        'between them; "halves agree": sizes where both halves picked the same configuration.'
    )
    if any(r.gain_ci for r in rows):
        lines.append(
            "In brackets: %d %% bootstrap intervals (%d redraws of each configuration's runs, whole runs)."
            % (COVERAGE * 100, draws)
        )
    return "\n".join(lines) + "\n"
