"""What a sweep will cost before it runs (`sweep --plan`, `retune --plan`): per stage the
configurations, repetitions and runs, and the time they take, estimated from this site's own past
runs (the store's records and validate's results.json, each run's wall time), per run and set.
"""

import json
import statistics
from pathlib import Path

from tunedmpi.bench import store, suites
from tunedmpi.files import read_text
from tunedmpi.regenerate import choice, sweep

CHOSEN = "(chosen by an earlier stage)"  # stands for a job configuration not yet measured


def _past_walls(site_name, store_root, results_root):
    """{(set, run name, ranks): [wall seconds]} of this site's finished runs: sweep records in the
    store and validate's campaigns under ``results_root``."""
    out = {}
    for d in store.campaigns(store_root, site_name):
        meta, recs = store.load_campaign(d)
        for r in recs:
            if r.get("wall_s") and r.get("status") == "ok":
                key = (meta.get("set"), r["run"], r["nodes"] * r["ppn"])
                out.setdefault(key, []).append(r["wall_s"])
    for path in sorted(Path(results_root).glob("%s-*/results.json" % site_name)):
        try:
            doc = json.loads(read_text(path))
            ranks = doc["geometry"]["np"]
            for r in doc.get("runs", []):
                if r.get("wall_s") and r.get("status") == "ok":
                    out.setdefault((doc["set"], r["run"], ranks), []).append(r["wall_s"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a campaign this version reads: it only refines the estimate
    return out


def sweep_plan(site, sp, nodes, ppn, store_root, results_root="validate-results", name=None):
    """{"stages": [{stage, configurations, repetitions, runs, missing, seconds}], "runs",
    "missing", "seconds" (None where no past run of that kind says), "campaign"}. A stage after a
    job-wide one is counted as built on a chosen job configuration: its knobs at default are then
    a configuration of their own beside the baseline (one more than on the MPI's defaults)."""
    cdir = sweep.campaign_dir(store_root, site, sp, nodes, ppn, name)
    walls = _past_walls(site.name, store_root, results_root)
    stages, unknown = [], set()
    job = dict(sp.job or {})
    for stage in sp.stages:
        plan = sweep.stage_plan(sp, stage, job)
        if not all(choice.per_collective(k) for k in stage.knobs):
            job = dict(job, **{CHOSEN: True})  # what this stage chooses is not known yet
        set_name = stage.set_name or sp.set_name
        # records already made (a resumed campaign): counted, not matched, as later stages'
        # configurations are built on what earlier ones chose
        made = len(list((cdir / stage.name).glob("*/*-rep*.json")))
        runs, seconds = 0, 0.0
        for config, benches in plan:
            for run, _ in suites.programs(sweep.program_benchmarks(sp, benches)):
                past = walls.get((set_name, run, nodes * ppn))
                if past:
                    seconds += statistics.median(past) * sp.repetitions
                else:
                    unknown.add("%s (%s set)" % (run, set_name))
                runs += sp.repetitions
        todo = max(0, runs - made)
        stages.append(
            dict(
                stage=stage.name,
                configurations=len(plan),
                repetitions=sp.repetitions,
                runs=runs,
                missing=todo,
                seconds=seconds * todo / runs if runs else 0.0,
            )
        )
    return dict(
        campaign=str(cdir),
        stages=stages,
        runs=sum(s["runs"] for s in stages),
        missing=sum(s["missing"] for s in stages),
        seconds=None if unknown else sum(s["seconds"] for s in stages),
        unknown=sorted(unknown),
        past=sum(len(v) for v in walls.values()),
    )


def minutes(seconds):
    return "unknown" if seconds is None else "~%d min" % max(1, round(seconds / 60))


def describe(plan, site, nodes, ppn):
    """The plan as the lines `--plan` prints."""
    lines = ["plan: site %s, %dx%d, campaign %s" % (site.name, nodes, ppn, plan["campaign"])]
    for s in plan["stages"]:
        time = minutes(s["seconds"]) if plan["seconds"] is not None else "unknown"
        lines.append(
            "  stage %(stage)-22s %(configurations)3d configurations x %(repetitions)d repetitions "
            "= %(runs)4d runs, %(missing)4d to measure, %(time)s" % dict(s, time=time)
        )
    unknown = "; none of " + ", ".join(plan["unknown"]) if plan["unknown"] else ""
    lines.append(
        "  total: %(runs)d runs, %(missing)d to measure, %(time)s (median wall time of %(past)d "
        "past runs of this site%(unknown)s)"
        % dict(plan, time=minutes(plan["seconds"]), unknown=unknown)
    )
    return lines
