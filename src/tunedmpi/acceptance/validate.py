"""`tunedmpi validate`: rerun the benchmarks with the untuned baseline (A) and the tuned module (B),
in counterbalanced pairs (A B, B A, ...), and decide with statistics (stats.py) whether the tuned
module wins, measuring more repetitions where a band is still undecided (once, or with --budget /
--max-pairs at the looks of a budget design, stats.Design.budgeted).

Every run is made by the shared runner (bench/runner.py): a fresh shell that purges modules and
loads exactly one MPI module, so nothing leaks between A and B; its command, the variables the
module set, its output, exit code and wall time go to a log of their own. Results land in a new
directory that is never reused (report.py).
"""

import contextlib
import datetime
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import List, Optional

from tunedmpi import paths, stats
from tunedmpi.acceptance import report, results
from tunedmpi.acceptance.results import ROLES, RunRecord
from tunedmpi.bench import build, suites
from tunedmpi.bench.runner import CannotRun, Runner, progress
from tunedmpi.errors import one_line
from tunedmpi.files import copy_tree, read_text, write_atomic
from tunedmpi.modules import revisions, sites
from tunedmpi.policy import POLICY

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT, EXIT_NO_GAIN, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4
# Each module verdict (stats.module_verdict) its own exit code; 2 is "could not run" (and NO-DATA).
EXIT_CODES = {
    stats.PASS: EXIT_PASS,
    stats.FAIL: EXIT_FAIL,
    stats.NO_GAIN: EXIT_NO_GAIN,
    stats.INCONCLUSIVE: EXIT_INCONCLUSIVE,
}


# The host state of every run is measured and reported, but the verdict's tests do not hold it
# equal: on the archived campaigns judged at validate's quick design the test within host states
# (with its Fisher gate) found fewer real gains than the test over all runs, at the same
# false-verdict rate (results-archive/notes/2026-11-27-campaign-level-verdict.md).
HOST_NOTE = "the verdict compares all runs (host states are reported, not held equal)"


@dataclass
class Options:
    site: str
    tuned: str  # module names with version
    baseline: str
    set_name: str = "quick"
    nodes: int = 1
    ppn: int = 2
    geometry_source: str = "default"
    repetitions: int = POLICY.first_look["quick"]  # pairs at look 1 (options_from_args: the set's)
    extend: bool = True
    budget_s: Optional[float] = None  # --budget: measure undecided bands until decided, this long
    max_pairs: Optional[int] = None  # --max-pairs: the same, up to this many pairs
    timeout: float = POLICY.timeout_s["quick"]
    retries: int = POLICY.retries
    tolerance: float = POLICY.tolerance
    alpha: float = POLICY.alpha
    only: Optional[List[str]] = None
    force_probes: bool = False
    out: str = "validate-results"
    modulepaths: List[str] = field(default_factory=list)


def design_of(opts):
    """The campaign's looks: with --budget or --max-pairs a budget design (stats.Design.budgeted),
    else the first look and the one extension."""
    if opts.budget_s or opts.max_pairs:
        return stats.Design.budgeted(opts.repetitions, opts.max_pairs)
    return stats.Design(*POLICY.looks(opts.repetitions, opts.extend))


def predicted_s(records, todo, more, elapsed_s):
    """Seconds `more` repetitions of the runs `todo` would take, from their wall times so far
    (per repetition, retries included), scaled by the campaign's elapsed over its wall time (the
    module shells around each run)."""
    wall = sum(r.wall_s for r in records) or 1.0
    total = 0.0
    for run in todo:
        mine = [r for r in records if r.run == run.name]
        total += sum(r.wall_s for r in mine) / max(1, len({r.rep for r in mine}))
    return total * more * elapsed_s / wall


def run_once(runner, binaries, run, role, module, rep, logdir):
    """Every attempt of one run (retried while it fails), each a RunRecord with its own log."""

    def log_for(attempt):
        return logdir / ("rep%d_%s_%s_try%d.log" % (rep, run.name, role, attempt))

    what = "tunedmpi validate run: %s, %s module %s, repetition %d" % (run.name, role, module, rep)

    def title_for(attempt):
        return "%s, attempt %d" % (what, attempt)

    def record(attempt, m):
        log = str(log_for(attempt).relative_to(logdir.parent))
        kept = {k: m[k] for k in ("status", "exit_code", "wall_s", "problems", "series", "env")}
        return RunRecord(run.name, role, module, rep, attempt, log=log, host=m["host"], **kept)

    return [record(*a) for a in runner.attempts(binaries, run, module, {}, log_for, title_for)]


def new_results_dir(out, site, where="--site"):
    """A fresh directory per campaign: <out>/<site>-<UTC time>[-n], never an existing one. ``site``
    must be a plain name (``where`` says where it came from): it never leads outside ``out``."""
    paths.safe_name(site, where, "site")
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        name = "%s-%s%s" % (site, stamp, "-%d" % n if n else "")
        path = paths.inside(base, base / name, where, "site")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise CannotRun("no free results directory under %s" % base)


STATUS = "STATUS"  # one line: running (who, since when), interrupted (by what), failed, complete


class Interrupted(Exception):
    """SIGINT or SIGTERM (or SIGHUP) during validate: the results directory is marked, exit 2."""


def _stamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def mark(outdir, text):
    """Write the results directory's STATUS line; best effort (a full disk may refuse it too)."""
    try:
        write_atomic(outdir / STATUS, text + "\n")
    except OSError:
        pass


def read_status(directory):
    """The STATUS line of a results directory, or None (results from before validate wrote one)."""
    try:
        return read_text(Path(directory) / STATUS, 4096, "replace").strip() or None
    except OSError:
        return None


def incomplete(directory):
    """Why a results directory without results.json has none: its STATUS (running: killed or still
    running; interrupted; failed), else None when it is no validate directory at all."""
    d = Path(directory)
    if (d / "results.json").is_file():
        return None
    status = read_status(d)
    if status is None and (d / "logs").is_dir():
        status = "no STATUS and no results.json, only logs: stopped before it ended"
    if status and status.startswith("running"):
        status += " (killed, or still running)"
    return status


@contextlib.contextmanager
def signals_interrupt():
    """While in the block, SIGTERM and SIGHUP raise Interrupted (SIGINT raises KeyboardInterrupt):
    validate then marks its directory and exits 2 instead of dying without a word."""

    def handler(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def guarded(outdir, work):
    """Run work() with outdir marked: STATUS is 'running' meanwhile, then 'complete', or on SIGINT,
    SIGTERM, SIGHUP 'interrupted' (raised as Interrupted), or on any other error 'failed'."""
    mark(outdir, "running: pid %d on %s since %s" % (os.getpid(), socket.gethostname(), _stamp()))
    try:
        result = work()
    except (KeyboardInterrupt, Interrupted) as exc:
        why = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        mark(outdir, "interrupted: by %s at %s; no verdict" % (why, _stamp()))
        raise Interrupted(
            "interrupted by %s: no verdict; %s says so (rerun validate)" % (why, outdir / STATUS)
        )
    except Exception as exc:  # whatever ends it (a full disk, a bug): STATUS never stays running
        mark(outdir, "failed: %s at %s; no verdict" % (one_line(exc) or repr(exc), _stamp()))
        raise
    mark(outdir, "complete: %s at %s" % (result[0]["verdict"], _stamp()))
    return result


def prepare(opts):
    """What can refuse the request, checked before the first run and before any results directory:
    both modules exist in the module path, their MPIs are ones validate can launch, and each side's
    benchmarks (or the probes) are there. Returns the runner, {role: Binaries} and the reasons a
    family runs the probes on both sides (suites.same_kind)."""
    runner = Runner(opts.modulepaths, opts.nodes, opts.ppn, opts.timeout, opts.retries)
    for option, module in (("--module", opts.tuned), ("--baseline", opts.baseline)):
        if not runner.module_available(module):
            raise CannotRun(
                "%s %s: no such module in the module path (%s); `module avail` lists what there is, "
                "--modulepath DIR adds a directory" % (option, module, ":".join(opts.modulepaths))
            )
    sides, notes = runner.find_sides(opts.baseline, opts.tuned, opts.only, opts.force_probes)
    return runner, sides, notes


def campaign(opts):
    """Run everything; returns (results dict, results directory).

    Repetitions 1..n: every run of the plan, the two modules in counterbalanced order (ABBA: an
    effect of running second cancels instead of always favouring one module). Then, with the
    extension on, the runs of benchmarks that still have an undecided band are measured again up to
    2n repetitions, once, and judged at the second look of the group-sequential design (stats.py);
    a budget design measures them look after look while a band is undecided and time is left."""
    runner, sides, notes = prepare(opts)
    outdir = new_results_dir(opts.out, opts.site)
    return guarded(outdir, lambda: _campaign(opts, runner, sides, notes, outdir))


def side_record(runner, module, binaries, runs):
    """What results.json keeps of one side: its MPI, launcher, binaries and commands."""
    kinds = {"collectives": None, "one_sided": 2}
    return {
        "module": module,
        "mpi": binaries.mpi,
        "launcher": {
            kind: " ".join(
                runner.mpirun_line(suites.Run(kind, "", (), (), ranks), binaries.flavour)
            )
            for kind, ranks in kinds.items()
        },
        "suite": binaries.suite,
        "binaries": {k: v for k, v in asdict(binaries).items() if k not in ("suite", "mpi")},
        "commands": {r.name: " ".join(runner.mpirun_line(r, binaries.flavour)) for r in runs},
    }


def _announce(opts, design, sides, notes, outdir):
    """The campaign's first lines on stderr: modules, geometry, set, looks, benchmarks, notes."""
    more = looks = ""
    if design.schedule:
        budget = "%gs" % opts.budget_s if opts.budget_s else "none"
        looks = ", looks at %s, budget %s" % ("/".join(map(str, design.sizes())), budget)
    if design.final > design.first:
        more = " (+ up to %d for undecided bands%s)" % (design.final - design.first, looks)
    benchmarks = sides["tuned"].suite
    if sides["baseline"] is not sides["tuned"]:
        benchmarks = ", ".join(
            "%s %s (%s)" % (r, sides[r].suite, sides[r].mpi["name"]) for r in ROLES
        )
    what = (opts.tuned, opts.baseline, opts.nodes, opts.ppn, opts.set_name, opts.repetitions)
    sys.stderr.write(
        "validate: %s vs %s, %d node(s) x %d ppn, %s set, %d repetitions" % what
        + "%s, benchmarks: %s; results in %s\n" % (more, benchmarks, outdir)
    )
    for note in notes:
        sys.stderr.write("validate: %s\n" % note)


def _campaign(opts, runner, sides, notes, outdir):
    logdir = outdir / "logs"
    logdir.mkdir()
    module_of = {"baseline": opts.baseline, "tuned": opts.tuned}
    # each side's runs with its own binaries; the plan (names, sizes, order) is the same for both
    plans = {role: suites.plan(b, opts.set_name, runner.np, opts.only) for role, b in sides.items()}
    runs = plans["tuned"]
    run_of = {role: {r.name: r for r in plan} for role, plan in plans.items()}
    # which hosts the ranks land on under each module (the tuned one may set the placement)
    placement = {
        role: runner.placement(module, sides[role].modules, sides[role].flavour)
        for role, module in module_of.items()
    }
    design = design_of(opts)
    started, t0 = time.monotonic(), datetime.datetime.now(datetime.timezone.utc)
    records = []
    _announce(opts, design, sides, notes, outdir)

    def measure_reps(todo, first, last):
        total, done = len(todo) * (last - first + 1) * 2, 0
        for rep in range(first, last + 1):
            for index, run in enumerate(todo):
                for role in stats.pair_order(rep, index):
                    side_run = run_of[role][run.name]
                    tries = run_once(
                        runner, sides[role], side_run, role, module_of[role], rep, logdir
                    )
                    records.extend(tries)
                    done += 1
                    what = "rep %d/%d %-15s %-8s" % (rep, last, run.name, role)
                    more = ", %d attempts" % len(tries) if len(tries) > 1 else ""
                    what += " %s (%.1fs%s)" % (tries[-1].status, tries[-1].wall_s, more)
                    progress(done, total, started, what)

    measure_reps(runs, 1, design.first)
    extended = []
    looks = [_look_record(design, opts.alpha, 1, runs)]
    stopped = []

    def extend(undecided, look):
        """The next look: every run holding an undecided benchmark, measured up to the look's
        repetitions, if the budget's time allows it."""
        todo = [run for run in runs if set(run.expect) & set(undecided)]
        done, upto = design.sizes()[look - 2], design.sizes()[look - 1]
        if not todo:
            return []
        elapsed = time.monotonic() - started
        need = predicted_s(records, todo, upto - done, elapsed)
        if opts.budget_s and elapsed + need > opts.budget_s:
            stopped.append(
                "budget: look %d (%d repetitions) would end at %.0fs of %gs"
                % (look, upto, elapsed + need, opts.budget_s)
            )
            sys.stderr.write("validate: %s; judged at look %d\n" % (stopped[-1], look - 1))
            return []
        benches = "; ".join("%s %s" % (b, ", ".join(v)) for b, v in sorted(undecided.items()))
        names = ", ".join(r.name for r in todo)
        sys.stderr.write(
            "validate: undecided after %d repetitions: %s; measuring repetitions %d-%d of %s\n"
            % (done, benches, done + 1, upto, names)
        )
        measure_reps(todo, done + 1, upto)
        extended.extend(run for run in todo if run not in extended)
        looks.append(_look_record(design, opts.alpha, look, todo))
        return [bench for run in todo for bench in run.expect]

    judged = analyse(opts, runs, records, design, extend)
    side_of = {
        role: side_record(runner, module_of[role], sides[role], plans[role]) for role in ROLES
    }
    judged = replace(
        judged,
        started=t0.isoformat(timespec="seconds"),
        finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        elapsed_s=round(time.monotonic() - started, 1),
        site=opts.site,
        modules=module_of,
        table_revision=revisions.module_revision(sites.load_named(opts.site), opts.tuned)[1],
        build=build.identity(runner, opts.tuned),
        geometry={
            "nodes": opts.nodes,
            "ppn": opts.ppn,
            "np": opts.nodes * opts.ppn,
            "source": opts.geometry_source,
        },
        placement=placement,
        set=opts.set_name,
        repetitions=opts.repetitions,
        retries=opts.retries,
        timeout_s=opts.timeout,
        tolerance=opts.tolerance,
        alpha=opts.alpha,
        suite=sides["tuned"].suite,
        design=_design_record(design, extended, looks, stopped, opts.budget_s),
        # the tuned module's (both modules' when they are one MPI); each side's in `sides`
        binaries=side_of["tuned"]["binaries"],
        commands=side_of["tuned"]["commands"],
        sides=side_of,
        same_mpi=sides["baseline"] is sides["tuned"],
        suite_notes=notes,
        osu_options={"window": suites.WINDOW, "sync": suites.SYNC},
        runs=records,
    )
    return report.write_all(outdir, judged), outdir


def _look_record(design, alpha, look, runs):
    """results.json's record of one look: its number, repetitions, level and the runs measured."""
    return {
        "look": look,
        "pairs": design.sizes()[look - 1],
        "alpha": design.level(alpha, look),
        "runs": [r.name for r in runs],
    }


def _design_record(design, extended, looks, stopped, budget_s):
    """results.json's "design" (results.looks_of): first and final (a budget design's: the last
    look made) repetitions; a budget design adds its schedule, rule, each look made, the budget and
    why the looks stopped."""
    out = {
        "first": design.first,
        "final": looks[-1]["pairs"] if design.schedule else design.final,
        "extended": [r.name for r in extended],
        "order": "counterbalanced (ABBA)",
    }
    if design.schedule:
        last = len(looks) == len(design.schedule)
        out.update(
            schedule=list(design.schedule),
            rule="Bonferroni over looks",
            looks=looks,
            budget_s=budget_s,
            stopped=stopped[0] if stopped else "last look" if last else "every band decided",
        )
    return out


def reanalyse(source, out):
    """Judge an earlier campaign's runs again with this version's method (e.g. one family for the
    campaign and the crossover test, which results from before them did not use). Writes a new results directory
    under `out`, with the source's runs, logs and options and `reanalysed_from` naming the source,
    which is never changed. The looks are the source's: its first repetitions, then its extended
    runs. Returns (results, directory)."""
    src = Path(source)
    why = incomplete(src)
    if why:
        raise CannotRun(
            "%s: validate did not finish there (STATUS: %s); it has no results to judge: rerun "
            "validate/run.sh" % (src, why)
        )
    try:
        res = results.read(src / "results.json")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CannotRun(
            "%s: not a validate result (%s); give a results directory that validate/run.sh wrote"
            % (src / "results.json", exc)
        )
    # the source's plan, in the order suites.plan made it (results.json keeps its keys sorted)
    runs = [suites.Run(name, "", b, (), None) for name, b in suites.programs(sorted(res.per_size))]
    tuned, baseline = res.modules["tuned"], res.modules["baseline"]
    opts = Options(res.site, tuned, baseline, tolerance=res.tolerance, alpha=res.alpha)
    looks = results.looks_of(res.to_json())
    design = results.design_from(looks, src / "results.json")
    # what each later look measured: a budget design records it per look, two looks as "extended"
    measured = {k["look"]: k["runs"] for k in looks.get("looks", [])} or {2: looks["extended"]}

    def again(undecided, look):
        return [b for run in runs if run.name in measured.get(look, ()) for b in run.expect]

    judged = analyse(opts, runs, res.runs, design, again)
    outdir = new_results_dir(out, res.site, str(src / "results.json"))
    verdict = {f: getattr(judged, f) for f in results.VERDICT_FIELDS}
    rejudged = replace(
        res,
        **verdict,
        design=looks,
        reanalysed_from=str(src.resolve()),
        schema_version=results.SCHEMA,
    )

    def write():
        if (src / "logs").is_dir():
            copy_tree(src / "logs", outdir / "logs")  # links skipped, bounded (files.copy_tree)
        return report.write_all(outdir, rejudged), outdir

    return guarded(outdir, write)


def attempts(records, upto=None):
    """The final attempt of each (run, role, repetition) up to repetition `upto` (None: all), and
    which role ran first in each (run, repetition). Records are in the order they were measured, so
    later attempts replace earlier ones."""
    final, first = {}, {}
    for r in records:
        if upto is None or r.rep <= upto:
            final[(r.run, r.role, r.rep)] = r
            first.setdefault((r.run, r.rep), r.role)
    return final, first


def _sides(final, run, bench):
    """({role: the run's repetitions}, {role: those that measured `bench`}), in repetition order."""
    reps = {
        role: sorted(
            (r for (name, rl, _), r in final.items() if name == run and rl == role),
            key=lambda r: r.rep,
        )
        for role in ROLES
    }
    used = {
        role: [r for r in recs if r.status == "ok" and bench in r.series]
        for role, recs in reps.items()
    }
    return reps, used


def analyse(opts, runs, records, design=None, extend=None):
    """The verdict on `records` by stats.Procedure (one family for the campaign): look 1 on the
    design's first repetitions, then extend(undecided) -> the benchmarks measured again (validate:
    every benchmark of a run it measured again; reanalyse: the source's), judged at look 2 on all
    their runs. Per benchmark: band verdicts and reliability; the module's verdict."""
    run_of = {bench: run.name for run in runs for bench in run.expect}
    # The crossover test over the pairs when the design has enough of them at its first look
    # (POLICY.paired_min: a rule of the design, not of the data); else the unpaired test.
    paired = stats.paired(design)

    def test(bench, look, previous):
        final, first = attempts(records, design.sizes()[look - 1] if design else None)
        reps, used = _sides(final, run_of[bench], bench)
        series = [r.series[bench] for recs in used.values() for r in recs]
        pts = {role: [r.series[bench]["points"] for r in recs] for role, recs in used.items()}
        pairs = None
        if paired:
            keys = [[r.rep for r in used[role]] for role in ROLES]
            pairs = stats.pairs_of(*keys, lambda rep: first[(run_of[bench], rep)] == "baseline")
        out = []
        if series:
            when = dict(design=design, previous=previous, pairs=pairs, look=look)
            out = stats.test_bands(
                bench, series[0]["metric"], pts["baseline"], pts["tuned"], **when
            )
        failed = {role: sum(1 for r in recs if r.status != "ok") for role, recs in reps.items()}
        counts = [n for role in ROLES for n in (failed[role], len(reps[role]))]
        return out + [(stats.reliability(bench, *counts), None)]

    procedure = stats.Procedure(design, opts.tolerance, opts.alpha)
    outcome = procedure.run(list(run_of), test, extend)
    final, _ = attempts(records)
    # The host state of each run, relative to the whole campaign (stats.host_labels): reported only.
    labels, slow_above = stats.host_labels([r.host for r in final.values()])
    state = dict(zip(final, labels))
    per_size = {}
    for bench, run in run_of.items():
        _, used = _sides(final, run, bench)
        series = [r.series[bench] for recs in used.values() for r in recs]
        per_size[bench] = {
            "metric": series[0]["metric"] if series else None,
            "suite": series[0]["suite"] if series else None,
            **{role: [r.series[bench]["points"] for r in recs] for role, recs in used.items()},
            "host_states": {
                role: [state[(r.run, r.role, r.rep)] for r in recs] for role, recs in used.items()
            },
            "host_note": HOST_NOTE,
        }
    # Comparable when either module produced numbers: a baseline that never runs where the tuned
    # module does is a result (reliability), not a failure to validate.
    any_data = any(r.status == "ok" for r in final.values())
    verdict = outcome.verdict
    exit_code = EXIT_CODES.get(verdict, EXIT_CANNOT) if any_data else EXIT_CANNOT
    return results.Results(
        bands=outcome.bands,
        per_size=per_size,
        verdict=verdict if any_data else "COULD-NOT-RUN",
        verdict_means=report.MEANS.get(verdict) if any_data else None,
        family=results.family_of(outcome.bands),
        exit_code=exit_code,
        noise=results.noise_of(per_size),
        host_state={
            "slow_above_ns": slow_above,
            "slow_factor": stats.SLOW_FACTOR,
            "fast_quantile": stats.FAST_QUANTILE,
            "runs": {
                role: {
                    str(label): sum(1 for k, lab in state.items() if k[1] == role and lab == label)
                    for label in sorted(set(labels), key=str)
                }
                for role in ROLES
            },
        },
    )
