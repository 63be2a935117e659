"""One procedure (issue 39): validate's verdict and power's simulation of it are the same code
path, stats.Procedure. Fed the same runs, validate.analyse and power.judge_campaign give every band
the same test, p, level, look and verdict, through both looks. No MPI needed."""

import math
import random

import pytest

from tunedmpi import stats
from tunedmpi.acceptance import power, validate
from tunedmpi.bench import suites

SIZES = (1, 4, 16, 64, 256, 1024, 4096)
# benchmark -> (its run, true gain of the tuned module, run-to-run noise)
BENCHES = {
    "allreduce": ("collectives", 1.1, 0.08),
    "bcast": ("collectives", 1.0, 0.003),
    "put_latency": ("put_latency", 1.3, 0.03),
    "get_latency": ("get_latency", 1.0, 0.1),
}


def campaign(reps, seed):
    """RunRecords of a campaign measured as validate measures it (ABBA per run position)."""
    rng = random.Random(seed)
    runs = [
        suites.Run(name, "osu", tuple(b for b, v in BENCHES.items() if v[0] == name), (), 2)
        for name in ("collectives", "put_latency", "get_latency")
    ]
    records = []
    for rep in range(1, reps + 1):
        for index, run in enumerate(runs):
            for role in stats.pair_order(rep, index):
                series = {}
                for bench in run.expect:
                    _, gain, sd = BENCHES[bench]
                    f = math.exp(rng.gauss(0, sd)) / (gain if role == "tuned" else 1.0)
                    pts = {s: round((2.0 + s / 512.0) * f, 4) for s in SIZES}
                    series[bench] = {"metric": "latency_us", "suite": "osu", "points": pts}
                records.append(
                    validate.RunRecord(run.name, role, "m", rep, 1, "ok", 0, 1.0, "l", [], series)
                )
    return runs, records


def as_drawn(runs, records, design):
    """The same runs as power draws a campaign: {benchmark: (baseline runs, tuned runs, pairs)}."""
    final, first = validate.attempts(records)
    draw, run_of = {}, {}
    for index, run in enumerate(runs):
        reps = sorted({rep for (name, _, rep) in final if name == run.name})
        for bench in run.expect:
            side = {
                role: [final[(run.name, role, rep)].series[bench]["points"] for rep in reps]
                for role in validate.ROLES
            }
            pairs = None
            if stats.paired(design):
                pairs = stats.pairs_of(
                    range(len(reps)),
                    range(len(reps)),
                    lambda k, name=run.name: first[(name, reps[k])] == "baseline",
                )
            draw[bench] = (side["baseline"], side["tuned"], pairs)
            run_of[bench] = run.name
    benches = {bench: ("latency_us", {}) for bench in draw}
    return power.Campaign("same", design, benches, [], False, {}, run_of), draw


@pytest.mark.parametrize("first, seed", [(5, 3), (5, 11), (5, 1), (10, 7), (10, 1)])
def test_validate_and_power_judge_the_same_runs_alike(first, seed):
    design = stats.Design(*validate.POLICY.looks(first))
    runs, records = campaign(design.final, seed)
    opts = validate.Options(site="local", tuned="t/1", baseline="b/1", repetitions=first)
    asked = []

    def extend(
        undecided,
        look,
    ):  # the runs are measured already: validate's choice of what to judge again
        asked.append(sorted(undecided))
        again = {run.name for run in runs if set(run.expect) & set(undecided)}
        return [b for run in runs if run.name in again for b in run.expect]

    judged = validate.analyse(opts, runs, records, design, extend)
    camp, draw = as_drawn(runs, records, design)
    simulated, extended = power.judge_campaign(camp, draw, {}, opts.tolerance, opts.alpha, {})
    keys = ("test", "p_value", "level", "look", "verdict", "n_tuned", "pairs")
    want = {
        (b.benchmark, b.band): tuple(getattr(b, k) for k in keys)
        for b in judged.bands
        if b.band != "reliability"
    }
    got = {k: tuple(getattr(r, f) for f in keys) for k, r in simulated.items()}
    assert got == want
    assert extended == bool(asked and asked[0])
    assert stats.module_verdict(list(simulated.values())) == judged.verdict


def test_what_is_judged_at_look_2_is_what_was_measured_again():
    """Seed 3 of the comparison above: allreduce and get_latency are undecided at look 1. What is
    judged again is what extend says was measured again (default: the undecided benchmarks); power
    extends as validate measures, every benchmark of an extended run, so bcast, decided at look 1
    but measured in allreduce's run, is judged again; put_latency keeps its look-1 bands."""
    design = stats.Design(5, 10)
    runs, records = campaign(design.final, 3)
    opts = validate.Options(site="local", tuned="t/1", baseline="b/1", repetitions=5)
    asked = []
    out = validate.analyse(
        opts, runs, records, design, lambda u, look: asked.append(u) or ["allreduce"]
    )
    assert "bcast" not in asked[0] and "allreduce" in asked[0]
    looks = {b.benchmark: b.look for b in out.bands if b.band == "<=1KB"}
    assert looks == {"allreduce": 2, "bcast": 1, "put_latency": 1, "get_latency": 1}
    out = validate.analyse(opts, runs, records, design)  # default: the undecided benchmarks only
    looks = {b.benchmark: b.look for b in out.bands if b.band == "<=1KB"}
    assert looks == {"allreduce": 2, "bcast": 1, "put_latency": 1, "get_latency": 2}
    camp, draw = as_drawn(runs, records, design)
    simulated, _ = power.judge_campaign(camp, draw, {}, 0.05, 0.05, {})
    assert {k[0]: r.look for k, r in simulated.items() if k[1] == "<=1KB"} == {
        "allreduce": 2,
        "bcast": 2,  # power extends as validate measures: the whole run
        "put_latency": 1,
        "get_latency": 2,
    }
