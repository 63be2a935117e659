"""`tunedmpi regret`: how far a validated module is from the per-size oracle of a separate run.

The module's gain per size comes from a validate result (tuned against baseline, same rounds);
the oracle per size is the best configuration a sweep campaign measured at that size (relative
to that stage's own baseline, same rounds). Both are times relative to the untuned baseline of
their own run, so run-to-run drift cancels; the campaign should be a separate run from the one
the table was tuned on, so the oracle is not the optimistic minimum over the choosing runs.

    regret(size) = (tuned / baseline)(size) / min over configurations (config / baseline)(size)

A table's choice can also be measured inside the separate campaign itself (table_regret): its job
configuration and, per collective, the algorithm its bands give at each size, looked up among the
campaign's measured configurations. Same rounds as the oracle, so no validate noise on top; but
only where the campaign measured exactly what the table picks.
"""
import json
from pathlib import Path

from tunedmpi.acceptance import stats
from tunedmpi.bench import store
from tunedmpi.errors import InputError
from tunedmpi.regenerate import choice
from tunedmpi.tables.units import SizeError, parse_size


def module_relative(results_dir):
    """{benchmark: {size: tuned/baseline time}} from a validate result directory."""
    path = Path(results_dir) / "results.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(str(path), None, "results.json", "cannot read a validate result: %s" % exc,
                         "give the --out directory of a finished validate/run.sh")
    out = {}
    for bench, d in doc.get("per_size", {}).items():
        base = [{int(k): v for k, v in r.items()} for r in d.get("baseline") or []]
        tuned = [{int(k): v for k, v in r.items()} for r in d.get("tuned") or []]
        if len(base) >= 2 and len(tuned) >= 2:
            out[bench] = stats.relative_times(base, tuned, d["metric"])
    return out, doc


def _geometry_data(campaign_dirs, nodes, ppn):
    records = []
    for d in campaign_dirs:
        records += store.load_campaign(d)[1]
    return choice.collect(records).get((nodes, ppn), {})


def _relative(geo):
    """{(stage, config_id): {benchmark: {size: config/baseline time}}} of every measured configuration."""
    out = {}
    for (stage, cid), e in geo.items():
        base = geo.get((stage, "baseline"))
        if not base:
            continue
        for bench, (metric, reps, _) in e["bench"].items():
            if bench in base["bench"] and len(reps) >= 2 and len(base["bench"][bench][1]) >= 2:
                out.setdefault((stage, cid), {})[bench] = stats.relative_times(base["bench"][bench][1], reps, metric)
    return out


def _best(rel):
    measured = {}
    for per in rel.values():
        for bench, r in per.items():
            measured.setdefault(bench, []).append(r)
    return {bench: stats.per_size_best(rels) for bench, rels in measured.items()}


def oracle(campaign_dirs, nodes, ppn):
    """{benchmark: {size: best config/baseline time over every configuration of every stage}}."""
    return _best(_relative(_geometry_data(campaign_dirs, nodes, ppn)))


def _row(bench, chosen, orc):
    """One report row from {size: chosen/baseline} and {size: oracle/baseline}, or None. Size 0
    moves no data (its time is the call's overhead alone): left out, as validate's bands do."""
    sizes = sorted(s for s in chosen if s >= 1 and s in orc and orc[s] > 0 and chosen[s] > 0)
    if not sizes:
        return None
    ratios = {s: chosen[s] / orc[s] for s in sizes}
    worst = max(ratios, key=ratios.get)
    return (bench, len(sizes), 1 / stats.geomean([chosen[s] for s in sizes]),
            1 / stats.geomean([orc[s] for s in sizes]),
            (stats.geomean(ratios.values()) - 1) * 100, (ratios[worst] - 1) * 100, worst)


def regret(results_dir, campaign_dirs):
    """[(benchmark, sizes, module gain, oracle gain, regret mean %, worst %, worst size)]."""
    rel, doc = module_relative(results_dir)
    geo = doc.get("geometry", {})
    orc = oracle(campaign_dirs, geo.get("nodes", 1), geo.get("ppn", 2))
    rows = [_row(bench, rel[bench], orc[bench]) for bench in sorted(set(rel) & set(orc))]
    return [r for r in rows if r]


def _same(a, b):
    """Two configurations equal knob by knob (sizes compared as bytes: '64kb' == 65536)."""
    def norm(v):
        try:
            return parse_size(str(v))
        except SizeError:
            return str(v)
    return a.keys() == b.keys() and all(norm(a[k]) == norm(b[k]) for k in a)


def table_regret(table, campaign_dirs, nodes, ppn):
    """Rows as regret(), for the table's choice at (nodes, ppn) measured inside the campaign(s).

    Per collective: at each size, the table's job configuration plus the algorithm (and segment
    size) of the band holding that size. Its relative time is taken from one stage: the one that
    measured the collective's algorithms if there is one, else any stage that measured the job
    configuration on the benchmark. Sizes where that stage lacks the configuration are left out."""
    geo = _geometry_data(campaign_dirs, nodes, ppn)
    rel = _relative(geo)
    orc = _best(rel)
    rows = []
    for case in sorted((c for c in table.cases if (c.nodes, c.ppn) == (nodes, ppn)),
                       key=lambda c: list(choice.OPERATIONS).index(c.collective)
                       if c.collective in choice.OPERATIONS else 99):
        if case.collective not in choice.OPERATIONS or "none" not in case.settings:
            continue
        bench, coll = choice.OPERATIONS[case.collective][0], case.collective
        job = dict(case.settings["none"])
        alg_knob = "coll_tuned_%s_algorithm" % coll
        stages = sorted({st for (st, cid) in rel if bench in rel[(st, cid)]},
                        key=lambda st: (not any(alg_knob in geo[k]["config"] for k in geo if k[0] == st), st))
        if not stages:
            continue
        stage = stages[0]
        configs = [(geo[k]["config"], rel[k][bench]) for k in rel if k[0] == stage and bench in rel[k]]
        chosen = {}
        for size in orc.get(bench, {}):
            want = dict(job)
            for band in case.bands or []:
                if size >= band.lo and (band.hi is None or size < band.hi) and band.algorithm:
                    want[alg_knob] = band.algorithm
                    if band.segsize:
                        want[alg_knob + "_segmentsize"] = band.segsize
            got = [r for cfg, r in configs if _same(cfg, want) and size in r]
            if got:
                chosen[size] = got[0][size]
        row = _row(bench, chosen, orc[bench])
        if row:
            rows.append(row)
    return rows


def report(rows, what="module"):
    lines = ["| benchmark | sizes | %s gain (geomean) | oracle gain (geomean) | regret mean | worst (size) |" % what,
             "|---|---|---|---|---|---|"]
    for bench, n, mg, og, mean, worst, wsize in rows:
        lines.append("| %s | %d | %.2fx | %.2fx | %+.1f%% | %+.1f%% (%d B) |" % (bench, n, mg, og, mean, worst, wsize))
    return "\n".join(lines) + "\n"
