"""`tunedmpi regret`: a validated module against the per-size oracle of a separate campaign, on the
real-IMB validate campaign (tests/fixtures/campaigns/local-full-imb-osu, copied from the team's
shared fixtures) and the archived local sweep."""

import math
import subprocess

from conftest import FIXTURES, ROOT, unpack_archive
from tunedmpi import stats
from tunedmpi.bench import store
from tunedmpi.regenerate import regret
from tunedmpi.tables import schema

FULL = (
    FIXTURES / "campaigns" / "local-full-imb-osu"
)  # its results.json: tests/fixtures/campaigns/README.md
ARCHIVE = "local-1x2-4e73d17310"


def _campaign(tmp_path, archive=ARCHIVE):
    unpack_archive(archive, tmp_path)
    (cdir,) = store.campaigns(tmp_path / "results-store")
    return cdir


def test_regret_is_the_module_relative_time_over_the_oracle_size_by_size(tmp_path):
    cdir = _campaign(tmp_path)
    rows = {r[0]: r for r in regret.regret(FULL, [cdir], draws=60)}
    assert {"alltoall", "allgather", "allreduce", "put_latency"} <= set(rows)
    rel = regret._module(regret._module_runs(FULL)[0])
    orc = regret._best(regret._relative(regret._geometry_data([cdir], 1, 2)))
    bench, n, module_gain, oracle_gain, mean, worst, wsize = rows["allreduce"][:7]
    sizes = [s for s in rel["allreduce"] if s in orc["allreduce"]]
    assert n == len(sizes) and n >= 10
    ratios = [rel["allreduce"][s] / orc["allreduce"][s] for s in sizes]
    assert abs(mean - (stats.geomean(ratios) - 1) * 100) < 1e-9
    assert abs(worst - (max(ratios) - 1) * 100) < 1e-9 and wsize in sizes
    assert abs(module_gain - 1 / stats.geomean([rel["allreduce"][s] for s in sizes])) < 1e-9
    # the oracle includes the untuned baseline itself (relative time 1) at every size
    assert all(orc["allreduce"][s] <= 1.0 for s in sizes) and oracle_gain >= 1.0
    # every figure has its bootstrap interval, and a smooth one (the module's gain) holds its own figure
    for r in rows.values():
        assert r.gain_ci[0] <= r.gain <= r.gain_ci[1] and r.oracle_ci[0] < r.oracle_ci[1]
        assert r.regret_ci[0] < r.regret_ci[1]
    assert regret.regret(FULL, [cdir], draws=60) == list(
        rows.values()
    )  # fixed seed: the same intervals again


def test_the_command_prints_the_table_and_refuses_a_non_campaign(tmp_path):
    cdir = _campaign(tmp_path)
    exe = str(ROOT / ".venv/bin/tunedmpi")
    ok = subprocess.run(
        [exe, "regret", str(FULL), "--campaign", str(cdir), "--draws", "30"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        ok.stdout.startswith("| benchmark | sizes | module gain") and "| allgather |" in ok.stdout
    )
    assert "95 % bootstrap intervals (30 redraws" in ok.stdout
    bad = subprocess.run(
        [exe, "regret", str(FULL), "--campaign", str(tmp_path)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "not a results-store campaign" in bad.stderr


SEPARATE = "local-1x2-a174daa01c-separate"
TABLE = ROOT / "tuning-tables" / "local" / "openmpi-5.0.8.yaml"


def test_a_tables_choice_measured_inside_a_separate_campaign(tmp_path):
    # the committed local table against the separate run of its per-size stages (not pooled by tune)
    cdir = _campaign(tmp_path, SEPARATE)
    # the committed table has no bands at 1 x 2 (none was confirmed): give a copy of it two, so the
    # band lookup is checked too
    import yaml

    doc = yaml.safe_load(TABLE.read_text())
    (case,) = [
        c for c in doc["cases"] if (c["nodes"], c["ppn"], c["collective"]) == (1, 2, "alltoall")
    ]
    case["bands"] = [
        {"from": 0, "to": "32kb", "algorithm": "ignore"},
        {"from": "32kb", "to": "256kb", "algorithm": "pairwise"},
        {"from": "256kb", "to": None, "algorithm": "two_proc"},
    ]
    table = tmp_path / "banded.yaml"
    table.write_text(yaml.safe_dump(doc, sort_keys=False))
    rows = {r[0]: r for r in regret.table_regret(schema.load_table(str(table)), [cdir], 1, 2)}
    assert set(rows) == {"alltoall", "allgather", "allreduce", "bcast"}
    geo = regret._geometry_data([cdir], 1, 2)
    rel = regret._relative(geo)
    orc = regret._best(rel)
    cases = {
        c.collective: c for c in schema.load_table(str(table)).cases if (c.nodes, c.ppn) == (1, 2)
    }

    def measured(coll, alg):
        want = dict(
            cases[coll].settings["none"], **({"coll_tuned_%s_algorithm" % coll: alg} if alg else {})
        )
        (key,) = [
            k for k in rel if k[0] == coll + "-algorithm" and regret._same(geo[k]["config"], want)
        ]
        return {s: v for s, v in rel[key][coll].items() if s >= 1}

    def algorithm_at(coll, size):  # the band holding the size, read off the table by hand
        return next(
            (
                b.algorithm
                for b in cases[coll].bands or []
                if b.lo <= size and (b.hi is None or size < b.hi)
            ),
            0,
        )

    assert [b.algorithm for b in cases["alltoall"].bands] == [0, 2, 5]
    for coll in rows:
        default = measured(coll, 0)
        chosen = {s: measured(coll, algorithm_at(coll, s))[s] for s in default}
        bench, n, gain, oracle_gain, mean, worst, wsize = rows[coll][:7]
        ratios = [chosen[s] / orc[coll][s] for s in chosen]
        assert n == len(chosen) and abs(mean - (stats.geomean(ratios) - 1) * 100) < 1e-9
        assert abs(gain - 1 / stats.geomean(chosen.values())) < 1e-9 and oracle_gain >= gain
    exe = str(ROOT / ".venv/bin/tunedmpi")
    ok = subprocess.run(
        [exe, "regret", "--table", str(table), "--campaign", str(cdir)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and ok.stdout.startswith(
        "| benchmark | sizes | table's choice gain"
    ), ok.stderr
    both = subprocess.run(
        [exe, "regret", str(FULL), "--table", str(TABLE), "--campaign", str(cdir)],
        capture_output=True,
        text=True,
    )
    assert both.returncode == 2 and "one of them" in both.stderr


def _synthetic(runs_per_side, repeat=1):
    """Two modules over two sizes, the tuned one 1.5x faster, with whole-run slow spells (2x)."""
    import random

    rng = random.Random(3)
    base, tuned = [], []
    for _ in range(runs_per_side):
        for side, speed in ((base, 1.0), (tuned, 1.5)):
            spell = 2.0 if rng.random() < 0.25 else 1.0
            side.append({s: s * spell * rng.uniform(0.9, 1.1) / speed for s in (1, 2)})
    return {"x": ("latency_us", base * repeat, tuned * repeat)}


def test_the_intervals_come_from_redrawn_whole_runs_and_narrow_with_more_runs():
    def rows_of(runs):
        return lambda draw: [regret._row("x", regret._module(runs, draw)["x"], {1: 0.6, 2: 0.6})]

    runs = _synthetic(10)
    (one,) = regret._with_intervals(rows_of(runs), 300)
    assert one.gain_ci[0] <= one.gain <= one.gain_ci[1]
    assert regret._with_intervals(rows_of(runs), 300) == [
        one
    ]  # fixed seed: the same interval again
    (bare,) = regret._with_intervals(rows_of(runs), 0)
    assert bare.gain_ci is None and bare.gain == one.gain and "–" not in regret.report([bare])
    # the same runs measured four times over: the interval is about half as wide (1/sqrt(4))
    (four,) = regret._with_intervals(rows_of(_synthetic(10, repeat=4)), 300)

    def width(r):
        return math.log(r.gain_ci[1] / r.gain_ci[0])

    assert 0.3 < width(four) / width(one) < 0.75
    # the oracle here is fixed, so regret's interval is the gain's, inverted
    assert abs((1 + one.regret_ci[1] / 100) * one.gain_ci[0] - 1 / 0.6) < 0.05 * (1 / 0.6)


def test_a_host_state_compares_the_module_and_the_oracle_in_that_state_alone(tmp_path):
    import json

    import pytest

    from tunedmpi.errors import InputError

    cdir = _campaign(tmp_path)
    with pytest.raises(InputError) as err:  # made before validate recorded the host state
        regret.regret(FULL, [cdir], draws=0, state="fast")
    assert "records no host state" in str(err.value) and "leave out --state" in str(err.value)
    doc = json.loads((FULL / "results.json").read_text())
    for d in doc["per_size"].values():  # every third run of each module met the slow state
        d["host_states"] = {
            role: ["slow" if i % 3 == 0 else "fast" for i in range(len(d[role] or []))]
            for role in ("baseline", "tuned")
        }
    (tmp_path / "result").mkdir()
    (tmp_path / "result" / "results.json").write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:  # a campaign swept before the runner recorded it
        regret.regret(tmp_path / "result", [cdir], draws=0, state="fast")
    assert "no run of this campaign records the host state" in str(err.value)
    for path in cdir.rglob("*-rep*.json"):  # the campaign's repetition 1 met the slow state
        rec = json.loads(path.read_text())
        rec["host"] = (
            {"before_ns": 330.0, "after_ns": 320.0}
            if rec["rep"] == 1
            else {"before_ns": 95.0, "after_ns": 99.0}
        )
        path.write_text(json.dumps(rec))
    every, fast = (
        regret._module_runs(tmp_path / "result")[0],
        regret._module_runs(tmp_path / "result", "fast")[0],
    )
    assert fast["allreduce"][1] == [r for i, r in enumerate(every["allreduce"][1]) if i % 3]
    geo_all, geo_fast = (
        regret._geometry_data([cdir], 1, 2),
        regret._geometry_data([cdir], 1, 2, "fast"),
    )

    def reps(geo):
        return len(geo[next(k for k in geo if k[1] == "baseline")]["bench"]["allreduce"][1])

    assert reps(geo_fast) == reps(geo_all) - 1
    rows = regret.regret(tmp_path / "result", [cdir], draws=0, state="fast")
    assert {r.benchmark for r in rows} >= {"alltoall", "allreduce"}
    assert rows != regret.regret(tmp_path / "result", [cdir], draws=0)


SEPARATE_HOST = "local-1x2-fe02597a71-separate-host"


def test_a_real_campaigns_host_figures_fall_in_two_states_and_regret_keeps_one(tmp_path):
    """The separate run of 21:15 UTC (real IMB, the host probe around every run): its figures fall in
    two groups that the campaign-relative limit separates, and --state fast measures the table's
    choice and the oracle on the fast runs alone."""
    cdir = _campaign(tmp_path, SEPARATE_HOST)
    records = store.load_campaign(cdir)[1]
    labels, limit = stats.host_labels([r["host"] for r in records])
    figures = [v for r in records for v in r["host"].values()]
    assert len(records) == 330 and 120 < limit < 300
    assert not [v for v in figures if 0.8 * limit < v < 1.25 * limit]  # nothing near the limit
    assert labels.count("fast") > len(records) / 2 and {"slow", "changed"} <= set(labels)
    fast = regret.table_regret(schema.load_table(TABLE), [cdir], 1, 2, draws=0, state="fast")
    every = regret.table_regret(schema.load_table(TABLE), [cdir], 1, 2, draws=0)
    assert (
        {r.benchmark for r in fast}
        == {r.benchmark for r in every}
        == {"alltoall", "allgather", "allreduce", "bcast"}
    )
    assert [r.gain for r in fast] != [r.gain for r in every]


def _noisy_stage(speeds, runs, seed, sizes=tuple(2**k for k in range(12))):
    """geometry data of one stage: the baseline (time 1 per byte) and one configuration per speed,
    every run with a whole-run spell (25 %: 2x) and 10 % noise per size, as on this host."""
    import random

    rng = random.Random(seed)

    def reps(speed):
        out = []
        for _ in range(runs):
            spell = 2.0 if rng.random() < 0.25 else 1.0
            out.append({s: s * spell * math.exp(rng.gauss(0, 0.1)) / speed for s in sizes})
        return out

    geo = {("st", "baseline"): {"config": {}, "bench": {"x": ("latency_us", reps(1.0), 0)}}}
    for i, speed in enumerate(speeds):
        geo[("st", "c%d" % i)] = {
            "config": {"k": i},
            "bench": {"x": ("latency_us", reps(speed), 0)},
        }
    return geo


def test_the_cross_fitted_oracle_is_not_fooled_by_noise_where_the_same_runs_oracle_is():
    def gain(per):
        return 1 / stats.geomean(list(per.values()))

    same, fitted, agree = [], [], []
    for seed in range(24):  # six configurations exactly as fast as each other (1.3x the baseline)
        geo = _noisy_stage([1.3] * 6, 12, seed)
        rel = regret._relative(geo)
        # what any one of them measured here (the baseline's own noise is common to every figure)
        typical = stats.geomean([gain(rel[("st", "c%d" % i)]["x"]) for i in range(6)])
        same.append(gain(regret._best(rel)["x"]) / typical)
        orc, agrees = regret._cross_fitted(geo)
        fitted.append(gain(orc["x"]) / typical)
        agree.append(sum(agrees["x"].values()) / len(agrees["x"]))
    # the lowest of seven noisy figures per size stands well above them; picked on other runs: about them
    assert stats.geomean(same) > 1.1
    assert abs(math.log(stats.geomean(fitted))) < 0.04
    assert sum(agree) / len(agree) < 0.4  # the halves pick by chance (1 in 6 or 7)
    # one configuration truly best by far: both oracles find it and the halves agree on it
    found = []
    for seed in range(8):
        geo = _noisy_stage([1.3, 1.3, 2.0, 1.3], 12, 100 + seed)
        orc, agrees = regret._cross_fitted(geo)
        rel = regret._relative(geo)
        assert all(agrees["x"].values())
        found.append(gain(orc["x"]) / gain(rel[("st", "c2")]["x"]))
    assert abs(math.log(stats.geomean(found))) < 0.04


def test_the_cross_fitted_oracle_picks_on_one_half_and_measures_on_the_other():
    geo = _noisy_stage([1.3, 1.5], 6, 5, sizes=(8,))
    rel = [regret._relative(geo, half) for half in regret._halves(regret._as_measured)]
    orc, agree = regret._cross_fitted(geo)
    picks = [
        min(("st", "baseline"), ("st", "c0"), ("st", "c1"), key=lambda k: rel[h][k]["x"][8])
        for h in (0, 1)
    ]
    assert orc["x"][8] == stats.geomean([rel[1][picks[0]]["x"][8], rel[0][picks[1]]["x"][8]])
    assert agree["x"][8] == (picks[0] == picks[1])
    # each half is every other run of every configuration: the same rounds for all of them
    base = geo[("st", "baseline")]["bench"]["x"][1]
    assert regret._halves(regret._as_measured)[1](base) == base[1::2]
    # the row reports it with its regret and how often the halves agree; too few runs: no such figure
    row = regret._row("x", {8: 0.7}, {8: 0.6}, orc["x"], agree["x"])
    assert abs(row.fitted - 1 / orc["x"][8]) < 1e-12 and row.agree == (int(agree["x"][8]), 1)
    assert abs(row.fitted_regret - (0.7 / orc["x"][8] - 1) * 100) < 1e-9
    assert regret._cross_fitted(_noisy_stage([1.3], 3, 1))[0] == {}
    assert "| - | - | - |" in regret.report([regret._row("x", {8: 0.7}, {8: 0.6})])


def test_on_a_real_separate_run_the_same_runs_oracle_is_the_higher(tmp_path):
    """The separate run of 21:15 UTC: per-size winners among coll_tuned's algorithms are mostly
    noise there (the halves agree on few sizes), so the same-runs oracle stands above the
    cross-fitted one for every collective, and the command prints both."""
    cdir = _campaign(tmp_path, SEPARATE_HOST)
    rows = regret.table_regret(schema.load_table(TABLE), [cdir], 1, 2, draws=20)
    assert {r.benchmark for r in rows} == {"alltoall", "allgather", "allreduce", "bcast"}
    for r in rows:
        assert r.fitted < r.oracle and r.fitted_regret < r.regret_mean
        assert r.agree[0] <= r.agree[1] / 2 and r.agree[1] == r.sizes
        assert r.fitted_ci[0] <= r.fitted_ci[1] and r.fitted_regret_ci[0] <= r.fitted_regret_ci[1]
    out = subprocess.run(
        [
            str(ROOT / ".venv/bin/tunedmpi"),
            "regret",
            "--table",
            str(TABLE),
            "--campaign",
            str(cdir),
            "--draws",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "| cross-fitted oracle | regret against it | halves agree |" in out.stdout
    assert "picked on alternate runs and measured on the others" in out.stdout
