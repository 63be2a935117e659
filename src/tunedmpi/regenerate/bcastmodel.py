"""Seed 002's pipeline model of a segmented broadcast: choose segment sizes, make bands.

Seed 002 (MPI collectives on Fugaku, section 3.3, docs/bcast-model.md) models a broadcast that
splits a message of M bytes into segments of m bytes and forwards them hop by hop:

    t(m) = (D + M/(c m) - 1) (L + m/B)           eq. 4 (c = 6 streams), eq. 6 (c = 1)

D: hops from the root to the last rank, c: segments sent side by side, L: latency of one transfer,
B: its bandwidth. dt/dm = 0 gives the optimal segment size

    m_S = sqrt(L B M / k),   k = c (D - 1)        eq. 5 and eq. 7

(eq. 7 prints exactly this; eq. 5 prints 6 (N_X + N_Y + N_Z - 2) where differentiating eq. 4 gives
- 3: see docs/bcast-model.md). Here k is passed in (docs/bcast-model.md gives it for Open MPI's
single-stream segmenting broadcasts). Units throughout: bytes, microseconds, and bytes per
microsecond for B (= IMB's "Mbytes/sec", 10^6 bytes/s), so L B is in bytes.

Segment sizes are what Open MPI 5.0.8's coll_tuned takes (rulesfile): a power of two up to 1 GiB,
0 = no segmentation. Bands are in the shape tables/schema.py checks (``bands:`` of a bcast case).
"""

import math
from typing import Dict, Iterable, List, Optional

from tunedmpi.errors import InputError
from tunedmpi.tables import rulesfile

WHERE = "tunedmpi.regenerate.bcastmodel"  # InputError path: the arguments of these functions
MAX_SEGSIZE = 1 << 30  # the largest power of two that fits Open MPI's C int
DEFAULT_VERSION = "5.0.8"


def _bad(key, problem, fix):
    return InputError(WHERE, None, key, problem, fix)


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
    if ("faninout" in used) != (faninout is not None):  # chain needs its fan-out, others take none
        problem, fix = (
            ("needs its chain fan-out", "pass faninout=1..%d" % rulesfile.MAX_FANINOUT)
            if faninout is None
            else ("takes no fan-out", "leave faninout out")
        )
        raise _bad("faninout", "bcast %d (%s) %s" % (number, names[number], problem), fix)
    ordered = sorted(set(int(s) for s in sizes))
    if not ordered:
        raise _bad("sizes", "no message sizes", "give the IMB sizes measured")
    out = []
    for size in ordered:
        seg = segment_size(L, B, size, k)
        if out and out[-1]["segsize"] == seg:
            continue
        if out:
            out[-1]["to"] = size
        band = {"from": size if out else 0, "to": None, "algorithm": names[number], "segsize": seg}
        if faninout is not None:
            band["faninout"] = faninout
        out.append(band)
    return out


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
        best_seg = min(times, key=lambda s: (times[s], s))  # the smaller segsize on a tie
        best_t = times[best_seg]
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
