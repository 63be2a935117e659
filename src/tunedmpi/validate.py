"""`tunedmpi validate`: rerun the benchmarks with the untuned baseline (A) and the tuned module (B),
alternating A B A B ..., and decide with statistics (stats.py) whether the tuned module wins.

Every run starts a fresh shell that purges modules and loads exactly one MPI module, so nothing
leaks between A and B; its command, the variables the module set, its output, exit code and wall
time go to a log of their own. Results land in a new directory that is never reused (report.py).
"""
import datetime
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from . import geometry, paths, report, sites, stats
from .bench import parse, probes, suites

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT = 0, 1, 2
LMOD_INITS = ("/usr/share/lmod/lmod/init/bash",)
# Variables a module run must not inherit from the caller's shell (the modules set their own).
INHERITED_TUNING = ("UCX_", "UCC_", "HCOLL_", "OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "TUNEDMPI_")
LMOD_STATE = ("LOADEDMODULES", "_LMFILES_", "_ModuleTable", "__LMOD")
SHOWN = ("UCX_", "UCC_", "HCOLL_", "OMPI_MCA_", "PRTE_MCA_", "SLURM_DISTRIBUTION", "TUNEDMPI_")


class CannotRun(Exception):
    """Validation cannot start here (no Lmod, no MPI, impossible geometry): exit 2."""


@dataclass
class Options:
    site: str
    tuned: str                    # module names with version
    baseline: str
    set_name: str = "quick"
    nodes: int = 1
    ppn: int = 2
    geometry_source: str = "default"
    repetitions: int = 5
    timeout: float = 120.0
    retries: int = 1
    tolerance: float = stats.DEFAULT_TOLERANCE
    alpha: float = stats.DEFAULT_ALPHA
    only: Optional[List[str]] = None
    force_probes: bool = False
    out: str = "validate-results"
    modulepaths: List[str] = field(default_factory=list)


@dataclass
class RunRecord:
    run: str                      # "collectives" or a one-sided benchmark
    role: str                     # baseline | tuned
    module: str
    rep: int
    attempt: int
    status: str                   # parse.STATUSES
    exit_code: Optional[int]
    wall_s: float
    log: str
    problems: List[str]
    series: dict                  # benchmark -> {"metric": ..., "suite": ..., "points": {size: value}}
    env: dict = field(default_factory=dict)   # tuning variables the module set for this run


def lmod_init():
    for cand in [os.path.join(os.environ.get("LMOD_PKG", "/nonexistent"), "init", "bash")] + list(LMOD_INITS):
        if os.path.isfile(cand):
            return cand
    raise CannotRun("Lmod not found (looked for $LMOD_PKG/init/bash and %s); install it "
                    "(Debian: apt-get install lmod)" % ", ".join(LMOD_INITS))


def run_env(opts):
    """The caller's environment without tuning or Lmod state, plus the geometry being validated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_TUNING + LMOD_STATE)}
    env["TUNEDMPI_NODES"], env["TUNEDMPI_PPN"] = str(opts.nodes), str(opts.ppn)
    if os.geteuid() == 0:  # Open MPI refuses root unless told; CI and containers run as root
        env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def module_script(opts, module, extra_modules, body):
    """bash: clean module state, load the MPI module (+ benchmark modules), then body."""
    lines = ["set -e", "source %s" % shlex.quote(lmod_init()), "module purge >/dev/null 2>&1 || true"]
    lines += ["module use %s" % shlex.quote(p) for p in opts.modulepaths]
    lines += ["module load %s" % " ".join(shlex.quote(m) for m in [module] + list(extra_modules))]
    return "\n".join(lines + [body])


def shell(script, env, timeout):
    """Run bash in its own process group (a timeout kills mpirun and every rank it started)."""
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "--norc", "--noprofile", "-c", script], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    return proc.returncode, out, timed_out, time.monotonic() - start


def find_binaries(opts, env, workdir):
    """IMB/OSU from the environment or modules, else probes built with the baseline's mpicc."""
    extra = [m for m in suites.BENCH_MODULES.values() if module_available(opts, env, m)]
    probe_out = "__PROBE_PATHS__"
    body = ("echo %s; command -v mpicc || echo; command -v mpirun || echo; command -v IMB-MPI1 || echo; "
            "for d in $(echo \"$PATH\" | tr ':' ' '); do [ -x \"$d/osu_put_latency\" ] && echo \"$d\" && break; done; echo"
            % probe_out)
    code, out, _, _ = shell(module_script(opts, opts.baseline, extra, body), env, 120)
    if code != 0 or probe_out not in out:
        raise CannotRun("could not load %s to find the MPI (module use %s):\n%s"
                        % (opts.baseline, " ".join(opts.modulepaths), out[-2000:]))
    lines = out.split(probe_out, 1)[1].strip("\n").split("\n") + ["", "", "", ""]
    mpicc, mpirun, imb_path, osu_dir = (l.strip() for l in lines[:4])
    if not mpirun:
        raise CannotRun("%s puts no mpirun on PATH" % opts.baseline)
    imb = os.environ.get("IMB_MPI1") or imb_path or None
    osu_root = os.environ.get("OSU_DIR") or osu_dir or None
    osu = suites.find_osu(osu_root) if osu_root else {}
    if opts.force_probes:
        imb, osu = None, {}
    b = suites.Binaries(suite="", imb=imb, osu=osu, modules=extra)
    need = set(opts.only or suites.COLLECTIVES + suites.ONE_SIDED)
    if not imb or not need.issubset(set(osu) | set(suites.COLLECTIVES)):
        if not mpicc:
            raise CannotRun("no IMB/OSU found and %s has no mpicc to build the probes" % opts.baseline)
        built = build_probes(opts, env, extra, mpicc, workdir)
        b.probe_coll, b.probe_osc = str(built["probe_coll"]), str(built["probe_osc"])
    b.suite = "+".join(["imb" if imb else "probe", "osu" if osu else "probe"])
    if b.suite == "probe+probe":
        b.suite = "probe"
    return b


def module_available(opts, env, name):
    code, _, _, _ = shell("\n".join(["source %s" % shlex.quote(lmod_init())] +
                                    ["module use %s" % shlex.quote(p) for p in opts.modulepaths] +
                                    ["module is-avail %s" % shlex.quote(name)]), env, 60)
    return code == 0


def build_probes(opts, env, extra, mpicc, workdir):
    """Build validate/probes with the baseline's mpicc, in that module's environment (PATH,
    LD_LIBRARY_PATH of the compiler it wraps); one cache folder per mpicc."""
    import hashlib
    cache = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tunedmpi" / "probes"
             / hashlib.sha256(mpicc.encode()).hexdigest()[:12])
    code, out, _, _ = shell(module_script(opts, opts.baseline, extra, "env -0"), env, 120)
    if code != 0:
        raise CannotRun("could not load %s to build the probes:\n%s" % (opts.baseline, out[-2000:]))
    module_env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    try:
        return probes.build(mpicc, cache, env=module_env)
    except probes.ProbeBuildError as exc:
        raise CannotRun("building the probes failed: %s" % exc)


def mpirun_line(run, opts):
    np = run.ranks or opts.nodes * opts.ppn
    args = ["mpirun", "-np", str(np)]
    if run.ranks and opts.nodes > 1:
        args += ["--map-by", "node"]  # one-sided pairs measure across nodes when there are nodes
    return args + list(run.argv)


def measure(opts, env, binaries, run, module, exports, log, title):
    """One benchmark run: fresh shell, module purge + load, the exports (a sweep configuration's
    variables), mpirun. Writes the log (title, command, variables, output) and returns a dict:
    status, exit_code, wall_s, problems, series {benchmark: {metric, suite, points}}, env."""
    argv = mpirun_line(run, opts)
    sets = "".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in exports.items())
    envfile = "env_shown=$(env | grep -E '^(%s)' | sort)" % "|".join(SHOWN)
    body = "%s%s\necho \"$env_shown\" | sed 's/^/#   /'\necho '# ---- output ----'\nexec %s" % (
        sets, envfile, " ".join(shlex.quote(a) for a in argv))
    code, out, timed_out, wall = shell(module_script(opts, module, binaries.modules, body), env, opts.timeout)
    # Parse what the benchmark printed, not the module's messages and variables before it.
    head, _, bench_out = out.rpartition("# ---- output ----\n")
    shown = dict(l[4:].split("=", 1) for l in head.splitlines() if l.startswith("#   ") and "=" in l)
    parsed = parse.parse_output(bench_out, exit_code=code, timed_out=timed_out,
                                requested=list(run.expect) if run.family == "imb" else None)
    series = {}
    for s in parsed.series:
        if s.benchmark in run.expect:
            series[s.benchmark] = {"metric": s.metric, "suite": s.suite,
                                   "points": {int(size): float(v) for size, v in s.points}}
    status = parsed.status
    problems = list(parsed.problems)
    missing = [b for b in run.expect if b not in series]
    if status == "ok" and missing:
        status = "failed"
        problems.append("no results for %s" % ", ".join(missing))
    exported = "".join("export %s=%s; " % (k, shlex.quote(v)) for k, v in exports.items())
    header = ["# %s" % title,
              "# command: module purge; module load %s; %s%s" % (" ".join([module] + binaries.modules), exported, " ".join(argv)),
              "# exit code: %s%s, wall time: %.2f s, status: %s" % (code, " (timed out)" if timed_out else "", wall, status),
              "# variables after module load:"]
    log.write_text("\n".join(header) + "\n" + out)
    return dict(status=status, exit_code=code, wall_s=round(wall, 3), problems=problems, series=series, env=shown,
                command=" ".join(argv))


def run_once(opts, env, binaries, run, role, module, rep, attempt, logdir):
    log = logdir / ("rep%d_%s_%s_try%d.log" % (rep, run.name, role, attempt))
    title = "tunedmpi validate run: %s, %s module %s, repetition %d, attempt %d" % (run.name, role, module, rep, attempt)
    m = measure(opts, env, binaries, run, module, {}, log, title)
    return RunRecord(run.name, role, module, rep, attempt, m["status"], m["exit_code"], m["wall_s"],
                     str(log.relative_to(logdir.parent)), m["problems"], m["series"], m["env"])


def new_results_dir(out, site):
    """A fresh directory per campaign: <out>/<site>-<UTC time>[-n], never an existing one."""
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        path = base / ("%s-%s%s" % (site, stamp, "" if n == 0 else "-%d" % n))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise CannotRun("no free results directory under %s" % base)


def progress(done, total, started, text):
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0
    fmt = lambda s: "%d:%02d" % (s // 60, s % 60)
    sys.stderr.write("[%*d/%d] %s | elapsed %s, left ~%s\n" % (len(str(total)), done, total, text, fmt(elapsed), fmt(eta)))
    sys.stderr.flush()


def campaign(opts):
    """Run everything; returns (results dict, results directory)."""
    env = run_env(opts)
    outdir = new_results_dir(opts.out, opts.site)
    logdir = outdir / "logs"
    logdir.mkdir()
    binaries = find_binaries(opts, env, outdir)
    runs = suites.plan(binaries, opts.set_name, opts.nodes * opts.ppn, opts.only)
    modules = (("baseline", opts.baseline), ("tuned", opts.tuned))
    total = opts.repetitions * len(runs) * 2
    started, t0 = time.monotonic(), datetime.datetime.now(datetime.timezone.utc)
    records, done = [], 0
    sys.stderr.write("validate: %s vs %s, %d node(s) x %d ppn, %s set, %d repetitions, %s; results in %s\n"
                     % (opts.tuned, opts.baseline, opts.nodes, opts.ppn, opts.set_name, opts.repetitions,
                        "benchmarks: " + binaries.suite, outdir))
    for rep in range(1, opts.repetitions + 1):
        for run in runs:
            for role, module in modules:  # A B A B ...: drift on the machine hits both alike
                for attempt in range(1, opts.retries + 2):
                    rec = run_once(opts, env, binaries, run, role, module, rep, attempt, logdir)
                    records.append(rec)
                    if rec.status == "ok":
                        break
                done += 1
                progress(done, total, started, "rep %d/%d %-15s %-8s %s (%.1fs%s)" % (
                    rep, opts.repetitions, run.name, role, rec.status, rec.wall_s,
                    ", %d attempts" % attempt if attempt > 1 else ""))
    results = analyse(opts, runs, records)
    results.update(
        tool="tunedmpi validate", started=t0.isoformat(timespec="seconds"),
        finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        elapsed_s=round(time.monotonic() - started, 1), site=opts.site,
        modules={"baseline": opts.baseline, "tuned": opts.tuned},
        geometry={"nodes": opts.nodes, "ppn": opts.ppn, "np": opts.nodes * opts.ppn, "source": opts.geometry_source},
        set=opts.set_name, repetitions=opts.repetitions, retries=opts.retries, timeout_s=opts.timeout,
        tolerance=opts.tolerance, alpha=opts.alpha, suite=binaries.suite,
        binaries={k: v for k, v in asdict(binaries).items() if k != "suite"},
        commands={r.name: " ".join(mpirun_line(r, opts)) for r in runs},
        osu_options={"window": suites.WINDOW, "sync": suites.SYNC},
        runs=[asdict(r) for r in records])
    report.write_all(outdir, results)
    return results, outdir


def analyse(opts, runs, records):
    """Per benchmark: the final attempt of each repetition, band verdicts, reliability; the verdict."""
    final = {}
    for r in records:  # later attempts replace earlier ones
        final[(r.run, r.role, r.rep)] = r
    bands, per_size = [], {}
    for run in runs:
        for bench in run.expect:
            reps = {role: [final[(run.name, role, k)] for k in range(1, opts.repetitions + 1)
                           if (run.name, role, k) in final] for role in ("baseline", "tuned")}
            ok = {role: [r.series[bench] for r in recs if r.status == "ok" and bench in r.series]
                  for role, recs in reps.items()}
            failed = {role: sum(1 for r in recs if r.status != "ok") for role, recs in reps.items()}
            metric = next((s["metric"] for role in ok for s in ok[role]), None)
            suite = next((s["suite"] for role in ok for s in ok[role]), None)
            pts = {role: [s["points"] for s in ok[role]] for role in ok}
            if metric:
                bands += stats.compare_bands(bench, metric, pts["baseline"], pts["tuned"], opts.tolerance, opts.alpha)
            bands.append(stats.reliability(bench, failed["baseline"], len(reps["baseline"]),
                                           failed["tuned"], len(reps["tuned"])))
            per_size[bench] = {"metric": metric, "suite": suite, "baseline": pts["baseline"], "tuned": pts["tuned"]}
    verdict = stats.module_verdict(bands)
    # Comparable when either module produced numbers: a baseline that never runs where the tuned
    # module does is a result (reliability), not a failure to validate.
    any_data = any(r.status == "ok" for r in final.values())
    exit_code = EXIT_CANNOT if not any_data else (EXIT_PASS if verdict == "PASS" else EXIT_FAIL)
    return {"bands": [asdict(b) for b in bands], "per_size": per_size, "verdict": verdict if any_data else "COULD-NOT-RUN",
            "exit_code": exit_code}


def options_from_args(args):
    """Options from the CLI: site, modules and geometry resolved, problems raised as CannotRun."""
    name = args.site or os.environ.get("TUNEDMPI_SITE") or "local"
    site = sites.load_named(name)
    env = dict(os.environ)
    if args.nodes or args.ppn:
        nodes, ppn, source = args.nodes or 1, args.ppn or site.default_ppn, "explicit"
    else:
        geo = geometry.from_scheduler(env)
        if geo:
            nodes, ppn, source = geo
        else:
            nodes, ppn, source = 1, min(site.default_ppn, os.cpu_count() or 1), "this machine"
    in_job = bool(geometry.from_scheduler(env))
    if not in_job and nodes > 1:
        raise CannotRun("%d nodes requested outside a job: run inside salloc/sbatch, or use --submit" % nodes)
    if not in_job and nodes * ppn > (os.cpu_count() or 1):
        raise CannotRun("%d ranks requested but this machine has %d cores: lower --ppn or run in a job"
                        % (nodes * ppn, os.cpu_count() or 1))
    tuned = args.module or "%s/%s" % (site.tuned_module, site.mpi_version)
    baseline = args.baseline or "%s/%s" % (site.baseline_module, site.mpi_version)
    modulepaths = [str(paths.project_root() / "modulefiles" / site.name)] + list(args.modulepath or [])
    only = [b.strip() for b in args.benchmarks.split(",") if b.strip()] if args.benchmarks else None
    known = set(suites.COLLECTIVES + suites.ONE_SIDED)
    if only and not set(only) <= known:
        raise CannotRun("unknown benchmark(s) %s; choose from %s"
                        % (", ".join(sorted(set(only) - known)), ", ".join(sorted(known))))
    set_name = "full" if args.full else "quick"
    return Options(site=site.name, tuned=tuned, baseline=baseline, set_name=set_name, nodes=nodes, ppn=ppn,
                   geometry_source=source, repetitions=args.repetitions,
                   timeout=args.timeout or (120.0 if set_name == "quick" else 900.0),
                   retries=args.retries, tolerance=args.tolerance, alpha=args.alpha, only=only,
                   force_probes=args.probes, out=args.out, modulepaths=modulepaths)


def submit(args):
    """--submit: run the same validation as a Slurm batch job (sbatch --wait), then show its output."""
    import shutil
    if geometry.from_scheduler(dict(os.environ)):
        raise CannotRun("--submit is for use outside a job; inside salloc/sbatch run without it")
    if not shutil.which("sbatch"):
        raise CannotRun("--submit needs Slurm's sbatch on PATH")
    site = sites.load_named(args.site or os.environ.get("TUNEDMPI_SITE") or "local")
    nodes, ppn = args.nodes or 1, args.ppn or site.default_ppn
    inner = [a for a in args.argv if a != "--submit"]
    drop = {"--sbatch-args"}
    cleaned, skip = [], False
    for a in inner:  # the job runs the same command without the submission options
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        if a.split("=", 1)[0] in drop:
            continue
        cleaned.append(a)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_sh = paths.project_root() / "validate" / "run.sh"
    # The job records the validation's own exit code: sbatch --wait says 0 for a job cancelled
    # before it started and 1 for one killed or out of time, which would read as PASS or FAIL.
    job = ["#!/bin/bash", "# written by tunedmpi validate --submit",
           "%s %s --out %s" % (shlex.quote(str(run_sh)), " ".join(shlex.quote(a) for a in cleaned),
                               shlex.quote(str(out))),
           "code=$?",
           'echo "$code" > %s/.exit-"$SLURM_JOB_ID"' % shlex.quote(str(out)),
           'exit "$code"']
    script = out / (".submit-%d.sh" % os.getpid())
    script.write_text("\n".join(job) + "\n")
    cmd = ["sbatch", "--wait", "--parsable", "--job-name", "tunedmpi-validate", "--nodes", str(nodes),
           "--ntasks-per-node", str(ppn), "--output", str(out / "slurm-%j.out")]
    cmd += shlex.split(args.sbatch_args or "") + [str(script)]
    sys.stderr.write("validate: submitting: %s\n" % " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    script.unlink()
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:  # refused at submission (partition, account, limits): nothing ran
        raise CannotRun("sbatch did not submit the job (exit %d): %s" % (proc.returncode, proc.stderr.strip()))
    log = out / ("slurm-%s.out" % job_id)
    if log.is_file():
        sys.stdout.write(log.read_text(errors="replace"))
    elif proc.stderr:
        sys.stderr.write(proc.stderr)
    exit_file = out / (".exit-%s" % job_id)
    try:
        code = int(exit_file.read_text().strip())
        exit_file.unlink()
    except (OSError, ValueError):
        code = None
    sys.stderr.write("validate: job %s finished (sbatch exit %d, validation exit %s)\n"
                     % (job_id, proc.returncode, "none" if code is None else code))
    if code not in (EXIT_PASS, EXIT_FAIL, EXIT_CANNOT):
        raise CannotRun("job %s ended without a verdict (%s); see `scontrol show job %s` and %s"
                        % (job_id, "no exit code recorded: cancelled, out of time or killed" if code is None
                           else "validation exited %d" % code, job_id, log))
    return code
