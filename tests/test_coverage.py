"""`tunedmpi coverage` on saved sacct output (issue 47): the committed sample's node-hours per
geometry, row and match kind, its bad lines skipped and counted; hostile files (a 100 MB one,
unicode, huge numbers, a line without end) in bounded memory and without a traceback; no
accounting at all is one line, exit 2. The real slurmdbd + MariaDB: tests/test_coverage_slurm.py."""

import csv
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT
from tunedmpi.modules import sites
from tunedmpi.regenerate import coverage, plan, space

SAMPLE = FIXTURES / "sacct" / "sample.txt"
TWO_PARTITIONS = FIXTURES / "sites" / "two-partitions" / "site.yaml"


def rows_of(out):
    with open(out / "coverage.csv", newline="", encoding="utf-8") as fh:
        return [
            (r["node_type"], int(r["nodes"]), int(r["ppn"]), r["row"], r["match"])
            + (int(r["node_seconds"]), int(r["untuned_node_seconds"]), int(r["steps"]))
            for r in csv.DictReader(fh)
        ]


def local_runs():
    """The local space's runs as `sweep --plan` prints them (its total line)."""
    site = sites.load_named("local")
    sp = space.load_space(str(ROOT / "site-configs" / "local" / "space.yaml"), site)
    laid = plan.sweep_plan(site, sp, 1, 2, "/nonexistent", "/nonexistent")
    total = plan.describe(laid, site, 1, 2)[-1]
    return int(total.split()[1])


def test_the_sample_per_geometry_row_and_match(run_cli, tmp_path):
    code, out, err = run_cli(
        "coverage", "--site", "local", "--sacct-file", SAMPLE, "--comment-trace", "--out", tmp_path
    )
    assert code == 0, err
    # by hand: 101.0 srun 1 node 2 tasks (traced); 102 mpirun (prted step) 4 nodes 8 CPUs, no trace;
    # 103.0 2 nodes 2 tasks (traced); 104.0 1 task of 2 CPUs (traced: "|" in the comment);
    # 106 no srun step, 2 CPUs, no trace, a unicode partition (no partition rule on local)
    assert rows_of(tmp_path) == [
        ("", 4, 2, "2x1", "extrapolated", 4 * 7200, 4 * 7200, 1),
        ("", 2, 1, "2x1", "exact", 2 * 1800, 0, 1),
        ("", 1, 2, "1x2", "exact", 3000 + 60, 60, 2),
        ("", 1, 1, "1x2", "extrapolated", 600, 0, 1),
    ]
    md = (tmp_path / "coverage.md").read_text()
    assert md == out.split("wrote ")[0]
    assert "as --rows: 4x2,1x1" in md
    assert "%d runs each" % local_runs() in md
    assert "| untuned | 8.02 |" in md  # (28800 + 60) / 3600
    assert (
        "Skipped lines: 2 ElapsedRaw not a number of seconds, 2 NNodes not a count, 1 fewer than 9 fields"
        in md
    )
    assert (tmp_path / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # no user names: the sample has none, and no comment or job name reaches the output
    for text in (md, (tmp_path / "coverage.csv").read_text()):
        assert "solver" not in text and "コメント" not in text and "a note" not in text


def test_without_the_trace_every_job_counts_as_tuned(run_cli, tmp_path):
    code, out, err = run_cli(
        "coverage", "--site", "local", "--sacct-file", SAMPLE, "--out", tmp_path
    )
    assert code == 0, err
    assert [r[6] for r in rows_of(tmp_path)] == [0, 0, 0, 0]
    assert "Untuned: not known" in out


def test_node_types_by_partition_take_their_own_table(tmp_path):
    site = sites.load_site(str(TWO_PARTITIONS))
    cov = coverage.coverage(site, [SAMPLE.read_bytes()], False, str(tmp_path / "none.yaml"), "x")
    got = [
        (g.node_type, g.nodes, g.ppn, g.row, g.kind, sum(g.seconds.values()))
        for g in cov.geometries
    ]
    # partition large -> the 256-core table (rows 1x32 ... 1x256); debug and the unicode one -> cpu
    assert got == [
        ("large", 4, 2, "1x32", "extrapolated", 28800),
        ("cpu", 2, 1, "2x8", "extrapolated", 3600),
        ("cpu", 1, 2, "1x8", "extrapolated", 3060),
        ("cpu", 1, 1, "1x8", "extrapolated", 600),
    ]
    assert cov.runs is None and "runs unknown (no space.yaml)" in coverage.to_markdown(cov)


def peak_kib(*args):
    """Peak RSS of `tunedmpi ARGS` in a child of its own (ru_maxrss of RUSAGE_CHILDREN is per
    process tree: a fresh interpreter measures only this run)."""
    code = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(p.stdout + p.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / ".venv" / "bin" / "tunedmpi")]
        + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    rc, kib = proc.stdout.split()
    return int(rc), int(kib), proc.stderr


def hostile_file(path, mib=100):
    """mib MiB: good records between lines without end (10 MiB each), unicode, random bytes."""
    good = SAMPLE.read_bytes()
    with open(path, "wb") as fh:
        for i in range(mib // 10 - 1):
            fh.write(good * 1000)  # 20,000 lines
            fh.write(b"\xff\xfe" + os.urandom(16) + b"|" * 7 + b"x" * (10 * 2**20 - 2000) + b"\n")
        while fh.tell() < mib * 2**20:
            fh.write(good)
        fh.write(b"111|\xe2\x80\xae|debug|1||2|cpu=2|60|" + b"9" * 100)  # no newline at the end


def test_a_100_mb_hostile_file_streams_in_bounded_memory(tmp_path):
    big = tmp_path / "big.txt"
    hostile_file(big)
    assert big.stat().st_size >= 100 * 2**20
    rc0, small, _ = peak_kib(
        "coverage", "--site", "local", "--sacct-file", SAMPLE, "--out", tmp_path / "a"
    )
    rc, peak, text = peak_kib(
        "coverage", "--site", "local", "--sacct-file", big, "--out", tmp_path / "b"
    )
    assert rc0 == 0 and rc == 0, text
    assert "Traceback" not in text
    assert "9 line longer than 65536 bytes" in text
    # the file is read as a stream: far less than its 100 MiB on top of the small run's peak
    assert peak - small < 40 * 1024, (peak, small)


@pytest.mark.parametrize(
    "given,problem",
    [
        ("dir", "is a folder, not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
        ("missing", "No such file or directory"),
    ],
)
def test_a_bad_sacct_file_is_one_line_exit_2(tmp_path, given, problem):
    path = given if given.startswith("/") else tmp_path / given
    if given == "dir":
        path.mkdir()
    rc, _, text = peak_kib(
        "coverage", "--site", "local", "--sacct-file", path, "--out", tmp_path / "o"
    )
    assert rc == 2 and len(text.strip().splitlines()) == 1 and problem in text, text
    assert not (tmp_path / "o").exists()


def test_no_accounting_is_one_line_exit_2_saying_how_to_enable_it(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=x\nSlurmctldHost=localhost\nAccountingStorageType=accounting_storage/none\n"
        "NodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"
    )
    env = dict(os.environ, SLURM_CONF=str(conf), PATH="/usr/bin:/bin")
    if not os.path.exists("/usr/bin/sacct"):
        pytest.skip("needs sacct (apt-get install slurm-client)")
    for path in ("/usr/bin:/bin", str(tmp_path)):  # accounting off; no sacct at all
        env["PATH"] = path
        proc = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "tunedmpi"),
                "coverage",
                "--site",
                "local",
                "--out",
                tmp_path / "o",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (path, proc.stdout, proc.stderr)
        assert (
            "accounting" in lines[0]
            and "AccountingStorageType=accounting_storage/slurmdbd" in lines[0]
        )
        assert not (tmp_path / "o").exists()


def test_distinct_geometries_beyond_the_cap_are_counted_not_mapped(monkeypatch, tmp_path):
    monkeypatch.setattr(coverage, "MAX_GEOMETRIES", 3)
    lines = ["%d|x|debug|1||%d|cpu=%d|60|" % (i, i, i) for i in range(1, 8)]
    cov = coverage.coverage(
        sites.load_named("local"), ["\n".join(lines).encode()], False, str(tmp_path / "no"), "x"
    )
    assert sorted((g.nodes, g.ppn) for g in cov.geometries) == [(1, 1), (1, 2), (1, 3)]
    assert cov.skipped == {"more than 3 distinct geometries": 4}
