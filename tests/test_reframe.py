"""validate/reframe through the real ReFrame 4 (PyPI reframe-hpc, the `test` extra): the local site
with the probes, under the local scheduler and launcher, and under a real one-node Slurm
(tools/slurmcluster.py). Each run is `reframe -C <example config> -c validate/reframe -r`, as a site types
it (plus -S for the quick probe collectives); its pass/fail must be validate's verdict (PASS expected,
a FAIL on this host's noise is reported as a warning: check_run), and its perflog must hold one record
per benchmark x band whose gain is the one in the results.json that validate wrote for that run."""

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import lmod
import slurmcluster as slurm
from conftest import ROOT, unpack_archive
from tunedmpi.acceptance import validate

REFRAME = Path(sys.executable).parent / "reframe"
LIBRARY = ROOT / "validate" / "reframe"
# The wiring run: allreduce, one collective probe run per repetition, 5 a side (the quick set's first
# look) and no second look, ~15 s. Any verdict is taken (check_run): ReFrame must pass exactly when
# validate passes with no band below its reference's edge. Not allgather or alltoall: at <= 1 KB the
# local tuned module is at parity with the baseline (0.86-1.21x), so a FAIL, which the forced-FAIL
# test below proves deterministically, would be the likely outcome instead of a PASS.
BENCHMARKS = ("allreduce",)
OPTIONS = ["-S", "probes=true", "-S", "benchmarks=allreduce", "-S", "repetitions=5"]
OPTIONS += ["-S", "extend=false"]
COLLECTIVES = (
    "allgather",
    "allreduce",
    "alltoall",
)  # one probe run: the failing case logs all three

pytestmark = [
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
    pytest.mark.skipif(
        not (ROOT / ".venv/bin/mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
    ),
    pytest.mark.skipif(
        not REFRAME.exists(), reason="ReFrame is not installed (pip install -e '.[test]')"
    ),
]


def reframe(config, cwd, env, options=OPTIONS, timeout=900):
    """`reframe -C config -c validate/reframe -r` in cwd (stage/, output/, perflogs/ land there),
    from a shell that has Lmod (ReFrame's modules system finds it through $LMOD_CMD). ReFrame looks
    at its running job at least once a second (RFM_POLL_RATE_MIN): its default slows to one look in
    10 s, up to 10 s idle after validate has ended."""
    env = dict(env, RFM_POLL_RATE_MIN="1")
    cmd = "source %s && exec %s -C %s -c %s -r %s" % (
        lmod.LMOD_INIT,
        REFRAME,
        LIBRARY / "config" / config,
        LIBRARY,
        " ".join(options),
    )
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def perflog_records(path):
    """{perf variable: record fields} from a perflog of the example configs' format (one line per
    performance variable: 'key=value' fields and plain ones, separated by '|')."""
    out = {}
    header, *lines = path.read_text().splitlines()
    assert header.startswith("job_completion_time|reframe version|name|"), (
        header
    )  # ReFrame's header line
    for line in lines:
        fields = line.split("|")
        named = dict(f.split("=", 1) for f in fields if "=" in f)
        var = next(k for k in named if k not in ("result", "verdict", "unit", "results"))
        assert var not in out, "two records for %s:\n%s" % (var, path.read_text())
        out[var] = dict(named, value=named[var], name=fields[2])
    return out


def kept(cwd, name):
    """The files called ``name`` that the run left: ReFrame copies the stage to output/ when the test
    passes, and keeps the stage (with no output/) when it fails."""
    return sorted((cwd / "output").rglob(name)) or sorted((cwd / "stage").rglob(name))


def band_vars(res):
    """{perf variable: band} of a results.json's size bands."""
    return {
        "%s_%s" % (b["benchmark"], b["band"].replace("<=", "le")): b
        for b in res["bands"]
        if b["band"] != "reliability"
    }


def below_edge(res):
    """The perf variables ReFrame's references fail: decided bands below validate's loss edge."""
    edge = 1 / (1 + res["tolerance"])
    return sorted(
        v
        for v, b in band_vars(res).items()
        if b["gain"] is not None and not b.get("undecided") and b["gain"] < edge
    )


def check_run(proc, cwd, system, partition, verdict=None, benchmarks=BENCHMARKS):
    """ReFrame's pass/fail is validate's verdict (``verdict``: the one expected; None: whichever
    validate reached, any of its four) and its references' (below_edge), and its perflog holds one
    record per benchmark x band with the gain of validate's results.json. Returns that results dict.

    Why None for the real runs: the local module's allreduce wins 1-64 KB by ~1.5x, but its <= 1 KB
    band is at parity and this 2-core host moves whole runs by up to 2x, so a PASS is likely, not
    certain (3 of 3 on an idle machine; FAILs seen when other MPI jobs shared the cores). A red CI
    must mean a broken wiring, not a noisy hour: the verdict is reported, and the forced-FAIL test
    below proves the FAIL side deterministically."""
    context = "reframe exit %d\n%s\n%s" % (
        proc.returncode,
        proc.stdout[-6000:],
        proc.stderr[-3000:],
    )
    results = kept(cwd, "results.json")
    assert len(results) == 1, context
    res = json.loads(results[0].read_text())
    context += (
        "\nvalidate's verdict table:\n%s"
        % (results[0].parent / "report.md")
        .read_text()
        .split("## Verdict per benchmark and band")[-1][:4000]
    )
    if verdict is None:
        verdict = res["verdict"]
        assert verdict in validate.EXIT_CODES, context
        if verdict == "INCONCLUSIVE":  # too noisy on this host: ReFrame skips, nothing to compare
            warnings.warn("ReFrame run on %s: INCONCLUSIVE on this host's noise" % system)
            assert proc.returncode == 0 and "SKIP" in proc.stdout, context
            return res
        if verdict != "PASS":
            warnings.warn(
                "ReFrame run on %s: validate's verdict was %s on this host's noise; the test "
                "checks that ReFrame failed with it\n%s" % (system, verdict, context[-2500:])
            )
    passed = verdict == "PASS" and not below_edge(res)
    assert proc.returncode == (0 if passed else 1), context
    assert (
        "Ran 1/1 test case(s) from 1 check(s) (%d failure(s)" % (0 if passed else 1) in proc.stdout
    ), context
    assert res["verdict"] == verdict and res["suite"] == "probe" and res["set"] == "quick", context
    log = cwd / "perflogs" / system / partition / "TunedMPIValidation.log"
    records = perflog_records(log)
    bands = band_vars(res)
    # one record per benchmark x band of the quick set (sizes 1 B-64 KB: two bands), each with its gain
    assert sorted(records) == sorted(
        "%s_%s" % (b, band) for b in benchmarks for band in ("le1KB", "1KB-64KB")
    ), log.read_text()
    assert sorted(records) == sorted(bands)
    for var, rec in records.items():
        assert float(rec["value"]) == pytest.approx(bands[var]["gain"], rel=1e-9), (var, rec)
        assert (
            rec["unit"] == "x"
            and rec["result"] == ("pass" if passed else "fail")
            and rec["verdict"] == verdict
        )
        assert rec["name"] == "TunedMPIValidation" and rec["results"] == str(results[0].parent), rec
    return res


def test_local_site_under_the_local_launcher(tmp_path):
    proc = reframe("local.py", tmp_path, lmod.clean_env())
    res = check_run(proc, tmp_path, "local", "default")
    assert res["geometry"]["source"] == "explicit" and res["geometry"]["np"] == 2


@pytest.mark.skipif(
    bool(slurm.missing()),
    reason="Slurm/munge not installed (%s): apt-get install %s"
    % (" ".join(slurm.missing()), slurm.APT_PACKAGES),
)
def test_a_module_that_does_not_win_fails_the_test_under_a_real_one_node_slurm(tmp_path):
    """The same tuned module, judged with a tolerance of 900 % (-S tolerance=9: only a 10x gain would
    count) on 3 runs a side, one look: nothing can win or lose, validate says NO-GAIN (on a very
    noisy host INCONCLUSIVE, which ReFrame skips), and the ReFrame test fails in its performance
    stage with every band's real gain in the perflog. Under a real one-node Slurm (the test above
    has the local launcher): validate runs inside the batch job ReFrame submitted, for the
    allocation it asked for."""
    options = [
        "-S",
        "probes=true",
        "-S",
        "benchmarks=" + ",".join(COLLECTIVES),
        "-S",
        "repetitions=3",
        "-S",
        "extend=false",
        "-S",
        "tolerance=9",
    ]
    cluster = slurm.start(tmp_path / "slurm")
    try:
        work = tmp_path / "work"
        work.mkdir()
        proc = reframe("slurm.py", work, cluster.env(), options)
        res = check_run(proc, work, "cluster", "compute", benchmarks=COLLECTIVES)
    finally:
        cluster.stop()
    assert res["tolerance"] == 9 and all(
        b["verdict"] == "tie" for b in res["bands"] if b["band"] != "reliability"
    )
    # only ties: NO-GAIN (shown equal) fails; INCONCLUSIVE (an interval beyond x10) was skipped
    assert res["verdict"] in ("NO-GAIN", "INCONCLUSIVE")
    if res["verdict"] == "NO-GAIN":
        assert "Failing phase: performance" in proc.stdout and "verdict NO-GAIN (" in proc.stdout, (
            proc.stdout
        )
    (script,) = (p.read_text() for p in kept(work, "rfm_job.sh"))
    assert "#SBATCH --ntasks=2" in script and "#SBATCH --ntasks-per-node=2" in script, script
    assert "validate/run.sh --nodes 1 --ppn 2" in script, script
    assert res["geometry"]["np"] == 2
    (err,) = (p.read_text() for p in kept(work, "rfm_job.err"))
    assert "validate: " in err


REPORT = "--performance-report=now-1d:now/last:+presult/+plower"


def performance_report(stdout):
    """{perf variable: (ReFrame's pass/fail of it, its lower bound)} from the report that
    --performance-report=...:+presult/+plower prints."""
    out = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 8 and cells[1] == "TunedMPIValidation":
            out[cells[3]] = (cells[5], float(cells[8]))
    return out


@pytest.mark.parametrize(
    "archive, campaign",
    [
        # against Intel MPI: 4 bands lose (0.72-0.86x), alltoall 64 KB-1 MB is undecided at 0.89x
        ("validate-local-vs-intel-mpi-20261127T044735Z", "local-20261127T044735Z"),
        # PASS, its put_bw <= 1 KB undecided at 0.94x: noise, not a regression
        ("validate-local-20261123T205744Z", "validate-results/local-20261123T205744Z"),
    ],
)
def test_references_fail_the_losing_bands_by_reframes_own_rule(tmp_path, archive, campaign):
    """An archived campaign judged again through ReFrame (-S reanalyse: validate measures nothing):
    each decided band's reference puts ReFrame's bound at validate's loss edge, so exactly the
    bands that lose fail ReFrame's check, and the performance report says so per band."""
    unpack_archive(archive, tmp_path / "archive")
    env = lmod.clean_env(RFM_ENABLE_RESULTS_STORAGE="1", RFM_SQLITE_DB_FILE=str(tmp_path / "db"))
    options = ["-S", "reanalyse=%s" % (tmp_path / "archive" / campaign), REPORT]
    proc = reframe("local.py", tmp_path, env, options)
    context = proc.stdout[-6000:] + proc.stderr[-2000:]
    (results,) = kept(tmp_path, "results.json")
    res = json.loads(results.read_text())
    bands = band_vars(res)
    lost = sorted(v for v, b in bands.items() if b["verdict"] == "lose")
    noisy = [v for v, b in bands.items() if b["undecided"] and b["gain"] < 1 / 1.05]
    assert noisy, "the campaign has no undecided band below the edge: pick another"
    failed = sorted(re.findall(r"^\s+(\S+)=[0-9.]+ x, expected 1.0 \(l=0.952", proc.stdout, re.M))
    assert failed == lost == below_edge(res), context
    assert proc.returncode == (1 if res["verdict"] != "PASS" else 0), context
    report = performance_report(proc.stdout)
    assert sorted(report) == sorted(bands), context
    for var, (result, lower) in report.items():
        assert result == ("fail" if var in lost else "pass"), (var, context)
        undecided = bands[var]["undecided"]
        assert lower == (-math.inf if undecided else pytest.approx(1 / 1.05)), (var, lower)
    records = perflog_records(
        tmp_path / "perflogs" / "local" / "default" / "TunedMPIValidation.log"
    )
    assert sorted(records) == sorted(bands)
    assert {r["results"] for r in records.values()} == {str(results.parent)}


def test_an_inconclusive_campaign_is_skipped_with_its_reason(tmp_path):
    """A campaign too noisy to decide (32 undecided ties, judged again with -S reanalyse: nothing is
    measured) is INCONCLUSIVE: ReFrame skips the test with the reason instead of failing it."""
    unpack_archive("validate-local-source-20261126T231944Z", tmp_path / "archive")
    src = tmp_path / "archive" / "validate-results" / "local-source-20261126T231944Z"
    proc = reframe("local.py", tmp_path, lmod.clean_env(), ["-S", "reanalyse=%s" % src])
    context = proc.stdout[-6000:] + proc.stderr[-2000:]
    (results,) = kept(tmp_path, "results.json")
    assert json.loads(results.read_text())["verdict"] == "INCONCLUSIVE", context
    assert (
        proc.returncode == 0 and "SKIP" in proc.stdout and "verdict INCONCLUSIVE" in proc.stdout
    ), context
