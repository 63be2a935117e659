"""Job geometry from the environment, and the choice of a table row for it.

The rule itself (sources in priority order, limits of a count, the nearest-row rule) is written
once in tunedmpi.modules.selector: this module evaluates it (the Python twin; `tunedmpi explain`,
the tests and the tuner use it), and render emits the Lua and Tcl selectors from it. The
primitives here have one counterpart each in render/templates/tuned.lua.j2 and tuned.tcl.j2; the
conformance tests require all three to agree on every case.
"""

import re
from dataclasses import dataclass
from fractions import Fraction

from tunedmpi.files import read_bytes
from tunedmpi.modules import selector

MAX_COUNT = selector.MAX_COUNT  # larger "counts" are garbage, not geometry
_COUNT = re.compile(r"[0-9]{1,%d}" % selector.MAX_DIGITS)  # fullmatch: "4\n" is no count
# A host name of LSB_MCPU_HOSTS: printable ASCII only. Under a UTF-8 locale Tcl decodes the bytes
# (b"h\xc3\xa9" and b"h\xe9" both become "hé") where Lua and Python compare them: no twin guesses.
_HOST = re.compile(r"[!-~]+\Z")
_WORD = re.compile(r"[^%s]+" % re.escape(selector.BLANKS))


def count(text):
    """A positive whole number from an environment string, else None (empty, zero, junk)."""
    if text is None or not _COUNT.fullmatch(text):
        return None
    value = int(text)
    return value if 0 < value <= MAX_COUNT else None


def max_tasks_per_node(text):
    """Largest count in Slurm's compressed SLURM_TASKS_PER_NODE, e.g. '36(x2),20' -> 36."""
    if not text:
        return None
    items = [re.fullmatch(r"([0-9]+)(\(x([0-9]+)\))?", item) for item in text.split(",")]
    if all(m and count(m.group(1)) and (not m.group(2) or count(m.group(3))) for m in items):
        return max(int(m.group(1)) for m in items)
    return None


def ceil_div(a, b):
    return -(-a // b)


def hosts_and_max(hosts):
    """(distinct hosts, most slots on one host) from a list of (host, slots)."""
    per = {}
    for host, slots in hosts:
        per[host] = per.get(host, 0) + slots
    return (len(per), max(per.values())) if per else (None, None)


def read_nodefile(path):
    """PBS_NODEFILE: one line per slot. Returns (nodes, ppn) or (None, None).

    Only a regular file of at most selector.NODEFILE_MAX_BYTES is read (a FIFO would block, a
    device never end); as in the Lua and Tcl twins, anything else is no host list."""
    if not path:
        return None, None
    try:
        data = read_bytes(path, selector.NODEFILE_MAX_BYTES)
    except (OSError, TypeError, ValueError):  # a FIFO, a device, too big: no host list
        return None, None
    # Lines end at "\n" only, as Lua's and Tcl's readers split them.
    lines = data.decode("utf-8", errors="surrogateescape").split("\n")
    names = [line.strip(selector.BLANKS) for line in lines]
    return hosts_and_max((name, 1) for name in names if name)


def lsf_hosts(text):
    """LSB_MCPU_HOSTS 'hostA 36 hostB 36' -> (2, 36), or (None, None) when malformed."""
    words = _WORD.findall(text or "")
    if not words or len(words) % 2:
        return None, None
    pairs = [(host, count(slots)) for host, slots in zip(words[0::2], words[1::2])]
    if any(slots is None or not _HOST.match(host) for host, slots in pairs):
        return None, None
    return hosts_and_max(pairs)


def per_node(text, nodes):
    """A count of processes over ``nodes`` nodes, rounded up, or None."""
    total = count(text)
    return ceil_div(total, nodes) if total else None


HOSTS = {"nodefile": read_nodefile, "slots": lsf_hosts}  # selector.hosts() readers


def _value(expr, env, nodes, ppn=None):
    """One expression of selector.SOURCES or THREADS on ``env``: a count or None."""
    if expr[0] == "first":
        for e in expr[1:]:
            value = _value(e, env, nodes)
            if value:
                return value
        return None
    text = env.get(expr[1])
    if expr[0] == "count":
        return count(text)
    if expr[0] == "tasks":
        return max_tasks_per_node(text)
    return per_node(text, ppn if expr[0] == "per_rank" else nodes)


def from_scheduler(env):
    """(nodes, ppn, source) from the first of selector.SOURCES that applies, else None."""
    for name, ways in selector.SOURCES:
        for way in ways:
            if way[0] == "pair":
                nodes = _value(way[1], env, None)
                ppn = _value(way[2], env, nodes) if nodes else None
            else:
                nodes, ppn = HOSTS[way[1]](env.get(way[2]))
            if nodes and ppn:
                return nodes, ppn, name
    return None


@dataclass
class Geometry:
    nodes: int
    ppn: int
    source: str  # explicit | slurm | pbs | lsf | flux | default (or a mix: explicit+slurm)


def detect(env, default_nodes, default_ppn):
    """Explicit TUNEDMPI_NODES/TUNEDMPI_PPN beat the scheduler, which beats the site default."""
    found = from_scheduler(env)
    nodes, ppn, source = found if found else (default_nodes, default_ppn, "default")
    exp_nodes, exp_ppn = (count(env.get(name)) for name in selector.EXPLICIT)
    if exp_nodes or exp_ppn:
        nodes, ppn = exp_nodes or nodes, exp_ppn or ppn
        source = (
            "explicit" if (exp_nodes and exp_ppn) or source == "default" else "explicit+" + source
        )
    return Geometry(nodes, ppn, source)


def threads(env, ppn):
    """Threads per rank at ``ppn`` (selector.THREADS): the explicit count, else the largest found, else 1."""
    explicit = count(env.get(selector.THREADS_EXPLICIT))
    return explicit or max([1] + [_value(e, env, None, ppn) or 1 for e in selector.THREADS])


_PLAIN = re.compile(r"[%s]{1,%d}\Z" % (selector.PLAIN_CHARS, selector.PLAIN_MAX))


def plain(text):
    """An environment string as a name the node-type rule compares (selector.PLAIN_CHARS), else None."""
    return text if text and _PLAIN.match(text) else None


def node_type(env, site):
    """(node type, source) of a site of several node types, by selector's node-type rule."""
    wanted = plain(env.get(selector.NODE_TYPE_EXPLICIT))
    if wanted in [nt.name for nt in site.node_types]:
        return wanted, "explicit"
    partition = {p: nt.name for nt in site.node_types for p in nt.partitions}
    for source, var in site.node_type_variables():
        value = plain(env.get(var))
        if value in partition:
            return partition[value], source
    return site.default_node_type, "default"


def seen(env, partition_sources=()):
    """selector.SEEN's record of ``env``: NAME=value;... of the variables that are set."""
    kept = "[^%s]" % selector.SEEN_CHARS
    names = [n for n in selector.seen_variables(partition_sources) if env.get(n)]
    return ";".join("%s=%s" % (n, re.sub(kept, "", env[n])) for n in names)


@dataclass
class Match:
    nodes: int  # the row's node count
    ppn: int  # the row's ppn
    kind: str  # exact | nearest | extrapolated


def nearest_log2(values, x):
    """Nearest value on a log2 scale; a tie goes to the smaller value. The distance is the ratio
    max/min as a fraction, no logarithms (Lmod has none)."""
    return min(sorted(values), key=lambda v: Fraction(max(v, x), min(v, x)))


def nearest_linear(values, x):
    return min(sorted(values), key=lambda v: abs(v - x))


def choose_row(keys, nodes, ppn):
    """Row for a geometry among measured (nodes, ppn) keys: nearest node count on a log2 scale,
    then the nearest ppn measured at that node count. Outside the measured range on either axis
    the nearest edge is used and the match is 'extrapolated'."""
    keys = sorted(set(keys))
    if not keys:
        return None
    row_nodes = nearest_log2({n for n, _ in keys}, nodes)
    ppns = {p for n, p in keys if n == row_nodes}
    row_ppn = nearest_linear(ppns, ppn)
    all_nodes = [n for n, _ in keys]
    if row_nodes == nodes and row_ppn == ppn:
        kind = "exact"
    elif nodes > max(all_nodes) or nodes < min(all_nodes) or ppn > max(ppns) or ppn < min(ppns):
        kind = "extrapolated"
    else:
        kind = "nearest"
    return Match(row_nodes, row_ppn, kind)


def outside(match, nodes, ppn, cores, factor):
    """(ppn over the node's cores, row extrapolated beyond ``factor``): selector's outside rule
    (cores or factor 0: not checked)."""

    def beyond(a, b):
        return bool(factor) and (a > factor * b or b > factor * a)

    far = match.kind == "extrapolated" and (beyond(nodes, match.nodes) or beyond(ppn, match.ppn))
    return bool(cores) and ppn > cores, far
