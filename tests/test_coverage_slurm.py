"""`tunedmpi coverage` against real Slurm accounting (issue 47): two namespace hosts
(tools/slurmcluster.py) with slurmdbd on a MariaDB of the cluster's own, started once per session.
Jobs of several geometries and two partitions load the tuned module and record what it selected
(TUNEDMPI_SELECTION); most also leave the trace in their comment. `coverage` must report each
geometry's row, match kind and node-seconds exactly as the module chose and as sacct measured."""

import csv
import re
import shlex
import time

import pytest

import lmod
import slurmcluster as slurm
from conftest import ROOT
from test_modules_conformance import two_partitions
from tunedmpi import files
from tunedmpi.regenerate import coverage

HOSTS = 2
pytestmark = [
    pytest.mark.skipif(
        bool(slurm.missing(HOSTS, accounting=True)),
        reason="Slurm accounting not installed (%s): apt-get install --no-install-recommends %s %s %s"
        % (
            " ".join(slurm.missing(HOSTS, accounting=True)),
            slurm.APT_PACKAGES,
            slurm.APT_PACKAGES_HOSTS,
            slurm.APT_PACKAGES_ACCOUNTING,
        ),
    ),
    pytest.mark.skipif(bool(slurm.cannot_make_hosts()), reason=slurm.cannot_make_hosts() or "-"),
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
]
TUNEDMPI = ROOT / ".venv" / "bin" / "tunedmpi"
SELECTION = re.compile(
    r"@@SELECTION (\S+) site=\S+(?: node_type=(\w+):\w+)? nodes=(\d+) ppn=(\d+) source=\S+ "
    r"row=(\d+x\d+) match=(\w+)"
)


@pytest.fixture(scope="session")
def accounted(tmp_path_factory):
    """A two-host cluster (each host all cores: 2-rank nodes) with accounting and a second partition."""
    c = slurm.start(
        tmp_path_factory.mktemp("accounted"),
        hosts=HOSTS,
        shared_cores=True,
        accounting=True,
        partitions=["large"],
    )
    yield c
    c.stop()


def script(trace, launch, two_partitions):
    """Load the local site's tuned module (its selection, the trace), then the two-partition
    site's (its selection), then launch."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -e",
            "source %s" % lmod.LMOD_INIT,
            "module use %s" % shlex.quote(str(ROOT / "modulefiles" / "local")),
            "module load openmpi-tuned/5.0.8",
            'echo "@@SELECTION local $TUNEDMPI_SELECTION"',
            # the site's trace: the job says in its comment that it loaded the tuned module
            'scontrol update JobId=$SLURM_JOB_ID Comment="TUNEDMPI_ROW=$TUNEDMPI_ROW"'
            if trace
            else "",
            "module purge",
            "module use %s" % shlex.quote(str(two_partitions)),
            "module load openmpi-tuned/5.0.6",
            'echo "@@SELECTION two-partitions $TUNEDMPI_SELECTION"',
            launch,
            "",
        ]
    )


# (sbatch args, comment trace, an srun step or not: an mpirun job is its allocation)
JOBS = [
    (["-N2", "--ntasks-per-node=1", "-p", "large"], True, True),  # 2x1: exact
    (["-N1", "--ntasks-per-node=2"], True, True),  # 1x2: exact
    (["-N1", "-n1", "-c2"], True, True),  # 1x1, 2 threads: extrapolated to 1x2
    (["-N2", "--ntasks-per-node=2", "-p", "large"], True, True),  # 2x2: extrapolated to 2x1
    (["-N2", "--ntasks-per-node=1"], False, True),  # 2x1 without the trace: untuned
    (["-N1", "--ntasks-per-node=2", "-p", "large"], True, False),  # no srun step: 1x2 assumed
    # mpirun across both hosts: its daemons are a `prted` srun step, the job counts as 2x1 assumed
    (["-N2", "--ntasks-per-node=1"], True, "mpirun"),
]
LAUNCH = {
    True: "srun sleep 2",
    False: "sleep 2",
    "mpirun": "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s sleep 2"
    % (ROOT / ".venv" / "bin" / "mpirun"),
}


def sacct_rows(cluster, job_id):
    out = cluster.run(
        "sacct",
        "-j",
        job_id,
        "--parsable2",
        "--noheader",
        "--format=JobIDRaw,NNodes,ElapsedRaw,State",
    ).stdout
    return {f[0]: f[1:] for f in (line.split("|") for line in out.splitlines())}


def complete(job_id, step, rows):
    """Whether sacct has the job's record complete and, for a job with a step, the step's too
    (slurmctld sends them to slurmdbd one by one: the step's can come after the job's; mpirun's
    `prted` step may end COMPLETED or CANCELLED, but not before its record says it ended)."""
    done = rows.get(job_id, [None] * 3)[2] == "COMPLETED"
    state = rows.get(job_id + ".0", [None] * 3)[2]
    if step is True:
        return done and state == "COMPLETED"
    return done and (step != "mpirun" or (state or "-").split()[0] in slurm.TERMINAL)


@pytest.fixture(scope="module")
def ran(accounted, tmp_path_factory):
    """JOBS run on the cluster, once: [(job id, {site: selection match}, trace, node-seconds)],
    node-seconds from sacct (the step's, or the allocation's for a job without one)."""
    c = accounted
    site, mpaths, _, _ = two_partitions(tmp_path_factory.mktemp("two-partitions"), "lua")
    submitted = [  # all at once: Slurm runs side by side what fits, as on a real cluster
        (c.sbatch(script(trace, LAUNCH[step], mpaths[0]), *args, wait=False)[0], trace, step)
        for args, trace, step in JOBS
    ]
    done = []
    for job_id, trace, step in submitted:
        state, out = c.wait(job_id, timeout=300)
        assert state == "COMPLETED", (job_id, out, c.diagnostics())
        found = {m.group(1): m for m in SELECTION.finditer(out)}
        assert sorted(found) == ["local", "two-partitions"], out
        done.append((job_id, found, trace, step))
    # the job records reach slurmdbd after the jobs end: wait until sacct has every one complete
    deadline = time.monotonic() + 180  # a loaded machine (make test runs this beside other files)
    while time.monotonic() < deadline:
        records = {job_id: sacct_rows(c, job_id) for job_id, _, _, _ in done}
        if all(complete(job_id, step, records[job_id]) for job_id, _, _, step in done):
            break
        time.sleep(1)
    out = []
    for job_id, found, trace, step in done:
        nodes, seconds = records[job_id][job_id + ".0" if step is True else job_id][:2]
        if step == "mpirun":  # the daemons' step is there, named prted
            assert records[job_id][job_id + ".0"][0] == "1", records[job_id]
        out.append((job_id, found, trace, int(nodes) * int(seconds)))
    return site, out


def expected(ran_jobs, name):
    """{(node type, nodes, ppn): [row, match, node-seconds, untuned node-seconds, steps]} from what
    the module selected in each job."""
    want = {}
    for _, found, trace, node_seconds in ran_jobs:
        m = found[name]
        key = (m.group(2) or "", int(m.group(3)), int(m.group(4)))
        entry = want.setdefault(key, [m.group(5), m.group(6), 0, 0, 0])
        assert entry[:2] == [m.group(5), m.group(6)], (key, entry, m.group(0))
        entry[2] += node_seconds
        entry[3] += 0 if trace else node_seconds
        entry[4] += 1
    return want


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return {
            (r["node_type"], int(r["nodes"]), int(r["ppn"])): [r["row"], r["match"]]
            + [int(r["node_seconds"]), int(r["untuned_node_seconds"]), int(r["steps"])]
            for r in csv.DictReader(fh)
        }


def test_coverage_reports_each_jobs_row_match_and_node_hours(accounted, ran, tmp_path):
    want = expected(ran[1], "local")
    assert {k: v[1] for k, v in want.items()} == {
        ("", 2, 1): "exact",
        ("", 1, 2): "exact",
        ("", 1, 1): "extrapolated",
        ("", 2, 2): "extrapolated",
    }, want  # the module's own choices: a check of the job mix, not of coverage
    cmd = [str(TUNEDMPI), "coverage", "--site", "local", "--comment-trace"]
    cmd += ["--since", "now-1hour", "--out", str(tmp_path)]
    proc = accounted.run(*cmd, timeout=120, check=False)  # on the login host, as an admin would
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read_csv(tmp_path / "coverage.csv") == want, (  # the message runs sacct only on failure
        proc.stdout + accounted.run(*coverage.sacct_command("now-1hour", "now")).stdout
    )
    assert "Skipped lines" not in proc.stdout, proc.stdout


def test_a_saved_sacct_file_maps_partitions_to_node_types(accounted, ran, tmp_path):
    site, jobs = ran
    want = expected(jobs, "two-partitions")
    assert {k[0] for k in want} == {"cpu", "large"}, want
    saved = tmp_path / "jobs.txt"
    argv = coverage.sacct_command("now-1hour", "now")
    saved.write_text(accounted.run(*argv, timeout=60).stdout)
    cov = coverage.coverage(site, files.read_chunks(saved), True, str(tmp_path / "none"), "file")
    coverage.write(cov, tmp_path / "out")
    assert read_csv(tmp_path / "out" / "coverage.csv") == want, saved.read_text()
    assert not cov.skipped
