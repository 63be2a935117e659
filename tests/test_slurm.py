"""Against a real one-node Slurm (tools/slurmcluster.py): inside `sbatch` the tuned module reads the job
geometry Slurm really sets, and Open MPI's mpirun starts exactly the allocation's processes;
validate/run.sh runs in an allocation, and `--submit` goes through `sbatch --wait` from outside one
and exits with the job's verdict (2 when the job never gave one); `tunedmpi sweep --slurm-array` runs
a stage as a job array, one task per repetition interleaving every configuration, and after
`scancel` of part of it a rerun finishes only what is missing."""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import lmod
import slurmcluster as slurm
from conftest import ROOT, VERDICT_EXITS, assert_verdict
from tunedmpi.acceptance import validate
from tunedmpi.bench import store
from tunedmpi.modules import explain, sites
from tunedmpi.regenerate import space, sweep

pytestmark = pytest.mark.skipif(
    bool(slurm.missing()),
    reason="Slurm/munge not installed (%s): apt-get "
    "install %s" % (" ".join(slurm.missing()), slurm.APT_PACKAGES),
)

SITE = "local"
MODULE = "openmpi-tuned/5.0.8"
HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    printf("@@RANK %d SIZE %d HOST %s\n", rank, size, host);
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = slurm.start(tmp_path_factory.mktemp("slurm"))
    pids = c.pids
    yield c
    c.stop()
    # the daemons were ours (Popen, reaped by stop): none of their pids may be left
    assert [pid for pid in pids.values() if pid_alive(pid)] == [], pids


def build_mpi_program(tmp_path_factory, name, source):
    """A C MPI program built with the wheel's mpicc; returns its path."""
    d = tmp_path_factory.mktemp(name)
    (d / (name + ".c")).write_text(source)
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "mpicc"), "-o", str(d / name), str(d / (name + ".c"))],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return d / name


@pytest.fixture(scope="session")
def hello(tmp_path_factory):
    """A tiny MPI program: prints rank, size and host."""
    return build_mpi_program(tmp_path_factory, "hello", HELLO_C)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def job_script(hello_path, pre=""):
    return "\n".join(
        [
            "#!/bin/bash",
            "set -e",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # jobs run as root here",
            pre,
            "env | grep '^SLURM_' | sed 's/^/@@ENV /'",
            "source %s" % lmod.LMOD_INIT,
            "module use %s" % shlex.quote(str(ROOT / "modulefiles" / SITE)),
            "module load %s" % MODULE,
            'echo "@@SELECTION $TUNEDMPI_SELECTION"',
            # the module's launch check first (selector.SEEN), then the MPI's own
            'echo "@@MPIRUN $(type -ap mpirun | sed -n 2p)"',
            "mpirun %s  # no -np: the process count must come from the allocation"
            % shlex.quote(str(hello_path)),
            "",
        ]
    )


def parse(out):
    job_env, ranks, sel, mpirun = {}, [], None, None
    for line in out.splitlines():
        if line.startswith("@@ENV "):
            k, _, v = line[6:].partition("=")
            job_env[k] = v
        elif line.startswith("@@SELECTION "):
            sel = line[len("@@SELECTION ") :]
        elif line.startswith("@@MPIRUN "):
            mpirun = line[len("@@MPIRUN ") :]
        elif line.startswith("@@RANK "):
            m = re.match(r"@@RANK (\d+) SIZE (\d+) HOST (\S+)$", line)
            ranks.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return job_env, sel, mpirun, ranks


def test_cluster_is_one_idle_node(cluster):
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N %T %c").stdout.split()
    assert out == [cluster.host, "idle", str(cluster.cpus)], cluster.diagnostics()
    assert all(pid_alive(pid) for pid in cluster.pids.values()), cluster.pids
    assert cluster.startup_seconds < 60


# (sbatch args, env at submission, expected nodes, ppn, source, ranks mpirun starts, job env checks)
CASES = {
    # --ntasks-per-node: Slurm exports SLURM_NTASKS_PER_NODE=2
    "ntasks-per-node=2": (
        ["-N1", "--ntasks-per-node=2"],
        {},
        1,
        2,
        "slurm",
        2,
        {"SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2"},
    ),
    # --ntasks only: no SLURM_NTASKS_PER_NODE; the module must use SLURM_TASKS_PER_NODE/SLURM_NTASKS
    # (ppn 1 also differs from the site default 1x2, and mpirun starts 1 process on 2 cores)
    "ntasks=1": (
        ["-N1", "--ntasks=1"],
        {},
        1,
        1,
        "slurm",
        1,
        {"SLURM_NTASKS_PER_NODE": None, "SLURM_TASKS_PER_NODE": "1", "SLURM_NTASKS": "1"},
    ),
    # an explicit TUNEDMPI_PPN beats Slurm's ppn in the module, but not the allocation in mpirun
    "explicit-ppn": (
        ["-N1", "--ntasks-per-node=2"],
        {"TUNEDMPI_PPN": "1"},
        1,
        1,
        "explicit+slurm",
        2,
        {"SLURM_NTASKS_PER_NODE": "2"},
    ),
}


@pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)")
@pytest.mark.parametrize("case", list(CASES))
def test_module_and_mpirun_follow_the_allocation(cluster, hello, case):
    args, submit_env, nodes, ppn, source, nranks, env_checks = CASES[case]
    if nranks > cluster.cpus:
        pytest.skip("needs %d CPUs, this node has %d" % (nranks, cluster.cpus))
    # the wheel's bin dir must come from the module, not from an activated venv
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    submit_env = dict(submit_env, PATH=path)
    job_id, state, out = cluster.sbatch(job_script(hello), *args, env=submit_env, timeout=60)
    context = "job %s %s:\n%s\n%s" % (job_id, state, out, cluster.diagnostics())
    assert state == "COMPLETED", context
    job_env, sel, mpirun, ranks = parse(out)

    assert job_env.get("SLURM_JOB_ID") == job_id, context
    for name, want in env_checks.items():
        assert job_env.get(name) == want, (name, context)

    # the selection names the geometry Slurm gave, and equals the Python twin fed the job's real env
    assert sel is not None, context
    assert " nodes=%d ppn=%d source=%s " % (nodes, ppn, source) in sel + " ", context
    want = explain.select(sites.load_named(SITE), dict(job_env, **CASES[case][1]))["selection"]
    assert sel == want, context

    # the module put the wheel's MPI first on PATH, and mpirun used the allocation (no -np)
    assert Path(mpirun) == ROOT / ".venv" / "bin" / "mpirun", context
    assert sorted(r for r, _, _ in ranks) == list(range(nranks)), context
    assert {(s, h) for _, s, h in ranks} == {(nranks, cluster.host)}, context


def test_stop_ends_every_daemon(tmp_path):
    c = slurm.start(tmp_path)
    pids = c.pids
    try:
        assert sorted(pids) == ["munged", "slurmctld", "slurmd"]
        assert all(pid_alive(pid) for pid in pids.values()), pids
        for name, pid in pids.items():  # they are the real daemons, not wrappers
            assert Path("/proc/%d/comm" % pid).read_text().strip() == name
        assert c.node_state() == "idle"
    finally:
        c.stop()
    assert [n for n, pid in pids.items() if pid_alive(pid)] == [], pids
    assert not c.munge_socket.exists()  # munged shut down cleanly, not killed
    for port in c.ports:  # nobody listens on slurmctld's and slurmd's ports any more
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


# -- validate/run.sh on the real Slurm -------------------------------------------------------------

RUN = ROOT / "validate" / "run.sh"
VALIDATE_JOB = "tunedmpi-validate"  # the job name --submit gives its job
needs_validate = pytest.mark.skipif(
    not (lmod.available() and (ROOT / ".venv/bin/mpicc").exists()),
    reason="validate needs Lmod (apt-get install lmod) and the Open MPI wheel (make)",
)
# any verdict validate can reach (the host's noise decides which: issue 48)
VERDICT_LINE = re.compile(
    r"^verdict: (%s)  \(openmpi-tuned/5\.0\.8 vs openmpi/5\.0\.8; report: (\S+)\)$"
    % "|".join(validate.EXIT_CODES),
    re.M,
)


class Watcher(threading.Thread):
    """Polls slurmctld while `validate/run.sh --submit` runs, so what Slurm knew about the job is kept
    after it is purged (there is no accounting): for each new job named tunedmpi-validate (or
    `name`), the states seen in order with whether the submitting process was alive then, its last
    record, its script (unless scripts=False)."""

    def __init__(self, cluster, name=VALIDATE_JOB, scripts=True):
        super().__init__(daemon=True)
        self.cluster, self.proc, self.name, self.want_scripts = cluster, None, name, scripts
        self.old = {job["JobId"] for job in cluster.jobs()}
        self.seen, self.last, self.scripts, self.errors = {}, {}, {}, []
        self.done = threading.Event()

    def poll(self):
        alive = self.proc.poll() is None
        for job in self.cluster.jobs():
            jid = job["JobId"]
            if jid in self.old or job.get("JobName") != self.name:
                continue
            self.last[jid] = job
            states = self.seen.setdefault(jid, [])
            if not states or states[-1] != (job["JobState"], alive):
                states.append((job["JobState"], alive))
            if self.want_scripts and jid not in self.scripts:
                self.scripts[jid] = self.cluster.batch_script(jid)

    def run(self):
        while True:  # one last poll after finish(): the submitter has ended, the job is final
            try:
                self.poll()
            except (slurm.SlurmError, subprocess.TimeoutExpired) as exc:
                self.errors.append(str(exc))
            if self.done.is_set():
                return
            self.done.wait(0.3)

    def finish(self):
        self.done.set()
        self.join(60)
        assert not self.is_alive()


class Submitted:
    """The outcome of one `validate/run.sh --submit` call (see submit())."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def context(self):
        return (
            "exit %s after %.1f s\n--- stdout:\n%s\n--- stderr:\n%s\n--- slurmctld saw: %s %s"
            % (
                self.returncode,
                self.wall,
                self.stdout[-3000:],
                self.stderr[-3000:],
                self.watcher.seen,
                self.watcher.errors,
            )
        )

    def job(self):
        """(job id, its last record): exactly one validate job must have been submitted."""
        assert len(self.watcher.seen) == 1, self.context()
        jid = next(iter(self.watcher.seen))
        return jid, self.watcher.last[jid]


def outside_env(cluster):
    """A login shell's environment: Slurm's client configuration, no job (no SLURM_JOB_*), no modules."""
    env = cluster.env()
    assert sorted(k for k in env if k.startswith("SLURM_")) == ["SLURM_CONF"]
    leaks = [k for k in env if k.startswith(("LOADEDMODULES", "_LMFILES_", "TUNEDMPI_"))]
    assert leaks == [k for k in slurm.KEPT if k in os.environ], leaks  # the measurement lock only
    return env


def watched(cluster, watcher, argv, cwd, during=None, timeout=240):
    """Run argv from outside any job, in cwd, as a user would, while the watcher follows its jobs.
    during(watcher, proc) is called every 0.05 s until it returns True (or the process ends)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [str(a) for a in argv],
        env=outside_env(cluster),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    watcher.proc = proc
    watcher.start()
    try:
        if during is not None:
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline and not during(watcher, proc):
                time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        try:  # our own process group: the command and the sbatch it started
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    finally:
        watcher.finish()
    return Submitted(
        returncode=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        watcher=watcher,
        wall=time.monotonic() - t0,
    )


def submit(cluster, cwd, *args, cancel=None, timeout=240):
    """`validate/run.sh --submit ARGS` in cwd. cancel(watcher) -> job id or None: scancel that job
    once it says so."""

    def during(watcher, proc):
        jid = cancel(watcher)
        if jid:
            cluster.run("scancel", jid)
        return bool(jid)

    return watched(
        cluster,
        Watcher(cluster),
        [RUN, "--submit"] + list(args),
        cwd,
        during if cancel is not None else None,
        timeout,
    )


def results_dirs(out):
    return sorted(d for d in out.iterdir() if d.is_dir()) if out.is_dir() else []


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    """(a): --submit from outside a job, with a relative --out (as users type it) and extra sbatch
    options; whichever verdict the host's noise gives, its exit code is the job's and the process's."""
    cwd = tmp_path_factory.mktemp("submit")
    # "--sbatch-args=...": argparse takes a separate "--time=10 ..." for an abbreviated --timeout
    s = submit(
        cluster,
        cwd,
        "--repetitions",
        "3",
        "--no-extend",
        "--benchmarks",
        "allreduce,put_latency",
        "--out",
        "results",
        "--sbatch-args=--time=10 --comment=tmtest-outside",
    )
    s.out = cwd / "results"
    return s


@needs_validate
def test_submit_waits_for_the_job_and_exits_with_its_verdict(submitted):
    s, out = submitted, submitted.out
    jid, job = s.job()
    ctx = s.context() + "\n--- job: %s" % job
    # through sbatch --wait: the geometry (1 node, the site's 2 ppn), the output file, the extra options
    assert (
        "validate: submitting: sbatch --wait --parsable --job-name tunedmpi-validate --nodes 1 "
        "--ntasks-per-node 2 --output %s/slurm-%%j.out --time=10 --comment=tmtest-outside %s/.submit-"
        % (out, out)
    ) in s.stderr, ctx
    assert (job["NumNodes"], job["NumTasks"], job["TimeLimit"], job["Comment"]) == (
        "1",
        "2",
        "00:10:00",
        "tmtest-outside",
    ), ctx
    # it waited: the job ran while validate was still running, and validate ended after the job
    assert ("RUNNING", True) in s.watcher.seen[jid], ctx
    assert job["JobState"] == ("COMPLETED" if s.returncode == 0 else "FAILED"), ctx
    assert job["ExitCode"] == "%d:0" % s.returncode, ctx
    assert (
        "validate: job %s finished (sbatch exit %d, validation exit %d)"
        % (jid, s.returncode, s.returncode)
        in s.stderr
    ), ctx

    # it printed the job's output, which is the verdict table, the verdict line and the progress
    log = out / ("slurm-%s.out" % jid)
    assert job["StdOut"] == str(log), ctx
    assert s.stdout == log.read_text(), ctx
    assert (
        "| benchmark | band | sizes | gain (tuned vs baseline) | p | verdict | why |" in s.stdout
    ), ctx
    for row in (
        "| allreduce | <=1KB |",
        "| allreduce | 1KB-64KB |",
        "| put_latency | <=1KB |",
        "| put_latency | reliability |",
    ):
        assert row in s.stdout, (row, ctx)
    assert "[12/12] rep 3/3 put_latency     baseline ok" in s.stdout, ctx  # ABBA: rep 3, 2nd run
    verdicts = VERDICT_LINE.findall(s.stdout)
    assert len(verdicts) == 1, ctx

    # exit code == the job's == the campaign's (every verdict its own code; noise decides which)
    (resdir,) = results_dirs(out)
    r = json.loads((resdir / "results.json").read_text())
    assert_verdict(s.returncode, r, ctx)
    assert verdicts[0] == (r["verdict"], str(resdir / "report.md")), ctx
    assert r["geometry"] == {"nodes": 1, "ppn": 2, "np": 2, "source": "slurm"}, ctx
    pair = ("baseline", "tuned")
    assert [(x["run"], x["role"], x["status"]) for x in r["runs"]] == [  # counterbalanced (ABBA)
        (run, role, "ok")
        for k in range(3)
        for i, run in enumerate(("collectives", "put_latency"))
        for role in (pair if (k + i) % 2 == 0 else pair[::-1])
    ], ctx
    assert (
        "| geometry | 1 node(s) x 2 ppn = 2 ranks (slurm) |" in (resdir / "report.md").read_text()
    )
    # nothing else is left in --out: the job script and its exit-code file are removed
    assert sorted(p.name for p in out.iterdir()) == sorted([resdir.name, log.name]), ctx


@needs_validate
def test_submitted_job_runs_this_checkout_without_the_submit_options(submitted):
    s, out = submitted, submitted.out
    jid, _ = s.job()
    script = s.watcher.scripts[jid]
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash", script
    calls = []  # the lines that call this checkout's validate/run.sh, from it on (after `exec` or not)
    for line in lines:
        words = shlex.split(line, comments=True)
        at = [
            i
            for i, w in enumerate(words)
            if w.endswith("run.sh") and Path(w).resolve() == RUN.resolve()
        ]
        calls += [words[at[0] :]] if at else []
    assert len(calls) == 1, script
    argv = calls[0]
    assert argv[-2:] == ["--out", str(out)], script  # --out made absolute (last one wins)
    assert "--submit" not in argv and not [
        a for a in argv if a.startswith("--sbatch-args") or "--time" in a
    ], script
    assert (
        argv[argv.index("--repetitions") + 1] == "3"
        and argv[argv.index("--benchmarks") + 1] == "allreduce,put_latency"
    )


@pytest.fixture(scope="module")
def inside(cluster, tmp_path_factory):
    """(b) and (c): a job script calls validate/run.sh --submit (must refuse) and then validate/run.sh
    itself, which must run in this allocation. No OMPI_ALLOW_RUN_AS_ROOT here: validate sets it."""
    d = tmp_path_factory.mktemp("inside")

    def q(p):
        return shlex.quote(str(p))

    script = "\n".join(
        [
            "#!/bin/bash",
            "env | grep '^SLURM_' | sed 's/^/@@ENV /'",
            "%s --submit --repetitions 1 --benchmarks put_latency --out %s >%s 2>%s"
            % (q(RUN), q(d / "submitted"), q(d / "submit.out"), q(d / "submit.err")),
            'echo "@@SUBMIT_EXIT $?"',
            "%s --repetitions 3 --no-extend --benchmarks put_latency --out %s"
            % (q(RUN), q(d / "results")),
            'echo "@@VALIDATE_EXIT $?"',
            "",
        ]
    )
    job_id, state, out = cluster.sbatch(script, "-N1", "--ntasks-per-node=2", timeout=180)
    later = [job for job in cluster.jobs() if int(job["JobId"]) > int(job_id)]
    env = dict(
        line[6:].split("=", 1)
        for line in out.splitlines()
        if line.startswith("@@ENV ") and "=" in line
    )
    codes = dict(re.findall(r"^@@(SUBMIT_EXIT|VALIDATE_EXIT) (\d+)$", out, re.M))
    ctx = "job %s %s:\n%s\n%s" % (job_id, state, out[-4000:], cluster.diagnostics())
    return Submitted(
        job_id=job_id,
        state=state,
        out=out,
        dir=d,
        later=later,
        env=env,
        codes={k: int(v) for k, v in codes.items()},
        ctx=ctx,
    )


@needs_validate
def test_validate_inside_an_allocation_runs_in_it(inside):
    j = inside
    assert j.state == "COMPLETED", j.ctx
    assert (
        j.env.get("SLURM_JOB_ID"),
        j.env.get("SLURM_JOB_NUM_NODES"),
        j.env.get("SLURM_NTASKS_PER_NODE"),
    ) == (j.job_id, "1", "2"), j.ctx
    (resdir,) = results_dirs(j.dir / "results")
    r = json.loads((resdir / "results.json").read_text())
    assert r["geometry"] == {"nodes": 1, "ppn": 2, "np": 2, "source": "slurm"}, j.ctx
    assert [(x["run"], x["role"], x["status"]) for x in r["runs"]] == [  # counterbalanced (ABBA)
        ("put_latency", role, "ok")
        for role in ("baseline", "tuned", "tuned", "baseline", "baseline", "tuned")
    ], j.ctx
    assert r["commands"]["put_latency"].startswith("mpirun -np 2 "), j.ctx
    # the tuned module saw the allocation's geometry
    assert " nodes=1 ppn=2 " in r["runs"][1]["env"]["TUNEDMPI_SELECTION"], r["runs"][1]["env"]
    assert_verdict(j.codes["VALIDATE_EXIT"], r, j.ctx)
    assert (
        "verdict: %s  (openmpi-tuned/5.0.8 vs openmpi/5.0.8; report: %s)"
        % (r["verdict"], resdir / "report.md")
        in j.out
    )


@needs_validate
def test_submit_inside_a_job_refuses(inside):
    j = inside
    assert j.codes.get("SUBMIT_EXIT") == 2, j.ctx
    err = (j.dir / "submit.err").read_text()
    assert (
        "validate: cannot run: --submit is for use outside a job; inside salloc/sbatch run without it"
        in err
    ), err
    assert (j.dir / "submit.out").read_text() == ""
    assert not (j.dir / "submitted").exists()  # refused before creating anything
    assert [job["JobId"] for job in j.later if job.get("JobName") == VALIDATE_JOB] == [], j.later


def test_submit_refused_by_sbatch_is_exit_2(cluster, tmp_path):
    """A job Slurm will not take is "could not run" (2), not a FAIL (sbatch itself exits 1)."""
    s = submit(
        cluster,
        tmp_path,
        "--repetitions",
        "3",
        "--benchmarks",
        "put_latency",
        "--out",
        tmp_path / "results",
        "--sbatch-args=--partition=nosuchpartition",
    )
    assert s.returncode == 2, s.context()
    assert (
        "validate: cannot run: sbatch did not submit the job (exit 1): "
        "sbatch: error: invalid partition specified: nosuchpartition" in s.stderr
    ), s.context()
    assert s.stdout == "" and s.watcher.seen == {}, s.context()
    assert list((tmp_path / "results").iterdir()) == []  # no job script left behind


@needs_validate
def test_rows_submit_runs_each_row_as_its_own_job_of_its_geometry(cluster, tmp_path):
    """validate --rows all --submit (issue 40 item 4) on this one-node cluster: 1x2 runs as a job of
    1 node x 2 tasks; 2x1's job of 2 nodes pends here for ever until scancel (as an admin would), so
    that row could not run and the campaign's one exit code is 2 whatever the noise made of 1x2."""
    out = tmp_path / "results"
    argv = [RUN, "--rows", "all", "--submit", "--repetitions", "3", "--no-extend"]
    argv += ["--benchmarks", "put_latency", "--out", out]

    def cancel_two_nodes(watcher, proc):
        for jid, job in list(watcher.last.items()):
            if job.get("NumNodes", "").startswith("2") and job.get("JobState") == "PENDING":
                cluster.run("scancel", jid)
                return True
        return False

    s = watched(cluster, Watcher(cluster), argv, tmp_path, cancel_two_nodes, timeout=240)
    jobs = {job["NumNodes"].split("-")[0]: (jid, job) for jid, job in s.watcher.last.items()}
    assert sorted(jobs) == ["1", "2"], s.context()
    assert jobs["1"][1]["NumTasks"] == "2" and jobs["2"][1]["JobState"] == "CANCELLED", s.context()
    (campaign,) = out.glob("local-rows-*")
    doc = json.loads((campaign / "results-rows.json").read_text())
    one, two = doc["rows"]
    assert s.returncode == doc["exit_code"] == 2 and one["exit_code"] in VERDICT_EXITS, s.context()
    assert one["dir"].startswith("rows/1x2/local-") and two["verdict"] == "COULD-NOT-RUN"
    assert (campaign / "rows" / "1x2" / ("slurm-%s.out" % jobs["1"][0])).is_file()
    assert "job %s ended without a verdict" % jobs["2"][0] in two["reason"], s.context()
    assert [x.get("name").split(":")[0] for x in ET.parse(campaign / "junit.xml").getroot()] == [
        "row 1x2",
        "row 2x1",
    ]


def _pending(watcher):
    return next((jid for jid, states in watcher.seen.items() if states[-1][0] == "PENDING"), None)


def _running(watcher, out):
    # running, and validate has started inside it (its results directory exists)
    started = bool(results_dirs(out))
    return next(
        (jid for jid, states in watcher.seen.items() if states[-1][0] == "RUNNING" and started),
        None,
    )


@pytest.mark.parametrize("when", ["pending", pytest.param("running", marks=needs_validate)])
def test_cancelled_job_is_exit_2_not_a_verdict(cluster, tmp_path, when):
    """sbatch --wait exits 0 for a job cancelled before it started and 1 for one killed while it ran
    (also by its time limit): neither is a verdict, --submit must say 2."""
    out = tmp_path / "results"
    if when == "pending":
        extra, cancel = ["--sbatch-args=--hold"], _pending
    else:
        extra, cancel = [], lambda w: _running(w, out)
    s = submit(
        cluster,
        tmp_path,
        "--repetitions",
        "3",
        "--no-extend",
        "--benchmarks",
        "allreduce,put_latency",
        "--out",
        out,
        *extra,
        cancel=cancel,
        timeout=120,
    )
    jid, job = s.job()
    assert job["JobState"] == "CANCELLED", s.context()
    assert s.returncode == 2, s.context()
    assert "validate: cannot run: job %s ended without a verdict (" % jid in s.stderr, s.context()
    assert not VERDICT_LINE.search(s.stdout), s.context()
    assert not list(out.glob(".exit-*")) and not list(out.glob(".submit-*")), sorted(out.iterdir())
    if when == "pending":
        assert ("PENDING", True) in s.watcher.seen[jid] and job["Reason"] in (
            "JobHeldUser",
            "None",
        ), s.context()
        assert results_dirs(out) == [] and not (out / ("slurm-%s.out" % jid)).exists()
    else:
        assert ("RUNNING", True) in s.watcher.seen[jid], s.context()
        assert "CANCELLED" in s.stdout, s.context()  # the job's output, Slurm's notice at its end


# -- tunedmpi sweep --slurm-array on the real Slurm --------------------------------------------------

TUNEDMPI = ROOT / ".venv" / "bin" / "tunedmpi"
SWEEP_JOB = "tunedmpi-sweep-s1"  # the job name of stage s1's array
SWEEP_SPACE = """schema: 1
benchmarks: [allreduce]
set: quick
repetitions: 2
stages:
  - name: s1
    knobs:
      pml: [default, ucx]
      ucx_tls: [default, "self,sm"]
"""
# stage s1's plan: the baseline first, then the other combinations
SWEEP_CONFIGS = [{}, {"ucx_tls": "self,sm"}, {"pml": "ucx"}, {"pml": "ucx", "ucx_tls": "self,sm"}]
SUBMITTING = re.compile(r"^sweep: submitting (\d+) array task\(s\): (sbatch .*)$", re.M)
needs_sweep = pytest.mark.skipif(
    not (lmod.available() and (ROOT / ".venv/bin/mpicc").exists()),
    reason="sweep needs Lmod (apt-get install lmod) and the Open MPI wheel (make)",
)


def sweep_cmd(tmp, *extra):
    return [
        str(TUNEDMPI),
        "sweep",
        "--site",
        SITE,
        "--space",
        str(tmp / "space.yaml"),
        "--store",
        str(tmp / "store"),
        "--slurm-array",
    ] + list(extra)


def run_sweep(cluster, tmp, *extra, during=None, timeout=240):
    """`tunedmpi sweep --slurm-array` from outside any job, in tmp, while a Watcher follows the
    stage's array."""
    return watched(
        cluster,
        Watcher(cluster, name=SWEEP_JOB, scripts=False),
        sweep_cmd(tmp, *extra),
        tmp,
        during,
        timeout,
    )


def arrays(watcher):
    """{array job id: {task index: last state}} of what the watcher saw (the record of a still
    pending remainder, say ArrayTaskId 2-3, is listed under that range)."""
    out = {}
    for job in list(watcher.last.values()):  # a copy: the watcher's thread adds to it
        out.setdefault(job["ArrayJobId"], {})[job["ArrayTaskId"]] = job["JobState"]
    return out


def record_files(cdir):
    """{path relative to the campaign: (mtime_ns, bytes)} of every run record and log."""
    return {
        str(p.relative_to(cdir)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(cdir.glob("*/*/*-rep*.*"))
        if p.suffix in (".json", ".log")
    }


def missing_runs(cdir):
    """[(repetition, plan index)] of stage s1's runs not stored yet."""
    return [
        (rep, i)
        for rep in (1, 2)
        for i, c in enumerate(SWEEP_CONFIGS)
        if not store.record_path(cdir, "s1", c, "collectives", rep).is_file()
    ]


def task_lines(cdir, job):
    """{task index: the last line of the task's output (after its progress lines)} of one array job."""
    return {
        int(p.stem.split("_")[1]): p.read_text().strip().splitlines()[-1]
        for p in cdir.glob("s1/slurm-%s_*.out" % job)
    }


def written_order(cdir, rep):
    """Stage s1's stored records of one repetition, as plan indices in the order they were written."""
    recs = sorted(
        cdir.glob("s1/*/collectives-rep%d.json" % rep), key=lambda p: p.stat().st_mtime_ns
    )
    ids = [store.config_id(c) for c in SWEEP_CONFIGS]
    return [ids.index(p.parent.name) for p in recs]


def sweep_order(cdir, rep):
    """The order the local interleaved sweep measures repetition `rep` of stage s1 in."""
    return sweep.round_order(len(SWEEP_CONFIGS), cdir.name, "s1", rep)


@pytest.fixture(scope="module")
def array_swept(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep-array")
    (tmp / "space.yaml").write_text(SWEEP_SPACE)
    s = run_sweep(cluster, tmp)
    s.tmp = tmp
    s.cdir = next(iter(store.campaigns(tmp / "store")), None)
    return s


@needs_sweep
def test_sweep_stage_runs_as_a_job_array_one_task_per_repetition(cluster, array_swept):
    s, cdir = array_swept, array_swept.cdir
    ctx = s.context()
    assert s.returncode == 0 and cdir is not None, ctx
    assert "campaign %s complete; the job configuration:" % cdir in s.stdout, ctx
    # one sbatch --wait --array of every repetition, on a 1 x 2 allocation per task
    assert SUBMITTING.findall(s.stderr) == [
        (
            "2",
            "sbatch --wait --parsable --job-name %s --array 1,2 --nodes 1 "
            "--ntasks-per-node 2 --output %s/s1/slurm-%%A_%%a.out %s/s1/array.sh"
            % (SWEEP_JOB, cdir, cdir),
        )
    ], ctx
    (job,) = arrays(s.watcher)
    assert arrays(s.watcher)[job] == {"1": "COMPLETED", "2": "COMPLETED"}, ctx
    assert "sweep: array job %s ended (sbatch exit 0)" % job in s.stderr, ctx
    # the sweep waited: tasks ran while it was alive, and it ended after the last one
    assert any(("RUNNING", True) in states for states in s.watcher.seen.values()), ctx
    for rec in s.watcher.last.values():
        assert (rec["NumNodes"], rec["NumTasks"], rec["StdOut"]) == (
            "1",
            "2",
            "%s/s1/slurm-%s_%s.out" % (cdir, job, rec["ArrayTaskId"]),
        ), (rec, ctx)
    # task k measured repetition k of every configuration, in its own output file, interleaved in
    # the order the local sweep measures that repetition in (the records' write times show it)
    plan = json.loads((cdir / "s1" / "plan.json").read_text())
    assert [config for config, _ in plan] == SWEEP_CONFIGS
    outs = task_lines(cdir, job)
    assert outs == {k: "sweep-task: s1 rep %d: 4 run(s) measured" % k for k in (1, 2)}, outs
    for k in (1, 2):
        assert written_order(cdir, k) == sweep_order(cdir, k), ctx
    # one 1 x 2 task at a time on fewer than 4 CPUs: repetition 1 of every configuration before 2
    files = record_files(cdir)
    by_time = sorted((t, name) for name, (t, _) in files.items() if name.endswith(".json"))
    if cluster.cpus < 4:
        assert [name.endswith("-rep1.json") for _, name in by_time] == [True] * 4 + [False] * 4
    # every record, made on the job's 1 x 2 ranks
    _, records = store.load_campaign(cdir)
    assert sorted((r["config_id"], r["rep"]) for r in records) == sorted(
        (store.config_id(c), rep) for c in SWEEP_CONFIGS for rep in (1, 2)
    ), ctx
    for r in records:
        assert (r["nodes"], r["ppn"], r["status"], r["source"], r["run"]) == (
            1,
            2,
            "ok",
            "sweep",
            "collectives",
        ), r
        assert r["command"].startswith("mpirun -np 2 ") and r["env"]["TUNEDMPI_PPN"] == "2", r
    ucx = next(r for r in records if r["config"] == {"pml": "ucx"})
    assert ucx["exports"]["OMPI_MCA_pml"] == "ucx" and "UCX_TLS" not in ucx["exports"]
    # the campaign is complete: the stage's knobs and the job configuration after it are recorded
    meta = json.loads((cdir / "campaign.json").read_text())
    assert meta["finished"] and [(h["stage"], h["configurations"]) for h in meta["stages"]] == [
        ("s1", 4)
    ], meta
    assert meta["stages"][0]["knobs"] == ["pml", "ucx_tls"] and "job" in meta["stages"][0], meta


@needs_sweep
def test_array_tasks_measure_the_repetitions_the_sweep_was_given(cluster, tmp_path):
    """sweep --repetitions: the tasks (which load the space from its file again) measure the
    campaign's repetitions, not the file's."""
    (tmp_path / "space.yaml").write_text(
        SWEEP_SPACE.replace('      ucx_tls: [default, "self,sm"]\n', "")
    )
    s = run_sweep(cluster, tmp_path, "--repetitions", "3")
    (cdir,) = store.campaigns(tmp_path / "store")
    assert s.returncode == 0, s.context()
    meta = json.loads((cdir / "campaign.json").read_text())
    assert meta["repetitions"] == 3 and meta["finished"], meta
    file_digest = space.load_space(str(tmp_path / "space.yaml"), sites.load_named(SITE)).digest
    assert cdir.name != "%s-1x2-%s" % (SITE, file_digest), cdir  # a campaign of its own
    (job,) = arrays(s.watcher)
    outs = task_lines(cdir, job)
    assert outs == {k: "sweep-task: s1 rep %d: 2 run(s) measured" % k for k in (1, 2, 3)}, outs
    _, records = store.load_campaign(cdir)
    assert sorted(r["rep"] for r in records) == [1, 1, 2, 2, 3, 3]


@pytest.fixture(scope="module")
def cancelled(cluster, tmp_path_factory):
    """A sweep whose array is partly cancelled: while it runs the same command is started again
    (it must refuse); once task 1 (repetition 1) has finished and task 2 has stored its first
    record, the array is cancelled (task 2 killed while running). Then the same command is run
    again, to completion."""
    tmp = tmp_path_factory.mktemp("sweep-cancel")
    (tmp / "space.yaml").write_text(SWEEP_SPACE)
    st = {"cancelled": None, "concurrent": None, "plan": None}

    def during(watcher, proc):
        cdirs = store.campaigns(tmp / "store")
        if not cdirs or not watcher.last:
            return False
        cdir = cdirs[0]
        if st["concurrent"] is None:  # the array is queued or running: a second sweep must refuse
            st["plan"] = (cdir / "s1" / "plan.json").read_bytes()
            try:
                st["concurrent"] = subprocess.run(
                    sweep_cmd(tmp),
                    env=outside_env(cluster),
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
            except subprocess.TimeoutExpired as exc:  # it submitted a second array and waits for it
                st["concurrent"] = exc
            st["concurrent_plan"] = (cdir / "s1" / "plan.json").read_bytes()
        if list(cdir.glob("s1/*/collectives-rep2.json")):
            jobs = sorted(arrays(watcher), key=int)
            cluster.run(
                "scancel", *jobs
            )  # the first array (and a second one, had it been submitted)
            st["cancelled"] = jobs[0]
            return True
        return False

    first = run_sweep(cluster, tmp, during=during)
    first.cdir = store.campaigns(tmp / "store")[0]
    first.cancelled, first.concurrent, first.plan, first.concurrent_plan = (
        st["cancelled"],
        st["concurrent"],
        st["plan"],
        st.get("concurrent_plan"),
    )
    first.missing, first.stored = missing_runs(first.cdir), written_order(first.cdir, 2)
    first.files = record_files(first.cdir)
    first.meta = json.loads((first.cdir / "campaign.json").read_text())
    first.outs = {
        p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in first.cdir.glob("s1/slurm-*.out")
    }
    again = run_sweep(cluster, tmp)
    return first, again


@needs_sweep
def test_a_second_sweep_refuses_while_the_array_runs(cancelled):
    first, _ = cancelled
    c = first.concurrent
    assert isinstance(c, subprocess.CompletedProcess) and c.returncode == 2, (c, first.context())
    # the sweep that submitted the array holds the campaign's lock while it waits (docs/regenerate.md);
    # with that sweep gone, the queued array itself refuses a second one
    assert re.search(
        r"^sweep: array job (\d+) of stage s1 of this campaign is still queued or running; wait for it "
        r"to end \(squeue -j \1\) or scancel it, then rerun the same command$",
        c.stderr,
        re.M,
    ) or re.search(r"\.sweep\.lock: lock: campaign .* is in use by pid \d+ on ", c.stderr), c.stderr
    assert not SUBMITTING.search(c.stderr) and c.stdout == "", c
    assert first.concurrent_plan == first.plan  # plan.json not rewritten under the running tasks
    assert len(arrays(first.watcher)) == 1, first.context()  # no second array was submitted


@needs_sweep
def test_scancel_of_part_of_the_array_leaves_missing_runs_and_exit_2(cancelled):
    first, _ = cancelled
    cdir, ctx = first.cdir, first.context()
    assert first.cancelled, ctx
    assert first.returncode == 2, ctx
    assert arrays(first.watcher)[first.cancelled] == {"1": "COMPLETED", "2": "CANCELLED"}, ctx
    # task 1 finished; task 2 stored the first configuration(s) of its order and was killed
    order = sweep_order(cdir, 2)
    stored = first.stored
    assert 1 <= len(stored) < 4 and stored == order[: len(stored)], (stored, order, ctx)
    assert first.missing == [(2, i) for i in sorted(order[len(stored) :])], ctx
    assert sorted(first.outs) == [
        "slurm-%s_1.out" % first.cancelled,
        "slurm-%s_2.out" % first.cancelled,
    ], ctx
    # exit 2 with the message telling the user to rerun (runner.CannotRun -> cli.cmd_sweep)
    assert (
        "sweep: %d run(s) of %d configuration(s) of stage s1 are missing (e.g. %s rep 2) after array "
        "job %s (tasks cancelled, failed or killed; their output: %s/s1/slurm-%s_<task>.out); rerun "
        "the same command to finish them (finished runs are kept)"
        % (
            len(first.missing),
            len(first.missing),
            store.config_id(SWEEP_CONFIGS[first.missing[0][1]]),
            first.cancelled,
            cdir,
            first.cancelled,
        )
    ) in first.stderr.splitlines(), ctx
    assert "complete" not in first.stdout, ctx
    assert "finished" not in first.meta and first.meta["started"], first.meta


@needs_sweep
def test_rerun_after_scancel_submits_only_the_missing_repetitions(cancelled):
    first, again = cancelled
    cdir, ctx = first.cdir, again.context()
    assert again.returncode == 0, ctx
    assert "campaign %s complete; the job configuration:" % cdir in again.stdout, ctx
    # only the repetitions that miss runs are submitted: never task 1's, whose runs all finished
    ((n, cmd),) = SUBMITTING.findall(again.stderr)
    assert n == "1" and " --array 2 " in cmd, ctx
    (job,) = arrays(again.watcher)
    assert job != first.cancelled and arrays(again.watcher)[job] == {"2": "COMPLETED"}, ctx
    assert task_lines(cdir, job) == {
        2: "sweep-task: s1 rep 2: %d run(s) measured" % len(first.missing)
    }, ctx
    # no finished result was touched: same bytes, same mtime; the missing ones exist now, made
    # after the kept ones in the same order
    now = record_files(cdir)
    assert {k: now.get(k) for k in first.files} == first.files, ctx
    assert len(first.files) == 2 * (8 - len(first.missing)) and len(now) == 2 * 8, sorted(now)
    assert missing_runs(cdir) == [] and written_order(cdir, 2) == sweep_order(cdir, 2)
    assert {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in cdir.glob("s1/slurm-%s_*.out" % first.cancelled)
    } == first.outs
    _, records = store.load_campaign(cdir)
    assert len(records) == 8 and all(
        (r["nodes"], r["ppn"], r["status"]) == (1, 2, "ok") for r in records
    ), ctx
    meta = json.loads((cdir / "campaign.json").read_text())
    assert meta["finished"] and meta["stages"][0]["configurations"] == 4, meta


def test_sweep_array_refused_by_sbatch_is_exit_2(cluster, tmp_path):
    """A job Slurm will not take: sbatch's message and exit 2, not "runs missing, rerun"."""
    (tmp_path / "space.yaml").write_text(SWEEP_SPACE)
    s = run_sweep(cluster, tmp_path, "--sbatch-args=--partition=nosuchpartition", timeout=60)
    assert s.returncode == 2, s.context()
    assert (
        "sweep: sbatch did not submit the array job (exit 1): sbatch: error: invalid partition specified: "
        "nosuchpartition"
    ) in s.stderr.splitlines(), s.context()
    assert "rerun" not in s.stderr and s.watcher.seen == {}, s.context()
    (cdir,) = store.campaigns(tmp_path / "store")
    assert record_files(cdir) == {} and not list(cdir.glob("s1/slurm-*.out"))


@pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)")
def test_a_module_loaded_at_login_is_re_selected_in_the_job(cluster, hello):
    """The job's geometry at launch (selector.SEEN): sbatch exports the login shell, module and
    all; the job's mpirun re-selects for itself in one line; `module reload` selects the job's row
    in the job's shell, and then mpirun is silent."""
    login = lmod.shell(
        [ROOT / "modulefiles" / SITE], "module load %s >/dev/null 2>&1 && env -0" % MODULE
    )
    assert login.returncode == 0, login.stderr
    env = dict(item.split("=", 1) for item in login.stdout.split("\0") if "=" in item)
    assert "source=default" in env["TUNEDMPI_SELECTION"]
    script = "\n".join(
        [
            "#!/bin/bash",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "mpirun %s 2>&1 | sed 's/^/@@RUN /'" % shlex.quote(str(hello)),
            "source %s" % lmod.LMOD_INIT,
            "module reload >/dev/null 2>&1",
            'echo "@@RELOADED $TUNEDMPI_SELECTION"',
            "mpirun %s 2>&1 | sed 's/^/@@AGAIN /'" % shlex.quote(str(hello)),
            "",
        ]
    )
    job_id, state, out = cluster.sbatch(script, "-N1", "--ntasks-per-node=1", env=env, timeout=60)
    context = "job %s %s:\n%s\n%s" % (job_id, state, out, cluster.diagnostics())
    assert state == "COMPLETED", context
    said = [line for line in out.splitlines() if "re-selected for this job" in line]
    assert len(said) == 1 and "was loaded for " in said[0], context
    assert "source=default" in said[0] and " source=slurm " in said[0], context
    assert "@@RUN @@RANK 0 SIZE 1" in out, context  # and the real mpirun ran
    assert " nodes=1 ppn=1 source=slurm " in out.split("@@RELOADED", 1)[1].split("\n")[0] + " "
    again = [line for line in out.splitlines() if line.startswith("@@AGAIN ")]
    assert again and not any("module reload" in line for line in again), context
