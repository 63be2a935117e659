"""The verdict's statistics: the seed figure, the exact Mann-Whitney test, bands and the rule."""
import random

import pytest

from tunedmpi import stats


def test_seed_figure_drops_max_and_min():
    assert stats.seed_figure([1, 2, 3, 4, 100]) == 3
    assert stats.seed_figure([5.0, 1.0, 3.0]) == 3.0
    assert stats.seed_figure([2.0, 4.0]) == 3.0          # too few to trim
    assert stats.seed_figure([]) is None


@pytest.mark.parametrize("size,band", [(0, None), (1, "<=1KB"), (1024, "<=1KB"), (1025, "1KB-64KB"),
                                       (65536, "1KB-64KB"), (65537, "64KB-1MB"), (1 << 20, "64KB-1MB"),
                                       ((1 << 20) + 1, ">1MB"), (1 << 22, ">1MB")])
def test_bands_are_inclusive_at_the_top(size, band):
    assert stats.band_of(size) == band


def test_mann_whitney_exact_values():
    # Fully separated 3 vs 3: 2 of the 20 splits are as extreme -> 0.1; 5 vs 5: 2/252.
    assert stats.mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert stats.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # One swap (U = 1): U <= 1 in 2 of the 252 splits, on each side.
    assert stats.mann_whitney_p([1, 2, 3, 4, 6], [5, 7, 8, 9, 10]) == pytest.approx(4 / 252)
    assert stats.mann_whitney_p([1, 1, 1], [1, 1, 1]) == pytest.approx(1.0)   # all tied
    assert stats.mann_whitney_p([3, 1, 2], [2, 3, 1]) == pytest.approx(1.0)


def test_mann_whitney_normal_approximation_for_many_repetitions():
    a, b = list(range(15)), list(range(100, 115))
    assert stats.mann_whitney_p(a, b) < 1e-4
    rng = random.Random(1)
    same = [rng.random() for _ in range(30)]
    assert stats.mann_whitney_p(same[:15], same[15:]) > 0.05


def reps(factor, noise, n=5, seed=0, sizes=(1, 64, 1024, 4096, 65536, 1 << 20)):
    rng = random.Random(seed)
    return [{s: (1.0 + s / 1000.0) * factor * (1 + rng.uniform(-noise, noise)) for s in sizes} for _ in range(n)]


def test_compare_bands_win_tie_lose():
    base = reps(1.0, 0.02, seed=1)
    by = {r.band: r for r in stats.compare_bands("x", "latency_us", base, reps(0.5, 0.02, seed=2))}
    assert set(by) == {"<=1KB", "1KB-64KB", "64KB-1MB"}
    assert all(r.verdict == "win" and r.gain == pytest.approx(2.0, rel=0.05) for r in by.values())
    assert by["<=1KB"].sizes == [1, 64, 1024]
    by = {r.band: r for r in stats.compare_bands("x", "latency_us", base, reps(2.0, 0.02, seed=3))}
    assert all(r.verdict == "lose" for r in by.values())
    # Same distribution: a tie, whatever the noise says at one size.
    by = {r.band: r for r in stats.compare_bands("x", "latency_us", base, reps(1.0, 0.02, seed=4))}
    assert all(r.verdict == "tie" for r in by.values())


def test_a_big_but_noisy_difference_is_not_a_win():
    """One repetition 10x slower in the baseline makes its mean look 2x worse; the test says noise."""
    base = reps(1.0, 0.01, seed=5)
    base[0] = {s: v * 10 for s, v in base[0].items()}
    tuned = reps(1.0, 0.01, seed=6)
    for r in stats.compare_bands("x", "latency_us", base, tuned):
        assert r.verdict == "tie", r


def test_bandwidth_is_higher_is_better():
    base = reps(1.0, 0.02, seed=7)
    r = stats.compare_bands("x", "bandwidth_MBps", base, reps(2.0, 0.02, seed=8))[0]
    assert r.verdict == "win" and r.gain == pytest.approx(2.0, rel=0.05)


def test_truncated_repetitions_compare_only_common_sizes():
    sizes = (1, 1024, 262144, 1 << 20)
    base = reps(1.0, 0.02, seed=9, sizes=sizes)
    tuned = reps(1.0, 0.02, seed=10, sizes=sizes)
    del tuned[2][1 << 20]                                   # one run crashed before 1 MB
    by = {r.band: r for r in stats.compare_bands("x", "latency_us", base, tuned)}
    assert by["64KB-1MB"].sizes == [262144]


def test_reliability_and_module_verdict():
    assert stats.reliability("put", 2, 5, 0, 5).verdict == "win"
    assert stats.reliability("put", 0, 5, 1, 5).verdict == "lose"
    assert stats.reliability("put", 0, 5, 0, 5).verdict == "tie"
    R = stats.BandResult
    tie, win, lose = (R("b", "x", [], 1.0, 1.0, v, "") for v in ("tie", "win", "lose"))
    assert stats.module_verdict([tie, win]) == "PASS"
    assert stats.module_verdict([tie, tie]) == "FAIL"          # not better anywhere: no reason to ship it
    assert stats.module_verdict([win, lose]) == "FAIL"
    assert stats.module_verdict([R("b", "x", [], None, None, "no-data", "")]) == "NO-DATA"
