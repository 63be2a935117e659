"""validate --budget/--max-pairs (issue 40, item 3): a budget design keeps measuring undecided bands
at looks fixed before the first (1, 2, 4 ... x the first look's pairs), alpha split evenly over
them (Bonferroni over looks), so the campaign's false-verdict rate stays at most alpha whatever the
looks' dependence and wherever the budget stops. The rule on synthetic data, validate and power
judging alike under it, power's A/A rate on an archived campaign, and one real run."""

import json
import math
import random
import subprocess

import pytest

import lmod
import test_procedure
from conftest import ROOT, VERDICT_EXITS, assert_verdict, unpack_archive
from test_procedure import BENCHES, as_drawn, campaign
from tunedmpi import stats
from tunedmpi.acceptance import power, power_report, validate
from tunedmpi.policy import POLICY


def test_the_looks_double_up_to_the_cap_and_split_alpha_evenly():
    d = stats.Design.budgeted(5)  # no --max-pairs: POLICY.budget_looks looks
    assert d.schedule == (5, 10, 20, 40, 80) and len(d.schedule) == POLICY.budget_looks
    assert (d.first, d.final) == (5, 80)
    assert d.levels(0.05) == (pytest.approx(0.01),) * 5
    assert stats.Design.budgeted(5, 30).sizes() == (5, 10, 20, 30)
    assert stats.Design.budgeted(15, 15).levels(0.05) == (0.05,)  # one look: all of alpha
    # without a budget the two looks stand: Pocock's 0.0294 at 5 + 5
    assert stats.Design(5, 10).sizes() == (5, 10) and stats.Design(5, 10).schedule is None
    assert "Bonferroni" in d.describe(0.05) and "Pocock" in stats.Design(5, 10).describe(0.05)


def test_bonferroni_over_looks_keeps_alpha_where_every_look_at_alpha_does_not():
    """Brute force, a true null: Welch's t at the looks 5/10/20/40 of one sample pair. Rejecting
    at alpha / 4 per look keeps the rate below alpha; at alpha per look (naive peeking) it is far
    above it."""
    rng = random.Random(7)
    looks, draws, split, naive = (5, 10, 20, 40), 1500, 0, 0
    for _ in range(draws):
        a = [rng.gauss(0, 1) for _ in range(looks[-1])]
        b = [rng.gauss(0, 1) for _ in range(looks[-1])]
        p = [stats.welch(a[:n], b[:n]).p for n in looks]
        split += min(p) <= 0.05 / len(looks)
        naive += min(p) <= 0.05
    assert split / draws <= 0.05 and naive / draws > 0.08, (split, naive)


OPTS = validate.Options(site="local", tuned="t/1", baseline="b/1", repetitions=5)


def judged(monkeypatch, design, gains_and_noise, seed=1, measured=None):
    """validate.analyse under `design` on a synthetic campaign (test_procedure's, with these
    benchmarks' (run, gain, noise)) of `measured` repetitions (default: all); extend records the
    looks asked for, each measuring (as validate) every run holding an undecided benchmark."""
    for bench, value in gains_and_noise.items():
        monkeypatch.setitem(test_procedure.BENCHES, bench, value)
    runs, records = campaign(measured or design.final, seed)
    asked = []

    def extend(undecided, look):
        asked.append(look)
        if measured is not None and design.sizes()[look - 1] > measured:
            return []  # the budget is spent: no more runs
        again = {run.name for run in runs if set(run.expect) & set(undecided)}
        return [b for run in runs if run.name in again for b in run.expect]

    return validate.analyse(OPTS, runs, records, design, extend), asked


EVERY = ("allreduce", "bcast", "put_latency", "get_latency")


def test_a_big_effect_is_decided_at_the_first_look(monkeypatch):
    design = stats.Design.budgeted(5, 40)
    out, asked = judged(monkeypatch, design, {b: (BENCHES[b][0], 1.5, 0.01) for b in EVERY})
    bands = [b for b in out.bands if b.band != "reliability"]
    assert out.verdict == stats.PASS and {b.look for b in bands} == {1}
    assert asked == [2] and all(b.verdict == "win" for b in bands)  # asked once, nothing to do


def test_undecided_bands_are_measured_look_after_look_up_to_the_cap(monkeypatch):
    """Noise of 30 % and no effect: undecided at every look; judged at all four looks on their
    schedule's repetitions, each at its Holm share of alpha / 4, never beyond the cap."""
    design = stats.Design.budgeted(5, 40)
    out, asked = judged(monkeypatch, design, {b: (BENCHES[b][0], 1.0, 0.3) for b in EVERY}, seed=2)
    bands = [b for b in out.bands if b.band != "reliability"]
    assert asked == [2, 3, 4]  # a next look while undecided; none after the last
    last = [b for b in bands if b.look == 4]
    assert last and all(b.n_tuned == 40 for b in last)
    # the split: nothing rejected, so every band's level is Holm's alpha / m, divided by the 4 looks
    assert [b.level for b in bands] == [pytest.approx(0.05 / len(bands) / 4)] * len(bands)
    assert out.verdict in (stats.INCONCLUSIVE, stats.NO_GAIN)


def test_a_spent_budget_ends_the_looks_and_judges_at_the_last_one_made(monkeypatch):
    design = stats.Design.budgeted(5, 40)
    out, asked = judged(
        monkeypatch, design, {b: (BENCHES[b][0], 1.0, 0.3) for b in EVERY}, 2, measured=10
    )
    bands = [b for b in out.bands if b.band != "reliability"]
    assert asked == [2, 3] and max(b.look for b in bands) == 2
    assert all(b.n_tuned <= 10 for b in bands)


def test_a_gain_hidden_by_noise_at_the_first_look_is_found_at_a_later_one(monkeypatch):
    design = stats.Design.budgeted(5, 40)
    out, _ = judged(monkeypatch, design, {"put_latency": ("put_latency", 1.15, 0.12)}, seed=4)
    put = [b for b in out.bands if b.benchmark == "put_latency" and b.band != "reliability"]
    assert {b.verdict for b in put} == {"win"} and min(b.look for b in put) > 1


@pytest.mark.parametrize("seed", [1, 3, 11])
def test_validate_and_power_judge_a_budget_campaign_alike(seed):
    design = stats.Design.budgeted(5, 20)
    runs, records = campaign(design.final, seed)

    def extend(undecided, look):
        again = {run.name for run in runs if set(run.expect) & set(undecided)}
        return [b for run in runs if run.name in again for b in run.expect]

    got = validate.analyse(OPTS, runs, records, design, extend)
    camp, draw = as_drawn(runs, records, design)
    simulated, _ = power.judge_campaign(camp, draw, {}, OPTS.tolerance, OPTS.alpha, {})
    keys = ("test", "p_value", "level", "look", "verdict", "n_tuned")
    want = {
        (b.benchmark, b.band): tuple(getattr(b, k) for k in keys)
        for b in got.bands
        if b.band != "reliability"
    }
    assert {k: tuple(getattr(r, f) for f in keys) for k, r in simulated.items()} == want


def test_power_simulates_the_budget_design_and_its_a_a_rate_stays_within_alpha(tmp_path):
    """An archived 30-pair --full campaign resampled as A/A campaigns (residuals) under validate
    --repetitions 5 --max-pairs 30 (looks 5/10/20/30, alpha / 4 each), judged by validate's own
    procedure: any false win or loss in at most alpha of them, within Monte-Carlo error (80
    draws: +- 0.048 at 5 %)."""
    name = "validate-local-20261123T205744Z"
    unpack_archive(name, tmp_path)
    (src,) = power.load([tmp_path])
    design = stats.Design.budgeted(5, 30)
    camp = power.campaign_of(src, design)
    rng, draws, false, looks = random.Random(1), 80, 0, []
    for _ in range(draws):
        draw = power._campaign_draw(camp, rng, power.drawn(design, len(camp.reps)))
        res, _ = power.judge_campaign(camp, draw, {}, 0.05, 0.05, {})
        false += any(r.verdict in ("win", "lose") for r in res.values())
        looks.append(max(r.look for r in res.values()))
    rate = false / draws
    assert rate <= 0.05 + 1.96 * math.sqrt(0.05 * 0.95 / draws), rate
    assert max(looks) > 1  # the draws are extended: later looks are simulated, not skipped
    text = power_report.render(power.compute([tmp_path], draws=10, repetitions=5, max_pairs=30))
    assert "budget: looks at 5/10/20/30 while undecided; Bonferroni level 0.0125 per look" in text
    from tunedmpi.errors import InputError

    with pytest.raises(InputError, match="--max-repetitions"):  # two looks or a budget: one
        power.compute([tmp_path], draws=10, repetitions=5, final=10, max_pairs=30)


needs_mpi = [
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
    pytest.mark.skipif(
        not (ROOT / ".venv/bin/mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
    ),
]


def run_validate(out, *args):
    proc = subprocess.run(
        [str(ROOT / "validate" / "run.sh"), "--probes", "--site", "local", "--quick"]
        + ["--benchmarks", "put_latency", "--repetitions", "3", "--out", str(out), *args],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    dirs = sorted(d for d in out.iterdir() if d.is_dir()) if out.is_dir() else []
    return proc, dirs


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-pairs", "2"], "--max-pairs 2: fewer than the 3 pairs of the first look"),
        (["--budget", "45x"], "is not a time such as 45m"),
        (["--budget", "45m", "--no-extend"], "--no-extend forbids it"),
    ],
)
def test_impossible_budgets_exit_2_at_once(tmp_path, args, message):
    proc, dirs = run_validate(tmp_path / "out", *args)
    assert proc.returncode == 2 and message in proc.stderr and not dirs, proc.stderr


@needs_mpi[0]
@needs_mpi[1]
def test_a_real_budget_campaign_records_its_looks_and_is_reanalysed_alike(tmp_path):
    """validate/run.sh --max-pairs 6 --budget 10m on put_latency's probe, 3 pairs at the first
    look: looks at 3 and 6 pairs, alpha / 2 each, the second made only while a band is undecided;
    --reanalyse judges the same runs by the same looks. With --budget 1s the first look has spent
    it: no second look, whatever the bands."""
    proc, dirs = run_validate(tmp_path / "out", "--max-pairs", "6", "--budget", "10m")
    assert proc.returncode in VERDICT_EXITS and len(dirs) == 1, proc.stderr[-3000:]
    res = json.loads((dirs[0] / "results.json").read_text())
    assert_verdict(proc.returncode, res, proc.stderr[-3000:])
    design = res["design"]
    assert (design["schedule"], design["rule"], design["budget_s"]) == (
        [3, 6],
        "Bonferroni over looks",
        600.0,
    )
    made = design["looks"]
    assert made[0] == {"look": 1, "pairs": 3, "alpha": 0.025, "runs": ["put_latency"]}
    assert max(r["rep"] for r in res["runs"]) == made[-1]["pairs"] == design["final"]
    assert design["stopped"] == ("last look" if len(made) == 2 else "every band decided")
    bands = [b for b in res["bands"] if b["band"] != "reliability"]
    assert {b["look"] for b in bands} <= set(range(1, len(made) + 1))
    assert "Bonferroni over looks: level 0.025 per look" in (dirs[0] / "report.md").read_text()
    again = subprocess.run(
        [str(ROOT / "validate" / "run.sh"), "--reanalyse", str(dirs[0])]
        + ["--out", str(tmp_path / "again")],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    (redone,) = sorted((tmp_path / "again").iterdir())
    assert again.returncode == proc.returncode, again.stderr
    assert json.loads((redone / "results.json").read_text())["bands"] == res["bands"]

    proc, dirs = run_validate(tmp_path / "spent", "--budget", "1s")
    assert proc.returncode in VERDICT_EXITS and len(dirs) == 1, proc.stderr[-3000:]
    res = json.loads((dirs[0] / "results.json").read_text())
    assert_verdict(proc.returncode, res, proc.stderr[-3000:])
    design = res["design"]
    assert design["schedule"] == [3, 6, 12, 24, 48] and len(design["looks"]) == 1
    assert design["stopped"].startswith("budget: look 2") or design["stopped"] == (
        "every band decided"
    )


def test_a_damaged_schedule_is_one_error_naming_the_key():
    from tunedmpi.acceptance import results
    from tunedmpi.errors import InputError

    good = {"first": 5, "final": 10, "schedule": [5, 10, 20]}  # stopped at look 2 of 3
    assert results.design_from(good) == stats.Design.budgeted(5, 20)
    for bad in ([5, "10"], [10, 5], [5, 20], "5,10", [4, 10]):
        with pytest.raises(InputError, match="design.schedule"):
            results.design_from(dict(good, schedule=bad), "x/results.json")
