"""validate/run.sh end to end on this machine: 2 ranks, the probes, the real Open MPI wheel and Lmod.
Checks the results directory's structure and the parsed numbers, not the verdict (machine noise)."""
import json
import subprocess
import xml.etree.ElementTree as ET

import pytest

import lmod
from conftest import ROOT
from tunedmpi.bench import parse

RUN = ROOT / "validate" / "run.sh"
pytestmark = [
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
    pytest.mark.skipif(not (ROOT / ".venv/bin/mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"),
]


def validate(tmp_path, *args, timeout=600):
    proc = subprocess.run([str(RUN), "--out", str(tmp_path / "out")] + list(args), env=lmod.clean_env(),
                          capture_output=True, text=True, timeout=timeout)
    dirs = sorted((tmp_path / "out").glob("*")) if (tmp_path / "out").is_dir() else []
    return proc, [d for d in dirs if d.is_dir()]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("validate")
    proc, dirs = validate(tmp, "--repetitions", "2", "--benchmarks", "allreduce,alltoall,put_latency,put_bw")
    assert len(dirs) == 1, proc.stderr[-3000:]
    return proc, dirs[0], json.loads((dirs[0] / "results.json").read_text())


def test_exit_code_and_summary(campaign):
    proc, outdir, results = campaign
    assert proc.returncode in (0, 1), proc.stderr[-3000:]      # pass or fail: both are verdicts
    assert proc.returncode == results["exit_code"]
    assert "verdict: %s" % results["verdict"] in proc.stdout
    assert results["verdict"] in ("PASS", "FAIL")
    # progress lines: position, what runs, elapsed and estimate
    assert "[ 1/12] rep 1/2 collectives     baseline ok" in proc.stderr
    assert "[12/12] rep 2/2 put_bw          tuned    ok" in proc.stderr
    assert "left ~" in proc.stderr


def test_results_structure(campaign):
    _, outdir, r = campaign
    assert r["suite"] == "probe" and r["geometry"] == {"nodes": 1, "ppn": 2, "np": 2, "source": "this machine"}
    assert r["modules"] == {"baseline": "openmpi/5.0.8", "tuned": "openmpi-tuned/5.0.8"}
    runs = r["runs"]
    assert len(runs) == 12 and all(x["status"] == "ok" for x in runs)
    # A B A B: every repetition runs the baseline just before the tuned module
    assert [x["role"] for x in runs] == ["baseline", "tuned"] * 6
    assert [(x["run"], x["rep"]) for x in runs[:6:2]] == [("collectives", 1), ("put_latency", 1), ("put_bw", 1)]
    assert "-w allocate -s flush" in r["commands"]["put_latency"]
    assert r["commands"]["collectives"].startswith("mpirun -np 2 ")
    for x in runs:
        log = (outdir / x["log"]).read_text()
        assert log.startswith("# tunedmpi validate run: %s, %s module" % (x["run"], x["role"]))
        assert "# command: module purge; module load %s; mpirun -np 2 " % x["module"] in log
        assert "TUNEDMPI_SELECTION=site=local" in log
    bands = {(b["benchmark"], b["band"]) for b in r["bands"]}
    for bench in ("allreduce", "alltoall", "put_latency", "put_bw"):
        assert {(bench, "<=1KB"), (bench, "1KB-64KB"), (bench, "reliability")} <= bands
    assert all(b["verdict"] in ("win", "tie", "lose") for b in r["bands"])


def test_parsed_numbers_match_the_logs(campaign):
    _, outdir, r = campaign
    for x in r["runs"]:
        text = (outdir / x["log"]).read_text().split("# ---- output ----\n", 1)[1]
        parsed = parse.parse_output(text, exit_code=0)
        for bench, data in x["series"].items():
            s = next(s for s in parsed.series if s.benchmark == bench)
            assert s.suite == data["suite"] == "probe"
            assert {str(k): v for k, v in s.points} == data["points"]   # JSON keys are strings
    allreduce = r["per_size"]["allreduce"]
    assert allreduce["metric"] == "latency_us" and len(allreduce["baseline"]) == 2
    sizes = sorted(int(k) for k in allreduce["baseline"][0])
    assert sizes[0] == 0 and sizes[-1] == 65536                  # -msglog 0:16
    assert r["per_size"]["put_bw"]["metric"] == "bandwidth_MBps"
    assert all(v > 0 for rep in allreduce["tuned"] for v in rep.values())


def test_report_plots_and_junit(campaign):
    _, outdir, r = campaign
    md = (outdir / "report.md").read_text()
    assert "**Verdict: %s**" % r["verdict"] in md and "probes** (validate/probes)" in md
    assert md.count("| allreduce | ") == 3
    envs = {x["role"]: {k: v for k, v in x["env"].items() if not k.startswith("TUNEDMPI_")} for x in r["runs"]}
    assert ("sets no tuning variable the baseline does not set" in md) == (envs["tuned"] == envs["baseline"])
    for bench in ("allreduce", "alltoall", "put_latency", "put_bw"):
        png = outdir / "plots" / (bench + ".png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "](plots/%s.png)" % bench in md
    suite = ET.parse(outdir / "junit.xml").getroot()
    assert suite.tag == "testsuite" and int(suite.get("tests")) == len(r["bands"])
    names = {(c.get("classname"), c.get("name")) for c in suite}
    assert ("validate.allreduce", "<=1KB") in names and ("validate.put_bw", "reliability") in names
    assert int(suite.get("failures")) == sum(b["verdict"] == "lose" for b in r["bands"])


def broken_module(tmp_path, name, base="openmpi/5.0.8"):
    """A module that loads the MPI and sets a placement PRRTE rejects: every mpirun exits 213."""
    path = tmp_path / "mods" / (name + ".lua")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('load("%s")\nsetenv("PRTE_MCA_rmaps_default_ranking_policy", "bogus")\n' % base)
    return str(tmp_path / "mods")


def test_a_failing_module_is_retried_recorded_and_loses(tmp_path):
    mods = broken_module(tmp_path, "broken/1")
    proc, dirs = validate(tmp_path, "--repetitions", "2", "--benchmarks", "put_latency",
                          "--module", "broken/1", "--modulepath", mods)
    r = json.loads((dirs[0] / "results.json").read_text())
    tuned = [x for x in r["runs"] if x["role"] == "tuned"]
    assert [(x["rep"], x["attempt"], x["status"]) for x in tuned] == [(1, 1, "failed"), (1, 2, "failed"),
                                                                     (2, 1, "failed"), (2, 2, "failed")]
    assert all(x["exit_code"] == 213 for x in tuned)
    rel = next(b for b in r["bands"] if b["band"] == "reliability")
    assert rel["verdict"] == "lose" and rel["reason"] == "failed runs: baseline 0/2, tuned 2/2"
    assert proc.returncode == 1 and r["verdict"] == "FAIL"
    assert "## Failed runs" in (dirs[0] / "report.md").read_text()


def test_a_baseline_that_fails_where_the_tuned_module_runs_is_a_result(tmp_path):
    mods = broken_module(tmp_path, "broken/1")
    proc, dirs = validate(tmp_path, "--repetitions", "2", "--benchmarks", "put_latency", "--retries", "0",
                          "--baseline", "broken/1", "--modulepath", mods)
    r = json.loads((dirs[0] / "results.json").read_text())
    rel = next(b for b in r["bands"] if b["band"] == "reliability")
    assert rel["verdict"] == "win"
    assert proc.returncode == 0 and r["verdict"] == "PASS"


def test_timeouts_are_killed_and_reported_as_could_not_run(tmp_path):
    proc, dirs = validate(tmp_path, "--repetitions", "1", "--benchmarks", "put_bw", "--timeout", "0.3",
                          "--retries", "0")
    r = json.loads((dirs[0] / "results.json").read_text())
    assert [x["status"] for x in r["runs"]] == ["timeout", "timeout"]
    assert proc.returncode == 2 and r["verdict"] == "COULD-NOT-RUN"


def test_results_directories_are_never_reused(tmp_path):
    for _ in range(2):
        validate(tmp_path, "--repetitions", "1", "--benchmarks", "fop_latency")
    dirs = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert len(dirs) == 2 and dirs[0] != dirs[1]


@pytest.mark.parametrize("args,message", [
    (["--nodes", "2"], "2 nodes requested outside a job"),
    (["--ppn", "512"], "512 ranks requested but this machine has"),
    (["--benchmarks", "allreduse"], "unknown benchmark(s) allreduse"),
    (["--site", "nowhere"], "no site 'nowhere'"),
])
def test_impossible_requests_exit_2_with_a_reason(tmp_path, args, message):
    proc, dirs = validate(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert dirs == []
