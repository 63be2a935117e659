"""`tunedmpi power`: the resampling study on small fixtures (tests/fixtures/power).

aa-campaign: a synthetic validate A/A campaign (the same module on both sides), 8 repetitions,
counterbalanced order (stats.pair_order), run noise 3 %, size noise 2 %, and the second run of
every pair 10 % slower. store/local-1x2-fixture: a results-store campaign whose baseline is
measured in two stages, plus one configuration 20 % faster in the second stage.
"""

import dataclasses
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunedmpi import stats
from tunedmpi.acceptance import power
from tunedmpi.errors import InputError

FIX = Path(__file__).parent / "fixtures" / "power"
AA, STORE = FIX / "aa-campaign", FIX / "store"


def test_load_reads_validate_directories_store_campaigns_and_their_parents():
    (aa,) = power.load([AA])
    assert aa.kind == "validate" and aa.aa and len(aa.runs) == 32  # 8 reps x 2 sides x 2 benchmarks
    (st,) = power.load([STORE])  # a directory holding a campaign
    assert st.kind == "store" and not st.aa and len(st.runs) == 15
    if (
        not st.timed
    ):  # round order: stage a's repetitions 1-5, then stage b's (file times do not confirm it)
        assert sorted({r.order for r in st.runs}) == [
            1.0,
            2.0,
            3.0,
            4.0,
            5.0,
            7.0,
            8.0,
            9.0,
            10.0,
            11.0,
        ]
    assert len(power.load([FIX])) == 2


def test_load_refuses_a_directory_without_campaigns(tmp_path):
    with pytest.raises(InputError):
        power.load([tmp_path])
    with pytest.raises(InputError):
        power.load([tmp_path / "missing"])


def test_pools_same_configuration_pairs_and_residuals():
    found = power.pools(power.load([AA, STORE]), 10)
    kinds = {(p.family, p.bench, len(p.units)) for p in found}
    assert ("same-config", "allreduce", 16) in kinds  # A/A: both sides are one configuration
    assert ("A/A pairs", "put_bw", 8) in kinds  # whole repetitions, order kept
    assert ("same-config", "allreduce", 10) in kinds  # the store baseline, both stages
    assert ("residual", "allreduce", 15) in kinds  # store: every (configuration, stage) centred
    assert not any(
        p.family == "same-config" and len(p.units) == 5 for p in found
    )  # too small: not resampled
    res = next(
        p for p in found if p.family == "residual" and p.bench == "allreduce" and len(p.units) == 15
    )
    assert all(set(u) == {4, 64, 1024, 4096, 65536} for u in res.units)  # size 0 is not compared


def test_noise_ICC_and_runs_needed():
    (aa,) = power.load([AA])
    runs = [r for r in aa.runs if r.bench == "allreduce"]
    n = power.noise(runs, power.bands_of(runs))
    # a 3 % run effect (and the 10 % second-run effect) shared by every size, 2 % per size
    assert 0.04 < n["<=1KB"]["sd"] < 0.12 and n["<=1KB"]["icc"] > 0.6 and n["<=1KB"]["runs"] == 16
    assert power.reps_needed(0.1, 1.3, 0.05, 2) == 5
    assert power.reps_needed(0.3, 1.3, 0.05, 2) == 26
    d = stats.Design(5, 10)
    assert power.design_power(0.05, 1.3, 0.05, 2, d, 5) > 0.99
    low = [power.design_power(sd, 1.3, 0.05, 2, d, 5) for sd in (0.1, 0.2, 0.3)]
    assert low == sorted(low, reverse=True)
    assert power.design_power(0.2, 1.3, 0.05, 2, d, 5) > power.design_power(
        0.2, 1.3, 0.05, 2, None, 5
    )


def test_the_second_run_effect_is_measured_in_an_A_A_campaign():
    (aa,) = power.load([AA])
    o = power.order_effects(aa)
    for bench in ("allreduce", "put_bw"):
        est, se, pairs = o["second"][bench]
        assert pairs == 8 and abs(est - math.log(1.1)) < 3 * se + 0.01, (bench, est, se)


def test_the_second_run_effect_is_not_claimed_when_tuned_always_ran_second(tmp_path):
    import json

    res = json.loads((AA / "results.json").read_text())
    res["modules"]["tuned"] = "openmpi-tuned/5.0.8"
    for r in res["runs"]:
        if r["role"] == "tuned":
            r["module"] = "openmpi-tuned/5.0.8"
    runs = sorted(
        res["runs"], key=lambda r: (r["rep"], r["run"], r["role"] != "baseline")
    )  # A B A B ...
    res["runs"] = runs
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "results.json").write_text(json.dumps(res))
    (ab,) = power.load([tmp_path / "ab"])
    assert set(power.order_effects(ab)["second"].values()) == {None}


def test_study_is_deterministic_and_finds_a_gain_at_low_noise():
    found = power.pools(power.load([AA]), 10)
    pool = next(p for p in found if p.family == "A/A pairs" and p.bench == "allreduce")
    d = stats.Design(5, 10)
    one = power.study(pool, random.Random(3), 40, 1.3, d, 5, 0.05, 0.05)
    assert one == power.study(pool, random.Random(3), 40, 1.3, d, 5, 0.05, 0.05)
    assert one["per_side"] == 5 and not one["two_looks"]  # 8 repetitions: no room for 5+5
    assert one["false"] <= 0.1 and min(one["power"].values()) == 1.0
    same = next(p for p in found if p.family == "same-config" and p.bench == "allreduce")
    r = power.study(same, random.Random(3), 40, 1.0001, None, 5, 0.05, 0.05)
    assert (
        r["false"] <= 0.1 and max(r["power"].values()) <= 0.1
    )  # no gain: "power" is the false rate


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tunedmpi.cli", "power"] + [str(a) for a in args],
        capture_output=True,
        text=True,
    )


def test_cli_prints_noise_order_and_resampling_in_seconds_and_reproducibly():
    started = time.monotonic()
    a = cli("--draws", 30, "--seed", 7, AA, STORE)
    assert a.returncode == 0, a.stderr
    assert time.monotonic() - started < 30
    for heading in (
        "## Run-to-run noise",
        "## Order and time effects",
        "## The campaign's verdict (what validate controls)",
        "## Per benchmark judged alone",
        "### Per benchmark",
        "## history's drift rule, A/A",
    ):
        assert heading in a.stdout
    assert "aa-campaign (A/A)" in a.stdout and "allreduce +" in a.stdout
    assert a.stdout == cli("--draws", 30, "--seed", 7, AA, STORE).stdout
    assert a.stdout != cli("--draws", 30, "--seed", 8, AA, STORE).stdout


def test_cli_bad_input(tmp_path):
    assert cli("--draws", 10, "--candidates", AA).returncode == 2  # research-only: removed
    bad = cli(tmp_path)
    assert bad.returncode == 2 and "results.json" in bad.stderr
    assert cli("--gain", "0.5", AA).returncode == 2


def test_pools_keep_the_host_state_and_the_study_holds_it_equal(tmp_path):
    """The A/A campaign with a slow host state in spells (runs 2.2x slower for either side, and the
    probe figures that say so): pools carry each run's state, the study judges within states, as
    validate does, and finds a 1.3x gain that the same draws judged as one group mostly miss."""
    import json

    res = json.loads((AA / "results.json").read_text())
    rng = random.Random(4)
    slow = False
    for r in res["runs"]:
        if rng.random() > 0.7:
            slow = rng.random() < 0.5
        r["host"] = {"before_ns": 320.0 if slow else 95.0, "after_ns": 330.0 if slow else 99.0}
        for s in r["series"].values():
            s["points"] = {
                k: v * (2.2 if slow else 1.0) ** (1 if s["metric"] == "latency_us" else -1)
                for k, v in s["points"].items()
            }
    (tmp_path / "aa-states").mkdir()
    (tmp_path / "aa-states" / "results.json").write_text(json.dumps(res))
    (src,) = power.load([tmp_path / "aa-states"])
    assert {r.state for r in src.runs} == {"fast", "slow"}
    found = power.pools([src], 10)
    same = next(p for p in found if p.family == "same-config" and p.bench == "allreduce")
    assert same.states == [r.state for r in src.runs if r.bench == "allreduce"]
    pairs = next(p for p in found if p.family == "A/A pairs" and p.bench == "allreduce")
    assert len(pairs.states) == len(pairs.units) and all(len(s) == 2 for s in pairs.states)
    held = power.study(same, random.Random(3), 60, 1.3, None, 8, 0.05, 0.05)
    one_group = dataclasses.replace(same, states=None)  # every run of a side as one group
    plain = power.study(one_group, random.Random(3), 60, 1.3, None, 8, 0.05, 0.05)
    assert held["false"] <= 0.1
    assert min(held["power"].values()) >= 0.8 and max(plain["power"].values()) <= 0.2


def paired_campaign(path, reps=16, first=10, second_slower=1.5, seed=5):
    """A synthetic validate campaign judged by the crossover test (first look >= POLICY.paired_min pairs):
    one module on both sides of each pair (A/B in name only), ABBA order (stats.pair_order); each
    pair shares a large slowness (30 %), its second run is `second_slower` times slower, and the
    two runs of a pair differ by 1 % otherwise. Only pairs kept together and in their order are
    quiet; any other resampling sees the 30 % and the order effect as noise."""
    import json

    rng = random.Random(seed)
    runs = []
    for rep in range(1, reps + 1):
        shared = math.exp(rng.gauss(0, 0.3))
        for k, role in enumerate(stats.pair_order(rep)):
            f = shared * (second_slower if k else 1.0) * math.exp(rng.gauss(0, 0.01))
            pts = {str(s): round(1.5 * (1 + s / 256.0) * f, 4) for s in (0, 4, 64, 512)}
            runs.append(
                dict(
                    run="collectives",
                    role=role,
                    rep=rep,
                    status="ok",
                    module="openmpi-tuned/5.0.8" if role == "tuned" else "openmpi/5.0.8",
                    series={"allreduce": dict(metric="latency_us", suite="imb", points=pts)},
                )
            )
    res = dict(
        tool="tunedmpi validate",
        site="local",
        set="full",
        suite="imb",
        repetitions=first,
        design=dict(first=first, final=first, extended=[], order="counterbalanced (ABBA)"),
        geometry=dict(nodes=1, ppn=2, np=2),
        modules={"baseline": "openmpi/5.0.8", "tuned": "openmpi-tuned/5.0.8"},
        runs=runs,
    )
    path.mkdir()
    (path / "results.json").write_text(json.dumps(res))
    return path


def test_a_paired_campaign_is_resampled_as_pairs_and_judged_by_validates_crossover_test(
    tmp_path, monkeypatch
):
    (src,) = power.load([paired_campaign(tmp_path / "paired")])
    assert src.design == stats.Design(10, 10) and stats.paired(src.design)
    found = power.pools([src])
    # one module's runs hold no pairs: with a paired design only pairs are resampled
    assert [(p.family, len(p.units), p.by_crossover) for p in found] == [
        ("residual pairs", 16, True)
    ]
    pool = found[0]
    pair_of = {id(x): i for i, u in enumerate(pool.units) for x in u}
    calls = []
    shipped = stats.test_bands

    def spy(bench, metric, base, tuned, *args, pairs=None, **kw):
        calls.append((base, tuned, pairs))
        return shipped(bench, metric, base, tuned, *args, pairs=pairs, **kw)

    monkeypatch.setattr(stats, "test_bands", spy)
    r = power.study(pool, random.Random(2), 30, 1.3, pool.design, 10, 0.05, 0.05)
    monkeypatch.setattr(stats, "test_bands", shipped)
    assert calls and all(pairs is not None for _, _, pairs in calls)
    assert len(calls) == 60  # per draw: the A/A draw, then its one band made 1.3x faster
    for base, tuned, pairs in calls[0::2]:  # A/A: the runs are the pool's own objects
        assert [p[:2] for p in pairs] == [(i, i) for i in range(10)]
        assert [p[2] for p in pairs] == [stats.pair_order(k)[0] == "baseline" for k in range(1, 11)]
        for i, j, baseline_first in pairs:
            n = pair_of[id(base[i])]
            assert pair_of[id(tuned[j])] == n  # the pair's two runs stay together ...
            ran_first = pool.units[n][0] if pool.baseline_first[n] else pool.units[n][1]
            assert (base[i] if baseline_first else tuned[j]) is ran_first  # ... and in their order
    assert r["false"] <= 0.1 and r["power"]["<=1KB"] >= 0.9

    # pairs broken, or their order lost: the 30 % and the 1.5x second run are noise, the gain is missed
    rng = random.Random(1)
    perm = rng.sample(range(16), 16)
    broken = dataclasses.replace(
        pool, units=[(a, pool.units[perm[i]][1]) for i, (a, _) in enumerate(pool.units)]
    )
    unordered = dataclasses.replace(  # half the pairs' order recorded wrongly
        pool, baseline_first=[f if i % 4 < 2 else not f for i, f in enumerate(pool.baseline_first)]
    )
    for other in (broken, unordered):
        o = power.study(other, random.Random(2), 30, 1.3, pool.design, 10, 0.05, 0.05)
        assert o["power"]["<=1KB"] <= 0.5, o


def test_cli_names_the_procedure_it_simulated(tmp_path):
    d = paired_campaign(tmp_path / "paired")
    own = cli("--draws", 10, d)
    assert own.returncode == 0, own.stderr
    assert "- paired: crossover test, 10 pairs (one look)" in own.stdout
    assert "| residual pairs | allreduce | 16 pairs | crossover test | 10 pairs |" in own.stdout
    five = cli("--draws", 10, "--repetitions", 5, d)  # validate judges 5 pairs unpaired
    assert five.returncode == 0, five.stderr
    assert "crossover" not in five.stdout and "unpaired test" in five.stdout
    assert cli("--max-repetitions", 10, d).returncode == 2


def test_the_campaign_is_judged_as_one_family_with_its_looks(tmp_path, monkeypatch):
    """campaign_study draws whole repetitions and judges every benchmark's bands as one family
    (stats.judge_family over all of them, as validate.analyse), A/A and with one band losing 10 %."""
    (src,) = power.load([AA])
    camp = power.campaign_of(src, stats.Design(4, 8))
    assert list(camp.benches) == ["allreduce", "put_bw"] and len(camp.reps) == 8
    families = []
    shipped = stats.judge_family

    def spy(tested, *args, **kw):
        families.append({r.benchmark for r, res in tested if res is not None})
        return shipped(tested, *args, **kw)

    monkeypatch.setattr(stats, "judge_family", spy)
    r = power.campaign_study(camp, random.Random(2), 20, 1.3, 0.05, 0.05)
    assert {"allreduce", "put_bw"} in families  # look 1: one family over both benchmarks
    assert r["tests"] == 4 and r["n"] == 8 and r["any"] <= 0.1
    assert r["win_all"] == 1.0 and min(r["caught"].values()) >= 0.8
    assert r["any"] == pytest.approx(r["fail"] + r["pass_"])
    # A/A: NO-GAIN and INCONCLUSIVE are no false call; INCONCLUSIVE's share is among the rest
    assert 0 <= r["inconclusive"] <= 1 - r["any"] + 1e-12


def test_the_drift_rule_is_measured_on_back_to_back_halves_of_a_campaign():
    """history's drift rule (stats.drifted) on the A/A campaign cut in two: its two halves are the
    same modules, so no drift; with every tuned run of the second half 1.5x slower (a real fall
    of the gain) its 4 bands drift."""
    (src,) = power.load([AA])
    tests, reps, timed, rate = power.drift_study(src, random.Random(1), 40, 0.05, 0.05)
    assert (tests, reps, timed) == (4, 8, 0) and rate <= 0.1
    for r in src.runs:
        if r.role == "tuned" and r.rep > 4:
            f = 1.5 if r.metric == "latency_us" else 1 / 1.5
            r.points = {s: v * f for s, v in r.points.items()}
    assert power.drift_study(src, random.Random(1), 10, 0.05, 0.05)[2] == 4
    (store,) = power.load([STORE])
    assert power.drift_study(store, random.Random(1), 10, 0.05, 0.05) is None  # no two modules
