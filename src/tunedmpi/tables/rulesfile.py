"""Open MPI coll_tuned dynamic rules files: a description of the rules, our own writer, a strict checker.

A tuned module chooses an algorithm per collective AND per message size by pointing Open MPI at a
rules file (``OMPI_MCA_coll_tuned_use_dynamic_rules=1`` plus
``OMPI_MCA_coll_tuned_dynamic_rules_filename=<file>``, see :func:`environment`). Open MPI drops
a file with any error WITHOUT a word (its messages are OPAL_OUTPUT, compiled to nothing without
--enable-debug: opal/util/output.h:510-536) and keeps its fixed decisions, so nothing is written
here that :func:`check` would refuse.

    rules = Rules(comm_size=72, collectives={
        "allreduce": [Band(0, "recursive_doubling"), Band("64KB", "rabenseifner")],
        "bcast": [Band(0, 6, segsize=0), Band("1MB", "pipeline", segsize=128 * 1024)]})
    text = render(rules, "5.0.8")     # refuses what Open MPI would not follow; passes check()

Band boundaries are in the bytes of IMB's ``#bytes`` column for that collective; render converts
them to the message size Open MPI computes (see MESSAGE_SIZE). Where a study's band is not tuned,
algorithm 0 means "Open MPI's own fixed decision".

Facts below were read in the Open MPI sources (github:open-mpi/ompi, tag v5.0.8 unless said
otherwise; "tuned/" = ompi/mca/coll/tuned/, "base/" = ompi/mca/coll/base/). Nothing is copied
from there; this writer and checker are our own.

File format (tuned/coll_tuned_dynamic_file.c, ompi_coll_tuned_read_rules_config_file):
- Optional first bytes ``rule-file-version-N`` (fscanf at offset 0, :127-130), 5.0.7 and later
  only (commit fef0566 "coll tuned add version identifier"; v5.0.6 skips the letters as garbage,
  reads "-2" as the collectives count and drops the file). Version > 1 allows a 5th number on a rule line, the
  max requests (:238-246), read only if a digit follows on the same line
  (base/coll_base_util.c:492-505). Without the line the version is 1: the classic format.
- Then numbers: collectives count (:133-140, at most COLLCOUNT = 22); per collective its COLLTYPE
  id (:145-152) and its count of communicator sizes (:166); per communicator size the size (:183)
  and its count of message sizes (:191); per message size ``msgsize algorithm faninout segsize``
  (:211-236). The first message size of every communicator size must be 0 (:248-253). Any error
  drops the whole file (:287-305) and the fixed decisions stay.
- Numbers are read with fscanf("%li") (base/coll_base_util.c:378-401): 0x.. is hex, 010 octal,
  a '#' skips to the end of the line, and any other non-number character is skipped one by one
  (so "4k" reads as 4 and then garbage). We write plain decimal numbers and '#' comments only.
- Nothing checks order or duplicates, but the look-up assumes sorted keys: for a communicator of
  size n the LAST entry with size <= n is used, and the FIRST entry when all are larger
  (tuned/coll_tuned_dynamic_rules.c:289-326); for a message of m bytes the last rule with
  msgsize <= m (:343-391). Algorithm 0 there means "use the fixed decision"
  (tuned/coll_tuned_decision_dynamic.c, e.g. :85-94).
- The rules are read once at component open when use_dynamic_rules is set
  (tuned/coll_tuned_component.c:232-242); a forced algorithm (coll_tuned_<coll>_algorithm) is
  checked BEFORE the file and wins (tuned/coll_tuned_decision_dynamic.c:65-71, 116-125, ...).
- An algorithm number out of range is not refused at read time: the collective then returns
  MPI_ERR_ARG at run time (e.g. tuned/coll_tuned_allreduce_decision.c:150-152). The two_proc
  algorithms return MPI_ERR_UNSUPPORTED_OPERATION on any communicator not of size 2
  (base/coll_base_alltoall.c:558, coll_base_allgather.c:754, coll_base_allgatherv.c:660,
  coll_base_barrier.c:315).
- Some algorithms run other collectives through the communicator, so THOSE collectives' rules
  apply inside them, at the inner call's message size: allgather 1 (gather + bcast,
  base/coll_base_allgather.c:846-858), allgatherv 1 (gatherv + bcast, coll_base_allgatherv.c:
  764-794), allreduce 2 (reduce + bcast, coll_base_allreduce.c:71-85), reduce_scatter 1 (reduce +
  scatterv, coll_base_reduce_scatter.c:70-104), reduce_scatter_block 1 (reduce + scatter,
  coll_base_reduce_scatter_block.c:116-170). allreduce 1 calls the base functions directly.
- coll/han (priority 35 > tuned's 30) takes barrier, bcast, reduce, allreduce, allgather,
  gather and scatter on communicators that span nodes (coll/han/coll_han_module.c:237-263) and
  calls tuned only on its per-node and per-leader sub-communicators; on one node han steps aside.

The 5.0.0 - 5.0.10 sources have the same COLLTYPE enum, algorithm tables and message-size rules
(compared tag by tag); only the version line is new in 5.0.7.
"""

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from tunedmpi.errors import InputError
from tunedmpi.tables.knobs import KnobError, version_tuple
from tunedmpi.tables.units import SizeError, format_human, parse_size

# ompi/mca/coll/base/coll_base_functions.h:44-68 (typedef enum COLLTYPE), v5.0.0 - v5.0.10.
COLLTYPE = {
    name: number
    for number, name in enumerate(
        """allgather allgatherv allreduce alltoall alltoallv alltoallw barrier bcast exscan gather
        gatherv reduce reduce_scatter reduce_scatter_block scan scatter scatterv neighbor_allgather
        neighbor_allgatherv neighbor_alltoall neighbor_alltoallv neighbor_alltoallw""".split()
    )
}
COLLCOUNT = 22
COLLTYPE_NAME = {v: k for k, v in COLLTYPE.items()}

# Collectives tuned consults a rules file for: tuned/coll_tuned_module.c:217-250 installs a
# dynamic decision for these; alltoallw, gatherv and scatterv get NULL (no tuned version) and the
# neighbourhood collectives are never looked up.
NOT_TUNED = {
    c: "tuned has no %s (coll_tuned_module.c sets it to NULL)" % c
    for c in ("alltoallw", "gatherv", "scatterv")
}

# Algorithm numbers and names: the mca_base_var_enum_value_t table of each
# tuned/coll_tuned_<coll>_decision.c (line given) = ompi_info "Valid values" (tested against the
# wheel); which numbers run what: the switch in <coll>_intra_do_this (line given).
# "takes": the file fields that algorithm actually uses (read in the do_this call).
# Each lists the names of algorithms 1, 2, 3, ... in number order.
_NAMES_5_0 = {
    # allgather_decision.c:35-43, do_this switch :138-171. No algorithm uses segsize/faninout.
    "allgather": "linear bruck recursive_doubling ring neighbor two_proc sparbit",
    # allgatherv_decision.c:35-42, switch :139-172.
    "allgatherv": "default bruck ring neighbor two_proc sparbit",
    # allreduce_decision.c:37-44, switch :134-149 (5 passes segsize).
    "allreduce": "basic_linear nonoverlapping recursive_doubling ring segmented_ring rabenseifner",
    # alltoall_decision.c:35-41, switch :168-181 (4 passes max_requests).
    "alltoall": "linear pairwise modified_bruck linear_sync two_proc",
    # alltoallv_decision.c:32-35, switch :103-121.
    "alltoallv": "basic_linear pairwise",
    # barrier_decision.c:30-37, switch :97-108.
    "barrier": "linear double_ring recursive_doubling bruck two_proc tree",
    # bcast_decision.c:37-47, switch :145-167 (2 passes segsize and faninout, 3-9 segsize; the
    # knomial radix of 7 comes from coll_tuned_bcast_algorithm_knomial_radix, not the file).
    "bcast": "basic_linear chain pipeline split_binary_tree binary_tree binomial knomial "
    "scatter_allgather scatter_allgather_ring",
    # exscan_decision.c:32-35, switch :98-107.
    "exscan": "linear recursive_doubling",
    # gather_decision.c:35-39, switch :136-156 (3 passes segsize).
    "gather": "basic_linear binomial linear_sync",
    # reduce_decision.c:36-44, switch :158-182 (2 segsize+faninout+max_requests, 3-6 segsize+max_requests).
    "reduce": "linear chain pipeline binary binomial in-order_binary rabenseifner",
    # reduce_scatter_decision.c:36-41, switch :135-149.
    "reduce_scatter": "non-overlapping recursive_halving ring butterfly",
    # reduce_scatter_block_decision.c:37-42, switch :128-142.
    "reduce_scatter_block": "basic_linear recursive_doubling recursive_halving butterfly",
    # scan_decision.c:32-35, switch :98-107.
    "scan": "linear recursive_doubling",
    # scatter_decision.c:36-40, switch :169-191 (3 takes its ratio from an MCA parameter).
    "scatter": "basic_linear binomial linear_nb",
}
_ALGS_5_0 = {coll: dict(enumerate(names.split(), 1)) for coll, names in _NAMES_5_0.items()}
_TAKES_5_0 = {
    ("allreduce", 5): ("segsize",),
    ("alltoall", 4): ("max_requests",),
    ("bcast", 2): ("segsize", "faninout"),
    **{("bcast", a): ("segsize",) for a in range(3, 10)},
    ("gather", 3): ("segsize",),
    ("reduce", 2): ("segsize", "faninout", "max_requests"),
    **{("reduce", a): ("segsize", "max_requests") for a in range(3, 7)},
}
TWO_PROC = {("allgather", 6), ("allgatherv", 5), ("alltoall", 5), ("barrier", 5)}
MAX_FANINOUT = 32  # MAXTREEFANOUT, base/coll_base_topo.h:26; build_chain clamps to 1..32
INT_MAX = (1 << 31) - 1  # segsize and max_requests end up in C ints (do_this arguments)
LONG_MAX = (1 << 63) - 1  # read with %li (LP64)

# Supported Open MPI versions: (first, last, algorithm table, fields each algorithm takes).
_VERSIONS = [((5, 0, 0), (5, 0, 10), _ALGS_5_0, _TAKES_5_0)]
VERSION_LINE_SINCE = (5, 0, 7)

# How Open MPI measures the message size it compares with the file, per collective
# (tuned/coll_tuned_decision_dynamic.c), and the factor that turns IMB's #bytes into it.
# "comm" = times the communicator size; None = the size never depends on the message.
MESSAGE_SIZE = {
    "allgather": (
        "comm",
        "sdtype size x scount x comm size (:498-500); IMB #bytes = one rank's block",
    ),
    "allgatherv": (1, "total received / comm size (:560-565); IMB #bytes = one rank's block"),
    "allreduce": (1, "dtype size x count (:79-80) = IMB #bytes"),
    "alltoall": (
        "comm",
        "sdtype size x scount x comm size (:134-136); IMB #bytes = the block per peer",
    ),
    "alltoallv": (None, "always 0 (:189-190): one rule per communicator size"),
    "barrier": (None, "always 0 (:233-234)"),
    "bcast": (1, "dtype size x count (:277-278) = IMB #bytes"),
    "exscan": (None, "dtype size x comm size, not the count (:712-714)"),
    "gather": (
        "comm",
        "sdtype size x scount x comm size (:616-618); IMB #bytes = one rank's block",
    ),
    "reduce": (1, "dtype size x count (:331-332) = IMB #bytes"),
    "reduce_scatter": (
        "comm",
        "dtype size x sum of recvcounts (:386-388); IMB 2019+ #bytes = one "
        "rank's share (IMB 2018 split #bytes over the ranks instead)",
    ),
    "reduce_scatter_block": (
        "comm",
        "dtype size x recvcount x comm size (:441-442); IMB #bytes = one rank's share",
    ),
    "scan": (None, "dtype size x comm size, not the count (:756-758)"),
    "scatter": (
        "comm",
        "sdtype size x scount x comm size (:666-668); IMB #bytes = one rank's block",
    ),
}


def _refused(where, key, problem, fix):
    """The InputError for rules given as values, where there is no line to name."""
    return InputError(where, None, key, problem, fix)


def _version(mpi_version):
    """(5, 0, 8) from '5.0.8' or a tuple; InputError if not a version we have tables for."""
    try:
        v = version_tuple(
            ".".join(map(str, mpi_version)) if isinstance(mpi_version, tuple) else mpi_version
        )
    except KnobError as exc:
        raise _refused("mpi_version", "mpi_version", exc.problem, exc.fix)
    if v is None:
        raise _refused(
            "mpi_version",
            "mpi_version",
            "no Open MPI version given",
            "give the version the module loads, e.g. 5.0.8",
        )
    v = tuple(v) + (0,) * (3 - len(v))
    for first, last, algs, takes in _VERSIONS:
        if first <= v <= last:
            return v, algs, takes
    raise _refused(
        "mpi_version",
        "mpi_version",
        "no coll_tuned algorithm table for Open MPI %s" % ".".join(map(str, v)),
        "tunedmpi knows Open MPI 5.0.0-5.0.10; add a table to tunedmpi/tables/rulesfile.py "
        "after reading that version's coll_tuned sources",
    )


def collectives(mpi_version):
    """The collectives coll_tuned reads rules for in this Open MPI version, by name."""
    return sorted(_version(mpi_version)[1])


def algorithms(collective, mpi_version):
    """{number: name} of coll_tuned's algorithms for a collective, 0 ('ignore') included."""
    _, algs, _ = _version(mpi_version)
    if collective not in algs:
        raise _refused(
            "mpi_version",
            collective,
            "coll_tuned has no rules for '%s'" % collective,
            "use one of: %s" % ", ".join(sorted(algs)),
        )
    return {0: "ignore", **algs[collective]}


def takes(collective, algorithm, mpi_version):
    """Which of segsize, faninout, max_requests the algorithm uses (a tuple of names)."""
    _, _, tk = _version(mpi_version)
    return tk.get((collective, algorithm), ())


def message_size(collective, imb_bytes, comm_size):
    """The message size Open MPI compares with the file for an IMB call of ``imb_bytes``."""
    factor = MESSAGE_SIZE[collective][0]
    if factor is None:
        return 0
    return imb_bytes * (comm_size if factor == "comm" else factor)


# ---------------------------------------------------------------------------------------------
# The description the lead builds from a table row.


@dataclass(frozen=True)
class Band:
    """One message-size band of one collective, from ``lo`` up to the next band's ``lo``.

    lo: IMB #bytes where the band starts (int, or a size such as "64KB"); the first band is 0.
    algorithm: coll_tuned number or name for the collective; 0 = Open MPI's fixed decision.
    segsize: bytes per segment, only for algorithms that segment (0 = no segmentation).
    faninout: chain fan-out (1-32), only for bcast/reduce "chain".
    max_requests: outstanding requests, only alltoall linear_sync and reduce 2-6; needs Open MPI
        >= 5.0.7 (rule-file-version-2); None = Open MPI's default.
    A table's band (a case's ``bands``: tables/schema.py) also says where it ends (hi: IMB #bytes,
    exclusive; None = no upper end), the algorithm's Open MPI name and its line in the table.
    """

    lo: Union[int, str]
    algorithm: Union[int, str]
    segsize: int = 0
    faninout: int = 0
    max_requests: Optional[int] = None
    hi: Optional[int] = None
    name: str = ""
    line: int = 0


@dataclass
class Rules:
    """The rules of one job geometry: for exactly ``comm_size`` ranks (nodes x ppn), per
    collective its bands in ascending ``lo``; communicators of any other size (sub-communicators,
    han's per-node pieces) keep Open MPI's fixed decision. ``comment``: provenance lines for the
    file."""

    comm_size: int
    collectives: Dict[str, List[Band]] = field(default_factory=dict)
    comment: str = ""


# ---------------------------------------------------------------------------------------------
# What check() returns: the file as Open MPI will read it.


@dataclass(frozen=True)
class MsgRule:
    msgsize: int
    algorithm: int
    faninout: int
    segsize: int
    max_requests: Optional[int]
    line: int


@dataclass(frozen=True)
class CommRule:
    comm_size: int
    rules: Tuple[MsgRule, ...]
    line: int


@dataclass(frozen=True)
class RulesFile:
    path: str
    version: int  # 1 = classic, 2 = with max requests
    collectives: Dict[str, Tuple[CommRule, ...]]  # in file order


# ---------------------------------------------------------------------------------------------
# One rule's legality, shared by render (on Bands) and check (on file lines).


def _comm_range(sizes, i):
    """The communicator sizes (>= 2: tuned steps aside below, coll_tuned_module.c:75-78) that
    entry i of a collective serves: (lo, hi), hi None = unbounded; lo > hi = never used."""
    lo = 2 if i == 0 else max(2, sizes[i])
    hi = sizes[i + 1] - 1 if i + 1 < len(sizes) else None
    return lo, hi


def _rule_problem(collective, alg, segsize, faninout, max_requests, vinfo, comm_range):
    """(field, problem, fix) for the first thing Open MPI would not do as written, else None."""
    v, algs, tk = vinfo
    names = {0: "ignore", **algs[collective]}
    vtext = ".".join(map(str, v))
    if alg not in names:
        return (
            "algorithm",
            "%s has no algorithm %d in Open MPI %s (it would fail with MPI_ERR_ARG "
            "at run time)" % (collective, alg, vtext),
            "use one of: %s" % ", ".join("%d %s" % kv for kv in sorted(names.items())),
        )
    used = tk.get((collective, alg), ())
    label = "%s %d (%s)" % (collective, alg, names[alg])
    if (collective, alg) in TWO_PROC and comm_range != (2, 2):
        lo, hi = comm_range
        return (
            "algorithm",
            "%s runs only on 2 ranks, but this entry serves communicators of %d%s "
            "ranks (MPI_ERR_UNSUPPORTED_OPERATION at run time)"
            % (label, lo, " and more" if hi is None else "-%d" % hi),
            "choose another algorithm, or give it a communicator-size entry of exactly 2",
        )
    if not 0 <= segsize <= INT_MAX:
        return (
            "segsize",
            "segsize %d is out of range" % segsize,
            "give 0 (no segmentation) to %d" % INT_MAX,
        )
    if segsize and "segsize" not in used:
        return (
            "segsize",
            "%s does not segment: segsize %d would be ignored" % (label, segsize),
            "write segsize 0 for it",
        )
    if "faninout" in used and not 1 <= faninout <= MAX_FANINOUT:
        return (
            "faninout",
            "%s needs a chain fan-out from 1 to %d, not %d (Open MPI would quietly "
            "use %d)" % (label, MAX_FANINOUT, faninout, 1 if faninout < 1 else MAX_FANINOUT),
            "give faninout 1-%d" % MAX_FANINOUT,
        )
    if faninout and "faninout" not in used:
        return (
            "faninout",
            "%s takes no fan-out: faninout %d would be ignored" % (label, faninout),
            "write faninout 0 for it",
        )
    if max_requests is not None:
        if v < VERSION_LINE_SINCE:
            return (
                "max_requests",
                "Open MPI %s reads no max requests from a rules file (that came "
                "in 5.0.7 with rule-file-version-2)" % vtext,
                "leave max_requests out, or render for Open MPI >= 5.0.7",
            )
        if "max_requests" not in used:
            return (
                "max_requests",
                "%s takes no max requests: %d would be ignored" % (label, max_requests),
                "leave max_requests out for it",
            )
        if not 0 <= max_requests <= INT_MAX:
            return (
                "max_requests",
                "max requests %d is out of range" % max_requests,
                "give 0 (no limit) to %d" % INT_MAX,
            )
    return None


# ---------------------------------------------------------------------------------------------
# render / write


def algorithm_number(value, names):
    """The coll_tuned number of a band's ``algorithm`` (a number or an Open MPI name) among
    `names` ({number: name}), else None: the one reading of it (tables and rules files)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value in names else None
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isascii() and text.isdigit():
            return int(text) if int(text) in names else None
        for number, name in names.items():
            if name == text:
                return number
    return None


def _band_row(where, coll, i, band, names, last, rules, vinfo):
    """(Band, algorithm number, Open MPI msgsize, lo) of band `i` of a collective, checked;
    last: the previous band's lo."""
    v = vinfo[0]
    key = "%s band %d" % (coll, i)
    try:
        lo = parse_size(band.lo)
    except SizeError as exc:
        raise _refused(where, key + " lo", str(exc), "give IMB #bytes, e.g. 0, 4096, 64KB")
    if i == 1 and lo != 0:
        raise _refused(
            where,
            key + " lo",
            "the first band starts at %d, not 0 (Open MPI "
            "drops a file whose first message size is not 0)" % lo,
            "start the first band at 0 (algorithm 0 keeps Open MPI's choice there)",
        )
    if last is not None and lo <= last:
        raise _refused(
            where,
            key + " lo",
            "bands must ascend: %d after %d" % (lo, last),
            "sort the bands by lo and merge duplicates",
        )
    if MESSAGE_SIZE[coll][0] is None and i > 1:
        raise _refused(
            where,
            key,
            "%s has one rule per communicator size: Open MPI's "
            "message size for it is %s" % (coll, MESSAGE_SIZE[coll][1]),
            "give %s a single band at 0" % coll,
        )
    alg = algorithm_number(band.algorithm, names)
    if alg is None:
        raise _refused(
            where,
            key + " algorithm",
            "%s has no algorithm %r in Open MPI %s" % (coll, band.algorithm, ".".join(map(str, v))),
            "use one of: %s" % ", ".join("%d %s" % kv for kv in sorted(names.items())),
        )
    crange = (rules.comm_size, rules.comm_size)
    bad = _rule_problem(coll, alg, band.segsize, band.faninout, band.max_requests, vinfo, crange)
    if bad:
        raise _refused(where, "%s %s" % (key, bad[0]), bad[1], bad[2])
    msg = message_size(coll, lo, rules.comm_size)
    if msg > LONG_MAX:
        raise _refused(
            where,
            key + " lo",
            "%d bytes x %d ranks overflows Open MPI's reader" % (lo, rules.comm_size),
            "give a smaller band start",
        )
    return band, alg, msg, lo


def _validated(rules, vinfo):
    """[(collective, [(band, algorithm number, Open MPI msgsize)])] in COLLTYPE order, or InputError."""
    v, algs, _ = vinfo
    where = "rules for %s ranks" % (rules.comm_size,)
    if (
        isinstance(rules.comm_size, bool)
        or not isinstance(rules.comm_size, int)
        or rules.comm_size < 2
    ):
        raise _refused(
            where,
            "comm_size",
            "the communicator size must be a whole number >= 2, "
            "not %r (tuned is not used below 2 ranks)" % (rules.comm_size,),
            "give the job's ranks, nodes x ppn",
        )
    if not rules.collectives:
        raise _refused(
            where,
            "collectives",
            "no collective has rules",
            "give at least one collective with its bands, or write no rules file",
        )
    out = []
    for coll in sorted(rules.collectives, key=lambda c: COLLTYPE.get(c, COLLCOUNT)):
        bands = list(rules.collectives[coll])
        if coll not in algs:
            why = NOT_TUNED.get(coll, "not a collective coll_tuned reads rules for")
            raise _refused(
                where,
                coll,
                "'%s': %s" % (coll, why),
                "use one of: %s" % ", ".join(sorted(algs)),
            )
        if not bands:
            raise _refused(
                where,
                coll,
                "%s has no bands" % coll,
                "give at least one band starting at 0, or leave the collective out",
            )
        names = {0: "ignore", **algs[coll]}
        rows, last = [], None
        for i, band in enumerate(bands, 1):
            band, alg, msg, lo = _band_row(where, coll, i, band, names, last, rules, vinfo)
            rows.append((band, alg, msg, lo))
            last = lo
        out.append((coll, rows))
    return out


def _line(numbers, comment):
    text = " ".join(str(n) for n in numbers)
    return "%-28s # %s" % (text, comment) if comment else text


def render(rules, mpi_version):
    """The rules file text for ``rules`` in the format ``mpi_version`` reads.

    Classic format (no version line, read by every 5.0.x) unless a band sets max_requests, which
    needs ``rule-file-version-2`` and Open MPI >= 5.0.7. Raises InputError for rules Open MPI
    would not follow as written; the text returned always passes :func:`check`."""
    vinfo = _version(mpi_version)
    v = vinfo[0]
    colls = _validated(rules, vinfo)
    version = (
        2 if any(b.max_requests is not None for _, rows in colls for b, _, _, _ in rows) else 1
    )
    n = rules.comm_size
    lines = []
    if version > 1:
        lines.append("rule-file-version-%d" % version)  # must be the very first bytes (file.c:127)
    lines.append(
        "# Open MPI %s coll_tuned dynamic rules for communicators of exactly %d ranks, written by "
        "tunedmpi" % (".".join(map(str, v)), n)
    )
    lines.append(
        "# use: OMPI_MCA_coll_tuned_use_dynamic_rules=1 "
        "OMPI_MCA_coll_tuned_dynamic_rules_filename=<this file>; sizes are Open MPI's "
        "message sizes (IMB #bytes in the comments)"
    )
    if rules.comment:
        for text in rules.comment.replace("\r", "").split("\n"):
            lines.append("# " + text.strip() if text.strip() else "#")
    lines.append(_line([len(colls)], "collectives"))
    for coll, rows in colls:
        names = algorithms(coll, mpi_version)
        entries = [
            (n, "of %d ranks" % n, rows),
            (n + 1, "above %d ranks: Open MPI's fixed decision" % n, None),
        ]
        if n > 2:  # an entry at 2 would serve nothing below it
            entries.insert(0, (0, "below %d ranks: Open MPI's fixed decision" % n, None))
        lines.append(_line([COLLTYPE[coll]], "collective id %d: %s" % (COLLTYPE[coll], coll)))
        lines.append(_line([len(entries)], "communicator sizes"))
        for size, what, rws in entries:
            lines.append(_line([size], "communicators " + what))
            if rws is None:
                lines.append(_line([1], "message sizes"))
                lines.append(_line([0, 0, 0, 0], "any message: algorithm 0 = fixed decision"))
                continue
            lines.append(_line([len(rws)], "message sizes"))
            for band, alg, msg, lo in rws:
                nums = [msg, alg, band.faninout, band.segsize]
                if band.max_requests is not None:
                    nums.append(band.max_requests)
                what = (
                    ("IMB %s and up: " % format_human(lo))
                    if MESSAGE_SIZE[coll][0] is not None
                    else ""
                )
                extra = "".join(
                    ", %s %d" % (k, getattr(band, k))
                    for k in ("segsize", "faninout")
                    if getattr(band, k)
                )
                if band.max_requests is not None:
                    extra += ", max_requests %d" % band.max_requests
                lines.append(_line(nums, "%s%d %s%s" % (what, alg, names[alg], extra)))
    text = "\n".join(lines) + "\n"
    try:
        check(text, mpi_version, name="<rendered rules for %d ranks>" % n)
    except InputError as exc:  # a bug here, never the user's: keep it from reaching a file
        raise RuntimeError(
            "tunedmpi.tables.rulesfile.render wrote a file its own check refuses: %s" % exc
        )
    return text


def environment(path):
    """The variables that make Open MPI read the rules file at ``path``. A forced
    OMPI_MCA_coll_tuned_<coll>_algorithm beats the file for that collective (it is checked
    first, coll_tuned_decision_dynamic.c:65-71), so set none of those beside it."""
    return {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(path),
    }


# ---------------------------------------------------------------------------------------------
# check

_NUMBER = re.compile(r"^(0|[1-9][0-9]*)\Z")
_VERSION_LINE = re.compile(r"^rule-file-version-([0-9]+)[ \t]*(#.*)?\Z")


def _version_line(raw, text, v, vtext, fail):
    """(rule file version, index of the first line after it) of a rules file's lines."""
    version, start = 1, 0
    if "\r" in text:
        fail(
            text[: text.index("\r")].count("\n") + 1,
            None,
            "carriage return in the file",
            "write Unix line ends (\\n)",
        )
    m = _VERSION_LINE.match(raw[0]) if raw else None
    if raw and raw[0].lstrip().startswith("rule-file-version") and not m:
        fail(
            1,
            "version line",
            "'%s' is not a version line Open MPI reads" % raw[0].strip(),
            "write exactly rule-file-version-2 as the first bytes of the file",
        )
    if m:
        if v < VERSION_LINE_SINCE:
            fail(
                1,
                "version line",
                "Open MPI %s reads no version line: it would drop the whole file" % vtext,
                "leave the line out (classic format) for Open MPI < 5.0.7",
            )
        version = int(m.group(1))
        if version not in (1, 2):
            fail(
                1,
                "version line",
                "rule file version %d is unknown (Open MPI %s knows 1 and 2)" % (version, vtext),
                "write rule-file-version-2, or no version line",
            )
        start = 1
    return version, start


def _records(raw, start, fail):
    """[(line number, [numbers])] of the lines from `start`, comments and blanks left out."""
    records = []  # (line number, [numbers])
    for i in range(start, len(raw)):
        body = raw[i].split("#", 1)[0]
        if "rule-file-version" in body:
            fail(
                i + 1,
                "version line",
                "a version line is read only as the very first bytes of the "
                "file; here it is garbage that breaks the numbers",
                "move it to the first line, before any comment",
            )
        tokens = [t for t in re.split(r"[ \t]+", body) if t]
        if not tokens:
            continue
        bad = next((t for t in tokens if not _NUMBER.match(t)), None)
        if bad is not None:
            fail(
                i + 1,
                None,
                "'%s' is not a plain decimal number (Open MPI reads 0x.. as hex, 010 "
                "as octal and skips other characters silently)" % bad,
                "write whole numbers in decimal without leading zeros; comments start with #",
            )
        records.append((i + 1, [int(t) for t in tokens]))
    return records


def _msg_rules(take, fail, coll, key, nms, version):
    """The `nms` message-size rules of one communicator size, checked in order."""
    rules = []
    for j in range(nms):
        rline, nums = take(
            key + " rule",
            "msgsize algorithm faninout segsize",
            (4, 5 if version > 1 else 4),
        )
        msg, alg, fan, seg = nums[:4]
        mr = nums[4] if len(nums) > 4 else None
        rkey = "%s msg %d" % (key, msg)
        if j == 0 and msg != 0:
            fail(
                rline,
                rkey,
                "the first message size is %d, not 0: Open MPI drops the whole file" % msg,
                "start every communicator size with a rule for message size 0",
            )
        if rules and msg <= rules[-1].msgsize:
            fail(
                rline,
                rkey,
                "message sizes must ascend: %d after %d (Open MPI stops at the "
                "first larger size)" % (msg, rules[-1].msgsize),
                "sort the rules, no duplicates",
            )
        if msg > LONG_MAX:
            fail(rline, rkey, "%d overflows Open MPI's reader" % msg, "give a smaller size")
        if MESSAGE_SIZE[coll][0] is None and j > 0:
            fail(
                rline,
                rkey,
                "%s's message size is %s: a second rule is %s"
                % (
                    coll,
                    MESSAGE_SIZE[coll][1],
                    "never used"
                    if coll in ("alltoallv", "barrier")
                    else "chosen by the datatype, not the message length",
                ),
                "give %s a single rule at message size 0" % coll,
            )
        rules.append(MsgRule(msg, alg, fan, seg, mr, rline))
    return tuple(rules)


def _comm_heads(take, fail, coll, ncs, version):
    """[(line, communicator size, its message-size rules)] of one collective's `ncs` sizes."""
    heads = []
    for _ in range(ncs):
        cline, (csize,) = take("%s comm size" % coll, "a communicator size")
        if heads and csize <= heads[-1][1]:
            fail(
                cline,
                "%s comm size" % coll,
                "communicator sizes must ascend: %d after %d (Open "
                "MPI takes the last size <= the communicator's and stops at the first larger)"
                % (csize, heads[-1][1]),
                "sort the communicator sizes, no duplicates",
            )
        if csize > LONG_MAX:
            fail(
                cline,
                "%s comm size" % coll,
                "%d overflows Open MPI's reader" % csize,
                "give a real size",
            )
        key = "%s comm %d" % (coll, csize)
        mline, (nms,) = take(key + " message sizes count", "the number of message sizes")
        if nms < 1:
            fail(
                mline,
                key + " message sizes count",
                "no message sizes for communicator size %d" % csize,
                "give at least the rule for message size 0",
            )
        rules = _msg_rules(take, fail, coll, key, nms, version)
        heads.append((cline, csize, tuple(rules)))
    return heads


def _comm_entries(coll, heads, vinfo, fail):
    """The CommRules of one collective from its [(line, comm size, rules)], each rule checked
    against the algorithm table of the communicator sizes it serves."""
    sizes = [h[1] for h in heads]
    entries = []
    for i, (cline, csize, rules) in enumerate(heads):
        crange = _comm_range(sizes, i)
        if crange[1] is not None and crange[0] > crange[1] and len(heads) > 1:
            fail(
                cline,
                "%s comm %d" % (coll, csize),
                "this entry serves no communicator (tuned runs "
                "on 2 or more ranks and the next entry starts at %d)" % sizes[i + 1],
                "remove the entry, or give it a size that some communicator has",
            )
        for r in rules:
            bad = _rule_problem(
                coll, r.algorithm, r.segsize, r.faninout, r.max_requests, vinfo, crange
            )
            if bad:
                fail(
                    r.line,
                    "%s comm %d msg %d %s" % (coll, csize, r.msgsize, bad[0]),
                    bad[1],
                    bad[2],
                )
        entries.append(CommRule(csize, rules, cline))
    return entries


def check(text, mpi_version, name="<rules>"):
    """Parse the text of the rules file ``name`` strictly; return a RulesFile or raise InputError
    (file, line, key, fix). Refuses anything Open MPI would read differently from how it looks
    (hex/octal spellings, stray characters, counts that do not match), that it would drop
    silently (first message size not 0, too many collectives, a version line it does not know),
    that its look-up would never reach (unsorted or duplicate sizes, unreachable entries) or that
    would fail at run time (unknown algorithm numbers, two_proc beyond 2 ranks), and tuning
    fields the chosen algorithm ignores."""
    vinfo = _version(mpi_version)
    v, algs, _ = vinfo
    vtext = ".".join(map(str, v))

    def fail(line, key, problem, fix):
        raise InputError(name, line, key, problem, fix)

    raw = text.split("\n")
    version, start = _version_line(raw, text, v, vtext, fail)
    records = _records(raw, start, fail)
    pos = [0]

    def take(key, what, width=(1, 1)):
        if pos[0] >= len(records):
            fail(
                len(text.splitlines()) or 1,
                key,
                "the file ends where %s should follow" % what,
                "complete the file, or lower the count that promised more",
            )
        line, nums = records[pos[0]]
        if not width[0] <= len(nums) <= width[1]:
            want = ("%d" % width[0]) if width[0] == width[1] else "%d or %d" % width
            fail(
                line,
                key,
                "expected %s number%s (%s) on this line, found %d"
                % (want, "" if width == (1, 1) else "s", what, len(nums)),
                "one count or id per line; a rule is 'msgsize algorithm faninout segsize%s'"
                % (" [max_requests]" if version > 1 else ""),
            )
        pos[0] += 1
        return line, nums

    line, (ncol,) = take("collectives count", "the number of collectives")
    if not 1 <= ncol <= COLLCOUNT:
        fail(
            line,
            "collectives count",
            "%d collectives: Open MPI takes 1 to %d (and drops the file above)" % (ncol, COLLCOUNT),
            "count the collective sections that follow",
        )
    out = {}
    for _ in range(ncol):
        line, (cid,) = take("collective id", "a collective id")
        if cid not in COLLTYPE_NAME:
            fail(
                line,
                "collective id",
                "%d is no collective id (COLLTYPE has 0-%d)" % (cid, COLLCOUNT - 1),
                "use an id from tunedmpi.tables.rulesfile.COLLTYPE, e.g. 2 allreduce, 3 alltoall",
            )
        coll = COLLTYPE_NAME[cid]
        if coll not in algs:
            fail(
                line,
                "collective id",
                "id %d is %s: %s"
                % (cid, coll, NOT_TUNED.get(coll, "coll_tuned never looks up rules for it")),
                "leave it out; tuned reads rules for: %s"
                % ", ".join("%d %s" % (COLLTYPE[c], c) for c in sorted(algs, key=COLLTYPE.get)),
            )
        if coll in out:
            fail(
                line,
                "collective id",
                "%s (id %d) appears twice; Open MPI would keep the second "
                "and leak the first" % (coll, cid),
                "merge the two sections",
            )
        line, (ncs,) = take("%s comm sizes count" % coll, "the number of communicator sizes")
        if ncs < 1:
            fail(
                line,
                "%s comm sizes count" % coll,
                "no communicator sizes for %s" % coll,
                "give at least one, or leave the collective out",
            )
        heads = _comm_heads(take, fail, coll, ncs, version)
        entries = _comm_entries(coll, heads, vinfo, fail)
        out[coll] = tuple(entries)
    if pos[0] < len(records):
        line, _ = records[pos[0]]
        fail(
            line,
            "collectives count",
            "numbers after the last of the %d collectives the file "
            "declares: Open MPI never reads them" % ncol,
            "raise the collectives count, or remove the extra lines",
        )
    return RulesFile(name, version, out)
