"""Per-size choice: from one collective's algorithm stage to message-size bands of a rules file.

The stage measured the collective with the job configuration and Open MPI's own algorithm choice
(the reference: algorithm 0) and with each forced algorithm (and segment size) on top of it, all
in the same interleaved rounds. Per message size the winner is the candidate with the lowest seed
figure (drop max and min, mean of the rest); adjacent sizes with one winner form a band. A band
keeps a forced algorithm only if it beats the reference there with significance: Welch's t on
per-run log band scores (every size and repetition of the band), its p multiplied by the number
of candidates (the winner was picked among them before the test), Holm over the collective's
tested bands, gain >= the tolerance; otherwise the band goes back to algorithm 0 (the MPI's fixed
decision) and merges with its neighbours.

Where a confirmation campaign measured the same stage again (`tunedmpi sweep --confirm`), the
bands are still picked on the choosing runs but tested on the confirmation's runs alone: the
selection was made on other data, so p is not multiplied by the number of candidates (Holm over
the bands still applies). A band whose candidate the confirmation did not measure is not kept.

Then, where no per-size band was kept, a second look at the granularity validate judges (its
bands, stats.BANDS): the sizes still on the reference, grouped by validate
band, go to the candidate with the best geometric mean over the group, tested the same way (its own
Holm family). Per-size winners of a flat curve alternate from size to size, so no single segment
carries enough runs to be significant, though one algorithm may be clearly better over the whole
band. Two families at alpha each: the false-band rate stays within 2 alpha per collective
(tests/test_persize.py measures it on noise alone). Band edges are IMB #bytes; a band starts at the
first size it won, the last band has no upper end.
"""

import math
from typing import NamedTuple

from tunedmpi import stats
from tunedmpi.policy import POLICY


class BandTest(NamedTuple):
    """One band a candidate won, tested against the reference."""

    lo: int
    hi: int
    key: tuple  # the candidate, e.g. (algorithm, segsize)
    gain: float
    p: float
    level: float
    kept: bool


def _figures(reps, sizes):
    return {s: stats.seed_figure([r[s] for r in reps]) for s in sizes}


def _merge(runs):
    """[(size, key)] -> [[key, [sizes]]] with adjacent equal keys merged."""
    out = []
    for size, key in runs:
        if out and out[-1][0] == key:
            out[-1][1].append(size)
        else:
            out.append([key, [size]])
    return out


def _test(reference, reps, sizes, metric, n_candidates):
    """(gain, p) of ``reps`` against the reference over ``sizes``: Welch's t on per-run log band
    scores (within host states where the runs know theirs, as tune's per-benchmark rule), p multiplied by the number
    of candidates the winner was picked among (Bonferroni)."""
    a, b = (stats.band_scores(runs, sizes, metric) for runs in (reference, reps))
    everyone = list(reference) + list(reps)
    floors = [stats.resolution_floor(runs, sizes, everyone) for runs in (reference, reps)]
    strata = stats.strata_of(reference, reps)
    if strata is None:
        res = stats.welch(a, b, *floors)
    else:
        res = stats.stratified(a, b, *strata, *floors)[0]
    return math.exp(-res.diff), min(1.0, res.p * n_candidates)


def _tester(reference, candidates, metric, confirm):
    """test(key, sizes) -> (gain, p): on the choosing runs with p x candidates, or, with
    ``confirm`` = (reference runs, {key: runs}) of a confirmation campaign, on those runs alone
    (no multiplicity for a selection made on other data). Not measured there: the choosing runs'
    gain, p = 1 (never kept)."""
    if confirm is None:
        return lambda key, sizes: _test(reference, candidates[key], sizes, metric, len(candidates))
    ref_c, cands_c = confirm

    def test(key, sizes):
        reps = cands_c.get(key) or []
        if (
            len(ref_c) < 2
            or len(reps) < 2
            or any(s not in r for r in list(ref_c) + list(reps) for s in sizes)
        ):
            return _test(reference, candidates[key], sizes, metric, len(candidates))[0], 1.0
        return _test(ref_c, reps, sizes, metric, 1)

    return test


def _band_tests(tested, alpha, tolerance):
    """[BandTest] of [(lo, hi, key, gain, p)], one Holm family: kept where p is within its Holm
    level and the gain at least the tolerance."""
    levels = stats.holm([p for *_, p in tested], alpha)
    return [
        BandTest(lo, hi, key, gain, p, level, p <= level and gain >= 1 + tolerance)
        for (lo, hi, key, gain, p), level in zip(tested, levels)
    ]


def _band_groups(sizes, keys):
    """Runs of adjacent sizes left on the reference (key None), split at validate's band edges:
    [[sizes]]. Size 0 joins the group after it (it moves no data and is never tested alone)."""
    groups, last = [], None
    for s in sizes:
        if keys[s] is not None:
            last = None
            continue
        band = stats.band_of(max(s, 1))
        if last == band:
            groups[-1].append(s)
        else:
            groups.append([s])
        last = band
    return [g for g in groups if any(s >= 1 for s in g)]


def choose_bands(
    reference, candidates, metric, tolerance=POLICY.tolerance, alpha=POLICY.alpha, confirm=None
):
    """reference: [{size: value}] runs of Open MPI's own choice; candidates: {key: [{size: value}]}
    with key a tuple such as (algorithm, segsize); confirm: None, or (reference, candidates) of a
    confirmation campaign, on which the bands are tested. Returns a dict:
      bands:   [(lo, hi or None, key or None)], None = the reference (algorithm 0)
      tests:   [BandTest] for every band a candidate won
    Sizes: those every run of the reference and of every candidate has (size 0 included: it is
    a message size the rules file covers too, but it never decides a test alone)."""
    sets = [set(r) for r in reference] + [set(r) for reps in candidates.values() for r in reps]
    sizes = sorted(set.intersection(*sets)) if sets else []
    if len(reference) < 2 or not sizes:
        return {"bands": [], "tests": []}
    figs = {None: _figures(reference, sizes)}
    figs.update((key, _figures(reps, sizes)) for key, reps in candidates.items() if len(reps) >= 2)
    sign = 1 if stats.LOWER_IS_BETTER[metric] else -1
    test = _tester(reference, candidates, metric, confirm)
    winners = []
    for s in sizes:
        at = {k: f[s] for k, f in figs.items() if f[s] is not None and f[s] > 0}
        best = min(at, key=lambda k: (sign * at[k], k is not None, str(k))) if at else None
        winners.append((s, best))
    segments = _merge(winners)
    # the test: each candidate-won segment against the reference, over its sizes >= 1 (size 0
    # alone moves no data: never a reason for a band); the winner was picked among k candidates
    # before it was tested (see _tester)
    won = [(key, seg) for key, seg in segments if key is not None and any(s >= 1 for s in seg)]
    tests = _band_tests(
        [(seg[0], seg[-1], key, *test(key, [s for s in seg if s >= 1])) for key, seg in won],
        alpha,
        tolerance,
    )
    keys = dict.fromkeys(sizes)
    for (key, seg), t in zip(won, tests):
        if t.kept:
            keys.update((s, key) for s in seg)
    # the second look: what stayed on the reference, by validate band
    picked = []
    for group in _band_groups(sizes, keys):
        tested = [s for s in group if s >= 1]

        def over_group(k):  # the candidate's time (or 1/bandwidth) relative to the reference
            if any(not figs[k][s] or not figs[None][s] for s in tested):
                return float("inf")
            return stats.geomean([figs[k][s] / figs[None][s] for s in tested]) ** sign

        best = min(
            (k for k in figs if k is not None), key=lambda k: (over_group(k), str(k)), default=None
        )
        if best is not None and over_group(best) < 1:
            picked.append((group, best, tested))
    second = _band_tests(
        [(max(g[0], 1), g[-1], key, *test(key, tested)) for g, key, tested in picked],
        alpha,
        tolerance,
    )
    for (group, key, _), t in zip(picked, second):
        if t.kept:
            keys.update((s, key) for s in group)
    tests += second
    final = _merge([(s, keys[s]) for s in sizes])
    starts = [0] + [seg_sizes[0] for _, seg_sizes in final[1:]]  # the first band starts at 0
    bands = [(lo, hi, key) for (key, _), lo, hi in zip(final, starts, starts[1:] + [None])]
    if all(k is None for _, _, k in bands):
        bands = []
    return {"bands": bands, "tests": tests}
