"""`tunedmpi sweep`: the seed studies' staged search, generalised and measured like validate.

Each stage measures every combination of its knobs, built on the job configuration chosen so far
(choice.py: one configuration for every operation of the job), against the untuned baseline,
which every stage measures again as its control. Stages of per-collective knobs (coll_tuned
algorithms, segment sizes) are measured at every size; tune turns them into bands (persize.py).
Runs are interleaved (repetition 1 of every configuration, then repetition 2, ...), the
configurations in a new shuffled order in every repetition (round_order), and made by the
runner validate also uses (bench/runner.py): the same benchmarks, parsers and fresh `module purge;
module load <baseline>` shells, with the configuration's variables exported on top. Every finished
run is one record in the results store (store.py); a rerun of the same command skips what exists,
so an interrupted sweep loses nothing.
With --slurm-array each stage is a Slurm job array, task k making repetition k the same way.
"""

import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

from tunedmpi import paths
from tunedmpi.bench import build, store, suites
from tunedmpi.bench.runner import CannotRun, Runner, check_geometry, progress, require_local_mpi
from tunedmpi.files import locked, read_text, write_atomic
from tunedmpi.modules import envmap, sites
from tunedmpi.regenerate import choice
from tunedmpi.regenerate import space as spacemod
from tunedmpi.tables.operations import COLLECTIVES

LOCK = ".sweep.lock"  # in the campaign directory: held (fcntl.flock) by the sweep measuring it
ALIVE = "PENDING,RUNNING,SUSPENDED,CONFIGURING"  # squeue states of an array job that may still run


def campaign_dir(store_root, site, sp, nodes, ppn, name=None, confirm=False):
    """Same site, space, geometry and role -> same campaign, so rerunning the command resumes it."""
    if name is not None:
        paths.safe_name(name, "--campaign", "campaign")
    suffix = "-confirm" if confirm else ""
    name = name or "%s-%dx%d-%s%s" % (site.name, nodes, ppn, sp.digest, suffix)
    return paths.inside(store_root, Path(store_root) / name, "--campaign", "campaign")


def check_confirmation(sp):
    """A confirmation campaign tests bands, so it may hold per-collective stages only (the job-wide
    ones would choose on runs that are meant to test)."""
    for stage in sp.stages:
        wide = [k for k in stage.knobs if not choice.per_collective(k)]
        if wide:
            raise CannotRun(
                "%s: stage %s varies job-wide knob(s) %s, but a confirmation campaign (--confirm) only "
                "tests per-collective bands; give a space of coll_tuned stages on the table's job "
                "configuration (`job:`, as site-configs/local/space-per-size.yaml) or sweep without "
                "--confirm" % (sp.path, stage.name, ", ".join(wide))
            )


def make_runner(site, sp, nodes, ppn, timeout=None, retries=1, modulepaths=()):
    """Runs as validate makes them, in the site's module tree (+ the admin's module paths)."""
    return Runner(
        [str(paths.project_root() / "modulefiles" / site.name)] + list(modulepaths),
        nodes,
        ppn,
        timeout
        or (120.0 if all((st.set_name or sp.set_name) == "quick" for st in sp.stages) else 900.0),
        retries,
    )


def baseline_module(site):
    """Every configuration is the untuned baseline module plus the configuration's variables."""
    return "%s/%s" % (site.baseline_module, site.mpi_version)


def program_benchmarks(sp, judged):
    """What a stage's runs measure: the benchmarks it judges and, with any collective among them,
    every collective of the space in that one IMB run, as validate runs them. A collective's time
    depends on what ran before it in the program (docs/regenerate.md, "Measured in validate's
    program"), so a band chosen on a collective run alone is chosen in another context than the one
    it is validated and used in. One-sided tests are programs of their own: only the judged ones."""
    colls = [b for b in sp.benchmarks if b in COLLECTIVES]
    wide = colls if any(b in colls for b in judged) else []
    return [b for b in sp.benchmarks if b in judged or b in wide]


def stage_plan(sp, stage, job):
    """[(config, [benchmarks])]: the stage's candidates, each built on the job configuration chosen so
    far (choice.job_step); the baseline {} first. Every candidate is judged on every benchmark of the
    stage (its `only:`, else the space's), measured in the program program_benchmarks() gives."""
    benches = [b for b in sp.benchmarks if not stage.only or b in stage.only]
    plan = OrderedDict([(store.config_id({}), ({}, list(benches)))])
    for combo in sp.combinations(stage):
        config = OrderedDict((k, v) for k, v in job.items() if k not in stage.knobs)
        config.update(combo)
        plan.setdefault(store.config_id(config), (dict(config), list(benches)))
    return [(cfg, bs) for cfg, bs in plan.values()]


ORDER = "configurations shuffled in every repetition (seeded by campaign, stage and repetition)"


def round_order(n, campaign, stage, rep):
    """The order of a stage's n configurations in repetition `rep`: a shuffle seeded by campaign,
    stage and repetition, so a resumed sweep keeps it. Why not the plan's order: slow spells of this
    kind of host last a few runs, so neighbouring runs share the host's state; in a fixed order every
    configuration follows the same neighbour in every round, and a spell pattern turns into a bias
    between configurations instead of noise the tests count."""
    order = list(range(n))
    random.Random("%s/%s/%d" % (campaign, stage, rep)).shuffle(order)
    return order


def measure_config(ctx, stage, config, benches, rep):
    """Every missing run of one configuration's repetition; returns how many were measured."""
    site, sp, runner, binaries, cdir = (
        ctx[k] for k in ("site", "space", "runner", "binaries", "dir")
    )
    exports, _ = envmap.knob_env(site, config, runner.nodes >= 2)
    done = 0
    for run in suites.plan(
        binaries, stage.set_name or sp.set_name, runner.np, program_benchmarks(sp, benches)
    ):
        path = store.record_path(cdir, stage.name, config, run.name, rep)
        if store.exists(path):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)

        def log_for(attempt):
            return path.with_suffix(".try%d.tmp" % attempt)

        def title_for(attempt):
            return "tunedmpi sweep run: stage %s, config %s, %s, repetition %d, attempt %d" % (
                stage.name,
                store.config_id(config),
                run.name,
                rep,
                attempt,
            )

        logs = []  # one record per run: its attempts' logs, one after the other
        for attempt, m in runner.attempts(
            binaries, run, baseline_module(site), exports, log_for, title_for
        ):
            logs.append(read_text(log_for(attempt), errors="replace"))
            log_for(attempt).unlink()
        record = dict(
            campaign=cdir.name,
            stage=stage.name,
            config=dict(config),
            config_id=store.config_id(config),
            run=run.name,
            benchmarks=list(run.expect),
            judged=[b for b in run.expect if b in benches],
            rep=rep,
            nodes=runner.nodes,
            ppn=runner.ppn,
            attempts=attempt,
            source="sweep",
            exports=exports,
            **m,
        )
        store.save(path, record, "\n".join(logs))
        done += 1
    return done


def missing_runs(cdir, stage_name, plan, repetitions):
    """[(config, run name, repetition)] whose record is not in the store yet."""
    return [
        (config, run, rep)
        for config, benches in plan
        for rep in range(1, repetitions + 1)
        for run, _ in suites.programs(benches)
        if not store.exists(store.record_path(cdir, stage_name, config, run, rep))
    ]


def run_sweep(
    site,
    sp,
    nodes,
    ppn,
    store_root,
    name=None,
    array=False,
    sbatch_args="",
    timeout=None,
    retries=1,
    modulepaths=(),
    confirm=False,
):
    # What can refuse the request, before the first run and before the campaign directory exists.
    if confirm:
        check_confirmation(sp)
    cdir = campaign_dir(store_root, site, sp, nodes, ppn, name, confirm)
    old = (
        json.loads(read_text(cdir / "campaign.json")) if (cdir / "campaign.json").is_file() else {}
    )
    if old and (old.get("role") == "confirm") != confirm:
        raise CannotRun(
            "campaign %s was started %s --confirm; rerun it as it was started, or give another "
            "--campaign" % (cdir, "with" if old.get("role") == "confirm" else "without")
        )
    runner = make_runner(site, sp, nodes, ppn, timeout, retries, modulepaths)
    if not array:  # an array's tasks run in allocations of their own
        check_geometry(nodes, ppn, runner.env, "add --slurm-array")
        require_local_mpi(site)
    if not runner.module_available(baseline_module(site)):
        raise CannotRun(
            "site %s: its baseline module %s is not in the module path (%s); run `make` (it renders "
            "modulefiles/%s) or add --modulepath DIR"
            % (site.name, baseline_module(site), ":".join(runner.modulepaths), site.name)
        )
    binaries = (
        runner.find_binaries(baseline_module(site), list(sp.benchmarks)) if not array else None
    )
    built = build.identity(runner, baseline_module(site))  # resumed only on the build it began on
    build.check_same(cdir, old.get("build"), built)
    cdir.mkdir(parents=True, exist_ok=True)
    # One sweep per campaign (a second one would measure the same runs on the same cores and
    # overwrite the first's records): it refuses at once, naming the holder (docs/regenerate.md).
    with locked(cdir / LOCK, "campaign %s" % cdir):
        meta = dict(
            site=site.name,
            nodes=nodes,
            ppn=ppn,
            space=os.path.abspath(sp.path),
            space_digest=sp.digest,
            mpi="%s %s" % (site.mpi_flavour, site.mpi_version),
            ucx=".".join(map(str, site.ucx_version)),
            baseline_module=baseline_module(site),
            set=sp.set_name,
            repetitions=sp.repetitions,
            program=spacemod.PROGRAM,
            timeout_s=runner.timeout,
            retries=retries,
            modulepaths=list(modulepaths),
            build=built,
        )
        if confirm:
            meta["role"] = "confirm"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta["started"] = old.get("started") or now
        # a campaign begun before the shuffle says so: its earlier runs were in the plan's order
        order = ORDER if not array else "one Slurm array task per repetition, " + ORDER
        meta["order"] = old.get("order") or (
            "plan order until %s, then %s" % (now, order) if old else order
        )
        # saved before the first run: tune needs the space's job even from an interrupted campaign
        job, history = dict(sp.job or {}), []
        meta["job_start"] = dict(job)
        store.save_campaign(cdir, meta)
        ctx = dict(site=site, space=sp, runner=runner, binaries=binaries, dir=cdir)
        for stage in sp.stages:
            plan = stage_plan(sp, stage, job)
            sys.stderr.write(
                "sweep: stage %s: %d configurations x %d repetitions (%s)\n"
                % (stage.name, len(plan), sp.repetitions, cdir)
            )
            if array:
                submit_array(ctx, stage, plan, sbatch_args)
            else:
                _measure_stage(ctx, stage, plan, range(1, sp.repetitions + 1))
            _, records = store.load_campaign(cdir)
            _refuse_missing(ctx, stage, plan)
            geo_data = choice.collect(records).get((nodes, ppn), {})
            job, decided = choice.job_step(geo_data, stage.name, list(stage.knobs), job)
            ch = decided["chosen"]
            history.append(
                {
                    "stage": stage.name,
                    "knobs": list(stage.knobs),
                    "configurations": len(plan),
                    "job": store.config_id(job),
                    "chosen": ch["config_id"] if ch else None,
                }
            )
            _say_job(stage, decided, job)
        meta["stages"] = history
        meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        store.save_campaign(cdir, meta)
        return cdir, job


def _measure_stage(ctx, stage, plan, reps):
    """Repetitions `reps` of a stage's plan here (an array task: one), interleaved: every
    configuration per repetition, in each repetition's shuffled order; runs already in the store
    are kept. Returns how many runs were measured."""
    cdir, sp = ctx["dir"], ctx["space"]
    total, done, measured, stage_started = len(plan) * len(reps), 0, 0, time.monotonic()
    for rep in reps:
        for config, benches in (
            plan[i] for i in round_order(len(plan), cdir.name, stage.name, rep)
        ):
            n = measure_config(ctx, stage, config, benches, rep)
            measured += n
            done += 1
            what = "stage %s rep %d/%d" % (stage.name, rep, sp.repetitions)
            news = "%d run(s) measured" % n if n else "already in the store"
            progress(
                done, total, stage_started, "%s %s: %s" % (what, store.config_id(config), news)
            )
    return measured


def _refuse_missing(ctx, stage, plan):
    """CannotRun when runs of the stage are missing (an array's tasks failed or were killed)."""
    cdir, sp = ctx["dir"], ctx["space"]
    missing = [
        (store.config_id(c), rep)
        for c, _, rep in missing_runs(cdir, stage.name, plan, sp.repetitions)
    ]
    if missing:
        job = ctx.get("arrays", {}).get(stage.name)
        where = ""
        if job:
            where = " after array job %s (tasks cancelled, failed or killed; their output: %s)" % (
                job,
                cdir / stage.name / ("slurm-%s_<task>.out" % job),
            )
        raise CannotRun(
            "%d run(s) of %d configuration(s) of stage %s are missing (e.g. %s rep %d)%s; "
            "rerun the same command to finish them (finished runs are kept)"
            % (len(missing), len({cid for cid, _ in missing}), stage.name, *missing[0], where)
        )


def _say_job(stage, decided, job):
    """The job configuration after a stage, on stderr."""
    ch, unproven = decided["chosen"], decided.get("unproven")
    if any(choice.per_collective(k) for k in stage.knobs):
        sys.stderr.write("sweep: stage %s measured per size (tune makes its bands)\n" % stage.name)
        return
    if ch:
        now = "%s (%.1f%% less time than the baseline)" % (ch["config_id"], (1 - ch["score"]) * 100)
    elif unproven:
        why = "%s beat its score but did not pass against it" % unproven["config_id"]
        now = "unchanged, %s (%s)" % (store.config_id(job), why)
    else:
        now = "unchanged, %s (no candidate passed and beat it)" % store.config_id(job)
    sys.stderr.write("sweep: after stage %s, the job configuration: %s\n" % (stage.name, now))


def submit_array(ctx, stage, plan, sbatch_args):
    """One Slurm array task per repetition that still misses runs; waits for the array.
    Refuses (CannotRun) while an array of this stage of this campaign is still queued or running
    (a second one would measure the same runs at the same time and rewrite plan.json
    under its tasks), and when sbatch does not take the job."""
    cdir, runner, sp = ctx["dir"], ctx["runner"], ctx["space"]
    script = cdir / stage.name / "array.sh"
    job_name = "tunedmpi-sweep-%s" % stage.name
    todo = sorted({rep for _, _, rep in missing_runs(cdir, stage.name, plan, sp.repetitions)})
    if not todo:
        return
    try:
        argv = ["squeue", "--noheader", "--name", job_name, "--format", "%F %o", "--states", ALIVE]
        q = subprocess.run(argv, capture_output=True, text=True)
    except OSError as exc:
        raise CannotRun("--slurm-array needs Slurm's commands (squeue, sbatch) on PATH: %s" % exc)
    lines = q.stdout.splitlines() if q.returncode == 0 else []
    mine = {line.split(None, 1)[0] for line in lines if line.split(None, 1)[1:] == [str(script)]}
    active = sorted(mine, key=int)
    if active:
        raise CannotRun(
            "array job %s of stage %s of this campaign is still queued or running; wait "
            "for it to end (squeue -j %s) or scancel it, then rerun the same command"
            % (",".join(active), stage.name, ",".join(active))
        )
    plan_path = cdir / stage.name / "plan.json"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(plan_path, json.dumps(plan, indent=1) + "\n")  # [[config, benchmarks]]
    exe = paths.project_root() / ".venv" / "bin" / "tunedmpi"
    cmd_line = '%s sweep-task %s %s "$SLURM_ARRAY_TASK_ID"' % (
        shlex.quote(str(exe)) if exe.exists() else "python3 -m tunedmpi.cli",
        shlex.quote(str(cdir)),
        shlex.quote(stage.name),
    )
    write_atomic(
        script,
        "#!/bin/bash\nexport TUNEDMPI_ROOT=%s PYTHONPATH=%s\nexec %s\n"
        % (
            shlex.quote(str(paths.project_root())),
            shlex.quote(str(paths.project_root() / "src")),
            cmd_line,
        ),
    )
    cmd = (
        [
            "sbatch",
            "--wait",
            "--parsable",
            "--job-name",
            job_name,
            "--array",
            ",".join(map(str, todo)),
            "--nodes",
            str(runner.nodes),
            "--ntasks-per-node",
            str(runner.ppn),
            "--output",
            str(cdir / stage.name / "slurm-%A_%a.out"),
        ]
        + shlex.split(sbatch_args or "")
        + [str(script)]
    )
    sys.stderr.write("sweep: submitting %d array task(s): %s\n" % (len(todo), " ".join(cmd)))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    job = proc.stdout.strip().split(";")[0]  # --parsable: "<id>[;<cluster>]", printed on submission
    if not job.isdigit():  # refused: rerunning the same command would not help
        raise CannotRun(
            "sbatch did not submit the array job (exit %d): %s"
            % (proc.returncode, proc.stderr.strip() or "(no message)")
        )
    ctx.setdefault("arrays", {})[stage.name] = job
    # sbatch --wait exits non-zero when a task failed or was killed, 0 when tasks were cancelled
    # before they started: the records, not this code, say what is missing (checked by run_sweep)
    sys.stderr.write("sweep: array job %s ended (sbatch exit %d)\n" % (job, proc.returncode))


def run_task(cdir, stage_name, rep):
    """One array task: every missing run of repetition `rep` of the stage's plan."""
    cdir = Path(cdir)
    meta = json.loads(read_text(cdir / "campaign.json"))
    site = sites.load_named(meta["site"])
    sp = spacemod.narrowed(
        spacemod.load_space(meta["space"], site), repetitions=meta["repetitions"]
    )
    runner = make_runner(
        site,
        sp,
        meta["nodes"],
        meta["ppn"],
        meta["timeout_s"],
        meta["retries"],
        meta["modulepaths"],
    )
    plan = json.loads(read_text(cdir / stage_name / "plan.json"))
    binaries = runner.find_binaries(baseline_module(site), list(sp.benchmarks))
    ctx = dict(site=site, space=sp, runner=runner, binaries=binaries, dir=cdir)
    stage = next(s for s in sp.stages if s.name == stage_name)
    n = _measure_stage(ctx, stage, plan, [rep])
    sys.stderr.write("sweep-task: %s rep %d: %d run(s) measured\n" % (stage_name, rep, n))
    return 0
