"""Abstract tuning knobs: the words tables use, their legal values, and their normal form.

A table says ``ucx_rndv_thresh: intra:32KB,inter:128KB``; this module checks that against the UCX
version the table names and normalises it to ``intra:32kb,inter:128kb``. Mapping knobs to
environment variables per MPI flavour belongs to the module renderer, not here.

Each knob has one validator ``(value, ucx_version) -> normal value`` raising KnobError with the fix.
Adding a knob is one entry in KNOBS.
"""

import re

from tunedmpi.tables.operations import COLLECTIVES, OPERATIONS, UCC_ALGORITHMS
from tunedmpi.tables.units import SizeError, format_size, parse_size


class KnobError(ValueError):
    def __init__(self, problem, fix):
        self.problem = problem
        self.fix = fix
        super().__init__(problem)


def version_tuple(text):
    """'1.18.1' -> (1, 18, 1); None stays None. Raises KnobError for anything else, a number too:
    YAML reads an unquoted 1.20 as the number 1.2 (issue 50)."""
    if text is None:
        return None
    not_text(text)
    m = re.match(r"^([0-9]+)\.([0-9]+)(?:\.([0-9]+))?\Z", str(text).strip())
    if not m:
        raise KnobError(
            "'%s' is not a version" % (text,), "write it as MAJOR.MINOR[.PATCH], e.g. 1.18.1"
        )
    return tuple(int(g) for g in m.groups() if g is not None)


def not_text(value):
    """Raise KnobError when a version is a YAML number instead of quoted text."""
    if isinstance(value, (int, float)):
        raise KnobError(
            "%r is a number, not a version (YAML reads an unquoted 1.20 as 1.2)" % (value,),
            'quote the version as it is written, e.g. "1.20"',
        )


UCX_KEYED_THRESH = (1, 17)  # UCX_RNDV_THRESH accepts intra:/inter: from UCX 1.17 on

# Transport names UCX_TLS accepts (aliases and concrete transports, UCX 1.11 - 1.18).
UCX_TRANSPORTS = frozenset(
    """
    all self sm shm mm posix sysv xpmem cma knem tcp ib rc rc_v rc_x rc_verbs rc_mlx5 ud ud_v ud_x
    ud_verbs ud_mlx5 dc dc_x dc_mlx5 cuda cuda_copy cuda_ipc gdr_copy rocm rocm_copy rocm_ipc
    rocm_gdr ze ze_copy ze_ipc srd ugni
""".split()
)


def _size_or_special(value, what):
    try:
        return parse_size(value, allow_special=True)
    except SizeError as exc:
        raise KnobError(str(exc), "write %s as auto, inf, or a size such as 32kb" % what)


def ucx_tls(value, ucx_version=None):
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str) or not value.strip():
        raise KnobError(
            "UCX_TLS must be a comma-separated list of transports", "write e.g. self,sm,rc or all"
        )
    text = value.strip().lower()
    negate = text.startswith("^")
    names = [t.strip() for t in text.lstrip("^").split(",")]
    for name in names:
        if name not in UCX_TRANSPORTS:
            raise KnobError(
                "unknown UCX transport '%s'" % name,
                "use transports UCX knows (e.g. all, self, sm, rc, ud, dc, tcp)",
            )
    if len(set(names)) != len(names):
        raise KnobError("a transport is named twice in '%s'" % value, "name each transport once")
    return ("^" if negate else "") + ",".join(names)


def ucx_rndv_thresh(value, ucx_version=None):
    """A size, or UCX >= 1.17's ``[default,]intra:X,inter:Y`` form, checked for the UCX version."""
    parts = [p.strip() for p in str(value).split(",")] if isinstance(value, str) else [value]
    default, keys = None, {}
    for part in parts:
        if isinstance(part, str) and ":" in part:
            key, _, size = part.partition(":")
            key = key.strip().lower()
            if key not in ("intra", "inter"):
                raise KnobError("unknown threshold key '%s'" % key, "use intra: or inter:")
            if key in keys:
                raise KnobError("'%s:' is given twice" % key, "give each key once")
            keys[key] = _size_or_special(size, "the %s: value" % key)
        else:
            if default is not None:
                raise KnobError(
                    "two default values in '%s'" % value, "give one default, e.g. auto,intra:32kb"
                )
            default = _size_or_special(part, "the threshold")
    if keys:
        if ucx_version is not None and ucx_version < UCX_KEYED_THRESH:
            raise KnobError(
                "UCX %s accepts no intra:/inter: keys (they came in UCX 1.17)"
                % ".".join(map(str, ucx_version)),
                "give a single value such as 32kb, or raise the table's ucx_version",
            )
        if default is None and len(keys) == 1:
            lone = next(iter(keys))
            raise KnobError(
                "a lone '%s:' key is a fatal error in UCX >= 1.17" % lone,
                "give both keys (intra:X,inter:Y) or a default plus the key (auto,%s:X)" % lone,
            )
    out = [] if default is None else [format_size(default)]
    out += ["%s:%s" % (k, format_size(keys[k])) for k in ("intra", "inter") if k in keys]
    return ",".join(out)


def ucx_zcopy_thresh(value, ucx_version=None):
    return format_size(_size_or_special(value, "UCX_ZCOPY_THRESH"))


def _choice(name, allowed, fix=None):
    if fix is None and allowed[0] == "default":  # say what default means
        *rest, last = allowed[1:]
        fix = "use default (Open MPI's own choice), %s or %s" % (", ".join(rest), last)

    def check(value, ucx_version=None):
        text = str(value).strip().lower() if not isinstance(value, bool) else None
        if text not in allowed:
            raise KnobError(
                "%s must be one of %s, not %r" % (name, ", ".join(allowed), value),
                fix or "use one of: %s" % ", ".join(allowed),
            )
        return text

    return check


def nps(value, ucx_version=None):
    if isinstance(value, bool) or value not in (1, 2, 4):
        raise KnobError(
            "nps (NUMA nodes per socket) must be 1, 2 or 4, not %r" % (value,),
            "write the BIOS setting as a number: 1, 2 or 4",
        )
    return value


def _bytes(name, low, high):
    """A byte count Open MPI reads as an integer (sizes such as 8kb are written out in bytes)."""

    def check(value, ucx_version=None):
        try:
            n = parse_size(value)
        except SizeError as exc:
            raise KnobError("%s: %s" % (name, exc), "write a size such as 4096 or 8kb")
        if n is None or not low <= n <= high:
            raise KnobError(
                "%s must be from %s to %s bytes, not %r"
                % (name, format_size(low), format_size(high), value),
                "give a size in that range",
            )
        return int(n)

    return check


def _count(name, low, high, fix="give a number in that range"):
    """A whole number from low to high."""

    def check(value, ucx_version=None):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise KnobError(
                "%s must be a whole number from %d to %d, not %r" % (name, low, high, value), fix
            )
        return value

    return check


def _flag(name):
    """An on/off MCA flag, written 1 or 0."""

    def check(value, ucx_version=None):
        if value in (True, 1, "1", "true", "on"):
            return 1
        if value in (False, 0, "0", "false", "off"):
            return 0
        raise KnobError("%s is on or off, not %r" % (name, value), "write 1 or 0")

    return check


# 0 = Open MPI's own (automatic) choice
_algorithm = _count(
    "a coll_tuned algorithm", 0, 16, "see `ompi_info --param coll tuned --level 9` for the numbers"
)


COMPONENTS = ("none", "ucc", "hcoll")


def components_of(collective):
    """The component values legal for one collective: COMPONENTS and its UCC algorithms
    (operations.py): "ucc@<algorithm>" runs it in UCC with that algorithm (UCC_TL_UCP_TUNE), "ucc"
    with UCC's default choice. known-params checks each against the build's list."""
    return COMPONENTS + tuple("ucc@" + a for a in UCC_ALGORITHMS.get(collective, ()))


def base_component(component):
    """ucc@knomial -> ucc: the component that runs it (site.yaml's components name these)."""
    return component.split("@", 1)[0]


KNOBS = {
    "ucx_tls": ucx_tls,
    "ucx_rndv_thresh": ucx_rndv_thresh,
    "ucx_zcopy_thresh": ucx_zcopy_thresh,
    "component": _choice("component", COMPONENTS),
    "nps": nps,
    "mapping": _choice("mapping", ("block", "cyclic")),
    "pml": _choice("pml", ("default", "ob1", "ucx", "cm")),
    "osc": _choice("osc", ("default", "ucx", "rdma", "sm", "pt2pt")),
    # ob1's shared-memory path (Open MPI's default pml on one node): btl sm's protocol limits and
    # the single-copy mechanism (smsc: cma here, xpmem/knem where built; none = copy in/out only).
    "btl_sm_eager_limit": _bytes("btl_sm_eager_limit", 256, 1 << 20),
    "btl_sm_max_send_size": _bytes("btl_sm_max_send_size", 4096, 1 << 24),
    "smsc": _choice("smsc", ("default", "cma", "xpmem", "knem", "none")),
    # ob1's TCP path (between nodes where there is no RDMA network): btl tcp's protocol limits,
    # socket buffers (0 = the kernel's autotuning) and sockets per peer
    "btl_tcp_eager_limit": _bytes("btl_tcp_eager_limit", 1024, 1 << 24),
    "btl_tcp_max_send_size": _bytes("btl_tcp_max_send_size", 4096, 1 << 24),
    "btl_tcp_sndbuf": _bytes("btl_tcp_sndbuf", 0, 1 << 28),
    "btl_tcp_rcvbuf": _bytes("btl_tcp_rcvbuf", 0, 1 << 28),
    "btl_tcp_links": _count("btl_tcp_links", 1, 8),
    # ranks that wait call sched_yield() instead of spinning, so whatever else needs that core runs
    "mpi_yield_when_idle": _flag("mpi_yield_when_idle"),
    # Which component runs one collective (a sweep's per-collective component stage; a table says
    # it per message size with a case's `choice`): Open MPI's own (none), UCC, or one of UCC's
    # algorithms (ucc@<name>). Per collective, as Open MPI routes it (coll_ucc_cts); where UCC runs
    # only some sizes, UCC's own tuning strings decline the others (modules/envmap.py).
    **{
        "coll_%s_component" % c: _choice(
            "coll_%s_component" % c,
            tuple(v for v in components_of(c) if v != "hcoll"),  # HCOLL: a case's settings only
            "use none (Open MPI's own collectives), ucc or ucc@<one of UCC's algorithms>",
        )
        for c in UCC_ALGORITHMS
    },
    **{OPERATIONS[c].knob: _algorithm for c in COLLECTIVES},
    # Open MPI 5.0.8: int, bytes, 0 = no segmentation; used only beside a forced bcast algorithm
    # that segments (chain, pipeline, trees: see rulesfile.takes), ignored otherwise.
    "coll_tuned_bcast_algorithm_segmentsize": _bytes(
        "coll_tuned_bcast_algorithm_segmentsize", 0, (1 << 31) - 1
    ),
}


def normalise(name, value, ucx_version=None):
    """Normal form of one knob value; KnobError (with the fix) when the knob or value is bad."""
    if name not in KNOBS:
        raise KnobError(
            "unknown knob '%s'" % name,
            "use one of: %s (or add it to tunedmpi/tables/knobs.py)" % ", ".join(sorted(KNOBS)),
        )
    if value is None:
        raise KnobError(
            "%s has no value" % name,
            "give a value, or leave the knob out and list it under unstated",
        )
    return KNOBS[name](value, ucx_version)
