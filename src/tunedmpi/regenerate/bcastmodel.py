"""Seed 002's pipeline model of a segmented broadcast: fit L and B, choose segment sizes, make bands.

Seed 002 (MPI collectives on Fugaku, section 3.3, docs/bcast-model.md) models a broadcast that
splits a message of M bytes into segments of m bytes and forwards them hop by hop:

    t(m) = (D + M/(c m) - 1) (L + m/B)           eq. 4 (c = 6 streams), eq. 6 (c = 1)

D: hops from the root to the last rank, c: segments sent side by side, L: latency of one transfer,
B: its bandwidth. dt/dm = 0 gives the optimal segment size

    m_S = sqrt(L B M / k),   k = c (D - 1)        eq. 5 and eq. 7

(eq. 7 prints exactly this; eq. 5 prints 6 (N_X + N_Y + N_Z - 2) where differentiating eq. 4 gives
- 3: see docs/bcast-model.md). Here k is passed in; :func:`k_for` gives it for Open MPI's
single-stream segmenting broadcasts. Units throughout: bytes, microseconds, and bytes per
microsecond for B (= IMB's "Mbytes/sec", 10^6 bytes/s), so L B is in bytes.

Segment sizes are what Open MPI 5.0.8's coll_tuned takes (rulesfile): a power of two up to 1 GiB,
0 = no segmentation. Bands are in the shape tables/schema.py checks (``bands:`` of a bcast case).
"""

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from tunedmpi.errors import InputError
from tunedmpi.tables import rulesfile
from tunedmpi.tables.units import format_human

WHERE = "tunedmpi.regenerate.bcastmodel"  # InputError path: the arguments of these functions
MAX_SEGSIZE = 1 << 30  # the largest power of two that fits Open MPI's C int
DEFAULT_VERSION = "5.0.8"


@dataclass(frozen=True)
class Fit:
    """A straight line t = rounds (L + M / B) through measured (bytes, microseconds) points."""

    L: float  # microseconds per transfer
    B: float  # bytes per microsecond (= MB/s, 10^6 bytes/s)
    n: int  # points used
    rms_rel: float  # root mean square of (measured - line) / measured
    max_rel: float  # the largest |relative residual| ...
    worst_size: int  # ... and the size where it is
    r2: float  # coefficient of determination of the times (unweighted)
    lo: int  # sizes used: lo <= size <= hi
    hi: Optional[int]
    rounds: int  # transfers one measured call makes one after another (eq. 3's N_R)
    latency_clamped: bool  # the free fit gave L < 0: L = 0 and B refitted alone

    @property
    def n_half(self):
        """L B in bytes: the message size at which a transfer spends as long in latency as in bandwidth."""
        return self.L * self.B

    def describe(self):
        return (
            "L = %.3f us, B = %.0f bytes/us (%.2f GB/s), L*B = %.0f bytes; %d points %s to %s, "
            "relative residuals rms %.1f%%, worst %.1f%% at %s; R^2 %.4f%s"
            % (
                self.L,
                self.B,
                self.B / 1000.0,
                self.n_half,
                self.n,
                format_human(self.lo),
                format_human(self.hi) if self.hi is not None else "the largest size",
                100 * self.rms_rel,
                100 * self.max_rel,
                format_human(self.worst_size),
                self.r2,
                "; L < 0 in the free fit, fixed at 0" if self.latency_clamped else "",
            )
        )


def _bad(key, problem, fix):
    return InputError(WHERE, None, key, problem, fix)


def fit(
    points: Iterable[Tuple[int, float]], lo: int = 0, hi: Optional[int] = None, rounds: int = 1
) -> Fit:
    """Fit L and B to (size in bytes, time in microseconds) points of a point-to-point-like
    measurement: an IMB PingPong (t[usec] is one way), or a broadcast on 2 ranks (one transfer,
    eq. 3 with N_R = 1), or a broadcast whose algorithm makes ``rounds`` transfers one after another.

    Least squares on RELATIVE residuals (weights 1/t^2): the sizes span six decades, and plain
    least squares would let the largest sizes decide alone and leave L to chance. Only sizes in
    [lo, hi] are used (a protocol switch, e.g. eager to rendezvous, bends the line: fit the range
    that matters). Returns a :class:`Fit`; ``fit(...).L`` and ``.B`` are the model's inputs.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise _bad(
            "rounds",
            "rounds must be a whole number >= 1, not %r" % (rounds,),
            "give the transfers one call makes one after another (1 for PingPong or 2 ranks)",
        )
    pts = []
    for i, p in enumerate(points):
        try:
            size, t = int(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            raise _bad(
                "points[%d]" % i,
                "%r is not a (bytes, microseconds) pair" % (p,),
                "give points as (size, time) pairs, e.g. Series.points of a parsed IMB table",
            )
        if size < 0 or not math.isfinite(t) or t <= 0:
            raise _bad(
                "points[%d]" % i,
                "size %d with time %r: sizes must be >= 0 and times > 0" % (size, t),
                "drop failed rows (IMB prints no time for them) before fitting",
            )
        if size >= lo and (hi is None or size <= hi):
            pts.append((size, t))
    if len({s for s, _ in pts}) < 2:
        raise _bad(
            "points",
            "%d point(s) of distinct size in %s to %s: a line needs 2"
            % (len(pts), lo, "the largest size" if hi is None else hi),
            "widen lo/hi or measure more sizes",
        )
    # Weighted normal equations for t = a + b M with weights w = 1/t^2.
    w = [1.0 / (t * t) for _, t in pts]
    sw = sum(w)
    sx = sum(wi * s for wi, (s, _) in zip(w, pts))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, pts))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, pts))
    det = sw * sxx - sx * sx
    a = (sxx * sy - sx * sxy) / det
    b = (sw * sxy - sx * sy) / det
    clamped = a < 0
    if clamped:  # a line through the origin: b alone, same weights
        a, b = 0.0, sxy / sxx
    if b <= 0:
        raise _bad(
            "points",
            "time does not grow with size in these points (slope %.3g us/byte)" % b,
            "fit a range where larger messages take longer (raise lo), or check the measurement",
        )
    rel = [(t - (a + b * s)) / t for s, t in pts]
    worst = max(range(len(pts)), key=lambda i: abs(rel[i]))
    mean_t = sum(t for _, t in pts) / len(pts)
    ss_tot = sum((t - mean_t) ** 2 for _, t in pts)
    ss_res = sum((t - (a + b * s)) ** 2 for s, t in pts)
    return Fit(
        L=a / rounds,
        B=rounds / b,
        n=len(pts),
        rms_rel=math.sqrt(sum(r * r for r in rel) / len(rel)),
        max_rel=abs(rel[worst]),
        worst_size=pts[worst][0],
        r2=1.0 - ss_res / ss_tot if ss_tot else 1.0,
        lo=lo,
        hi=hi,
        rounds=rounds,
        latency_clamped=clamped,
    )


def _check_model(L, B, M, k):
    for key, value, low in (("L", L, 0.0), ("B", B, None), ("M", M, 0), ("k", k, 0)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise _bad(
                key,
                "%s must be a finite number, not %r" % (key, value),
                "see docs/bcast-model.md for units",
            )
        if (low is None and value <= 0) or (low is not None and value < low):
            raise _bad(
                key,
                "%s = %r is out of range (%s)" % (key, value, "> 0" if low is None else ">= 0"),
                "L in microseconds >= 0, B in bytes per microsecond > 0, M in bytes >= 0, k >= 0",
            )


def optimal_segment(L: float, B: float, M: int, k: float) -> float:
    """Eq. 5 / 7: sqrt(L B M / k) in bytes, unrounded; inf when k = 0 (one hop: never segment)."""
    _check_model(L, B, M, k)
    return math.inf if k == 0 else math.sqrt(L * B * M / k)


def predict(L: float, B: float, M: int, k: float, segsize: int, streams: int = 1) -> float:
    """Eq. 4 / 6 in microseconds: (k + M/m) (L + m/B) / streams, with k = streams (D - 1);
    segsize 0 or >= M is one segment (m = M): D (L + M/B), eq. 3 with N_R = D."""
    _check_model(L, B, M, k)
    m = M if segsize <= 0 or segsize >= M else segsize
    if m == 0:
        return (k + 1) * L / streams
    return (k + M / m) * (L + m / B) / streams


def segment_size(L: float, B: float, M: int, k: float) -> int:
    """The model's segment size for an M-byte broadcast, as Open MPI takes it: of the two powers of
    two around sqrt(L B M / k), the one with the lower predicted time (eq. 4/6), at most 1 GiB;
    0 (no segmentation) when that is M or more, or when k = 0."""
    m = optimal_segment(L, B, M, k)
    if not math.isfinite(m) or m >= M:
        return 0
    below = 1 << max(int(math.floor(math.log2(m))), 0) if m >= 1 else 1
    options = [min(p, MAX_SEGSIZE) for p in (below, below * 2)]
    best = min(options, key=lambda p: (predict(L, B, M, k, p), p))
    return 0 if best >= M else best


def k_for(algorithm, ranks: int) -> int:
    """k of eq. 5/7 for Open MPI's single-stream segmenting bcasts on ``ranks`` ranks (c = 1):
    pipeline (3) is a chain of ranks-1 hops, k = ranks - 2 (eq. 6's form, the seed's Pipeline);
    binary_tree (5) is eq. 7 on one axis, k = ceil(log2 ranks) - 1 (each rank feeds two children
    one after the other: twice the time per step, the same optimum)."""
    names = rulesfile.algorithms("bcast", DEFAULT_VERSION)
    number = _number(algorithm, names)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise _bad(
            "ranks", "a broadcast needs 2 or more ranks, not %r" % (ranks,), "give nodes x ppn"
        )
    if names.get(number) == "pipeline":
        return ranks - 2
    if names.get(number) == "binary_tree":
        return (ranks - 1).bit_length() - 1  # ceil(log2 ranks) - 1
    raise _bad(
        "algorithm",
        "no k for bcast algorithm %r in this model" % (algorithm,),
        "use pipeline or binary_tree, or pass k yourself (docs/bcast-model.md)",
    )


def _number(algorithm, names):
    if isinstance(algorithm, int) and not isinstance(algorithm, bool) and algorithm in names:
        return algorithm
    for number, name in names.items():
        if isinstance(algorithm, str) and algorithm.strip().lower() in (name, str(number)):
            return number
    raise _bad(
        "algorithm",
        "Open MPI has no bcast algorithm %r" % (algorithm,),
        "use one of: %s" % ", ".join("%d %s" % kv for kv in sorted(names.items())),
    )


def bands(
    L: float,
    B: float,
    sizes: Iterable[int],
    k: float,
    algorithm="pipeline",
    faninout: Optional[int] = None,
    mpi_version: str = DEFAULT_VERSION,
) -> List[Dict]:
    """The model's segment size at each measured size, as bcast ``bands`` for a tuning-table case:
    [{"from": bytes, "to": bytes or None, "algorithm": name, "segsize": bytes}, ...] (plus
    "faninout" for chain). Adjacent sizes with the same segment size are one band; a band starts
    at the first size it covers (the first at 0) and ends where the next starts (the last: None)."""
    names = rulesfile.algorithms("bcast", mpi_version)
    number = _number(algorithm, names)
    used = rulesfile.takes("bcast", number, mpi_version)
    if "segsize" not in used:
        raise _bad(
            "algorithm",
            "bcast %d (%s) does not segment: a segment size would be ignored"
            % (number, names[number]),
            "use one that does: %s"
            % ", ".join(
                "%d %s" % (n, names[n])
                for n in sorted(names)
                if "segsize" in rulesfile.takes("bcast", n, mpi_version)
            ),
        )
    if "faninout" in used and faninout is None:
        raise _bad(
            "faninout",
            "bcast %d (%s) needs its chain fan-out" % (number, names[number]),
            "pass faninout=1..%d" % rulesfile.MAX_FANINOUT,
        )
    if "faninout" not in used and faninout is not None:
        raise _bad(
            "faninout",
            "bcast %d (%s) takes no fan-out" % (number, names[number]),
            "leave faninout out",
        )
    ordered = sorted(set(int(s) for s in sizes))
    if not ordered:
        raise _bad("sizes", "no message sizes", "give the IMB sizes measured, e.g. Series.sizes")
    out = []
    for size in ordered:
        seg = segment_size(L, B, size, k)
        if out and out[-1]["segsize"] == seg:
            continue
        if out:
            out[-1]["to"] = size
        band = {
            "from": 0 if not out else size,
            "to": None,
            "algorithm": names[number],
            "segsize": seg,
        }
        if faninout is not None:
            band["faninout"] = faninout
        out.append(band)
    return out


def best_measured(times: Dict[int, float]) -> Tuple[int, float]:
    """(segsize, time) of the fastest measured segment size; the smaller segsize on a tie."""
    seg = min(times, key=lambda s: (times[s], s))
    return seg, times[seg]


def report(L: float, B: float, k: float, measured: Dict[int, Dict[int, float]]) -> str:
    """Markdown: per size, the model's segment size and predicted time beside the measured best.
    ``measured``: {size: {segsize: microseconds}} (segsize 0 = unsegmented)."""
    lines = [
        "| #bytes | model segsize | model us | best segsize | best us | at model segsize us | model / best |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    hits = 0
    for size in sorted(measured):
        if not measured[size]:
            raise _bad(
                "measured[%d]" % size, "no measured segment size", "give {segsize: microseconds}"
            )
        # Open MPI sends one segment when segsize is 0 or at least the message: one choice, "0";
        # several such runs of a size are one configuration measured more than once (fastest kept)
        times = {}
        for s, t in measured[size].items():
            s = 0 if s <= 0 or s >= size else s
            times[s] = min(t, times.get(s, t))
        seg = segment_size(L, B, size, k)
        best_seg, best_t = best_measured(times)
        at_model = times.get(seg)
        hits += at_model is not None and at_model == best_t
        lines.append(
            "| %d | %s | %.2f | %s | %.2f | %s | %s |"
            % (
                size,
                _seg_text(seg),
                predict(L, B, size, k, seg),
                _seg_text(best_seg),
                best_t,
                "not measured" if at_model is None else "%.2f" % at_model,
                "" if at_model is None else "%.2f" % (at_model / best_t),
            )
        )
    lines.append("")
    lines.append(
        "Model: L = %.3f us, B = %.0f bytes/us, k = %g (seed 002 eq. 5/7). The model's choice is "
        "the measured best at %d of %d sizes." % (L, B, k, hits, len(measured))
    )
    return "\n".join(lines) + "\n"


def _seg_text(seg):
    return "0 (none)" if seg == 0 else str(seg)
