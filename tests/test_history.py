"""`tunedmpi history`: the trend table, the plots, drift and its exit code, on real campaigns.

tests/fixtures/history/ holds three real `validate` result directories of one series (local site,
openmpi-tuned/5.0.8 vs openmpi/5.0.8, 1 x 2, quick set, probes), cut to three benchmarks and to the
keys history reads (README.md there). The drifted campaigns are derived from them here, by the
transformations named in each helper, never invented.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunedmpi.acceptance import history

FIX = Path(__file__).parent / "fixtures" / "history"
P1 = FIX / "local-quick-probes"  # 2026-11-22 21:04, older results format (Mann-Whitney bands)
P2 = FIX / "local-quick-probes-slurm"  # 2026-11-22 21:18, older format, through a one-node Slurm
P3 = FIX / "local-20261123T050113Z"  # 2026-11-23 05:01, current format (Yuen-Welch, two looks)
LATER = "2026-11-24T00:00:00+00:00"  # derived campaigns are dated after every real one


def _derive(src, dst, change):
    res = json.loads((src / "results.json").read_text())
    for data in res["per_size"].values():
        change(data)
    res["started"] = LATER
    dst.mkdir(parents=True)
    (dst / "results.json").write_text(json.dumps(res))
    return dst


def untuned_copy(src, dst):
    """`src` with its tuned runs replaced by its own baseline runs: what a tuned module whose tuning no
    longer takes effect (say, an MPI update renamed its variables) measures, without new noise."""
    return _derive(src, dst, lambda d: d.update(tuned=[dict(r) for r in d["baseline"]]))


def slower_copy(src, dst, factor):
    """`src` with every tuned run `factor` times slower (latency x factor, bandwidth / factor)."""

    def change(d):
        f = factor if d["metric"] == "latency_us" else 1 / factor
        d["tuned"] = [{s: v * f for s, v in r.items()} for r in d["tuned"]]

    return _derive(src, dst, change)


def _row(out, bench, band):
    return next(line for line in out.splitlines() if line.split()[:2] == [bench, band])


def test_three_campaigns_one_drifted_flags_the_bands_that_stopped_winning(run_cli, tmp_path):
    drifted = untuned_copy(P2, tmp_path / "local-drifted")
    code, out, err = run_cli("history", "--plots", tmp_path / "plots", P1, P2, drifted)
    assert code == 1, out + err
    assert "(3 campaigns)" in out and "#3" in out
    for bench in ("allreduce", "alltoall"):  # both won in #2 (2.15x, 1.42x) and now tie at 1.00x
        row = _row(out, bench, "1KB-64KB")
        assert "win" in row and "1.00x tie !" in row and "#3: won in #2" in row, row
    for bench, band in (
        ("put_latency", "<=1KB"),
        ("put_latency", "1KB-64KB"),
        ("alltoall", "<=1KB"),
    ):
        assert "!" not in _row(out, bench, band)  # ties before and after: no drift
    assert "drift in the newest campaign (#3): allreduce 1KB-64KB; alltoall 1KB-64KB" in out
    assert out.rstrip().splitlines()[-1].startswith("DRIFT: 2 band(s)")
    pngs = sorted(p.name for p in (tmp_path / "plots").rglob("*.png"))
    assert pngs == ["allreduce.png", "alltoall.png", "put_latency.png"]
    assert all(p.stat().st_size > 5000 for p in (tmp_path / "plots").rglob("*.png"))


def test_without_the_drifted_campaign_no_drift_and_exit_0(run_cli, tmp_path):
    code, out, err = run_cli("history", "--plots", tmp_path / "plots", P1, P2)
    assert code == 0, out + err
    assert "!" not in out and "drift in the newest campaign (#2): none" in out
    # the older format is re-judged with today's statistics: #2 stored FAIL (a Mann-Whitney loss of
    # alltoall <= 1 KB), which Welch's t calls a tie
    assert "PASS (stored FAIL)" in out and "re-judged" in out
    assert "0.86x tie" in _row(out, "alltoall", "<=1KB")


def test_current_format_uses_the_stored_verdicts(run_cli, tmp_path):
    code, out, err = run_cli(
        "history", "--plots", tmp_path / "plots", FIX
    )  # a folder of result directories
    assert code == 0, out + err
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("#3"))
    assert "local-20261123T050113Z" in line and "re-judged" not in line
    stored = {
        (b["benchmark"], b["band"]): b
        for b in json.loads((P3 / "results.json").read_text())["bands"]
    }
    for (bench, band), b in stored.items():
        if band != "reliability":
            assert _row(out, bench, band).split()[6:8] == ["%.2fx" % b["gain"], b["verdict"]]


def test_a_significant_fall_of_the_gain_is_drift_beyond_the_margin(run_cli, tmp_path):
    slow = slower_copy(P2, tmp_path / "slower", 1.5)
    code, out, _ = run_cli("history", "--plots", tmp_path / "plots", P2, slow)
    assert code == 1
    row = _row(out, "put_latency", "1KB-64KB")  # 1.15x tie -> 0.77x tie: no win lost, the gain fell
    assert "gain fell 1.15x -> 0.77x" in row and "(Holm)" in row, row
    assert "!" not in _row(out, "put_latency", "<=1KB")  # fell as much, but not significantly
    code, out, _ = run_cli("history", "--margin", "0.6", "--plots", tmp_path / "plots", P2, slow)
    assert "gain fell" not in out  # x0.67 is within a 60 % margin
    assert code == 1  # the lost wins still count


def test_change_test_estimates_the_ratio_of_gains():
    c2 = history.load_campaign(P2)
    same = history.change_test(
        c2.bands[("allreduce", "1KB-64KB")], c2.bands[("allreduce", "1KB-64KB")]
    )
    assert same == (1.0, 1.0)
    c1 = history.load_campaign(P1)
    ratio, p = history.change_test(
        c1.bands[("allreduce", "1KB-64KB")], c2.bands[("allreduce", "1KB-64KB")]
    )
    assert 1.0 < ratio < 1.5 and 0 < p < 1  # 1.75x -> 2.15x by the seed figures


def test_default_directory_site_filter_and_left_out_campaigns(run_cli, tmp_path, monkeypatch):
    results = tmp_path / "validate-results"
    for src in (P1, P2):
        shutil.copytree(src, results / src.name)
    (results / "local-20261124T000000Z").mkdir()
    (results / "local-20261124T000000Z" / "results.json").write_text(
        json.dumps(
            dict(
                json.loads((P1 / "results.json").read_text()),
                verdict="COULD-NOT-RUN",
                started=LATER,
            )
        )
    )
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("history")
    assert code == 0 and "(2 campaigns)" in out and "could not run (no data): left out" in err
    assert (tmp_path / "validate-history").is_dir()
    code, _, err = run_cli("history", "--site", "oci-bm-optimized3.36")
    assert code == 2 and "no campaign with data for site oci-bm-optimized3.36" in err


@pytest.mark.parametrize(
    "content, key",
    [
        ('{"tool": "tunedmpi validate", "started": "2026', "(file): not JSON"),
        ('{"started": "2026-11-22T21:04:29+00:00"}', "tool: not a validation result"),
        (None, "per_size: unknown results format"),
        ("[1, 2]", "tool: not a validation result"),
    ],
)
def test_unknown_formats_are_left_out_with_the_file_and_the_fix(run_cli, tmp_path, content, key):
    """One campaign history cannot read is left out, said with the file and the fix (issue 42.12:
    it used to stop the history of every series); when none is left, exit 2."""
    bad = tmp_path / "local-bad"
    bad.mkdir()
    if content is None:  # a results file from before per-size data was kept
        res = json.loads((P1 / "results.json").read_text())
        del res["per_size"]
        content = json.dumps(res)
    (bad / "results.json").write_text(content)
    code, out, err = run_cli("history", "--plots", tmp_path / "plots", P1, bad)
    assert code == 0 and "(1 campaign)" in out and err.strip().endswith(": left out"), err
    assert (
        str(bad / "results.json") in err and key in err and "fix: history reads results.json" in err
    ), err
    code, out, err = run_cli("history", "--plots", tmp_path / "plots", bad)
    assert code == 2 and err.count("\n") == 1 and str(bad / "results.json") in err and key in err


def test_missing_and_empty_directories(run_cli, tmp_path):
    code, _, err = run_cli("history", tmp_path / "nowhere")
    assert code == 2 and "no such directory" in err
    code, _, err = run_cli("history", tmp_path)
    assert code == 2 and "no validation result here" in err


def test_the_command_states_its_rule_and_never_shows_a_traceback(tmp_path):
    tunedmpi = [sys.executable, "-m", "tunedmpi.cli"]
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PATH": "/usr/bin:/bin"}
    helptext = subprocess.run(
        tunedmpi + ["history", "--help"], capture_output=True, text=True, env=env
    ).stdout
    flat = " ".join(helptext.split())
    assert "latest earlier campaign of the same series in which the band won" in flat
    assert (
        "margin" in flat and "Holm" in flat and "Exit 0: no drift; 1: drift; 2: bad input" in flat
    )
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "results.json").write_text("\0garbage")
    proc = subprocess.run(
        tunedmpi + ["history", str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "not JSON" in proc.stderr
