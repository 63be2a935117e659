"""Seed 002's broadcast pipeline model (tunedmpi.regenerate.bcastmodel): the segment size against a
brute-force minimum of the cost equations, the paper's own numbers, bands that the real tuning-table
checker accepts, and the model-vs-measured report. Pure Python."""

import math

import pytest

from tunedmpi.errors import InputError
from tunedmpi.regenerate import bcastmodel as bm
from tunedmpi.tables import schema

IMB_SIZES = [0] + [2**i for i in range(21)]  # -msglog 0:20


# ------------------------------------------------------------ the model


def brute_force_minimum(cost, hi):
    """argmin of a convex cost over m in (0, hi], by golden-section search on log m."""
    a, b = 0.0, math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        c, d = b - g * (b - a), a + g * (b - a)
        if cost(math.exp(c)) < cost(math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


@pytest.mark.parametrize(
    "L, B, k, M",
    [
        (
            4.29,
            6640.0,
            11,
            1 << 20,
        ),  # seed 002 Bintree3d, 3072 ranks 1D: eq. 7, k = ceil(log2 3072) - 1
        (4.29, 6640.0, 11, 1 << 26),
        (3.94, 10868.0, 62, 1 << 20),  # this machine's PingPong fit, a 64-rank pipeline
    ],
)
def test_eq7_is_the_minimum_of_eq6(L, B, k, M):
    depth = k + 1

    def eq6(m):
        return (depth + M / m - 1) * (L + m / B)

    assert bm.optimal_segment(L, B, M, k) == pytest.approx(brute_force_minimum(eq6, M), rel=1e-6)
    assert bm.predict(L, B, M, k, 4096) == pytest.approx(eq6(4096))


def test_the_papers_bintree3d_numbers():
    # 3072 nodes, one axis: k = ceil(log2 3072) + 0 + 0 - 1 = 11; L = 4.29 us, B = 6.64 GB/s
    assert bm.optimal_segment(4.29, 6640.0, 1 << 20, 11) == pytest.approx(52109.4, abs=0.5)
    assert bm.segment_size(4.29, 6640.0, 1 << 20, 11) == 65536  # 32 KB and 64 KB straddle it
    assert bm.predict(4.29, 6640.0, 1 << 20, 11, 65536) < bm.predict(
        4.29, 6640.0, 1 << 20, 11, 32768
    )


def test_eq5_as_printed_is_not_the_minimum_of_eq4():
    """Differentiating eq. 4 gives k = 6 (N_X + N_Y + N_Z - 3); eq. 5 prints - 2. The model follows
    the derivative (docs/bcast-model.md); with k passed in, either can be used."""
    L, B, M, n = 1.73, 6340.0, 1 << 24, 3072 + 1 + 1

    def eq4(m):
        return (n + M / (6 * m) - 3) * (L + m / B)

    best = brute_force_minimum(eq4, M)
    assert bm.optimal_segment(L, B, M, 6 * (n - 3)) == pytest.approx(best, rel=1e-6)
    assert bm.optimal_segment(L, B, M, 6 * (n - 2)) != pytest.approx(best, rel=1e-4)
    assert bm.predict(L, B, M, 6 * (n - 3), 4096, streams=6) == pytest.approx(eq4(4096))


@pytest.mark.parametrize("ranks", [3, 4, 16, 64, 1024])
def test_segment_size_is_the_best_power_of_two(ranks):
    L, B = 3.94, 10868.0
    k = ranks - 2  # pipeline: a chain of ranks - 1 hops (docs/bcast-model.md)
    for M in IMB_SIZES[1:] + [3 << 20, 1 << 28]:
        seg = bm.segment_size(L, B, M, k)
        candidates = [0] + [1 << j for j in range(31) if (1 << j) < M]
        best = min(candidates, key=lambda s: (bm.predict(L, B, M, k, s), s))
        assert bm.predict(L, B, M, k, seg) == pytest.approx(
            bm.predict(L, B, M, k, best), rel=1e-12
        ), (M, seg, best)
        assert seg == 0 or (seg & (seg - 1) == 0 and seg < M)


def test_one_hop_never_segments():
    # 2 ranks: every Open MPI broadcast is one transfer, k = 0, a segment only adds latency
    assert bm.optimal_segment(3.94, 10868.0, 1 << 20, 0) == math.inf
    assert all(bm.segment_size(3.94, 10868.0, m, 0) == 0 for m in IMB_SIZES)
    assert bm.predict(3.94, 10868.0, 1 << 20, 0, 0) == pytest.approx(3.94 + (1 << 20) / 10868.0)


@pytest.mark.parametrize(
    "L, B, k, M",
    [
        (-1, 100.0, 1, 10),
        (1, 0.0, 1, 10),
        (1, 100.0, -1, 10),
        (1, 100.0, 1, -5),
        (1, float("nan"), 1, 10),
        (True, 100.0, 1, 10),
    ],
)
def test_model_refuses_bad_arguments(L, B, k, M):
    with pytest.raises(InputError) as err:
        bm.segment_size(L, B, M, k)
    assert err.value.fix


# ---------------------------------------------------------------- bands


TABLE = """schema: 1
platform: bcast-model-test
title: "bcast bands made by tunedmpi.regenerate.bcastmodel"
mpi: {flavour: openmpi, version: 5.0.8}
ucx_version: "1.18"
provenance:
  document: "tests/test_bcastmodel.py"
  platform: "this build machine"
  benchmark: "IMB-MPI1 PingPong fixture"
  command: "none"
  method: "seed 002 eqs. 4-7"
  date: null
baseline:
  text: "module load openmpi/5.0.8"
  knobs: {pml: default}
cases:
  - nodes: %d
    ppn: %d
    collective: bcast
    section: "model"
    settings: {none: {}}
    bands: %s
"""


def checked(bands, nodes, ppn):
    """The bands through the real tuning-table checker (schema.py and rulesfile.render)."""
    import json

    table = schema.load_table("model.yaml", TABLE % (nodes, ppn, json.dumps(bands)))
    return [(b.lo, b.hi, b.name, b.segsize, b.faninout) for b in table.cases[0].bands]


def test_bands_merge_sizes_and_pass_the_table_checker():
    L, B = 3.94, 10868.0  # the PingPong fit above 4 KB
    k = 62  # pipeline on 64 ranks
    got = bm.bands(L, B, IMB_SIZES, k)
    assert got == [
        {"from": 0, "to": 2048, "algorithm": "pipeline", "segsize": 0},
        {"from": 2048, "to": 4096, "algorithm": "pipeline", "segsize": 1024},
        {"from": 4096, "to": 16384, "algorithm": "pipeline", "segsize": 2048},
        {"from": 16384, "to": 65536, "algorithm": "pipeline", "segsize": 4096},
        {"from": 65536, "to": 262144, "algorithm": "pipeline", "segsize": 8192},
        {"from": 262144, "to": 1048576, "algorithm": "pipeline", "segsize": 16384},
        {"from": 1048576, "to": None, "algorithm": "pipeline", "segsize": 32768},
    ]
    for band in got:  # every size in a band gets that band's segment size
        assert all(
            bm.segment_size(L, B, m, k) == band["segsize"]
            for m in IMB_SIZES
            if m >= band["from"] and (band["to"] is None or m < band["to"])
        )
    assert checked(got, 1, 64) == [(b["from"], b["to"], "pipeline", b["segsize"], 0) for b in got]


def test_two_ranks_is_one_unsegmented_band_and_chain_carries_its_fanout():
    assert bm.bands(3.94, 10868.0, IMB_SIZES, 0) == [
        {"from": 0, "to": None, "algorithm": "pipeline", "segsize": 0}
    ]
    chain = bm.bands(3.94, 10868.0, IMB_SIZES, 14, algorithm=2, faninout=1)
    assert {b["algorithm"] for b in chain} == {"chain"} and {b["faninout"] for b in chain} == {1}
    assert checked(chain, 1, 16) == [(b["from"], b["to"], "chain", b["segsize"], 1) for b in chain]


@pytest.mark.parametrize(
    "kwargs, key, message",
    [
        ({"algorithm": "binomial_tree"}, "algorithm", "no bcast algorithm"),
        ({"algorithm": "basic_linear"}, "algorithm", "does not segment"),
        ({"algorithm": "chain"}, "faninout", "needs its chain fan-out"),
        ({"algorithm": "pipeline", "faninout": 2}, "faninout", "takes no fan-out"),
        ({"sizes": []}, "sizes", "no message sizes"),
    ],
)
def test_bands_refuse_what_open_mpi_would_ignore(kwargs, key, message):
    args = dict(L=3.94, B=10868.0, sizes=IMB_SIZES, k=14)
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        bm.bands(**args)
    assert err.value.key == key and message in err.value.problem and err.value.fix


# --------------------------------------------------------------- report


def test_report_puts_the_models_choice_beside_the_measured_best():
    L, B, k = 3.94, 10868.0, 14
    # measured at 3 sizes; at 1 MB the model's 32 KB wins, at 64 KB the unsegmented run wins
    measured = {
        65536: {0: 40.1, 8192: 45.0, 16384: 44.2},
        1048576: {0: 1500.0, 16384: 160.0, 32768: 150.5, 65536: 171.0},
        4096: {0: 5.2, 1024: 9.9},
    }
    assert bm.segment_size(L, B, 65536, k) == 16384 and bm.segment_size(L, B, 1048576, k) == 65536
    assert bm.segment_size(L, B, 4096, k) == 0
    text = bm.report(L, B, k, measured)
    lines = text.splitlines()
    assert lines[0].startswith("| #bytes | model segsize | model us | best segsize | best us |")
    row = {
        int(line.split("|")[1]): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:5]
    }
    assert list(row) == [4096, 65536, 1048576]  # sorted by size
    assert row[4096] == [
        "0 (none)",
        "%.2f" % bm.predict(L, B, 4096, k, 0),
        "0 (none)",
        "5.20",
        "5.20",
        "1.00",
    ]
    assert row[65536][0] == "16384" and row[65536][2:] == ["0 (none)", "40.10", "44.20", "1.10"]
    assert row[1048576][0] == "65536" and row[1048576][2:] == ["32768", "150.50", "171.00", "1.14"]
    assert "the measured best at 1 of 3 sizes" in text
    # a segment as large as the message is "no segmentation": the model's 0, measured twice here
    same = bm.report(L, B, k, {4096: {4096: 5.0, 65536: 4.0, 1024: 9.0}}).splitlines()[2]
    assert same == "| 4096 | 0 (none) | %.2f | 0 (none) | 4.00 | 4.00 | 1.00 |" % bm.predict(
        L, B, 4096, k, 0
    )
    assert "not measured" in bm.report(L, B, k, {1048576: {0: 10.0}})
