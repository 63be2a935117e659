"""The tuned module's geometry rule, written down once, and the code the modulefiles get from it.

Three twins apply the rule: tunedmpi.modules.geometry (Python: `tunedmpi explain`, the tests, the
tuner) interprets SOURCES directly; each module format's writer (modules/writers.py: Lua for
Lmod, Tcl for Environment Modules) emits its scheduler chain, threads and node type from it, and
render gives the templates the constants below. So the order of the sources, the variables each
reads, how it falls back and the limits of a valid count exist only here.

Each language still writes its few primitives by hand, as small as possible (they are the
reading of one value, not the rule): count, tasks, per_node, the host readers (hosts()), and the
nearest-row choice. tests/test_modules_conformance.py and tests/test_modules_tcl.py
hold all three equal on the same grid of environments.
"""

import re

from tunedmpi import argtypes

# A count is 1 to MAX_DIGITS decimal digits (leading zeros are decimal: Tcl would read "010" as
# octal, so the Tcl twin scans it as %d) with a value in 1..MAX_COUNT; anything else is absent.
MAX_DIGITS = 7
MAX_COUNT = argtypes.MAX_COUNT
# What trims a line and separates words (a host file's lines, LSF's list): Lua's %s in the C
# locale, exactly; Python's str.split()/strip() would also take \x1c-\x1f and Unicode spaces.
BLANKS = " \t\n\v\f\r"

# PBS_NODEFILE is read only when it is a regular file (a FIFO blocks the open, a device never
# ends) of at most NODEFILE_MAX_BYTES bytes (200,000 slots of 40-character host names); anything
# else is no host list, and the next source is tried.
NODEFILE_MAX_BYTES = 8 * 1024 * 1024
# An unknown TUNEDMPI_PROFILE is named in the load's message by its first PROFILE_SHOWN
# characters ("..." when cut), and only when it is all letters, digits and "_"; else "?".
PROFILE_SHOWN = 40

# Explicit geometry: each half overrides only its own half of whatever was found.
EXPLICIT = ("TUNEDMPI_NODES", "TUNEDMPI_PPN")


def count(var):
    """The variable as a count."""
    return ("count", var)


def tasks(var):
    """The largest count in Slurm's compressed task list, "36(x2),20" -> 36."""
    return ("tasks", var)


def per_node(var):
    """The variable (a count of processes) divided by the way's node count, rounded up."""
    return ("per_node", var)


def per_rank(var):
    """The variable (a count of cores on a host) divided by the geometry's ppn, rounded up."""
    return ("per_rank", var)


def first(*exprs):
    """The first of the expressions that has a value."""
    return ("first",) + exprs


def pair(nodes, ppn):
    """A way: a node count and a ppn expression (which may use the node count: per_node)."""
    return ("pair", nodes, ppn)


def hosts(reader, var):
    """A way: (distinct hosts, most slots on one host) from a host list, by ``reader``:
    "nodefile" = the file named by the variable, one line per slot (PBS); "slots" = "host slots
    host slots ..." in the variable (LSF; a host listed twice adds up)."""
    return ("hosts", reader, var)


# The scheduler sources in priority order: (name, ways). A source applies with the first of its
# ways that yields both a node count and a ppn; else the next source is tried; if none applies,
# the site's default geometry is used ("default"). EXPLICIT then overrides either half.
SOURCES = (
    (
        "slurm",
        (
            pair(
                first(count("SLURM_JOB_NUM_NODES"), count("SLURM_NNODES")),
                first(
                    count("SLURM_NTASKS_PER_NODE"),
                    tasks("SLURM_TASKS_PER_NODE"),
                    per_node("SLURM_NTASKS"),
                ),
            ),
        ),
    ),
    (
        "pbs",
        (pair(count("PBS_NUM_NODES"), count("PBS_NUM_PPN")), hosts("nodefile", "PBS_NODEFILE")),
    ),
    ("lsf", (hosts("slots", "LSB_MCPU_HOSTS"),)),
    ("flux", (pair(count("FLUX_JOB_NNODES"), per_node("FLUX_JOB_SIZE")),)),
)

# The row: the nearest measured node count on a log2 scale, then the nearest ppn measured at that
# node count on a linear scale; a tie goes to the smaller; "exact", else "extrapolated" when the
# geometry lies outside the measured node counts or that node count's ppns, else "nearest".

# Outside the table (site.yaml outside: {factor, then}; issue 50): a geometry is outside when its
# ppn exceeds the node's cores (hardware: sockets x cores_per_socket), or when its row is
# extrapolated by more than the factor on an axis (a row of n nodes for a job of more than
# factor x n nodes or fewer than n / factor; the same for ppn). The selection names why, after
# match= (OVER_NOTE, BEYOND_NOTE); the site's `then` says what the module does there:
# "extrapolate" the edge row, said at load (as inside the factor; the default); "nearest" the edge
# row as a nearest match, quietly; "untuned" no row: nothing set, row=none match=untuned, said at
# load, and UNTUNED_MARK in TUNEDMPI_ROW (after the row unload and the launch check read).
OUTSIDE_CHOICES = ("extrapolate", "nearest", "untuned")
OVER_NOTE = " ppn>cores=%d"
BEYOND_NOTE = " beyond=x%d"
UNTUNED_MARK = ":untuned"


# Threads per rank (the cores a rank needs): THREADS_EXPLICIT, else the largest of THREADS, else 1.
# Slurm's cpus-per-task; PBS Pro's NCPUS (the cores of the job's chunk on a host) over the ppn;
# OMP_NUM_THREADS, as the user, PBS Pro (ompthreads), LSF or Flux set it.
THREADS_EXPLICIT = "TUNEDMPI_THREADS"
THREADS = (count("SLURM_CPUS_PER_TASK"), per_rank("NCPUS"), count("OMP_NUM_THREADS"))
# A rank of more than one thread is never bound to one core. PRRTE takes PE=n per job only (as
# PRTE_MCA_rmaps_default_mapping_policy, Open MPI 5.0.8's mpirun exits 213: "cannot be the default
# setting") and binds 1-2 ranks to a core by default; so when a row sets the placement (BINDING),
# the module leaves its mapping and ranking (UNPLACED) unset and sets BINDING to none: placement is
# the launcher's (srun binds cpus-per-task cores; mpirun --map-by slot:PE=n per job: PRRTE refuses
# PE=n beside binding none, so the launch check's mpirun and mpiexec unset BINDING when their
# command line has PE=). TUNEDMPI_ROW carries THREADED_MARK so that unload undoes what load set.
BINDING = ("PRTE_MCA_hwloc_default_binding_policy", "none")
UNPLACED = ("PRTE_MCA_rmaps_default_mapping_policy", "PRTE_MCA_rmaps_default_ranking_policy")
THREADED_MARK = ":unbound"
BINDING_WHY = "threads per rank above 1: placement left to the launcher, never one core"
THREAD_VARIABLES = [THREADS_EXPLICIT] + [e[1] for e in THREADS]


def variables():
    """Every environment variable the rule reads (for tests and docs): EXPLICIT, the sources', then
    THREAD_VARIABLES."""

    def names(expr):  # a variable is the last item of a primitive or a hosts way
        if expr[0] in ("first", "pair"):
            return [n for e in expr[1:] for n in names(e)]
        return [expr[-1]]

    read = [n for _, ways in SOURCES for way in ways for n in names(way)]
    return list(EXPLICIT) + read + THREAD_VARIABLES


# Users in control: a name in SKIP (words separated by "," or blanks) is left alone, and so is
# a name that already has a value when the module loads: the user's (or an earlier module's) wins.
# TUNEDMPI_SELECTION names both (skip=..., yours=...); TUNEDMPI_ROW records them after LEFT_MARK
# so that unload leaves them too. A word of SKIP that names nothing this module sets is ignored,
# and the load says so (a word shown as an unknown profile is: PROFILE_SHOWN).
SKIP = "TUNEDMPI_SKIP"
LEFT_MARK = ":left="

# The launch check (docs/design.md, "The job's geometry at launch"): the module records in SEEN
# what it read (each variable of seen_variables() that is set, as NAME=value, joined by ";",
# values kept to SEEN_CHARS: the record is data, never code); the mpirun, mpiexec and srun of
# LAUNCH_DIR in the module's side folder rebuild it from the environment they run in and, when it
# differs (a login row inherited by a job, a job step, threads set after the load), say so in one
# line that names the fix (module reload), then run the real command.
SEEN = "TUNEDMPI_SEEN"
SEEN_CHARS = "A-Za-z0-9_.,()/-"  # a bracket class in Python, Tcl and tr; Lua: SEEN_LUA
SEEN_LUA = "[^A-Za-z0-9_.,()/%-]"
LAUNCHERS = ("mpirun", "mpiexec", "srun")
LAUNCH_DIR = "bin"


# One site, several node types (site.yaml node_types): the node type is chosen before the row.
# NODE_TYPE_EXPLICIT naming a node type wins; else the first of PARTITIONS, then the site's own
# variable (node_types.variable, source "site"), whose value is a partition some node type lists;
# else the site's default node type. Only a plain name (PLAIN_CHARS, at most PLAIN_MAX) compares:
# any other value is no partition. TUNEDMPI_ROW starts with "<node type>@" for unload.
NODE_TYPE_EXPLICIT = "TUNEDMPI_NODE_TYPE"
PARTITIONS = (("slurm", "SLURM_JOB_PARTITION"), ("pbs", "PBS_QUEUE"), ("lsf", "LSB_QUEUE"))
PLAIN_CHARS = "A-Za-z0-9_.-"  # a bracket class in Python and Tcl; Lua: PLAIN_LUA
PLAIN_LUA = "^[A-Za-z0-9_.%-]+$"
PLAIN_MAX = 64
NODE_TYPE_MARK = "@"


def node_type_variables(site_variable=None):
    """(source, variable) of the partition sources in priority order, the site's own last."""
    return list(PARTITIONS) + ([("site", site_variable)] if site_variable else [])


def seen_variables(partition_sources=()):
    """What the row depends on: the rule's variables and TUNEDMPI_PROFILE; on a site of several
    node types also NODE_TYPE_EXPLICIT and the variables of ``partition_sources`` (its
    node_type_variables())."""
    extra = [NODE_TYPE_EXPLICIT] + [v for _, v in partition_sources] if partition_sources else []
    return variables() + ["TUNEDMPI_PROFILE"] + extra


def _check():
    """The names above reach Lua and Tcl code unquoted: they must be plain identifiers."""
    ident = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
    names = variables() + [name for name, _ in SOURCES] + list(UNPLACED) + [BINDING[0]]
    names += [NODE_TYPE_EXPLICIT] + [n for pair_ in PARTITIONS for n in pair_]
    bad = [n for n in names if not ident.match(n)]
    if bad:
        raise ValueError("selector names must be plain identifiers: %r" % bad)


_check()
