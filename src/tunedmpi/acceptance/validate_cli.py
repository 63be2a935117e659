"""validate's command line: its options, read into validate.Options (site, modules and geometry
resolved), --submit (the same validation as a Slurm batch job), and one validation (a campaign,
--reanalyse or --submit) with the verdict table and line it prints; `--rows` (rows.py) calls it
for each row."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tunedmpi import argtypes, paths
from tunedmpi.acceptance import report, validate
from tunedmpi.argtypes import MAX_TIMEOUT_S, add_levels, add_wait, duration, number, whole
from tunedmpi.bench import machine
from tunedmpi.bench.runner import CannotRun, check_geometry, require_local_mpi
from tunedmpi.files import read_text, write_atomic
from tunedmpi.modules import geometry, sites
from tunedmpi.policy import POLICY
from tunedmpi.tables.operations import BENCHMARKS


def site_of(args):
    """The site the options name: --site, else $TUNEDMPI_SITE, else local."""
    return sites.load_named(args.site or os.environ.get("TUNEDMPI_SITE") or "local")


def one(args):
    """One validation as the options say; its exit code (CannotRun and Interrupted are raised)."""
    if args.submit:
        return submit(args)
    if args.reanalyse:
        results, outdir = validate.reanalyse(args.reanalyse, args.out)
    else:
        with machine.measuring(args.wait):  # one measurement per machine
            results, outdir = validate.campaign(options_from_args(args))
    print(report.verdict_table(results))
    modules = results["modules"]
    print(
        "\nverdict: %s  (%s vs %s; report: %s)"
        % (results["verdict"], modules["tuned"], modules["baseline"], outdir / "report.md")
    )
    return results["exit_code"]


def add_arguments(p):
    """`tunedmpi validate`'s options (options_from_args reads them into Options)."""
    p.add_argument("--site", help="site (default: $TUNEDMPI_SITE, else local)")
    p.add_argument(
        "--module", help="tuned module to validate (default: the site's, e.g. openmpi-tuned/5.0.6)"
    )
    p.add_argument("--baseline", help="untuned module to compare with (default: the site's)")
    size = p.add_mutually_exclusive_group()
    for flag, text in (
        ("--quick", "small sizes and iteration limits (default)"),
        ("--full", "the studies' sizes: IMB -msglog 0:20, OSU up to 1 MB"),
        (
            "--short",
            "quick's sizes with a tenth of the iterations, for networks where one call takes "
            "milliseconds (e.g. the untuned default between namespace hosts)",
        ),
    ):
        size.add_argument(flag, action="store_true", help=text)
    p.add_argument("--nodes", type=whole(1), help="nodes (default: the job's, else 1)")
    p.add_argument(
        "--ppn",
        type=whole(1),
        help="ranks per node (default: the job's, else the site default capped at this machine's cores)",
    )
    p.add_argument(
        "--repetitions",
        type=whole(1),
        help="runs per module and benchmark at the first look (default %d; %d with --full, so that "
        "the first look is judged over its pairs; at least %d)"
        % (POLICY.first_look["quick"], POLICY.first_look["full"], POLICY.min_pairs),
    )
    p.add_argument(
        "--no-extend",
        action="store_true",
        help="no second look: do not measure up to %d x the repetitions for undecided bands"
        % POLICY.extension_factor,
    )
    p.add_argument(
        "--budget",
        type=duration,
        metavar="TIME",
        help="e.g. 45m: while a band is undecided, measure more pairs (looks at %d, %d, %d ... x "
        "the first look's, alpha split over them), each only if predicted to end within TIME"
        % tuple(POLICY.budget_growth**k for k in range(3)),
    )
    p.add_argument(
        "--max-pairs",
        type=whole(1),
        metavar="N",
        help="the same, the last look at N pairs (default with --budget: %d x the first look's)"
        % POLICY.budget_growth ** (POLICY.budget_looks - 1),
    )
    p.add_argument("--benchmarks", help="comma list, e.g. allreduce,put_latency (default: all)")
    p.add_argument("--out", default="validate-results", help="parent of the new results directory")
    p.add_argument(
        "--timeout",
        type=number(0, MAX_TIMEOUT_S),
        help="seconds per run (default %(quick)g quick, %(short)g short, %(full)g full)"
        % POLICY.timeout_s,
    )
    p.add_argument(
        "--retries",
        type=whole(0),
        default=POLICY.retries,
        help="extra attempts for a failed run (default %d)" % POLICY.retries,
    )
    add_levels(p)
    p.add_argument(
        "--probes", action="store_true", help="use validate/probes even where IMB/OSU exist"
    )
    p.add_argument(
        "--modulepath", action="append", help="extra directory for module use (repeatable)"
    )
    p.add_argument(
        "--submit", action="store_true", help="from outside a job: run this as a Slurm batch job"
    )
    p.add_argument(
        "--reanalyse",
        metavar="DIR",
        help="run nothing: judge the runs of an earlier result DIR again with "
        "this version's method, into a new directory under --out",
    )
    p.add_argument(
        "--rows",
        metavar="all|NxP,...",
        help="validate every row (nodes x ppn) of the site's table, or these, each as its own "
        "validate (with --submit: its own job); one summary and the worst row's exit code",
    )
    p.add_argument(
        "--sbatch-args",
        help="extra sbatch options with --submit; write --sbatch-args='--time=30 ...'",
    )
    add_wait(p)


def options_from_args(args):
    """Options from the CLI: site, modules and geometry resolved, problems raised as CannotRun."""
    site = site_of(args)
    env = dict(os.environ)
    if args.nodes or args.ppn:
        nodes, ppn, source = args.nodes or 1, args.ppn or site.default_ppn, "explicit"
    else:
        geo = geometry.from_scheduler(env)
        if geo:
            nodes, ppn, source = geo
        else:
            nodes, ppn, source = 1, min(site.default_ppn, os.cpu_count() or 1), "this machine"
    check_geometry(nodes, ppn, env, "add --submit")
    require_local_mpi(site)
    tuned = args.module or "%s/%s" % (site.tuned_module, site.mpi_version)
    baseline = args.baseline or "%s/%s" % (site.baseline_module, site.mpi_version)
    modulepaths = [str(paths.project_root() / "modulefiles" / site.name)]
    modulepaths += args.modulepath or []
    only = [b.strip() for b in args.benchmarks.split(",") if b.strip()] if args.benchmarks else None
    known = set(BENCHMARKS)
    if only and not set(only) <= known:
        raise CannotRun(
            "--benchmarks: unknown benchmark(s) %s; choose from %s"
            % (", ".join(sorted(set(only) - known)), ", ".join(sorted(known)))
        )
    set_name = "full" if args.full else "short" if args.short else "quick"
    repetitions = args.repetitions or POLICY.first_look[set_name]
    if repetitions < POLICY.min_pairs:
        least, default = POLICY.min_pairs, POLICY.first_look[set_name]
        raise CannotRun(
            "--repetitions %d: the verdict needs at least %d runs per module (the seed figure drops "
            "the largest and the smallest run); use --repetitions %d or more (default %d for --%s)"
            % (repetitions, least, least, default, set_name)
        )
    if (args.budget or args.max_pairs) and args.no_extend:
        raise CannotRun("--budget/--max-pairs measure more pairs; --no-extend forbids it: drop one")
    if args.max_pairs is not None and args.max_pairs < repetitions:
        raise CannotRun(
            "--max-pairs %d: fewer than the %d pairs of the first look; give --max-pairs %d or more"
            % (args.max_pairs, repetitions, repetitions)
        )
    return validate.Options(
        site=site.name,
        tuned=tuned,
        baseline=baseline,
        set_name=set_name,
        nodes=nodes,
        ppn=ppn,
        geometry_source=source,
        repetitions=repetitions,
        extend=not args.no_extend,
        budget_s=args.budget,
        max_pairs=args.max_pairs,
        timeout=args.timeout or POLICY.timeout_s[set_name],
        retries=args.retries,
        tolerance=args.tolerance,
        alpha=args.alpha,
        only=only,
        force_probes=args.probes,
        out=args.out,
        modulepaths=modulepaths,
    )


def submit(args):
    """--submit: run the same validation as a Slurm batch job (sbatch --wait), then show its output."""
    if geometry.from_scheduler(dict(os.environ)):
        raise CannotRun("--submit is for use outside a job; inside salloc/sbatch run without it")
    if not shutil.which("sbatch"):
        raise CannotRun("--submit needs Slurm's sbatch on PATH")
    site = site_of(args)
    nodes, ppn = args.nodes or 1, args.ppn or site.default_ppn
    # the job runs the same command without the submission options
    cleaned = argtypes.argv_without([a for a in args.argv if a != "--submit"], {"--sbatch-args"})
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_sh = paths.project_root() / "validate" / "run.sh"
    # The job records the validation's own exit code: sbatch --wait says 0 for a job cancelled
    # before it started and 1 for one killed or out of time, which would read as PASS or FAIL.
    command = [str(run_sh)] + cleaned + ["--out", str(out)]
    job = [
        "#!/bin/bash",
        "# written by tunedmpi validate --submit",
        " ".join(shlex.quote(a) for a in command),
        "code=$?",
        'echo "$code" > %s/.exit-"$SLURM_JOB_ID"' % shlex.quote(str(out)),
        'exit "$code"',
    ]
    script = out / (".submit-%d.sh" % os.getpid())
    write_atomic(script, "\n".join(job) + "\n")
    cmd = ["sbatch", "--wait", "--parsable", "--job-name", "tunedmpi-validate"]
    cmd += ["--nodes", str(nodes), "--ntasks-per-node", str(ppn)]
    cmd += ["--output", str(out / "slurm-%j.out")] + shlex.split(args.sbatch_args or "")
    cmd += [str(script)]
    sys.stderr.write("validate: submitting: %s\n" % " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    script.unlink()
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:  # refused at submission (partition, account, limits): nothing ran
        raise CannotRun(
            "sbatch did not submit the job (exit %d): %s" % (proc.returncode, proc.stderr.strip())
        )
    log = out / ("slurm-%s.out" % job_id)
    if log.is_file():
        sys.stdout.write(read_text(log, errors="replace"))
    elif proc.stderr:
        sys.stderr.write(proc.stderr)
    exit_file = out / (".exit-%s" % job_id)
    try:
        code = int(read_text(exit_file, 64).strip())
        exit_file.unlink()
    except (OSError, ValueError):
        code = None
    sys.stderr.write(
        "validate: job %s finished (sbatch exit %d, validation exit %s)\n"
        % (job_id, proc.returncode, "none" if code is None else code)
    )
    if code not in set(validate.EXIT_CODES.values()) | {validate.EXIT_CANNOT}:
        why = "no exit code recorded: cancelled, out of time or killed"
        if code is not None:
            why = "validation exited %d" % code
        raise CannotRun(
            "job %s ended without a verdict (%s); see `scontrol show job %s` and %s"
            % (job_id, why, job_id, log)
        )
    return code
