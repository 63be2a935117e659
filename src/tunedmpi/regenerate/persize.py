"""Per-size choice: from one collective's algorithm stage to message-size bands of a rules file.

The stage measured the collective with the job configuration and Open MPI's own algorithm choice
(the reference: algorithm 0) and with each forced algorithm (and segment size) on top of it, all
in the same interleaved rounds. Per message size the winner is the candidate with the lowest seed
figure (drop max and min, mean of the rest); adjacent sizes with one winner form a band. A band
keeps a forced algorithm only if it beats the reference there with significance: Yuen-Welch on
per-run log band scores (every size and repetition of the band), its p multiplied by the number
of candidates (the winner was picked among them before the test), Holm over the collective's
tested bands, gain >= the tolerance; otherwise the band goes back to algorithm 0 (the MPI's fixed
decision) and merges with its neighbours. Band edges are IMB #bytes; a band starts at the first
size it won, the last band has no upper end.
"""
import math

from tunedmpi.acceptance import stats


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


def choose_bands(reference, candidates, metric, tolerance=stats.DEFAULT_TOLERANCE, alpha=stats.DEFAULT_ALPHA):
    """reference: [{size: value}] runs of Open MPI's own choice; candidates: {key: [{size: value}]}
    with key a tuple such as (algorithm, segsize). Returns a dict:
      bands:   [(lo, hi or None, key or None)], None = the reference (algorithm 0)
      winners: [(size, key or None, {key or None: figure})] per size, before the test
      tests:   [(lo, hi, key, gain, p, level, kept)] for every band a candidate won
    Sizes: those every run of the reference and of every candidate has (size 0 included: it is
    a message size the rules file covers too, but it never decides a test alone)."""
    sets = [set(r) for r in reference] + [set(r) for reps in candidates.values() for r in reps]
    sizes = sorted(set.intersection(*sets)) if sets else []
    if len(reference) < 2 or not sizes:
        return {"bands": [], "winners": [], "tests": []}
    lower = stats.LOWER_IS_BETTER[metric]
    figs = {None: _figures(reference, sizes)}
    for key, reps in candidates.items():
        if len(reps) >= 2:
            figs[key] = _figures(reps, sizes)
    sign = 1 if lower else -1
    winners = []
    for s in sizes:
        at = {k: f[s] for k, f in figs.items() if f[s] is not None and f[s] > 0}
        best = min(at, key=lambda k: (sign * at[k], k is not None, str(k))) if at else None
        winners.append((s, best, at))
    segments = _merge([(s, k) for s, k, _ in winners])
    # the test: each candidate-won segment against the reference, over its sizes >= 1
    pending = []
    for seg in segments:
        key, seg_sizes = seg
        tested = [s for s in seg_sizes if s >= 1]
        if key is None or not tested:   # size 0 alone moves no data: never a reason for a band
            seg[0] = None
            seg.append(None)
            continue
        a = stats.band_scores(reference, tested, metric)
        b = stats.band_scores(candidates[key], tested, metric)
        everyone = list(reference) + list(candidates[key])
        res = stats.yuen_welch(a, b, stats.resolution_floor(reference, tested, everyone),
                               stats.resolution_floor(candidates[key], tested, everyone))
        gain = math.exp(-res.diff)
        # the winner was picked among k candidates before it was tested: Bonferroni over them
        seg.append([gain, min(1.0, res.p * len(candidates)), None])
        pending.append(seg)
    pending.sort(key=lambda seg: seg[2][1])
    m, rejected = len(pending), 0
    for i, seg in enumerate(pending):      # Holm's step-down over the collective's tested bands
        level = alpha / (m - rejected)
        gain, p, _ = seg[2]
        seg[2][2] = level
        if p > level:
            for rest in pending[i + 1:]:
                rest[2][2] = level
            break
        rejected += 1
    tests = []
    for seg in segments:
        key, seg_sizes, t = seg
        if t is None:
            continue
        gain, p, level = t
        kept = p <= level and gain >= 1 + tolerance
        tests.append((seg_sizes[0], seg_sizes[-1], key, gain, p, level, kept))
        if not kept:
            seg[0] = None
    final = _merge([(s, seg[0]) for seg in segments for s in seg[1]])
    bands = []
    for i, (key, seg_sizes) in enumerate(final):
        lo = 0 if i == 0 else seg_sizes[0]
        hi = final[i + 1][1][0] if i + 1 < len(final) else None
        bands.append((lo, hi, key))
    if all(k is None for _, _, k in bands):
        bands = []
    return {"bands": bands, "winners": winners, "tests": tests}
