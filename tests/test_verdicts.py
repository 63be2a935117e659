"""The module verdicts, one meaning each (issue 40 items 1-2): PASS, FAIL, NO-GAIN, INCONCLUSIVE,
each its own exit code, reached by `validate --reanalyse` of archived campaigns (no measuring), and
the junit.xml and report.md a CI panel and a person read."""

import json
import shutil
import xml.etree.ElementTree as ET

from conftest import unpack_archive
from tunedmpi import stats
from tunedmpi.acceptance import validate

# (archive, campaign folder inside it)
NOISY = ("validate-local-source-20261126T231944Z", "validate-results/local-source-20261126T231944Z")
INTEL = ("validate-local-vs-intel-mpi-20261127T044735Z", "local-20261127T044735Z")
PASSING = ("validate-local-20261124T002110Z", "validate-results/local-20261124T002110Z")


def reanalyse(run_cli, tmp_path, archive, tolerance=None):
    """(exit code, results.json, junit.xml's root, report.md) of --reanalyse of an archived campaign;
    tolerance: judged with this tolerance instead of the campaign's own (the same runs)."""
    unpack_archive(archive[0], tmp_path / "a")
    src = tmp_path / "a" / archive[1]
    if tolerance is not None:
        doc = json.loads((src / "results.json").read_text())
        doc["tolerance"] = tolerance
        (src / "results.json").write_text(json.dumps(doc))
    code, out, err = run_cli("validate", "--reanalyse", src, "--out", tmp_path / "out")
    (res,) = (tmp_path / "out").glob("*/results.json")
    res_doc = json.loads(res.read_text())
    junit = ET.parse(res.parent / "junit.xml").getroot()
    report = (res.parent / "report.md").read_text()
    shutil.rmtree(tmp_path / "a")
    return code, res_doc, junit, report


def module_case(junit):
    (case,) = [c for c in junit.iter("testcase") if c.get("name") == "module verdict"]
    return case


def counts(junit):
    cases = list(junit.iter("testcase"))
    fails = sum(1 for c in cases if c.find("failure") is not None)
    skips = sum(1 for c in cases if c.find("skipped") is not None)
    assert (int(junit.get("failures")), int(junit.get("skipped")), int(junit.get("tests"))) == (
        fails,
        skips,
        len(cases),
    )
    return fails, skips


def sized(res):
    return [b for b in res["bands"] if b["band"] != "reliability" and b["verdict"] != "no-data"]


def test_exit_codes_are_one_per_verdict_and_2_stays_could_not_run():
    codes = validate.EXIT_CODES
    assert codes == {"PASS": 0, "FAIL": 1, "NO-GAIN": 3, "INCONCLUSIVE": 4}
    assert validate.EXIT_CANNOT == 2 and validate.EXIT_CANNOT not in codes.values()


def test_module_verdict_separates_a_regression_from_no_gain_and_from_noise():
    R = stats.BandResult
    win, lose, tie = (R("b", "x", [], 1.0, 1.0, v, "") for v in ("win", "lose", "tie"))
    undecided = R("b", "y", [], 1.0, 1.0, "tie", "", undecided=True)
    assert stats.module_verdict([win, tie, undecided]) == "PASS"
    assert stats.module_verdict([win, lose]) == "FAIL"
    assert stats.module_verdict([lose, undecided]) == "FAIL"
    assert stats.module_verdict([tie, tie]) == "NO-GAIN"
    assert stats.module_verdict([tie, undecided]) == "INCONCLUSIVE"


def test_a_noisy_campaign_that_failed_for_want_of_a_decision_is_now_inconclusive(run_cli, tmp_path):
    """Its 32 bands are all undecided ties (a busy host, 5 pairs): before issue 40 FAIL, exit 1."""
    code, res, junit, report = reanalyse(run_cli, tmp_path, NOISY)
    assert (code, res["verdict"], res["exit_code"]) == (4, "INCONCLUSIVE", 4)
    assert "too noisy" in res["verdict_means"]
    bands = sized(res)
    assert bands and all(b["verdict"] == "tie" for b in bands)
    assert any(b["undecided"] for b in bands)
    # the panel: no failure, the module's case skipped with the reason
    assert counts(junit) == (0, 1)
    assert "too noisy" in module_case(junit).find("skipped").get("message")
    lines = report.splitlines()
    assert lines[
        2
    ] == "INCONCLUSIVE: 0 win · 0 lose · %d tie (%d undecided) · 5 pairs · %.0f min" % (
        len(bands),
        sum(1 for b in bands if b["undecided"]),
        res["elapsed_s"] / 60,
    )
    assert "## Undecided bands" in report and "pairs needed" in report
    # host too noisy: its runs' median per-size CV (35 %) is above POLICY.noisy_cv, said at the top
    assert res["noise"]["too_noisy"] and 0.3 < res["noise"]["median_cv"] < 0.4
    assert lines[4].startswith(
        "**Host too noisy**: the runs' median per-size CV is 35 % (above 30 %)"
    )
    # the host state note, once for the whole table instead of once per band
    assert report.count(validate.HOST_NOTE) == 1 and "| held equal |" not in report


def test_the_same_runs_shown_equal_within_a_wide_tolerance_are_no_gain(run_cli, tmp_path):
    """A passing campaign's runs (15+15 pairs) judged with a 900 % tolerance (only a 10x difference
    counts): no band wins, every band's interval lies inside the tolerance, so nothing is undecided:
    NO-GAIN, exit 3, a failure in junit."""
    code, res, junit, report = reanalyse(run_cli, tmp_path, PASSING, tolerance=9)
    assert (code, res["verdict"], res["exit_code"]) == (3, "NO-GAIN", 3)
    assert not any(b["undecided"] for b in sized(res))
    assert counts(junit) == (1, 0)
    assert "no benefit" in module_case(junit).find("failure").get("message")
    assert report.splitlines()[2].startswith("NO-GAIN: 0 win · 0 lose · ")
    # a quiet host's campaign (median per-size CV 20 %): no noise warning
    assert res["noise"]["median_cv"] < 0.25 and not res["noise"]["too_noisy"]
    assert "Host too noisy" not in report


def test_a_losing_campaign_fails_with_a_failure_per_losing_band(run_cli, tmp_path):
    code, res, junit, report = reanalyse(run_cli, tmp_path, INTEL)
    lost = [b for b in res["bands"] if b["verdict"] == "lose"]
    assert (code, res["verdict"], res["exit_code"]) == (1, "FAIL", 1) and lost
    assert counts(junit)[0] == len(lost) + 1
    assert module_case(junit).find("failure") is not None
    assert report.splitlines()[2].startswith(
        "FAIL: %d win · %d lose · "
        % (
            sum(1 for b in sized(res) if b["verdict"] == "win"),
            sum(1 for b in sized(res) if b["verdict"] == "lose"),
        )
    )


def test_a_passing_campaign_is_green_and_says_its_held_equal_sentence_once(run_cli, tmp_path):
    code, res, junit, report = reanalyse(run_cli, tmp_path, PASSING)
    assert (code, res["verdict"], res["exit_code"]) == (0, "PASS", 0)
    fails, _ = counts(junit)
    assert fails == 0 and module_case(junit).find("system-out") is not None
    assert report.splitlines()[2].startswith("PASS: ")
    # every band held the host state equal by its pairs: said once, not a column of one sentence
    assert "| held equal |" not in report
    assert report.count("held equal in every band: by pairs (crossover test)") == 1


def colour_pixels(png, colour):
    """How many pixels of the PNG are (nearly) this matplotlib colour."""
    import matplotlib.colors
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    want = matplotlib.colors.to_rgb(colour)
    return int((abs(img - want).max(axis=-1) < 0.03).sum())


def test_plots_mark_each_band_edge_and_verdict(run_cli, tmp_path):
    """The losing campaign's plots: each judged band shaded in its verdict's colour between dashed
    edges, its verdict and gain written at the top; a benchmark with a losing band has red in its
    PNG, one without has none."""
    from tunedmpi.acceptance import report

    unpack_archive(INTEL[0], tmp_path / "a")
    run_cli("validate", "--reanalyse", tmp_path / "a" / INTEL[1], "--out", tmp_path / "out")
    (outdir,) = (tmp_path / "out").glob("*/")
    res = json.loads((outdir / "results.json").read_text())
    red = report.MARK_COLOURS["lose"]
    seen = set()
    for bench, rel in res["plots"].items():
        marks = report.band_marks(res, bench)
        bands = [b for b in sized(res) if b["benchmark"] == bench]
        assert len(marks) == len(bands) > 0
        for (lo, hi, label, colour), b in zip(marks, bands):
            word = "undecided" if b["undecided"] else b["verdict"]
            assert (lo, hi) == (b["sizes"][0] or b["sizes"][1], b["sizes"][-1])
            assert label == "%s %.2fx" % (word, b["gain"]) and colour == report.MARK_COLOURS[word]
        loses = any(b["verdict"] == "lose" for b in bands)
        seen.add(loses)
        assert (colour_pixels(outdir / rel, red) > 20) == loses, bench
    assert seen == {True, False}  # both kinds of plot were checked
