"""What validate runs: the benchmark sets, their flags scaled to the machine, and the binaries.

Binaries, in this order: IMB_MPI1 / OSU_DIR variables; IMB-MPI1 / osu_* on PATH once the MPI module
(and, where the site has them, the Spack modules intel-mpi-benchmarks / osu-micro-benchmarks) are
loaded; else the probes in validate/probes/ built with that MPI's mpicc, labelled "probe". A module
of another MPI than the site's (validate --baseline intel-mpi/...) gets its own, found without the
variables and the benchmark modules (they are the site's MPI's), and same_kind() makes both sides
of a family run the same kind of program.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tunedmpi.files import read_text
from tunedmpi.tables.operations import BENCHMARKS, COLLECTIVES, OSU_BENCHMARKS

BENCH_MODULES = {"imb": "intel-mpi-benchmarks", "osu": "osu-micro-benchmarks"}
# OSU one-sided window creation and synchronisation: allocate + flush are OSU 7's defaults and the
# only pair that never crashed under default Open MPI settings on this machine kind (see
# ../shared/fixtures/README.md); both are written into every command and report.
WINDOW, SYNC = "allocate", "flush"

# Per set: IMB sizes (log2, from msglog_min: default 0), repetitions and seconds per size; OSU
# sizes, iterations, warm-up, and those of the bandwidth tests (None: OSU's own).
SET_KEYS = "msglog iter time osu_max osu_iter osu_warmup osu_bw_iter osu_bw_warmup".split()
SETS = {
    "quick": dict(zip(SET_KEYS, (16, 200, 0.2, 65536, 500, 50, 50, 5))),
    # quick's sizes at a tenth of the iterations and a 10x time budget (IMB stops a benchmark
    # after -time x number of sizes, timing included, and prints "time-out" for the rest): for a
    # network where one call can take milliseconds (the untuned default between the namespace
    # hosts, ~8 ms: docs/slurm.md), so that every size is measured
    "short": dict(zip(SET_KEYS, (16, 20, 2.0, 65536, 50, 5, 10, 2))),
    "full": dict(zip(SET_KEYS, (20, 1000, 10, 1 << 20, None, None, None, None))),
}
# full's settings from 1 KB on (IMB -msglog 10:20): the middle bands, where a campaign aims at
# 1 KB - 1 MB alone (site-configs/local-source/space-ucc.yaml)
SETS["mid"] = dict(SETS["full"], msglog_min=10)
# short's iterations to full's 1 MB: a campaign between the namespace hosts that reaches the large
# band, where the untuned baseline (spinning ranks) would spend minutes per run at full's
# (site-configs/local-source/space-2x1-ucc.yaml)
SETS["short-1mb"] = dict(SETS["short"], msglog=20, osu_max=1 << 20)


@dataclass(frozen=True)
class Run:
    """One benchmark program invocation: what it measures and how it is launched."""

    name: str  # "collectives" or a one-sided benchmark name
    family: str  # "imb" (IMB-MPI1 format) or "osu"
    expect: Tuple[str, ...]  # benchmark names its output must contain
    argv: Tuple[str, ...]  # program and arguments (mpirun is added by the runner)
    ranks: Optional[int]  # fixed rank count (OSU one-sided: 2), None: the job's


@dataclass
class Binaries:
    suite: str  # "imb+osu", "imb+probe", "probe+osu" or "probe"
    imb: Optional[str] = None
    osu: Dict[str, str] = field(default_factory=dict)
    probe_coll: Optional[str] = None
    probe_osc: Optional[str] = None
    modules: List[str] = field(default_factory=list)  # benchmark modules loaded after the MPI
    # probe_host: the host state around each run (None: not recorded)
    host_probe: Optional[str] = None
    flavour: str = "openmpi"  # whose mpirun runs them (runner.LAUNCHERS)
    mpi: Optional[dict] = None  # the MPI they belong to (runner.MPI.record), None: not identified


def suite_name(b):
    """ "imb+osu", "imb+probe", "probe+osu" or "probe": what runs the collectives and one-sided."""
    name = "+".join(["imb" if b.imb else "probe", "osu" if b.osu else "probe"])
    return "probe" if name == "probe+probe" else name


def same_kind(baseline, tuned, only=None):
    """Both sides of a benchmark family run the same kind of program, so that a comparison of two
    MPIs is not one of two programs: where one side has IMB-MPI1 (or OSU's one-sided programs) and
    the other not, both use the probes for that family. Changes the Binaries (before their probes
    are built) and returns one line per family changed, saying why."""
    wanted = set(only) if only else set(BENCHMARKS)
    sides = {"baseline": baseline, "tuned": tuned}
    notes = []
    if wanted & set(COLLECTIVES) and bool(baseline.imb) != bool(tuned.imb):
        has = next(role for role, b in sides.items() if b.imb)
        notes.append(
            "collectives: probes for both modules: only the %s module has IMB-MPI1 (%s)"
            % (has, sides[has].imb)
        )
        baseline.imb = tuned.imb = None
    one_sided = [n for n in OSU_BENCHMARKS if n in wanted]
    found = {role: [n for n in one_sided if n in b.osu] for role, b in sides.items()}
    if one_sided and found["baseline"] != found["tuned"]:
        notes.append(
            "one-sided: probes for both modules: OSU's one-sided programs found for the "
            "baseline: %s; for the tuned module: %s"
            % tuple(", ".join(found[role]) or "none" for role in ("baseline", "tuned"))
        )
        baseline.osu, tuned.osu = {}, {}
    return notes


def machine_cache_mb():
    """The last-level cache in MB (IMB's -off_cache wants it), 0 when unknown."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            text = read_text(idx / "size", 4096).strip()
        except (OSError, UnicodeError):
            continue
        num = int(text.rstrip("KMG") or 0)
        scale = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:], 1 / (1024 * 1024))
        best = max(best, num * scale)
    return max(int(round(best)), 1) if best else 0


def imb_args(settings, np, mem_gb):
    """The studies' IMB flags (-msglog 0:20 -mem 2.3G -off_cache 39,64 -npmin N), scaled here."""
    msglog = "%d:%d" % (settings.get("msglog_min", 0), settings["msglog"])
    args = ["-msglog", msglog, "-npmin", str(np), "-iter", str(settings["iter"])]
    # IMB reads "2.3G" as 2.3 and ignores the G: write a number
    args += ["-time", str(settings["time"]), "-mem", "%.2f" % mem_gb]
    cache = machine_cache_mb()
    if cache:
        args += ["-off_cache", "%d,64" % cache]
    return args


def osu_args(settings, name):
    args = ["-w", WINDOW, "-s", SYNC]
    if name not in ("fop_latency", "cas_latency"):  # fixed-size operations
        args += ["-m", "1:%d" % settings["osu_max"]]
    prefix = "osu_bw_" if name.endswith("_bw") else "osu_"
    it, wu = settings[prefix + "iter"], settings[prefix + "warmup"]
    if it:
        args += ["-i", str(it), "-x", str(wu)]
    return args


def mem_per_process_gb(np):
    """-mem: the studies' 2.3 GB, or a quarter of this machine's memory shared by the ranks."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        total = 8.0
    return max(min(2.3, total / 4 / max(np, 1)), 0.05)


def programs(only=None):
    """[(run name, the benchmarks it measures)] of a benchmark selection, in order: one IMB run for
    the collectives, then one run per one-sided test. Results are stored and looked up by name."""
    wanted = set(only or BENCHMARKS)
    colls = tuple(c for c in COLLECTIVES if c in wanted)
    one_sided = [(n, (n,)) for n in OSU_BENCHMARKS if n in wanted]
    return ([("collectives", colls)] if colls else []) + one_sided


def plan(binaries, set_name, np, only=None):
    """The Run list for a set and a benchmark selection (see programs)."""
    settings = SETS[set_name]
    runs = []
    for name, benches in programs(only):
        if name == "collectives":
            exe = binaries.imb or binaries.probe_coll
            argv = [exe] + imb_args(settings, np, mem_per_process_gb(np)) + list(benches)
            runs.append(Run(name, "imb", benches, tuple(argv), None))
        else:
            exe = [binaries.osu[name]] if name in binaries.osu else [binaries.probe_osc, name]
            runs.append(Run(name, "osu", (name,), tuple(exe + osu_args(settings, name)), 2))
    return runs


def find_osu(directory):
    """{name: path} of the one-sided OSU programs under a directory (OSU_DIR or a Spack prefix)."""
    found = {}
    for root, _, files in os.walk(directory):
        for name in OSU_BENCHMARKS:
            exe = "osu_" + name
            if exe in files and name not in found and os.access(os.path.join(root, exe), os.X_OK):
                found[name] = os.path.join(root, exe)
    return found
