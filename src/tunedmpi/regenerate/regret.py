"""`tunedmpi regret`: how far a validated module is from the per-size oracle of a separate run.

The module's gain per size comes from a validate result (tuned against baseline, same rounds);
the oracle per size is the best configuration a sweep campaign measured at that size (relative
to that stage's own baseline, same rounds). Both are times relative to the untuned baseline of
their own run, so run-to-run drift cancels; the campaign should be a separate run from the one
the table was tuned on, so the oracle is not the optimistic minimum over the choosing runs.

    regret(size) = (tuned / baseline)(size) / min over configurations (config / baseline)(size)
"""
import json
from pathlib import Path

from tunedmpi.acceptance import stats
from tunedmpi.bench import store
from tunedmpi.errors import InputError
from tunedmpi.regenerate import choice


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


def oracle(campaign_dirs, nodes, ppn):
    """{benchmark: {size: best config/baseline time over every configuration of every stage}}."""
    records = []
    for d in campaign_dirs:
        records += store.load_campaign(d)[1]
    geo = choice.collect(records).get((nodes, ppn), {})
    measured = {}
    for (stage, cid), e in geo.items():
        base = geo.get((stage, "baseline"))
        if not base:
            continue
        for bench, (metric, reps, _) in e["bench"].items():
            if bench in base["bench"] and len(reps) >= 2 and len(base["bench"][bench][1]) >= 2:
                measured.setdefault(bench, []).append(stats.relative_times(base["bench"][bench][1], reps, metric))
    return {bench: stats.per_size_best(rels) for bench, rels in measured.items()}


def regret(results_dir, campaign_dirs):
    """[(benchmark, sizes, module gain, oracle gain, regret mean %, worst %, worst size)]."""
    rel, doc = module_relative(results_dir)
    geo = doc.get("geometry", {})
    orc = oracle(campaign_dirs, geo.get("nodes", 1), geo.get("ppn", 2))
    rows = []
    for bench in sorted(set(rel) & set(orc)):
        sizes = [s for s in rel[bench] if s in orc[bench] and orc[bench][s] > 0]
        if not sizes:
            continue
        ratios = {s: rel[bench][s] / orc[bench][s] for s in sizes}
        worst = max(ratios, key=ratios.get)
        rows.append((bench, len(sizes), 1 / stats.geomean([rel[bench][s] for s in sizes]),
                     1 / stats.geomean([orc[bench][s] for s in sizes]),
                     (stats.geomean(ratios.values()) - 1) * 100, (ratios[worst] - 1) * 100, worst))
    return rows


def report(rows):
    lines = ["| benchmark | sizes | module gain (geomean) | oracle gain (geomean) | regret mean | worst (size) |",
             "|---|---|---|---|---|---|"]
    for bench, n, mg, og, mean, worst, wsize in rows:
        lines.append("| %s | %d | %.2fx | %.2fx | %+.1f%% | %+.1f%% (%d B) |" % (bench, n, mg, og, mean, worst, wsize))
    return "\n".join(lines) + "\n"
