"""`tunedmpi tune`: from the results store to a tuning table, with provenance, a diff and regret.

Per (nodes, ppn, operation) a configuration is chosen only when it would pass validate's rule
against the baseline measured in the same stage (no band loses, at least one wins, same tolerance
and test); among those the lowest time relative to that baseline wins. Where none passes, the
case keeps the MPI's defaults (`settings: {none: {}}`): the table records that the baseline was
measured and not beaten, rather than a knob chosen from noise.

Regret: per message size the oracle is the best configuration measured at that size (relative to
its own stage's baseline); the regret of the chosen configuration is how much slower it is than
that oracle, as a geometric mean over sizes and at the worst size.
"""
import os
import sys
from collections import OrderedDict
from pathlib import Path

import yaml

from . import paths, sites, stats, store, tables
from .atomic import write_atomic
from .bench import suites
from .errors import InputError

# Table operation <- the benchmarks that measure it (the first one carries the regret figures).
OPERATIONS = OrderedDict([("alltoall", ["alltoall"]), ("allgather", ["allgather"]), ("allreduce", ["allreduce"]),
                          ("put", ["put_latency", "put_bw"]), ("get", ["get_latency", "get_bw"]),
                          ("acc", ["acc_latency"]), ("get_acc", ["get_acc_latency"]),
                          ("fop", ["fop_latency"]), ("cas", ["cas_latency"])])


def collect(records):
    """{(nodes, ppn): {(stage, config_id): {"config":…, "bench": {b: (metric, [points…], failed)}}}}"""
    out = {}
    for r in records:
        geo = out.setdefault((r["nodes"], r["ppn"]), {})
        entry = geo.setdefault((r["stage"], r["config_id"]), {"config": r["config"], "bench": {}})
        for b in r.get("benchmarks") or list(r["series"]):
            metric, reps, failed = entry["bench"].get(b, (None, [], 0))
            s = r["series"].get(b) if r["status"] == "ok" else None
            if s:
                metric = s["metric"]
                reps = reps + [{int(k): v for k, v in s["points"].items()}]
            else:
                failed += 1
            entry["bench"][b] = (metric, reps, failed)
    return out


def judge(base, cand, benches, tolerance, alpha):
    """(validate verdict, score = mean relative time, per-benchmark relative times) of a candidate."""
    bands, rels = [], {}
    for b in benches:
        bm, breps, bfail = base["bench"][b]
        cm, creps, cfail = cand["bench"][b]
        metric = bm or cm
        if metric:
            bands += stats.compare_bands(b, metric, breps, creps, tolerance, alpha)
            rels[b] = stats.relative_times(breps, creps, metric) if breps and creps else {}
        bands.append(stats.reliability(b, bfail, len(breps) + bfail, cfail, len(creps) + cfail))
    scores = [stats.geomean(r.values()) for r in rels.values() if r]
    score = stats.geomean(scores) if scores and all(scores) else None
    return stats.module_verdict(bands), score, rels, bands


def choose(geo_data, op, tolerance=stats.DEFAULT_TOLERANCE, alpha=stats.DEFAULT_ALPHA):
    """The decision for one operation at one geometry, or None when it was not measured."""
    benches = [b for b in OPERATIONS[op]
               if any(b in e["bench"] for e in geo_data.values())]
    if not benches:
        return None
    stages = sorted({st for st, _ in geo_data})
    best, considered, oracle = None, 0, {}
    for st in stages:
        base = geo_data.get((st, "baseline"))
        if not base or not all(b in base["bench"] for b in benches):
            continue
        for (s2, cid), cand in geo_data.items():
            if s2 != st or not all(b in cand["bench"] for b in benches):
                continue
            verdict, score, rels, _ = judge(base, cand, benches, tolerance, alpha)
            for size, rel in rels.get(benches[0], {}).items():   # the per-size oracle, all stages
                oracle[size] = min(oracle.get(size, rel), rel)
            if cid == "baseline":
                continue
            considered += 1
            if verdict == "PASS" and score is not None and (best is None or score < best["score"]):
                best = dict(stage=st, config_id=cid, config=cand["config"], score=score, rels=rels)
    chosen_rel = best["rels"].get(benches[0], {}) if best else {s: 1.0 for s in oracle}
    ratios = [chosen_rel[s] / oracle[s] for s in oracle if s in chosen_rel and oracle[s] > 0]
    regret = {"mean_pct": round((stats.geomean(ratios) - 1) * 100, 1) if ratios else None,
              "max_pct": round((max(ratios) - 1) * 100, 1) if ratios else None, "sizes": len(ratios)}
    return dict(op=op, benchmarks=benches, chosen=best, candidates=considered, regret=regret)


def build_table(site, metas, decisions, runs_count):
    cids = ", ".join(sorted(m["campaign"] for m in metas))
    suites_used = sorted({m.get("suite", "probe") for m in metas})
    first = metas[0]
    prov = OrderedDict([
        ("document", "tunedmpi sweep campaign(s) %s" % cids),
        ("platform", site.description),
        ("mpi", first["mpi"]), ("ucx", first["ucx"]),
        ("benchmark", "%s: IMB-MPI1 collectives and OSU one-sided tests%s" % (
            "+".join(suites_used), " (validate/probes, IMB/OSU-compatible)" if "probe" in "".join(suites_used) else "")),
        ("command", "module purge; module load %s; <knob variables>; mpirun -np <nodes*ppn> <benchmark> (%s set; "
                    "one-sided: -w %s -s %s)" % (first["baseline_module"], first["set"], suites.WINDOW, suites.SYNC)),
        ("method", "%s; figure = drop max and min, mean of the rest; a configuration is chosen only if it passes "
                   "validate's rule against the same stage's baseline (no band loses, one wins: gain >= 5%% and a "
                   "Yuen-Welch t test on per-run band scores, Holm over bands, p < 0.05)" % "; ".join(
                       "ingested logs (tunedmpi ingest), one repetition per log" if m.get("source") == "ingest" else
                       "staged search (%s), %s interleaved repetitions per configuration"
                       % (" -> ".join(s["stage"] for s in m.get("stages", [])) or "stages", m["repetitions"])
                       for m in metas)),
        ("date", (first.get("finished") or first.get("started") or "")[:10] or None),
        ("campaign", cids),
        ("notes", ["%d runs measured" % runs_count]),
    ])
    cases = []
    for (nodes, ppn, op), d in sorted(decisions.items(), key=lambda kv: (kv[0][0], kv[0][1], list(OPERATIONS).index(kv[0][2]))):
        config = OrderedDict(sorted((d["chosen"] or {}).get("config", {}).items()))
        note = ("chosen over %d candidate(s): %s, %.1f%% less time than the baseline"
                % (d["candidates"], d["chosen"]["config_id"], (1 - d["chosen"]["score"]) * 100)
                if d["chosen"] else "no candidate of %d passed against the baseline: the MPI's defaults stay" % d["candidates"])
        regret = d["regret"]
        cases.append(OrderedDict([
            ("nodes", nodes), ("ppn", ppn), ("collective", op),
            ("section", "campaign %s, stage %s" % (cids, d["chosen"]["stage"] if d["chosen"] else "baseline")),
            ("settings", {"none": {k: (v if not isinstance(v, bool) else str(v)) for k, v in config.items()}}),
            ("notes", [note, "regret vs the per-size oracle of %s over %d sizes: mean %s%%, worst %s%%"
                       % (d["benchmarks"][0], regret["sizes"], regret["mean_pct"], regret["max_pct"])]),
        ]))
    return OrderedDict([
        ("schema", tables.SCHEMA_VERSION), ("platform", site.name),
        ("title", "Measured on %s by tunedmpi sweep/tune" % site.name),
        ("mpi", OrderedDict([("flavour", site.mpi_flavour), ("version", site.mpi_version)])),
        ("ucx_version", ".".join(map(str, site.ucx_version))),
        ("provenance", prov),
        ("baseline", OrderedDict([("text", "module load %s with no tuning variable: the MPI's own defaults"
                                           % first["baseline_module"]),
                                 # no variable set = these defaults (UCX's auto thresholds, Open MPI's own pml/osc)
                                 ("knobs", OrderedDict([("pml", "default"), ("osc", "default"),
                                                        ("ucx_rndv_thresh", "auto"), ("ucx_zcopy_thresh", "auto")]))])),
        ("cases", cases)])


def _dump(doc):
    class Dumper(yaml.SafeDumper):
        pass
    Dumper.add_representer(OrderedDict, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items()))
    return ("# GENERATED by `tunedmpi tune`; review the diff it printed before committing.\n"
            + yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=110))


def diff(old, new):
    """Readable changes between two tables, case by case."""
    def cases(t):
        return {(c.nodes, c.ppn, c.collective): c.settings.get("none", {}) for c in t.cases} if t else {}
    a, b = cases(old), cases(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        label = "%dx%d %s" % key
        if key not in a:
            lines.append("+ %s: %s" % (label, _knobs(b[key])))
        elif key not in b:
            lines.append("- %s (no longer measured)" % label)
        elif a[key] != b[key]:
            lines.append("~ %s: %s -> %s" % (label, _knobs(a[key]), _knobs(b[key])))
    return lines or ["(no change in chosen settings)"]


def _knobs(values):
    return ", ".join("%s=%s" % kv for kv in sorted(values.items())) or "MPI defaults"


def tune(site_name, store_root, out=None, campaign_names=None, tolerance=stats.DEFAULT_TOLERANCE,
         alpha=stats.DEFAULT_ALPHA):
    site = sites.load_named(site_name)
    dirs = store.campaigns(store_root, site.name)
    if campaign_names:
        unknown = sorted(set(campaign_names) - {d.name for d in dirs})
        if unknown:
            raise InputError("--campaign", None, ", ".join(unknown), "no such campaign of site %s in %s" % (site.name, store_root),
                             "use one of: %s" % (", ".join(d.name for d in dirs) or "(none: run tunedmpi sweep first)"))
        dirs = [d for d in dirs if d.name in campaign_names]
    if not dirs:
        raise InputError(str(store_root), None, "campaign", "no campaign of site %s in the store" % site.name,
                         "run tunedmpi sweep --site %s (or ingest logs) first" % site.name)
    metas, records = [], []
    for d in dirs:
        meta, recs = store.load_campaign(d)
        meta["campaign"] = d.name
        suites_seen = {s["suite"] for r in recs for s in r["series"].values()}
        meta["suite"] = "+".join(sorted(suites_seen)) or "probe"
        metas.append(meta)
        records += recs
    decisions = {}
    for (nodes, ppn), geo_data in collect(records).items():
        for op in OPERATIONS:
            d = choose(geo_data, op, tolerance, alpha)
            if d:
                decisions[(nodes, ppn, op)] = d
    doc = build_table(site, metas, decisions, len(records))
    target = Path(out) if out else paths.tables_dir() / site.name / ("%s-%s.yaml" % (site.mpi_flavour, site.mpi_version))
    text = _dump(doc)
    tmp = target.parent / (".check-" + target.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(tmp, text)
    try:  # the same checks as any table, before it replaces the old one
        new = tables.load_table(str(tmp))
    finally:
        os.unlink(tmp)
    old = tables.load_table(str(target)) if target.is_file() else None
    write_atomic(target, text)
    return target, new, old, decisions


def report(target, new, old, decisions, stream=sys.stdout):
    stream.write("wrote %s (%d cases)\n\nchanges against the previous table:\n" % (target, len(new.cases)))
    for line in diff(old, new):
        stream.write("  %s\n" % line)
    stream.write("\n| case | chosen | candidates | less time than baseline | regret mean / worst (%) |\n"
                 "|---|---|---|---|---|\n")
    for (nodes, ppn, op), d in sorted(decisions.items()):
        ch = d["chosen"]
        stream.write("| %dx%d %s | %s | %d | %s | %s / %s |\n" % (
            nodes, ppn, op, ch["config_id"] if ch else "baseline (MPI defaults)", d["candidates"],
            "%.1f%%" % ((1 - ch["score"]) * 100) if ch else "-", d["regret"]["mean_pct"], d["regret"]["max_pct"]))
