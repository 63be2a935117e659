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
SELECTION = re.compile(r"nodes=(\d+) ppn=(\d+) source=\S+ row=(\d+x\d+) match=(\w+)")


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


def script(trace, launch):
    return "\n".join(
        [
            "#!/bin/bash",
            "set -e",
            "source %s" % lmod.LMOD_INIT,
            "module use %s" % shlex.quote(str(ROOT / "modulefiles" / "local")),
            "module load openmpi-tuned/5.0.8",
            'echo "@@SELECTION $TUNEDMPI_SELECTION"',
            # the site's trace: the job says in its comment that it loaded the tuned module
            'scontrol update JobId=$SLURM_JOB_ID Comment="TUNEDMPI_ROW=$TUNEDMPI_ROW"'
            if trace
            else "",
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
]


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


def test_coverage_reports_each_jobs_row_match_and_node_hours(accounted, tmp_path):
    c = accounted
    want = {}  # (nodes, ppn) -> [row, match, node-seconds, untuned node-seconds, steps]
    done = []
    for args, trace, step in JOBS:
        job_id, state, out = c.sbatch(
            script(trace, "srun sleep 2" if step else "sleep 2"), *args, timeout=120
        )
        assert state == "COMPLETED", (job_id, out, c.diagnostics())
        m = SELECTION.search(out)
        assert m, out
        done.append((job_id, m, trace, step))
    # the job records reach slurmdbd after the jobs end: wait until sacct has every one complete
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = {job_id: sacct_rows(c, job_id) for job_id, _, _, _ in done}
        if all(r.get(j, [None] * 3)[2] == "COMPLETED" for j, r in records.items()):
            break
        time.sleep(1)
    for job_id, m, trace, step in done:
        nodes, seconds = records[job_id][job_id + ".0" if step else job_id][:2]
        key = (int(m.group(1)), int(m.group(2)))
        entry = want.setdefault(key, [m.group(3), m.group(4), 0, 0, 0])
        assert entry[:2] == [m.group(3), m.group(4)]
        entry[2] += int(nodes) * int(seconds)
        entry[3] += 0 if trace else int(nodes) * int(seconds)
        entry[4] += 1
    assert {k: v[1] for k, v in want.items()} == {
        (2, 1): "exact",
        (1, 2): "exact",
        (1, 1): "extrapolated",
        (2, 2): "extrapolated",
    }, want  # the module's own choices (a check of the job mix, not of coverage)

    cmd = [str(TUNEDMPI), "coverage", "--site", "local", "--comment-trace"]
    cmd += ["--since", "now-1hour", "--out", str(tmp_path)]
    proc = c.run(*cmd, timeout=120, check=False)  # on the login host, as an admin would
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "coverage.csv", newline="", encoding="utf-8") as fh:
        got = {
            (int(r["nodes"]), int(r["ppn"])): [r["row"], r["match"]]
            + [int(r["node_seconds"]), int(r["untuned_node_seconds"]), int(r["steps"])]
            for r in csv.DictReader(fh)
        }
    assert got == want, proc.stdout
    assert "Skipped lines" not in proc.stdout, proc.stdout
