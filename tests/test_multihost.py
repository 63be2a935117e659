"""Several nodes on one machine (tools/slurmcluster.py, hosts=2): two hosts made of network + UTS +
mount namespaces, each with its own hostname, address and slurmd, under one slurmctld on a login
host. An `sbatch -N2` job spans both; mpirun inside it starts ranks on both and Open MPI treats them
as two nodes (shared memory cannot reach the other host, TCP can); the tuned module reads the
2-node geometry from the job's real SLURM_*; `validate/run.sh --rows all --submit` (its 2x1 row is
`--submit --nodes 2 --ppn 1`) and `tunedmpi sweep --slurm-array --nodes 2 --ppn 1` run across the
hosts. After stop (or `down` after the caller died) no namespace, daemon or interface is left."""

import json
import os
import subprocess
import sys

import pytest

import lmod
import slurmcluster as slurm
from conftest import ROOT, VERDICT_EXITS, assert_verdict
from test_slurm import (
    MODULE,
    SITE,
    Watcher,
    build_mpi_program,
    hello,  # noqa: F401 (a fixture)
    job_script,
    parse,
    pid_alive,
    watched,
)
from tunedmpi.bench import store
from tunedmpi.modules import explain, sites

HOSTS = 2
pytestmark = [
    pytest.mark.skipif(
        bool(slurm.missing(HOSTS)),
        reason="Slurm/munge/iproute2 not installed (%s): apt-get install %s %s"
        % (" ".join(slurm.missing(HOSTS)), slurm.APT_PACKAGES, slurm.APT_PACKAGES_HOSTS),
    ),
    pytest.mark.skipif(bool(slurm.cannot_make_hosts()), reason=slurm.cannot_make_hosts() or "-"),
]
needs_mpi = pytest.mark.skipif(
    not (lmod.available() and (ROOT / ".venv/bin/mpicc").exists()),
    reason="needs Lmod (apt-get install lmod) and the Open MPI wheel (make)",
)
TUNEDMPI = ROOT / ".venv" / "bin" / "tunedmpi"
MPIRUN = ROOT / ".venv" / "bin" / "mpirun"


def root_links():
    """The interfaces of this machine's own network namespace."""
    out = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    links = root_links()
    c = slurm.start(tmp_path_factory.mktemp("hosts"), hosts=HOSTS)
    pids = c.pids
    yield c
    c.stop()
    assert [n for n, pid in pids.items() if pid_alive(pid)] == [], pids
    assert not set(c.netns) & set(slurm.namespaces())
    assert root_links() == links


def on(cluster, host, *argv):
    return subprocess.run(
        cluster.on(host, list(argv)), capture_output=True, text=True, timeout=30, check=True
    ).stdout


def test_two_idle_hosts_with_their_own_names_and_addresses(cluster):
    assert cluster.node_states() == {n: "idle" for n in cluster.nodes}, cluster.diagnostics()
    assert len(cluster.nodes) == HOSTS and cluster.startup_seconds < 60
    for node in cluster.nodes:
        assert on(cluster, node, "hostname").strip() == node
        addrs = on(cluster, node, "ip", "-4", "-o", "addr", "show").split()
        assert cluster.addrs[node] + "/24" in addrs
    # each host has its own core(s): two nodes do not share a core when the machine has enough
    if len(os.sched_getaffinity(0)) >= HOSTS:
        cores = [cluster.cores[n] for n in cluster.nodes]
        assert all(cores) and not set(cores[0]) & set(cores[1])
    # the machine's own namespace got nothing: no bridge, no veth end
    assert not [link for link in root_links() if link.startswith(("tmveth", "br0", "p1", "p2"))]


def test_no_route_leads_out_of_the_hosts(cluster):
    node = cluster.nodes[0]
    routes = on(cluster, node, "ip", "-4", "route", "show").strip().splitlines()
    assert routes == [
        "%s.0/24 dev eth0 proto kernel scope link src %s" % (slurm.SUBNET, cluster.addrs[node])
    ], routes
    # an address outside the private network is unreachable, not merely silent
    probe = (
        "import socket\ns = socket.socket()\ns.settimeout(5)\n"
        "try:\n    s.connect(('192.0.2.1', 9))\nexcept OSError as e:\n    print(e.errno)\n"
    )
    import errno

    assert on(cluster, node, sys.executable, "-c", probe).strip() == str(errno.ENETUNREACH)


TALK_C = r"""
#include <mpi.h>
#include <stdio.h>
/* Every rank sends to every other: a transport that cannot reach a peer fails here (connections
   are made on first use, so a program that only calls MPI_Init would not notice). */
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="module")
def talk(tmp_path_factory):
    return build_mpi_program(tmp_path_factory, "talk", TALK_C)


MULTI = "\n".join(
    [
        "echo @@HOST $(hostname)",
        "M=%s" % MPIRUN,
        "for v in 'ob1 self,sm' 'ob1 self,tcp'; do set -- $v",
        '  $M --mca pml $1 --mca btl $2 %(hello)s >/dev/null 2>&1 && echo "@@TRANSPORT pml=$1 btl=$2 ok" '
        '|| echo "@@TRANSPORT pml=$1 btl=$2 failed"',
        "done",
        "for tls in sm,self tcp,self; do",
        "  UCX_TLS=$tls $M --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any "
        "-x UCX_TLS %(hello)s >/dev/null 2>&1 "
        '&& echo "@@TRANSPORT pml=ucx UCX_TLS=$tls ok" || echo "@@TRANSPORT pml=ucx UCX_TLS=$tls failed"',
        "done",
        "",
    ]
)


@needs_mpi
def test_a_two_node_job_spans_both_hosts_and_the_module_reads_its_geometry(cluster, hello):  # noqa: F811 (the fixture)
    script = job_script(hello, pre="echo @@BATCHHOST $(hostname)")
    job_id, state, out = cluster.sbatch(script, "-N2", "--ntasks-per-node=1", timeout=120)
    context = "job %s %s:\n%s\n%s" % (job_id, state, out, cluster.diagnostics())
    assert state == "COMPLETED", context
    job_env, sel, mpirun, ranks = parse(out)
    assert job_env["SLURM_JOB_NUM_NODES"] == "2" and job_env["SLURM_TASKS_PER_NODE"] == "1(x2)", (
        context
    )
    assert "@@BATCHHOST %s" % cluster.nodes[0] in out, context
    # the module's selection: 2 nodes x 1 ppn from Slurm, equal to the Python twin fed the real env
    assert " nodes=2 ppn=1 source=slurm " in sel + " ", context
    assert sel == explain.select(sites.load_named(SITE), job_env)["selection"], context
    # mpirun without -np started one rank on each host
    assert sorted((r, s, h) for r, s, h in ranks) == [
        (0, 2, cluster.nodes[0]),
        (1, 2, cluster.nodes[1]),
    ], context


@needs_mpi
def test_ranks_on_different_hosts_talk_over_tcp_not_shared_memory(cluster, talk):
    job_id, state, out = cluster.sbatch(
        "#!/bin/bash\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
        + MULTI % {"hello": talk},
        "-N2",
        "--ntasks-per-node=1",
        timeout=180,
    )
    context = "job %s %s:\n%s" % (job_id, state, out)
    found = sorted(
        line.split(None, 1)[1] for line in out.splitlines() if line.startswith("@@TRANSPORT ")
    )
    # Open MPI (ob1's btl sm) and UCX (its sm transports) both see another node: shared memory
    # cannot reach the peer and the job aborts; TCP can
    assert found == sorted(
        [
            "pml=ob1 btl=self,sm failed",
            "pml=ob1 btl=self,tcp ok",
            "pml=ucx UCX_TLS=sm,self failed",
            "pml=ucx UCX_TLS=tcp,self ok",
        ]
    ), context


@needs_mpi
def test_a_login_loaded_modules_two_node_job_runs_with_the_jobs_row(cluster, talk):
    """Issue 50: `module load` on the login host (the 1x2 row: UCX over shared memory only), then
    `sbatch -N2`: the launch check re-selects for the job (the 2x1 row) and says so in one line;
    the ranks on both hosts reach each other (MPI_Allreduce) instead of aborting."""
    login = lmod.shell(
        [ROOT / "modulefiles" / SITE],
        "module load %s >/dev/null 2>&1 && env -0" % MODULE,
        PATH="%s:%s" % (cluster.env()["PATH"], MPIRUN.parent),
    )
    env = dict(kv.split("=", 1) for kv in login.stdout.split("\0") if "=" in kv)
    assert "row=1x2" in env["TUNEDMPI_SELECTION"] and env["UCX_TLS"] == "self,posix", login.stderr
    env["SLURM_CONF"] = cluster.env()["SLURM_CONF"]
    script = "\n".join(
        [
            "#!/bin/sh",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "mpirun sh -c 'echo \"@@RANKENV $(hostname) UCX_TLS=${UCX_TLS-unset} $TUNEDMPI_SELECTION\"'",
            "mpirun %s && echo @@TALK ok" % talk,
            "",
        ]
    )
    job_id, state, out = cluster.sbatch(script, "-N2", "--ntasks-per-node=1", env=env, timeout=180)
    context = "job %s %s:\n%s" % (job_id, state, out)
    assert state == "COMPLETED" and "@@TALK ok" in out, context
    job = explain.select(
        sites.load_named(SITE), {"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "1"}
    )["selection"]
    assert "row=2x1" in job, job
    ranks = sorted(line.split(" ", 2)[1:] for line in out.splitlines() if "@@RANKENV" in line)
    assert ranks == [[n, "UCX_TLS=unset " + job] for n in cluster.nodes], context
    said = [line for line in out.splitlines() if "re-selected for this job" in line]
    assert len(said) == 2 and all(job in line for line in said), context  # one per mpirun
    assert "run 'module reload'" not in out and "unreachable" not in out, context


SPACE = """schema: 1
benchmarks: [allreduce]
set: short
repetitions: 2
stages:
  - name: s1
    knobs:
      btl_tcp_eager_limit: [default, 16kb]
"""


@needs_mpi
def test_sweep_array_tasks_span_the_hosts(cluster, tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    argv = [
        str(TUNEDMPI),
        "sweep",
        "--site",
        SITE,
        "--space",
        str(tmp_path / "space.yaml"),
        "--store",
        str(tmp_path / "store"),
        "--slurm-array",
        "--nodes",
        "2",
        "--ppn",
        "1",
    ]
    s = watched(
        cluster,
        Watcher(cluster, name="tunedmpi-sweep-s1", scripts=False),
        cluster.client(argv),
        tmp_path,
        timeout=400,
    )
    ctx = s.context()
    assert s.returncode == 0, ctx
    for rec in s.watcher.last.values():
        assert (rec["NumNodes"], rec["NumTasks"], rec["JobState"]) == ("2", "2", "COMPLETED"), (
            rec,
            ctx,
        )
        assert rec["NodeList"] == "%sn[1-2]" % cluster.tag, (rec, ctx)
    (cdir,) = store.campaigns(tmp_path / "store")
    recs = [json.loads(p.read_text()) for p in sorted(cdir.glob("s1/*/*-rep*.json"))]
    assert len(recs) == 4 and {(r["nodes"], r["ppn"]) for r in recs} == {(2, 1)}, recs[:1]


def test_down_after_the_caller_died_leaves_nothing_and_up_again_reuses_the_directory(tmp_path):
    """`up` in a process that then exits (as a crashed test or a closed terminal leaves it): `down`
    from another process stops every daemon and removes every namespace."""
    links = root_links()
    tool = [sys.executable, str(ROOT / "tools" / "slurmcluster.py")]
    up = subprocess.run(
        tool + ["up", "--hosts", "2", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((tmp_path / slurm.STATE_FILE).read_text())
    assert sorted(state["pids"]) == ["munged", "slurmctld"] + [
        "slurmd@" + n for n in state["nodes"]
    ]
    assert all(pid_alive(pid) for pid in state["pids"].values())
    assert set(state["netns"]) <= set(slurm.namespaces())
    down = subprocess.run(
        tool + ["down", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert down.returncode == 0 and "nothing left" in down.stdout, down.stdout + down.stderr
    assert [n for n, pid in state["pids"].items() if pid_alive(pid)] == []
    assert not set(state["netns"]) & set(slurm.namespaces())
    assert root_links() == links and not (tmp_path / slurm.STATE_FILE).exists()
    # `make cluster-down` then `make cluster-up` use the same directory: the stopped cluster's
    # files (its munge key above all) must not stop the new one
    again = subprocess.run(
        tool + ["up", "--hosts", "2", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    down = subprocess.run(
        tool + ["down", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert down.returncode == 0 and "nothing left" in down.stdout, down.stdout + down.stderr


@needs_mpi
def test_validate_rows_submit_runs_each_row_on_its_own_geometry(cluster, tmp_path):
    """validate --rows all --submit (issue 40 item 4) on the two hosts with the local table's rows:
    each row its own job of its geometry. 2x1 runs across both hosts (its job is validate --submit
    --nodes 2 --ppn 1: the one real 2-host campaign here, its placement and report checked too);
    1x2 needs 2 CPUs on one host, which a 2-core machine split into 2 hosts has not, so Slurm
    refuses it and that row could not run: one summary, the worst row's exit code, 2."""
    from tunedmpi.acceptance import rows

    out = tmp_path / "results"
    argv = [str(ROOT / "validate" / "run.sh"), "--rows", "all", "--submit", "--short"]
    argv += ["--repetitions", "3", "--no-extend", "--benchmarks", "allreduce", "--out", str(out)]
    s = watched(cluster, Watcher(cluster), cluster.client(argv), tmp_path, timeout=600)
    ctx = s.context()
    (campaign,) = out.glob("local-rows-*")
    doc = json.loads((campaign / "results-rows.json").read_text())
    one, two = doc["rows"]
    assert (one["row"], two["row"]) == ("1x2", "2x1"), ctx
    assert s.returncode == doc["exit_code"] == rows.worst([one["exit_code"], two["exit_code"]])
    if cluster.cpus < 2:
        assert one["exit_code"] == 2 and "sbatch did not submit the job" in one["reason"], ctx
    assert two["exit_code"] in VERDICT_EXITS, (two, ctx)
    res = json.loads((campaign / two["dir"] / "results.json").read_text())
    assert_verdict(two["exit_code"], res, ctx)
    # the job gets --nodes/--ppn as given (source explicit); they must fit its allocation
    assert res["geometry"] == {"nodes": 2, "ppn": 1, "np": 2, "source": "explicit"}, ctx
    assert res["set"] == "short" and {x["status"] for x in res["runs"]} == {"ok"}, ctx
    both = sorted(cluster.nodes)
    for role in ("baseline", "tuned"):
        assert res["placement"][role] == {"collectives": both, "one_sided": both}, res["placement"]
    report = (campaign / two["dir"] / "report.md").read_text()
    assert "| hosts, tuned, collectives | %s (1), %s (1) |" % tuple(both) in report, report[:3000]
    summary = (campaign / "summary.md").read_text()
    assert "| row | allreduce <=1KB | allreduce 1KB-64KB |" in summary, summary
    assert "| 2x1 | " in summary and (campaign / "rows-heatmap.png").is_file()


def test_shared_cores_give_each_host_every_core(tmp_path):
    """`up --shared-cores` (make cluster-up SHARED_CORES=1): each host has all of this machine's
    cores, so a 2-core machine can hold a row of 2 ranks on one host (the local table's 1x2)."""
    cores = sorted(os.sched_getaffinity(0))
    shared = slurm.Cluster(tmp_path, hosts=2, shared_cores=True)
    assert shared.cpus == len(cores) and list(shared.cores.values()) == [cores, cores]
    split = slurm.Cluster(tmp_path, hosts=2)
    if len(cores) >= 2:
        assert split.cpus == len(cores) // 2 and not set(split.cores[split.nodes[0]]) & set(
            split.cores[split.nodes[1]]
        )
