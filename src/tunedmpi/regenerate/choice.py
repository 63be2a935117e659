"""How measured configurations are chosen: the per-benchmark rule against a stage's own baseline, and the
job-wide rule that picks ONE configuration for every operation of a job geometry.

Used by the sweep (which configuration later stages build on) and by tune (what the table says),
so the configuration a sweep built its later stages on is the one tune writes.

Two kinds of knobs (docs/design.md, "One configuration per job"):
- per-collective knobs, ``coll_tuned_<coll>_*``: each collective gets its own best, per message
  size (tunedmpi.regenerate.persize turns an algorithm stage into bands);
- job-wide knobs, everything else (pml, osc, UCX, btl sm, ...): one value for the whole job.

The job-wide rule, stage by stage in the space's order: among the stage's configurations that
build on the job configuration chosen so far, take the one with the lowest score (the geometric
mean over operations of the geometric mean over sizes of its time relative to the stage's
baseline) among those that PASS the per-benchmark rule on every benchmark the stage measured (no
band of any benchmark loses, at least one band wins: stats.compare_bands, each benchmark's bands
their own Holm family, runs within host states; validate's family is the campaign), if that
score is below the job configuration's own score in the same stage. Otherwise the job configuration stays.
"""

from collections import Counter

from tunedmpi import stats
from tunedmpi.policy import POLICY
from tunedmpi.tables.operations import OPERATION_OF


def per_collective(knob):
    """A knob that each collective gets for itself (coll_tuned_<coll>_algorithm, ..._segmentsize,
    coll_<coll>_component)."""
    return knob.startswith("coll_tuned_") or is_component(knob)


def is_component(knob):
    """coll_<coll>_component: which component runs the collective (none or ucc)."""
    return knob.startswith("coll_") and knob.endswith("_component")


def collective_of(knob):
    """coll_tuned_allreduce_algorithm, coll_allreduce_component -> allreduce."""
    prefix = "coll_tuned_" if knob.startswith("coll_tuned_") else "coll_"
    return knob[len(prefix) :].split("_", 1)[0]


def program_of(record):
    """The benchmarks a record's run measured, in its program's order (records from before the
    field existed: its series)."""
    return tuple(record.get("benchmarks") or record["series"])


def collect(records):
    """{(nodes, ppn): {(stage, config_id): {"config":…, "bench": {b: (metric, [points…], failed)}}}}
    Only the benchmarks a record's stage judges: a per-collective stage's run measures every
    collective of the space (validate's program) but is about its own collective alone. Each run's
    points are stats.RunPoints that know the host state the run met, labelled within its campaign
    (stats.host_labels), so that choices compare runs in like states (validate reports the states
    but compares all runs)."""
    out = {}
    by_campaign = {}
    for r in records:
        by_campaign.setdefault(r.get("campaign"), []).append(r)
    state = {}
    for recs in by_campaign.values():
        state.update(zip(map(id, recs), stats.host_labels([r.get("host") for r in recs])[0]))
    for r in records:
        geo = out.setdefault((r["nodes"], r["ppn"]), {})
        entry = geo.setdefault((r["stage"], r["config_id"]), {"config": r["config"], "bench": {}})
        for b in r.get("judged") or program_of(r):
            metric, reps, failed = entry["bench"].get(b, (None, [], 0))
            s = r["series"].get(b) if r["status"] == "ok" else None
            if s:
                metric = s["metric"]
                reps = reps + [
                    stats.RunPoints({int(k): v for k, v in s["points"].items()}, state[id(r)])
                ]
            else:
                failed += 1
            entry["bench"][b] = (metric, reps, failed)
    return out


def one_program(records):
    """(records, [notes]): each (geometry, stage, run) keeps the runs of one program. Sweeps before
    the program changed (space.PROGRAM) ran a per-collective stage's collective alone in its IMB run;
    pooled with the same stage run in validate's program, two contexts' levels would make one
    sample. The program with the most benchmarks in one run (validate's) is kept (between two as
    wide, the same one every time); each note says which campaign's runs were left out."""
    keyed = [((r["nodes"], r["ppn"], r["stage"], r["run"]), program_of(r), r) for r in records]
    widest = {}
    for key, prog, _ in keyed:
        widest[key] = max(widest.get(key, ()), prog, key=lambda p: (len(p), p))
    kept = [r for key, prog, r in keyed if prog == widest[key]]
    left = Counter(
        (key[:3], r.get("campaign", "?"), prog, widest[key])
        for key, prog, r in keyed
        if prog != widest[key]
    )
    notes = [
        "%dx%d stage %s: %d run(s) of campaign %s left out: they ran %s in one program, where other runs of "
        "the stage ran %s (validate's program, which is kept)"
        % (n, p, st, count, camp, ", ".join(prog), ", ".join(wide))
        for ((n, p, st), camp, prog, wide), count in left.items()
    ]
    return kept, notes


def judge(base, cand, benches, tolerance, alpha):
    """(module verdict by the per-benchmark rule, score, per-benchmark relative times
    {b: {size: rel}}, band results) of a candidate against its stage's baseline. score: geometric
    mean over the operations measured of the geometric mean over their benchmarks and sizes of the
    relative time (< 1: faster)."""
    bands, rels = [], {}
    for b in benches:
        bm, breps, bfail = base["bench"][b]
        cm, creps, cfail = cand["bench"][b]
        metric = bm or cm
        if metric:
            strata = stats.strata_of(breps, creps, alpha)
            bands += stats.compare_bands(b, metric, breps, creps, tolerance, alpha, strata=strata)
            rels[b] = stats.relative_times(breps, creps, metric) if breps and creps else {}
        bands.append(stats.reliability(b, bfail, len(breps) + bfail, cfail, len(creps) + cfail))
    per_op = {}
    for b, r in rels.items():
        if r:
            per_op.setdefault(OPERATION_OF.get(b, b), []).append(stats.geomean(r.values()))
    ops = [stats.geomean(v) for v in per_op.values()]
    score = (
        stats.geomean(ops)
        if ops and all(ops) and len(per_op) == len({OPERATION_OF.get(b, b) for b in benches})
        else None
    )
    return stats.module_verdict(bands), score, rels, bands


def without(config, knobs):
    """The configuration a stage's candidate was built on: ``config`` without the stage's knobs."""
    return {k: v for k, v in config.items() if k not in knobs}


def beats_its_base(
    geo_data, stage, knobs, config_id, benches, tolerance=POLICY.tolerance, alpha=POLICY.alpha
):
    """(passes, others): whether a candidate passes the per-benchmark rule against the configuration it was
    built on (its stage knobs at default, measured in the same stage; the stage's baseline while that
    is the MPI's defaults), at alpha / the other candidates built on it, which it was picked among.
    A stage that did not measure that configuration (no `default` value) cannot say: passes."""
    cand = geo_data[(stage, config_id)]
    rest = without(cand["config"], knobs)
    peers = [
        e
        for (st, cid), e in sorted(geo_data.items())
        if st == stage and cid != "baseline" and without(e["config"], knobs) == rest
    ]
    if rest:
        base, others = next((e for e in peers if e["config"] == rest), None), len(peers) - 1
    else:
        base, others = geo_data.get((stage, "baseline")), len(peers)
    if base is None or base is cand:
        return True, others
    return judge(base, cand, benches, tolerance, alpha / max(1, others))[0] == "PASS", others


def job_step(geo_data, stage, knobs, job, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """One stage of the job-wide rule: (job configuration after the stage, what was decided).

    ``knobs``: the stage's knob names; ``job``: the job configuration chosen before the stage."""
    base = geo_data.get((stage, "baseline"))
    benches = sorted(base["bench"]) if base else []  # those the stage's baseline was measured on
    decided = {"stage": stage, "benchmarks": benches, "candidates": 0, "chosen": None}
    if not base or not benches or any(per_collective(k) for k in knobs):
        return dict(job), decided
    rest = without(job, knobs)
    # The incumbent (the job configuration itself, measured again in this stage; the baseline while
    # the job configuration is still the MPI's defaults) is replaced only by a candidate that passes
    # against the baseline, beats the incumbent's score here, and passes the per-benchmark rule against the
    # incumbent itself at alpha / (the other candidates it was picked among). Without that last test
    # the best of several knobs that do nothing (btl sm limits under pml ucx) beats it by noise alone.
    incumbent, best = 1.0, None
    for (st, cid), cand in sorted(geo_data.items()):
        if st != stage or cid == "baseline":
            continue
        cfg = cand["config"]
        if without(cfg, knobs) != rest or not all(b in cand["bench"] for b in benches):
            continue  # built on another job configuration (or measured on fewer benchmarks)
        decided["candidates"] += 1
        verdict, score, _, _ = judge(base, cand, benches, tolerance, alpha)
        if cfg == job:
            incumbent = score or 1.0
        if (
            verdict == "PASS"
            and score is not None
            and (best is None or (score, cid) < (best["score"], best["config_id"]))
        ):
            best = dict(config=dict(cfg), config_id=cid, score=score)
    if best is None or best["config"] == job or best["score"] >= incumbent:
        return dict(job), decided
    passes, others = beats_its_base(
        geo_data, stage, knobs, best["config_id"], benches, tolerance, alpha
    )
    if not passes:
        decided["unproven"] = dict(best, others=others)
        return dict(job), decided
    decided["chosen"] = best
    return dict(best["config"]), decided


def job_configuration(geo_data, stages, tolerance=POLICY.tolerance, alpha=POLICY.alpha, start=None):
    """The job-wide rule over all stages in order: (job configuration, [per-stage decisions]).
    ``stages``: [(stage name, [knob names])] in the space's order; ``start``: the space's job."""
    job, steps = dict(start or {}), []
    for name, knobs in stages:
        job, decided = job_step(geo_data, name, knobs, job, tolerance, alpha)
        steps.append(decided)
    return job, steps


def losses(geo_data, config, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """[(stage, BandResult)] of every band of any benchmark in which ``config`` lost to the MPI's
    defaults, in each stage that measured both (the per-benchmark rule, as the stage's choice)."""
    out = []
    for (st, cid), e in sorted(geo_data.items()):
        base = geo_data.get((st, "baseline"))
        if cid == "baseline" or e["config"] != config or not base:
            continue
        benches = [b for b in sorted(base["bench"]) if b in e["bench"]]
        out += [
            (st, r) for r in judge(base, e, benches, tolerance, alpha)[3] if r.verdict == "lose"
        ]
    return out


def never_worse(geo_data, steps, job, start=None, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """(configuration, [(rejected configuration, its losses)]): ``job`` when it lost no band of any
    benchmark in any stage that measured it; else the latest configuration before it on the job
    rule's path (after each stage, back to ``start``) that lost nowhere; else the MPI's defaults.
    A job-wide knob that wins small messages can lose large ones in a later stage's runs, where
    the stage that chose it did not look (issue 49: pml ucx at allgather 64 KB - 1 MB)."""
    path = [dict(start or {})] + [dict(s["chosen"]["config"]) for s in steps if s["chosen"]]
    rejected = []
    for cfg in [dict(job)] + path[::-1]:
        if any(cfg == r for r, _ in rejected):
            continue
        lost = losses(geo_data, cfg, tolerance, alpha) if cfg else []
        if not lost:
            return cfg, rejected
        rejected.append((cfg, lost))
    return {}, rejected
