"""Job geometry from the environment, and the choice of a table row for it.

This is the Python twin of the selector in the generated Lua modulefile: `tunedmpi explain`, the
tests and the tuner use it, and the conformance test requires both to agree on every case.
Keep the two in step: every rule here has one counterpart in render/templates/tuned.lua.j2.
"""
import re
from dataclasses import dataclass

MAX_COUNT = 1000000  # larger "counts" are garbage, not geometry
_COUNT = re.compile(r"^[0-9]+$")


def count(text):
    """A positive whole number from an environment string, else None (empty, zero, junk)."""
    if text is None or not _COUNT.match(text) or len(text) > 7:
        return None
    value = int(text)
    return value if 0 < value <= MAX_COUNT else None


def max_tasks_per_node(text):
    """Largest count in Slurm's compressed SLURM_TASKS_PER_NODE, e.g. '36(x2),20' -> 36."""
    if not text:
        return None
    best = None
    for item in text.split(","):
        m = re.match(r"^([0-9]+)(\(x([0-9]+)\))?$", item)
        if not m or count(m.group(1)) is None or (m.group(2) and count(m.group(3)) is None):
            return None
        best = max(best or 0, int(m.group(1)))
    return best


def ceil_div(a, b):
    return -(-a // b)


def hosts_and_max(hosts):
    """(distinct hosts, most slots on one host) from a list of (host, slots)."""
    per = {}
    for host, slots in hosts:
        per[host] = per.get(host, 0) + slots
    if not per:
        return None, None
    return len(per), max(per.values())


def read_nodefile(path):
    """PBS_NODEFILE: one line per slot. Returns (nodes, ppn) or (None, None)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            names = [line.strip() for line in fh if line.strip()]
    except (OSError, TypeError):
        return None, None
    return hosts_and_max((name, 1) for name in names)


def lsf_hosts(text):
    """LSB_MCPU_HOSTS 'hostA 36 hostB 36' -> (2, 36), or (None, None) when malformed."""
    words = (text or "").split()
    if not words or len(words) % 2:
        return None, None
    pairs = []
    for i in range(0, len(words), 2):
        slots = count(words[i + 1])
        if slots is None:
            return None, None
        pairs.append((words[i], slots))
    return hosts_and_max(pairs)


def from_scheduler(env):
    """(nodes, ppn, source) from the first scheduler whose variables make sense, else None."""
    nodes = count(env.get("SLURM_JOB_NUM_NODES")) or count(env.get("SLURM_NNODES"))
    if nodes:
        ppn = (count(env.get("SLURM_NTASKS_PER_NODE"))
               or max_tasks_per_node(env.get("SLURM_TASKS_PER_NODE")))
        if not ppn and count(env.get("SLURM_NTASKS")):
            ppn = ceil_div(count(env["SLURM_NTASKS"]), nodes)
        if ppn:
            return nodes, ppn, "slurm"
    nodes, ppn = count(env.get("PBS_NUM_NODES")), count(env.get("PBS_NUM_PPN"))
    if not (nodes and ppn) and env.get("PBS_NODEFILE"):
        nodes, ppn = read_nodefile(env["PBS_NODEFILE"])
    if nodes and ppn:
        return nodes, ppn, "pbs"
    nodes, ppn = lsf_hosts(env.get("LSB_MCPU_HOSTS"))
    if nodes and ppn:
        return nodes, ppn, "lsf"
    nodes, size = count(env.get("FLUX_JOB_NNODES")), count(env.get("FLUX_JOB_SIZE"))
    if nodes and size:
        return nodes, ceil_div(size, nodes), "flux"
    return None


@dataclass
class Geometry:
    nodes: int
    ppn: int
    source: str            # explicit | slurm | pbs | lsf | flux | default (or a mix: explicit+slurm)


def detect(env, default_nodes, default_ppn):
    """Explicit TUNEDMPI_NODES/TUNEDMPI_PPN beat the scheduler, which beats the site default."""
    found = from_scheduler(env)
    nodes, ppn, source = found if found else (default_nodes, default_ppn, "default")
    exp_nodes, exp_ppn = count(env.get("TUNEDMPI_NODES")), count(env.get("TUNEDMPI_PPN"))
    if exp_nodes or exp_ppn:
        nodes, ppn = exp_nodes or nodes, exp_ppn or ppn
        source = "explicit" if (exp_nodes and exp_ppn) or source == "default" else "explicit+" + source
    return Geometry(nodes, ppn, source)


@dataclass
class Match:
    nodes: int             # the row's node count
    ppn: int               # the row's ppn
    kind: str              # exact | nearest | extrapolated


def _log_nearer(a, b, x):
    """Is a nearer to x than b on a log2 scale? Compared as ratios, no logarithms (Lmod has none)."""
    ra = max(a, x) * min(b, x)
    rb = max(b, x) * min(a, x)
    return ra < rb


def nearest_log2(values, x):
    """Nearest value on a log2 scale; a tie goes to the smaller value."""
    best = None
    for v in sorted(values):
        if best is None or _log_nearer(v, best, x):
            best = v
    return best


def nearest_linear(values, x):
    best = None
    for v in sorted(values):
        if best is None or abs(v - x) < abs(best - x):
            best = v
    return best


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
