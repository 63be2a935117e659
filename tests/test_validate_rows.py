"""validate --rows (issue 40 item 4): every row of the site's table in one campaign, each by the
single-row validate, one summary (results-rows.json, summary.md's rows x bands matrix, a heatmap,
junit.xml with a testsuite per row) and one exit code, the worst row's. Real: this machine's
Open MPI wheel, Lmod and the probes; outside a job the local table's 2x1 row cannot run, which makes
the campaign's exit code deterministic (2) whatever the noise does to 1x2."""

import json
import subprocess
import xml.etree.ElementTree as ET

import pytest

import lmod
from conftest import ROOT, VERDICT_EXITS, assert_verdict
from tunedmpi import argtypes
from tunedmpi.acceptance import rows, validate
from tunedmpi.bench.runner import CannotRun
from tunedmpi.modules import sites

RUN = ROOT / "validate" / "run.sh"
QUICK = ("--probes", "--repetitions", "3", "--no-extend", "--benchmarks", "put_latency")
needs_mpi = pytest.mark.skipif(
    not (lmod.available() and (ROOT / ".venv/bin/mpicc").exists()),
    reason="validate needs Lmod (apt-get install lmod) and the Open MPI wheel (make)",
)


def test_the_worst_row_decides_in_the_stated_order():
    assert rows.worst([0, 4, 3]) == 3 and rows.worst([4, 0]) == 4 and rows.worst([0, 0]) == 0
    assert rows.worst([3, 1, 4]) == 1 and rows.worst([1, 2, 0]) == 2
    assert rows.worst(code for code in (4, 0)) == 4  # a generator, as write_summary gives it
    assert rows.ORDER == "COULD-NOT-RUN 2 > FAIL 1 > NO-GAIN 3 > INCONCLUSIVE 4 > PASS 0"


def test_rows_are_the_tables_and_a_row_it_lacks_is_refused_naming_them():
    site = sites.load_named("local")
    assert rows.parse_rows("all", site) == [(1, 2), (2, 1)]
    assert rows.parse_rows(" 2x1, 1x2,2x1", site) == [(2, 1), (1, 2)]
    for bad in ("4x4", "1x", "two", ","):
        with pytest.raises(CannotRun) as err:
            rows.parse_rows(bad, site)
        assert "give --rows all or a comma list of the table's rows: 1x2,2x1" in str(err.value)


def test_each_row_runs_without_the_rows_options_even_abbreviated():
    argv = ["--row", "all", "--probes", "--out=x", "--nod", "2", "--ppn=1", "--sbatch-args=--x=1"]
    assert argtypes.argv_without(argv, {"--rows", "--out", "--nodes", "--ppn"}) == [
        "--probes",
        "--sbatch-args=--x=1",
    ]


def validate_rows(tmp_path, *args):
    proc = subprocess.run(
        [str(RUN), "--out", str(tmp_path / "out")] + list(args),
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    (campaign,) = (tmp_path / "out").glob("local-rows-*")
    return proc, campaign, json.loads((campaign / rows.SUMMARY).read_text())


@needs_mpi
def test_rows_all_validates_each_row_and_exits_with_the_worst(tmp_path):
    proc, campaign, doc = validate_rows(tmp_path, "--rows", "all", *QUICK)
    ctx = proc.stderr[-3000:]
    assert proc.returncode == doc["exit_code"] == 2 and doc["verdict"] == "COULD-NOT-RUN", ctx
    one, two = doc["rows"]
    # 1x2 ran as the single-row validate, into the campaign's rows/1x2/
    assert (one["row"], one["nodes"], one["ppn"]) == ("1x2", 1, 2)
    assert one["exit_code"] in VERDICT_EXITS and one["dir"].startswith("rows/1x2/local-"), ctx
    res = json.loads((campaign / one["dir"] / "results.json").read_text())
    assert res["geometry"]["nodes"] == 1 and res["geometry"]["ppn"] == 2
    assert one["verdict"] == res["verdict"] and len(one["bands"]) == 2  # put_latency's 2 bands
    assert_verdict(one["exit_code"], res, ctx)
    # 2x1 needs two nodes: outside a job it could not run, and says why
    assert (two["row"], two["exit_code"], two["verdict"], two["bands"]) == (
        "2x1",
        2,
        "COULD-NOT-RUN",
        [],
    )
    assert "--nodes 2: outside a job only this machine runs" in two["reason"]
    summary = (campaign / "summary.md").read_text()
    assert ("(**host too noisy**)" in summary) == one["noise"]["too_noisy"]
    assert "| row | put_latency <=1KB | put_latency 1KB-64KB |" in summary
    assert "| 2x1 | - | - |" in summary and "![rows x bands](rows-heatmap.png)" in summary
    assert (campaign / "rows-heatmap.png").read_bytes()[:4] == b"\x89PNG"
    suites = ET.parse(campaign / "junit.xml").getroot()
    assert suites.tag == "testsuites" and [s.get("name").split(":")[0] for s in suites] == [
        "row 1x2",
        "row 2x1",
    ]
    assert int(suites.get("errors")) == 1 and int(suites.get("tests")) == len(res["bands"]) + 2
    assert (campaign / validate.STATUS).read_text().startswith("complete: COULD-NOT-RUN")
    assert proc.stdout.rstrip().endswith("(2 rows; summary: %s/summary.md)" % campaign)

    # history reads a rows campaign's rows (its own directory has no results.json)
    hist = subprocess.run(
        [str(ROOT / ".venv/bin/tunedmpi"), "history", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert hist.returncode == 0 and "incomplete" not in hist.stderr, hist.stderr
    assert "1 x 2, quick set, probe (1 campaign)" in hist.stdout, hist.stdout
    assert not (tmp_path / "validate-history").exists()  # no plots in the working directory

    # --reanalyse of the rows campaign judges 1x2 again; 2x1 stays could-not-run
    again = subprocess.run(
        [str(RUN), "--reanalyse", str(campaign), "--out", str(tmp_path / "again")],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    (new,) = (tmp_path / "again").glob("local-rows-*")
    redo = json.loads((new / rows.SUMMARY).read_text())
    assert again.returncode == redo["exit_code"] == 2, again.stderr
    assert redo["reanalysed_from"] == str(campaign.resolve())
    rejudged = json.loads((new / redo["rows"][0]["dir"] / "results.json").read_text())
    assert rejudged["reanalysed_from"] == str((campaign / one["dir"]).resolve())
    assert redo["rows"][1] == two


def test_rows_with_a_geometry_is_refused(run_cli, tmp_path):
    code, out, err = run_cli("validate", "--rows", "all", "--ppn", "2", "--out", tmp_path)
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert "--rows sets --nodes and --ppn per row: drop them, or validate one row" in err


def test_reanalyse_refuses_a_summary_leading_outside_its_campaign(run_cli, tmp_path):
    """A damaged or hostile results-rows.json: a row's folder outside the campaign, or a row that is
    no whole number, is exit 2 naming the file and key, and nothing is written."""
    src = tmp_path / "local-rows-x"
    src.mkdir()
    bad = {"dir": "../../etc"}, {"nodes": "1/../..", "ppn": 2}
    for extra in bad:
        row = dict({"row": "1x2", "nodes": 1, "ppn": 2}, **extra)
        (src / rows.SUMMARY).write_text(json.dumps({"site": "local", "rows": [row]}))
        code, out, err = run_cli("validate", "--reanalyse", src, "--out", tmp_path / "out")
        assert code == 2 and not (tmp_path / "out").exists(), err
        assert "results-rows.json" in err and ("rows[].dir" in err or "whole numbers" in err), err
