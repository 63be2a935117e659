"""Seed 002's broadcast pipeline model (tunedmpi.regenerate.bcastmodel): the fit, the segment size against a
brute-force minimum of the cost equations, the paper's own numbers, bands that the real tuning-table
checker accepts, and the model-vs-measured report. Pure Python, real fixture output."""

import math

import pytest

from conftest import FIXTURES
from tunedmpi.bench.parse import parse_output
from tunedmpi.errors import InputError
from tunedmpi.regenerate import bcastmodel as bm
from tunedmpi.tables import schema

PINGPONG = (
    FIXTURES
    / "imb"
    / "imb-mpi1_pt2pt-bandwidth-variants_pingpong-pingping-sendrecv-exchange_default-ompi.txt"
)
OSU_BCAST = FIXTURES / "osu" / "osu-7.4_osu_bcast_c-validation_default-ompi.txt"
IMB_SIZES = [0] + [2**i for i in range(21)]  # -msglog 0:20


def series(path, bench):
    parsed = parse_output(path.read_text(), exit_code=0)
    assert parsed.status == "ok", parsed.problems
    return next(s for s in parsed.series if s.benchmark == bench)


# ------------------------------------------------------------------ fit


def test_fit_recovers_an_exact_line():
    L, B = 1.73, 6340.0  # seed 002's Trinaryx6 fit: 1.73 us, 6.34 GB/s
    f = bm.fit([(m, L + m / B) for m in IMB_SIZES])
    assert f.L == pytest.approx(L, rel=1e-9) and f.B == pytest.approx(B, rel=1e-9)
    assert f.n == 22 and f.rms_rel < 1e-9 and f.r2 == pytest.approx(1.0) and not f.latency_clamped
    # a broadcast making 3 transfers one after another per call: eq. 3, t = N_R (L + M/B)
    f3 = bm.fit([(m, 3 * (L + m / B)) for m in IMB_SIZES], rounds=3)
    assert (f3.L, f3.B) == (pytest.approx(L), pytest.approx(B))


def test_fit_weighs_relative_residuals_so_small_sizes_keep_the_latency():
    # 10 % noise alternating up and down: the latency still comes out within 10 %
    L, B = 2.0, 10000.0
    pts = [(m, (L + m / B) * (1.1 if i % 2 else 0.9)) for i, m in enumerate(IMB_SIZES)]
    f = bm.fit(pts)
    assert f.L == pytest.approx(L, rel=0.1) and f.B == pytest.approx(B, rel=0.1)
    assert 0.09 < f.rms_rel < 0.11 and f.max_rel == pytest.approx(0.1, rel=0.2)


def test_fit_real_imb_pingpong_and_osu_bcast():
    """The shared fixtures (Open MPI 5.0.8, 2 ranks, shared memory): a line fits poorly across
    the eager-to-rendezvous switch at 4 KB and well above it, where segments live."""
    pp = series(PINGPONG, "pingpong")
    whole = bm.fit(pp.points)
    assert whole.n == 22 and whole.rms_rel > 0.3 and whole.worst_size == 4096
    big = bm.fit(pp.points, lo=4096)
    assert big.n == 9 and big.rms_rel < 0.05 and big.r2 > 0.999
    assert big.L == pytest.approx(3.94, abs=0.01) and big.B == pytest.approx(10868, rel=0.001)
    # OSU's 2-rank broadcast is one transfer (eq. 3 with N_R = 1): the same order of L and B
    osu = bm.fit(series(OSU_BCAST, "bcast").points, lo=4096)
    assert osu.n == 9 and osu.rms_rel < 0.06
    assert osu.L == pytest.approx(2.31, abs=0.01) and osu.B == pytest.approx(13654, rel=0.001)
    assert "L = 3.937 us, B = 10868 bytes/us" in big.describe()


@pytest.mark.parametrize(
    "points, kwargs, key, message",
    [
        ([(0, 1.0)], {}, "points", "a line needs 2"),
        ([(0, 1.0), (8, 1.0), (64, -2.0)], {}, "points[2]", "times > 0"),
        ([(0, 5.0), (1024, 4.0), (4096, 3.0)], {}, "points", "does not grow with size"),
        ([(0, 1.0), (8, "x")], {}, "points[1]", "not a (bytes, microseconds) pair"),
        ([(0, 1.0), (8, 2.0)], {"rounds": 0}, "rounds", "rounds must be"),
        ([(0, 1.0), (8, 2.0), (16, 3.0)], {"lo": 16}, "points", "1 point(s)"),
    ],
)
def test_fit_refuses_bad_points(points, kwargs, key, message):
    with pytest.raises(InputError) as err:
        bm.fit(points, **kwargs)
    assert err.value.key == key and message in err.value.problem and err.value.fix
    assert err.value.path == "tunedmpi.regenerate.bcastmodel"


def test_fit_through_the_origin_when_the_free_latency_is_negative():
    f = bm.fit([(1024, 0.05), (65536, 6.5), (1048576, 105.0)])
    assert f.latency_clamped and f.L == 0 and f.B > 0


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
    k = bm.k_for("pipeline", ranks)
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
    assert bm.k_for("pipeline", 2) == 0 and bm.k_for(5, 2) == 0
    assert bm.optimal_segment(3.94, 10868.0, 1 << 20, 0) == math.inf
    assert all(bm.segment_size(3.94, 10868.0, m, 0) == 0 for m in IMB_SIZES)
    assert bm.predict(3.94, 10868.0, 1 << 20, 0, 0) == pytest.approx(3.94 + (1 << 20) / 10868.0)


def test_k_for_open_mpi_algorithms():
    assert [bm.k_for("pipeline", p) for p in (2, 3, 72)] == [0, 1, 70]
    assert [bm.k_for("binary_tree", p) for p in (2, 3, 4, 5, 72, 3072)] == [0, 1, 1, 2, 6, 11]
    with pytest.raises(InputError, match="no k for bcast algorithm 'binomial'"):
        bm.k_for("binomial", 8)
    with pytest.raises(InputError, match="no bcast algorithm 'pipe'"):
        bm.k_for("pipe", 8)
    with pytest.raises(InputError, match="2 or more ranks"):
        bm.k_for("pipeline", 1)


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
    k = bm.k_for("pipeline", 64)
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
    assert bm.bands(3.94, 10868.0, IMB_SIZES, bm.k_for("pipeline", 2)) == [
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
