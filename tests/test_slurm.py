"""Against a real one-node Slurm (tests/slurm.py): inside `sbatch` the tuned module reads the job
geometry Slurm really sets, and Open MPI's mpirun starts exactly the allocation's processes."""
import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

import lmod
import slurm
from conftest import ROOT
from tunedmpi import explain, sites

pytestmark = pytest.mark.skipif(bool(slurm.missing()), reason="Slurm/munge not installed (%s): apt-get "
                                "install %s" % (" ".join(slurm.missing()), slurm.APT_PACKAGES))

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


@pytest.fixture(scope="session")
def hello(tmp_path_factory):
    """A tiny MPI program built with the wheel's mpicc: prints rank, size and host."""
    d = tmp_path_factory.mktemp("hello")
    (d / "hello.c").write_text(HELLO_C)
    subprocess.run([str(ROOT / ".venv" / "bin" / "mpicc"), "-o", str(d / "hello"), str(d / "hello.c")],
                   check=True, capture_output=True, timeout=120)
    return d / "hello"


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def job_script(hello_path, pre=""):
    return "\n".join([
        "#!/bin/bash",
        "set -e",
        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # jobs run as root here",
        pre,
        "env | grep '^SLURM_' | sed 's/^/@@ENV /'",
        "source %s" % lmod.LMOD_INIT,
        "module use %s" % shlex.quote(str(ROOT / "modulefiles" / SITE)),
        "module load %s" % MODULE,
        'echo "@@SELECTION $TUNEDMPI_SELECTION"',
        'echo "@@MPIRUN $(command -v mpirun)"',
        "mpirun %s  # no -np: the process count must come from the allocation" % shlex.quote(str(hello_path)),
        ""])


def parse(out):
    job_env, ranks, sel, mpirun = {}, [], None, None
    for line in out.splitlines():
        if line.startswith("@@ENV "):
            k, _, v = line[6:].partition("=")
            job_env[k] = v
        elif line.startswith("@@SELECTION "):
            sel = line[len("@@SELECTION "):]
        elif line.startswith("@@MPIRUN "):
            mpirun = line[len("@@MPIRUN "):]
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
    "ntasks-per-node=2": (["-N1", "--ntasks-per-node=2"], {}, 1, 2, "slurm", 2,
                          {"SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2"}),
    # --ntasks only: no SLURM_NTASKS_PER_NODE; the module must use SLURM_TASKS_PER_NODE/SLURM_NTASKS
    # (ppn 1 also differs from the site default 1x2, and mpirun starts 1 process on 2 cores)
    "ntasks=1": (["-N1", "--ntasks=1"], {}, 1, 1, "slurm", 1,
                 {"SLURM_NTASKS_PER_NODE": None, "SLURM_TASKS_PER_NODE": "1", "SLURM_NTASKS": "1"}),
    # an explicit TUNEDMPI_PPN beats Slurm's ppn in the module, but not the allocation in mpirun
    "explicit-ppn": (["-N1", "--ntasks-per-node=2"], {"TUNEDMPI_PPN": "1"}, 1, 1, "explicit+slurm", 2,
                     {"SLURM_NTASKS_PER_NODE": "2"}),
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
