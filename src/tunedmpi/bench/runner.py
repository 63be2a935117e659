"""One benchmark run in a fresh module shell: the runner that validate and sweep share.

A run is a new `bash` that starts from the caller's environment without tuning variables or Lmod
state, purges modules, loads exactly one MPI module (plus the site's benchmark modules), exports
the variables it is given (a sweep configuration's; none for validate), prints the variables that
are now set and `exec`s mpirun. It has a timeout that kills its whole process group, its log holds
the command, the variables, the exit code, the wall time and the output, and the output is parsed
(parse.py) into per-size series. Failed runs are retried a bounded number of times.
"""

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from tunedmpi import paths
from tunedmpi.bench import parse, probes, suites
from tunedmpi.files import write_atomic
from tunedmpi.modules import geometry
from tunedmpi.tables.operations import BENCHMARKS, COLLECTIVES

LMOD_INITS = ("/usr/share/lmod/lmod/init/bash",)
# Variables a module run must not inherit from the caller's shell (the modules set their own).
# Intel MPI (I_MPI_), MPICH (MPIR_CVAR_, HYDRA_) and libfabric (FI_) for a baseline of another MPI.
INHERITED_TUNING = ("UCX_", "UCC_", "HCOLL_", "OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "TUNEDMPI_")
INHERITED_TUNING += ("I_MPI_", "MPIR_CVAR_", "HYDRA_", "FI_")
LMOD_STATE = ("LOADEDMODULES", "_LMFILES_", "_ModuleTable", "__LMOD")
SHOWN = ("UCX_", "UCC_", "HCOLL_", "OMPI_MCA_", "PRTE_MCA_", "SLURM_DISTRIBUTION", "TUNEDMPI_")
SHOWN += ("I_MPI_", "MPIR_CVAR_", "HYDRA_", "FI_")
OUTPUT_MARK = "# ---- output ----"


class CannotRun(Exception):
    """Runs cannot be made here (no Lmod, no MPI, impossible geometry, ...): the callers exit 2."""


@dataclass(frozen=True)
class Launcher:
    """How one MPI's mpirun is told what validate and sweep need: the MPI is recognised by what
    `mpirun --version` prints (`version`: a pattern whose group is the version), `bind` is added to
    every run, `across_nodes` to the 2-rank one-sided runs when the job has several nodes."""

    name: str
    version: str
    bind: Tuple[str, ...] = ()
    across_nodes: Tuple[str, ...] = ()


# flavour -> launcher, in the order they are recognised. Open MPI binds to core for np <= 2 (to
# socket above) and spreads pairs with --map-by node. Intel MPI's hydra pins ranks by default;
# MPICH's hydra does not bind at all unless told. Both hydras put one rank per node with -ppn 1.
LAUNCHERS = {
    "openmpi": Launcher("Open MPI", r"\(Open MPI\)\s*(\S+)", (), ("--map-by", "node")),
    "intel": Launcher("Intel MPI", r"Intel\(R\) MPI Library.*?Version\s+(\S+)", (), ("-ppn", "1")),
    "mpich": Launcher(
        "MPICH", r"HYDRA build details:\s*Version:\s*(\S+)", ("-bind-to", "core"), ("-ppn", "1")
    ),
}


def launcher_args(flavour, np, across_nodes=False):
    """mpirun and its options (before the program) for `np` ranks of the MPI `flavour`."""
    launcher = LAUNCHERS[flavour]
    return (
        ["mpirun", "-np", str(np)]
        + list(launcher.bind)
        + (list(launcher.across_nodes) if across_nodes else [])
    )


def recognise(output):
    """(flavour, version, version line) from what `mpirun --version` printed, or None. The version
    line is the first line; for hydra, whose first line is "HYDRA build details:", up to the line
    with its Version."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    for k in range(1, min(len(lines), 10) + 1):
        text = " ".join(lines[:k])
        for flavour, launcher in LAUNCHERS.items():
            found = re.search(launcher.version, text)
            if found:
                return flavour, found.group(1), text
    return None


@dataclass(frozen=True)
class MPI:
    """Which MPI a module puts on PATH: its mpirun (as on PATH and resolved), mpicc, the flavour
    (a LAUNCHERS key) and what `mpirun --version` said."""

    module: str
    mpirun: str
    mpirun_real: str
    mpicc: str
    flavour: str
    version: str
    version_line: str

    @property
    def name(self):
        return "%s %s" % (LAUNCHERS[self.flavour].name, self.version)

    def record(self):
        return {
            "name": self.name,
            "flavour": self.flavour,
            "version": self.version_line,
            "mpirun": self.mpirun,
            "mpicc": self.mpicc or None,
        }


# Sets $p to the MPI's own mpirun: the first on PATH that is no tuned module's launch check
# (render.EXECUTABLE, which runs the next one), so two modules of one MPI share one mpirun.
OWN_MPIRUN = (
    "p=; while IFS= read -r c; do case $c in */__*.rules/bin/mpirun) ;; "
    "*) p=$c; break ;; esac; done < <(type -ap mpirun); "
)


def lmod_init():
    pkg_init = os.path.join(os.environ.get("LMOD_PKG", "/nonexistent"), "init", "bash")
    for cand in (pkg_init, *LMOD_INITS):
        if os.path.isfile(cand):
            return cand
    raise CannotRun(
        "Lmod not found (looked for $LMOD_PKG/init/bash and %s); install it "
        "(Debian: apt-get install lmod)" % ", ".join(LMOD_INITS)
    )


def shell(script, env, timeout):
    """Run bash in its own process group (a timeout kills mpirun and every rank it started)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    except BaseException:  # interrupted (SIGINT, SIGTERM): mpirun and its ranks do not outlive us
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        raise
    return proc.returncode, out, timed_out, time.monotonic() - start


def progress(done, total, started, text):
    """One progress line on stderr: n/N, what ran, elapsed time and the time left."""
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0

    def fmt(s):
        return "%d:%02d" % (s // 60, s % 60)

    sys.stderr.write(
        "[%*d/%d] %s | elapsed %s, left ~%s\n"
        % (len(str(total)), done, total, text, fmt(elapsed), fmt(eta))
    )
    sys.stderr.flush()


def require_local_mpi(site):
    """A site whose MPI prefix is inside the checkout (the local site's .venv) gets it from `make`."""
    if site.prefix and not site.prefix.startswith("/"):
        mpirun = paths.project_root() / site.prefix / "bin" / "mpirun"
        if not os.access(str(mpirun), os.X_OK):
            raise CannotRun(
                "site %s: its MPI (%s) is installed by `make`, and %s is missing: run `make` first"
                % (site.name, site.prefix, mpirun)
            )


def check_geometry(nodes, ppn, env, outside_fix):
    """Refuse what this machine or this job's allocation cannot hold, before anything runs.
    outside_fix: how to get more than this machine from outside a job (validate: --submit)."""
    job = geometry.from_scheduler(env)
    cores = os.cpu_count() or 1
    if job:
        jn, jp, src = job
        if nodes > jn:
            raise CannotRun(
                "--nodes %d: this %s job has %d node(s); ask for at most --nodes %d or submit a larger job"
                % (nodes, src, jn, jn)
            )
        if nodes * ppn > jn * jp:
            raise CannotRun(
                "--ppn %d: %d node(s) x %d ranks do not fit this %s job's %d x %d; lower --ppn"
                % (ppn, nodes, ppn, src, jn, jp)
            )
    elif nodes > 1:
        raise CannotRun(
            "--nodes %d: outside a job only this machine runs; run inside salloc/sbatch, or %s"
            % (nodes, outside_fix)
        )
    elif ppn > cores:
        raise CannotRun(
            "--ppn %d: this machine has %d cores; lower --ppn, run inside a job, or %s"
            % (ppn, cores, outside_fix)
        )


@dataclass
class Runner:
    """How runs are made for one geometry: module paths, ranks, time limit and retries."""

    modulepaths: List[str]
    nodes: int
    ppn: int
    timeout: float
    retries: int = 1
    env: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        # The caller's environment without tuning or Lmod state, plus the geometry being measured.
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(INHERITED_TUNING + LMOD_STATE)
        }
        env["TUNEDMPI_NODES"], env["TUNEDMPI_PPN"] = str(self.nodes), str(self.ppn)
        if os.geteuid() == 0:  # Open MPI refuses root unless told; CI and containers run as root
            env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        self.env = env

    @property
    def np(self):
        return self.nodes * self.ppn

    def script(self, module, extra_modules, body):
        """bash: clean module state, load the MPI module (+ benchmark modules), then body."""
        lines = [
            "set -e",
            "source %s" % shlex.quote(lmod_init()),
            "module purge >/dev/null 2>&1 || true",
        ]
        lines += ["module use %s" % shlex.quote(p) for p in self.modulepaths]
        lines += ["module load %s" % shlex.join([module, *extra_modules])]
        return "\n".join(lines + [body])

    def module_available(self, name):
        code, _, _, _ = shell(
            "\n".join(
                ["source %s" % shlex.quote(lmod_init())]
                + ["module use %s" % shlex.quote(p) for p in self.modulepaths]
                + ["module is-avail %s" % shlex.quote(name)]
            ),
            self.env,
            60,
        )
        return code == 0

    def identify(self, module, option="--module"):
        """The MPI `module` puts on PATH (an MPI), recognised by `mpirun --version` (LAUNCHERS).
        CannotRun, in one line naming the module, when it has no mpirun or an unknown one."""
        mark = "__TUNEDMPI_MPI__"
        body = (
            "echo %s; %s"
            'echo "$p"; [ -n "$p" ] && readlink -f "$p" || echo; command -v mpicc || echo; echo %s; '
            '[ -n "$p" ] && "$p" --version 2>&1 | head -n 40 || true' % (mark, OWN_MPIRUN, mark)
        )
        code, out, timed_out, _ = shell(self.script(module, [], body), self.env, 60)
        parts = out.split(mark)
        if code != 0 or len(parts) < 3:
            raise CannotRun(
                "%s %s: could not load it to see its MPI (module use %s): %s"
                % (option, module, " ".join(self.modulepaths), " ".join(out.split())[-300:])
            )
        # one line each after the mark's (an empty one for what is missing)
        mpirun, real, mpicc = (line.strip() for line in (parts[1].split("\n") + [""] * 4)[1:4])
        if not mpirun:
            raise CannotRun("%s %s puts no mpirun on PATH" % (option, module))
        found = recognise(parts[2])
        if found is None:
            said = " ".join(parts[2].split())[:200] or "nothing"
            raise CannotRun(
                "%s %s: its mpirun (%s) is no MPI validate knows (Open MPI, Intel MPI, MPICH): "
                "`mpirun --version`%s printed: %s"
                % (option, module, mpirun, " (timed out)" if timed_out else "", said)
            )
        return MPI(module, mpirun, real or mpirun, mpicc, *found)  # found: flavour, version, line

    def find_binaries(self, mpi_module, only=None, force_probes=False, mpi=None):
        """IMB/OSU from the environment or modules, else probes built with the MPI module's mpicc.
        mpi: the module's MPI (identify), which sets the launcher (default: Open MPI's)."""
        b, mpicc = self.survey(mpi_module, force_probes, mpi)
        self.complete(b, mpi_module, mpicc, only)
        b.host_probe = self.build_host_probe(mpi_module, b.modules, mpicc)
        return b

    def find_sides(self, baseline, tuned, only=None, force_probes=False):
        """{"baseline": Binaries, "tuned": Binaries} and the reasons a family was moved to the
        probes (suites.same_kind). Two modules of one MPI (the same mpirun, resolved) share one set,
        found under the baseline. Otherwise each side has its own, found in its module's
        environment or built with its mpicc; the variables IMB_MPI1 and OSU_DIR and the benchmark
        modules belong to the site's MPI (the tuned module's); probe_host is the tuned side's."""
        mb, mt = self.identify(baseline, "--baseline"), self.identify(tuned, "--module")
        if mb.mpirun_real == mt.mpirun_real:
            b = self.find_binaries(baseline, only, force_probes, mpi=mb)
            return {"baseline": b, "tuned": b}, []
        t, t_cc = self.survey(tuned, force_probes, mt, site_own=True)
        b, b_cc = self.survey(baseline, force_probes, mb, site_own=False)
        notes = suites.same_kind(b, t, only)
        self.complete(t, tuned, t_cc, only)
        self.complete(b, baseline, b_cc, only)
        t.host_probe = b.host_probe = self.build_host_probe(tuned, t.modules, t_cc)
        return {"baseline": b, "tuned": t}, notes

    def survey(self, mpi_module, force_probes=False, mpi=None, site_own=True):
        """(Binaries with the IMB/OSU found for `mpi_module`, no probes yet; its mpicc)."""
        extra = (
            [m for m in suites.BENCH_MODULES.values() if self.module_available(m)]
            if site_own
            else []
        )
        mark = "__PROBE_PATHS__"
        body = (
            "echo %s; command -v mpicc || echo; %s"
            'echo "$p"; command -v IMB-MPI1 || echo; '
            "for d in $(echo \"$PATH\" | tr ':' ' '); do "
            '[ -x "$d/osu_put_latency" ] && echo "$d" && break; done; echo' % (mark, OWN_MPIRUN)
        )
        code, out, _, _ = shell(self.script(mpi_module, extra, body), self.env, 120)
        if code != 0 or mark not in out:
            raise CannotRun(
                "could not load %s to find the MPI (module use %s):\n%s"
                % (mpi_module, " ".join(self.modulepaths), out[-2000:])
            )
        # one line each after the mark's, an empty one for what is missing
        lines = out.split(mark, 1)[1].split("\n") + ["", "", "", "", ""]
        mpicc, mpirun, imb_path, osu_dir = (line.strip() for line in lines[1:5])
        if not mpirun:
            raise CannotRun("%s puts no mpirun on PATH" % mpi_module)
        own = os.environ if site_own else {}
        imb = own.get("IMB_MPI1") or imb_path or None
        # OSU installed beside the MPI (a Spack view holding both: site local-source) puts its
        # programs in libexec/osu-micro-benchmarks/, which no module adds to PATH.
        beside = Path(mpirun).parent.parent / "libexec" / "osu-micro-benchmarks"
        osu_root = own.get("OSU_DIR") or osu_dir or (str(beside) if beside.is_dir() else None)
        osu = suites.find_osu(osu_root) if osu_root else {}
        if force_probes:
            imb, osu = None, {}
        b = suites.Binaries(suite="", imb=imb, osu=osu, modules=extra)
        if mpi is not None:
            b.flavour, b.mpi = mpi.flavour, mpi.record()
        return b, mpicc

    def complete(self, b, mpi_module, mpicc, only=None):
        """Build the probes where `b` lacks IMB-MPI1 or a one-sided OSU program; name its suite."""
        need = set(only or BENCHMARKS)
        if not b.imb or not need.issubset(set(b.osu) | set(COLLECTIVES)):
            if not mpicc:
                raise CannotRun(
                    "no IMB/OSU found and %s has no mpicc to build the probes" % mpi_module
                )
            built = self.build_probes(mpi_module, b.modules, mpicc)
            b.probe_coll, b.probe_osc = str(built["probe_coll"]), str(built["probe_osc"])
        b.suite = suites.suite_name(b)
        return b

    def build_probes(self, mpi_module, extra, mpicc, names=probes.PROBES):
        """Build validate/probes with the module's mpicc, in that module's environment (PATH,
        LD_LIBRARY_PATH of the compiler it wraps); one cache folder per mpicc."""
        cache = (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "tunedmpi"
            / "probes"
            / hashlib.sha256(mpicc.encode()).hexdigest()[:12]
        )
        code, out, _, _ = shell(self.script(mpi_module, extra, "env -0"), self.env, 120)
        if code != 0:
            raise CannotRun(
                "could not load %s to build the probes:\n%s" % (mpi_module, out[-2000:])
            )
        module_env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
        try:
            return probes.build(mpicc, cache, env=module_env, names=names)
        except probes.ProbeBuildError as exc:
            raise CannotRun("building the probes failed: %s" % exc)

    def build_host_probe(self, mpi_module, extra, mpicc):
        """probe_host's path, or None (said on stderr) when it cannot be built here: the host state is
        then not recorded, and the verdict compares all runs as one group."""
        if not mpicc:
            sys.stderr.write(
                "note: %s has no mpicc to build probe_host; the host state is not recorded\n"
                % mpi_module
            )
            return None
        try:
            return str(
                self.build_probes(mpi_module, extra, mpicc, (probes.HOST_PROBE,))[probes.HOST_PROBE]
            )
        except CannotRun as exc:
            sys.stderr.write("note: the host state is not recorded: %s\n" % exc)
            return None

    def mpirun_line(self, run, flavour="openmpi"):
        """mpirun, the options of the MPI `flavour` (LAUNCHERS) and the program: the job's ranks, or
        the run's fixed count (one-sided pairs, spread over two nodes when there are nodes)."""
        across = bool(run.ranks) and self.nodes > 1
        return launcher_args(flavour, run.ranks or self.np, across) + list(run.argv)

    def placement(self, module, extra_modules=(), flavour="openmpi"):
        """Where mpirun puts the ranks under `module`, as {"collectives": [host of rank 0, 1, ...],
        "one_sided": [...]} (`hostname` started the way the benchmarks are): proof of which nodes a
        campaign measured, e.g. that a 2-node run really spanned two hosts. A module under which
        mpirun cannot start gets its error instead: its benchmark runs will fail and be judged."""
        mark = "__PLACEMENT__"
        found = {}
        for name, ranks in (("collectives", None), ("one_sided", 2)):
            run = suites.Run(
                name="placement", family="hostname", argv=["hostname"], expect=(), ranks=ranks
            )
            body = "echo %s; %s" % (mark, shlex.join(self.mpirun_line(run, flavour)))
            code, out, timed_out, _ = shell(self.script(module, extra_modules, body), self.env, 120)
            hosts = out.split(mark, 1)[-1].split()
            if code != 0 or timed_out or mark not in out:
                return {
                    "error": "`hostname` under mpirun exited %s%s: %s"
                    % (code, " (timed out)" if timed_out else "", " ".join(out.split()[-30:]))
                }
            found[name] = sorted(hosts)
        return found

    def measure(self, binaries, run, module, exports, log, title):
        """One benchmark run: fresh shell, module purge + load, the exports, mpirun. Writes the log
        (title, command, variables, output) and returns a dict: status, exit_code, wall_s, problems,
        series {benchmark: {metric, suite, points}}, env (the tuning variables that were set), command."""
        argv = self.mpirun_line(run, binaries.flavour)
        sets = "".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in exports.items())
        envfile = "env_shown=$(env | grep -E '^(%s)' | sort)" % "|".join(SHOWN)
        body = "%s%s\necho \"$env_shown\" | sed 's/^/#   /'\necho '%s'\nexec %s" % (
            sets,
            envfile,
            OUTPUT_MARK,
            shlex.join(argv),
        )
        # The host state just before and just after the run (probes.host_state): a run whose
        # figures agree met one state throughout, one whose figures differ met a change.
        before = probes.host_state(binaries.host_probe, self.env) if binaries.host_probe else None
        code, out, timed_out, wall = shell(
            self.script(module, binaries.modules, body), self.env, self.timeout
        )
        after = probes.host_state(binaries.host_probe, self.env) if binaries.host_probe else None
        # Parse what the benchmark printed, not the module's messages and variables before it.
        head, _, bench_out = out.rpartition(OUTPUT_MARK + "\n")
        shown = dict(
            line[4:].split("=", 1)
            for line in head.splitlines()
            if line.startswith("#   ") and "=" in line
        )
        parsed = parse.parse_output(
            bench_out,
            exit_code=code,
            timed_out=timed_out,
            requested=list(run.expect) if run.family == "imb" else None,
        )
        series = {}
        for s in parsed.series:
            if s.benchmark in run.expect:
                series[s.benchmark] = {
                    "metric": s.metric,
                    "suite": s.suite,
                    "points": {int(size): float(v) for size, v in s.points},
                }
        status = parsed.status
        problems = list(parsed.problems)
        missing = [b for b in run.expect if b not in series]
        if status == "ok" and missing:
            status = "failed"
            problems.append("no results for %s" % ", ".join(missing))
        exported = "".join("export %s=%s; " % (k, shlex.quote(v)) for k, v in exports.items())
        header = [
            "# %s" % title,
            "# command: module purge; module load %s; %s%s"
            % (" ".join([module] + binaries.modules), exported, " ".join(argv)),
            "# exit code: %s%s, wall time: %.2f s, status: %s"
            % (code, " (timed out)" if timed_out else "", wall, status),
            "# host state (cache-line round trip, ns): before %s, after %s" % (before, after),
            "# variables after module load:",
        ]
        write_atomic(log, "\n".join(header) + "\n" + out)  # a full disk: OutputError naming it
        host = (
            None if before is None and after is None else {"before_ns": before, "after_ns": after}
        )
        return dict(
            status=status,
            exit_code=code,
            wall_s=round(wall, 3),
            problems=problems,
            series=series,
            env=shown,
            command=" ".join(argv),
            host=host,
        )

    def attempts(self, binaries, run, module, exports, log_for, title_for):
        """measure(), retried up to `retries` times while it fails; yields (attempt, result) for every
        attempt made. log_for(attempt) / title_for(attempt) name each attempt's log and title."""
        for attempt in range(1, self.retries + 2):
            m = self.measure(binaries, run, module, exports, log_for(attempt), title_for(attempt))
            yield attempt, m
            if m["status"] == "ok":
                return
