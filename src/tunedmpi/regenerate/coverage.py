"""`tunedmpi coverage`: the site's job mix from Slurm accounting, mapped to the rows of its table.

Each job's geometry (nodes, ranks per node, threads per rank, partition) becomes the environment
the tuned module would read in that job, and explain.select, the module's own Python twin, picks
the row: the same rule, not a copy. The node-hours are summed per geometry and match kind (exact,
nearest, extrapolated; untuned for jobs without the module's trace), and the geometries not
measured exactly are ranked by node-hours, each with the runs a sweep of it costs.

What accounting holds (sacct, Slurm 22.05): a job step launched by srun has its node and task
count; a job allocation has its nodes and requested CPUs only. So a job with srun steps counts
each step (ranks per node = tasks / nodes, rounded up, as the module's SLURM_NTASKS rule does); a
job without one (mpirun, whose daemons run as `prted` steps) counts its allocation with one rank
per requested CPU, an assumption the report gives the share of. User names are never read: the
sacct fields below hold none, and the comment is only searched for the trace.
"""

import argparse
import csv
import io
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from tunedmpi import files
from tunedmpi.errors import InputError
from tunedmpi.modules import explain, geometry

FIELDS = (
    "JobIDRaw",
    "JobName",
    "Partition",
    "NNodes",
    "NTasks",
    "ReqCPUS",
    "AllocTRES",
    "ElapsedRaw",
    "Comment",  # last: a comment may hold "|", so it is everything after the other fields
)
# A job records that it loaded the tuned module when its comment holds TRACE (e.g. the job runs
# `scontrol update JobId=$SLURM_JOB_ID Comment="TUNEDMPI_ROW=$TUNEDMPI_ROW"`, docs/coverage.md).
TRACE = "TUNEDMPI_ROW="
BOOKKEEPING = {"batch", "extern", "interactive"}  # steps of every job, not an MPI launch
LAUNCHER_DAEMONS = {"prted", "orted", "hydra_pmi_proxy", "hydra_bstrap_proxy"}  # mpirun's helpers
MAX_LINE = 64 * 1024  # a longer line is skipped (and counted), never held
MAX_SECONDS = 10 * 366 * 24 * 3600  # a step longer than ten years is junk
# distinct job geometries mapped (explain.select takes ~1 ms each); more are counted as skipped
MAX_GEOMETRIES = 10000
KINDS = ("exact", "nearest", "extrapolated", "untuned", "no table")
COLOURS = {
    "exact": "tab:green",
    "nearest": "tab:orange",
    "extrapolated": "tab:red",
    "untuned": "tab:gray",
    "no table": "tab:purple",
}
ENABLE = (
    "enable Slurm accounting (slurm.conf AccountingStorageType=accounting_storage/slurmdbd, "
    "AccountingStoreFlags=job_comment; docs/coverage.md) or give --sacct-file"
)


def sacct_command(since, until):
    """The sacct call coverage runs; a saved file is this command's output."""
    fields = "--format=" + ",".join(FIELDS)
    return ["sacct", "-a", "--parsable2", "--noheader", "-S", since, "-E", until, fields]


@dataclass
class Unit:
    """One job step (or allocation) as the module would see it."""

    nodes: int
    tasks: int  # ranks in all (an allocation: its requested CPUs)
    threads: int
    partition: str
    seconds: int
    assumed: bool  # tasks assumed from the CPUs (an allocation without srun steps)


class Skip(Exception):
    """A line that is not a usable record; its message is the reason, never the line."""


def _count(text, what):
    value = geometry.count(text)
    if value is None:
        raise Skip("%s not a count" % what)
    return value


def _cpus(tres):
    m = re.search(r"(?:^|,)cpu=([0-9]{1,7})(?:,|$)", tres)
    return int(m.group(1)) if m else None


def parse(line):
    """A sacct line (FIELDS, "|"-separated) as a dict, or Skip."""
    parts = line.split("|")
    if len(parts) < len(FIELDS):
        raise Skip("fewer than %d fields" % len(FIELDS))
    rec = dict(zip(FIELDS[:-1], parts))
    rec["Comment"] = "|".join(parts[len(FIELDS) - 1 :])
    job, dot, step = rec["JobIDRaw"].partition(".")
    if not re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,12})?", job):
        raise Skip("JobIDRaw not a job id")
    rec["job"], rec["step"] = job, step if dot else None
    if not re.fullmatch(r"[0-9]{1,12}", rec["ElapsedRaw"]) or int(rec["ElapsedRaw"]) > MAX_SECONDS:
        raise Skip("ElapsedRaw not a number of seconds")
    return rec


def unit_of_step(rec):
    """A srun step's Unit, or None for bookkeeping and launcher-daemon steps."""
    if rec["step"] in BOOKKEEPING or rec["JobName"] in LAUNCHER_DAEMONS:
        return None
    nodes, tasks = _count(rec["NNodes"], "NNodes"), _count(rec["NTasks"], "NTasks")
    cpus = _cpus(rec["AllocTRES"]) or tasks
    return Unit(nodes, tasks, max(1, cpus // tasks), "", int(rec["ElapsedRaw"]), False)


def unit_of_job(rec):
    """A job allocation's Unit (no srun step): one rank per requested CPU."""
    nodes, cpus = _count(rec["NNodes"], "NNodes"), _count(rec["ReqCPUS"], "ReqCPUS")
    return Unit(nodes, cpus, 1, rec["Partition"], int(rec["ElapsedRaw"]), True)


def lines_of(chunks, counts):
    """Text lines of a byte stream, each at most MAX_LINE bytes (longer ones counted in ``counts``
    and dropped as they stream past); undecodable bytes replaced."""
    buf, dropping = b"", False
    for chunk in chunks:
        buf += chunk
        while True:
            cut = buf.find(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE:
                    buf, dropping = b"", True
                break
            line, buf = buf[:cut], buf[cut + 1 :]
            if dropping or len(line) > MAX_LINE:
                counts["line longer than %d bytes" % MAX_LINE] += 1
                dropping = False
                continue
            yield line.decode("utf-8", "replace").rstrip("\r")
    if buf and not dropping:
        yield buf.decode("utf-8", "replace")
    elif dropping:
        counts["line longer than %d bytes" % MAX_LINE] += 1


def units(lines, counts):
    """The Units of a sacct stream, with each job's trace: (unit, traced). A job's steps follow its
    allocation line (as sacct prints them); a job with a srun step counts its steps only."""
    job, alloc, has_steps = None, None, False

    def flush():
        if alloc is not None and not has_steps:
            try:
                return [(unit_of_job(alloc), TRACE in alloc["Comment"])]
            except Skip as exc:
                counts[str(exc)] += 1
        return []

    for number, line in enumerate(lines, 1):
        if not line.strip() or (number == 1 and line.startswith(FIELDS[0] + "|")):
            continue  # a blank line, or the header of a saved file
        try:
            rec = parse(line)
        except Skip as exc:
            counts[str(exc)] += 1
            continue
        if rec["job"] != job:
            yield from flush()
            job, alloc, has_steps = rec["job"], None, False
        if rec["step"] is None:
            alloc = rec
            continue
        try:
            unit = unit_of_step(rec)
        except Skip as exc:
            counts[str(exc)] += 1
            continue
        if unit is not None:
            has_steps = True
            unit.partition = alloc["Partition"] if alloc else rec["Partition"]
            yield unit, bool(alloc and TRACE in alloc["Comment"])
    yield from flush()


def module_env(unit):
    """The Slurm variables the module would read in this job step."""
    env = {"SLURM_JOB_NUM_NODES": str(unit.nodes), "SLURM_NTASKS": str(unit.tasks)}
    if unit.threads > 1:
        env["SLURM_CPUS_PER_TASK"] = str(unit.threads)
    if unit.partition:
        env["SLURM_JOB_PARTITION"] = unit.partition
    return env


@dataclass
class Geometry:
    node_type: str
    nodes: int
    ppn: int
    row: str  # NxP of the row the module picks, or "-"
    kind: str  # exact | nearest | extrapolated | no table
    seconds: Counter = field(default_factory=Counter)  # node-seconds by kind (untuned apart)
    steps: int = 0
    assumed_seconds: int = 0

    @property
    def node_hours(self):
        return sum(self.seconds.values()) / 3600.0


@dataclass
class Coverage:
    site: str
    geometries: list
    skipped: Counter
    traced: bool  # untuned known (--comment-trace)
    runs: object = None  # runs of a sweep of one geometry (None: no space.yaml)
    source: str = ""
    # whose rows: the site's default profile (a job's TUNEDMPI_PROFILE is not seen)
    profile: str = ""


def tally(site, pairs, counts, traced):
    """Geometries of the (unit, traced) pairs, by node type, nodes and ppn, each with its row."""
    seen, out = {}, OrderedDict()
    for unit, has_trace in pairs:
        key = (unit.nodes, unit.tasks, unit.threads, unit.partition)
        if key not in seen:
            if len(seen) >= MAX_GEOMETRIES:
                counts["more than %d distinct geometries" % MAX_GEOMETRIES] += 1
                continue
            env = module_env(unit)
            result = explain.select(site, env)
            node_type = geometry.node_type(env, site)[0] if site.node_types else ""
            geo, match = result["geometry"], result.get("match")
            gkey = (node_type, geo.nodes, geo.ppn)
            if gkey not in out:
                row = "%dx%d" % (match.nodes, match.ppn) if match else "-"
                out[gkey] = Geometry(
                    node_type, geo.nodes, geo.ppn, row, match.kind if match else "no table"
                )
            seen[key] = out[gkey]
        g = seen[key]
        node_seconds = unit.nodes * unit.seconds
        g.seconds["untuned" if traced and not has_trace else g.kind] += node_seconds
        g.steps += 1
        g.assumed_seconds += node_seconds if unit.assumed else 0
    return sorted(
        out.values(), key=lambda g: (-sum(g.seconds.values()), g.node_type, g.nodes, g.ppn)
    )


def sweep_runs(site, space_path):
    """Runs of a sweep of one geometry over the site's space, as `sweep --plan` counts them
    (regenerate.plan: configurations x repetitions x the benchmark runs each makes); None
    without a space file."""
    from tunedmpi.regenerate import plan, space

    if not os.path.isfile(space_path):
        return None
    sp = space.load_space(space_path, site)
    return plan.sweep_plan(site, sp, 1, 1, os.devnull, os.devnull)["runs"]


def run_sacct(since, until, env=None):
    """sacct's output as a stream of byte chunks; InputError (exit 2, one line) when there is no
    accounting to ask."""
    exe = shutil.which("sacct", path=(env or {}).get("PATH"))
    if exe is None:
        raise InputError(
            "sacct", None, "accounting", "no sacct on PATH: no Slurm accounting here", ENABLE
        )
    argv = [exe] + sacct_command(since, until)[1:]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            yield chunk
        err = proc.stderr.read(4096).decode("utf-8", "replace")
    finally:
        proc.stdout.close()
        code = proc.wait()
        proc.stderr.close()
    if code != 0:
        first = (err.strip().splitlines() or ["exit %d" % code])[-1]
        raise InputError("sacct", None, "accounting", "sacct failed: %s" % first.strip(), ENABLE)


def coverage(site, chunks, traced, space_path, source):
    counts = Counter()
    geos = tally(site, units(lines_of(chunks, counts), counts), counts, traced)
    runs = sweep_runs(site, space_path)
    return Coverage(site.name, geos, counts, traced, runs, source, site.default_profile)


# -- output ---------------------------------------------------------------------------------------


def _hours(h):
    """Node-hours as read: 2 decimals, or 3 significant digits below one hour (a test's seconds)."""
    return "%.2f" % h if h >= 1 or h == 0 else "%.3g" % h


def _label(g):
    return ("%s " % g.node_type if g.node_type else "") + "%dx%d" % (g.nodes, g.ppn)


def to_next(cov):
    """The geometries not measured exactly, most node-hours first: [(geometry, node-hours)]."""
    return [(g, g.node_hours) for g in cov.geometries if g.kind != "exact" and g.node_hours > 0]


def to_csv(cov):
    """One line per geometry; node-seconds exact (integers), node-hours rounded."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(
        ["node_type", "nodes", "ppn", "row", "match", "node_hours", "node_seconds"]
        + ["untuned_node_seconds", "assumed_node_seconds", "steps"]
    )
    for g in cov.geometries:
        w.writerow(
            [g.node_type, g.nodes, g.ppn, g.row, g.kind, "%.4f" % g.node_hours]
            + [sum(g.seconds.values()), g.seconds["untuned"], g.assumed_seconds, g.steps]
        )
    return out.getvalue()


def totals(cov):
    """Node-hours by kind."""
    tot = Counter()
    for g in cov.geometries:
        tot.update(g.seconds)
    return {k: tot[k] / 3600.0 for k in KINDS}


def to_markdown(cov):
    tot = totals(cov)
    all_h = sum(tot.values()) or 1.0
    assumed = sum(g.assumed_seconds for g in cov.geometries) / 3600.0
    steps = sum(g.steps for g in cov.geometries)
    lines = [
        "# Coverage of site %s" % cov.site,
        "",
        "Source: %s. %d job steps, %s node-hours; rows of profile %s."
        % (cov.source, steps, _hours(sum(tot.values())), cov.profile),
        "",
        "| match | node-hours | share |",
        "|---|---:|---:|",
    ]
    for k in KINDS:
        if tot[k] or k != "no table":
            lines.append("| %s | %s | %.1f %% |" % (k, _hours(tot[k]), 100.0 * tot[k] / all_h))
    lines += [
        "",
        "Untuned: %s."
        % (
            "jobs whose comment lacks %s" % TRACE
            if cov.traced
            else "not known (no --comment-trace): every job counted as if it loaded the module"
        ),
        "Ranks per node assumed from requested CPUs (jobs without srun steps): %s node-hours."
        % _hours(assumed),
        "",
        "| node type | geometry | row | match | node-hours | untuned | steps |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for g in cov.geometries:
        hours, untuned = _hours(g.node_hours), _hours(g.seconds["untuned"] / 3600.0)
        lines.append(
            "| %s | %dx%d | %s | %s | %s | %s | %d |"
            % (g.node_type or "-", g.nodes, g.ppn, g.row, g.kind, hours, untuned, g.steps)
        )
    lines += ["", "## Measure next", ""]
    nxt = to_next(cov)
    runs = (
        "%d runs each, as `sweep --plan` counts them (its estimate of time: run it)" % cov.runs
        if cov.runs
        else "runs unknown (no space.yaml)"
    )
    for g, hours in nxt:
        lines.append(
            "- %s: %s node-hours, now row %s (%s): `tunedmpi sweep --site %s --nodes %d --ppn %d`"
            % (_label(g), _hours(hours), g.row, g.kind, cov.site, g.nodes, g.ppn)
        )
    if nxt:
        lines += [
            "",
            "%s; as --rows: %s" % (runs, ",".join("%dx%d" % (g.nodes, g.ppn) for g, _ in nxt)),
        ]
    else:
        lines.append("Every geometry run is measured exactly.")
    if cov.skipped:
        lines += [
            "",
            "Skipped lines: "
            + ", ".join("%d %s" % (n, why) for why, n in sorted(cov.skipped.items())),
        ]
    return "\n".join(lines) + "\n"


def plot(cov, path):
    """Node-hours by geometry, one bar each, coloured by match (untuned stacked in grey)."""
    from tunedmpi.acceptance import report

    plt = report.pyplot()
    if plt is None or not cov.geometries:
        return None
    shown = cov.geometries[:40]
    fig, ax = plt.subplots(figsize=report.FIGSIZE)
    x = list(range(len(shown)))
    bottom = [0.0] * len(shown)
    for kind in KINDS:
        h = [g.seconds[kind] / 3600.0 for g in shown]
        if any(h):
            ax.bar(x, h, bottom=bottom, color=COLOURS[kind], label=kind)
            bottom = [b + v for b, v in zip(bottom, h)]
    ax.set_xticks(x)
    ax.set_xticklabels(
        ["%s\nrow %s" % (_label(g), g.row) for g in shown],
        fontsize=7,
        rotation=45 if len(shown) > 8 else 0,
    )
    ax.set_ylabel("node-hours")
    ax.set_title("Site %s: node-hours by geometry and match" % cov.site)
    ax.legend()
    fig.tight_layout()
    report.save_png(fig, path)
    return path


def write(cov, outdir):
    """coverage.md, coverage.csv and coverage.png in outdir; returns their paths."""
    os.makedirs(outdir, exist_ok=True)
    md, cs = os.path.join(outdir, "coverage.md"), os.path.join(outdir, "coverage.csv")
    files.write_all_or_none({md: to_markdown(cov), cs: to_csv(cov)})
    png = plot(cov, os.path.join(outdir, "coverage.png"))
    return [md, cs] + ([png] if png else [])


# -- the command -----------------------------------------------------------------------------------


def _when(text):
    """argparse type: a sacct time (now-30days, 2026-11-01, 2026-11-01T08:00), plain characters."""
    if not re.fullmatch(r"[A-Za-z0-9:+_-]{1,32}", text):
        raise argparse.ArgumentTypeError(
            "%r is not a sacct time such as now-30days or 2026-11-01" % text
        )
    return text


def add_arguments(p):
    p.add_argument("--site", required=True)
    p.add_argument(
        "--sacct-file", help="saved output of the sacct call coverage makes (docs/coverage.md)"
    )
    p.add_argument(
        "--since", type=_when, default="now-30days", help="sacct -S (default now-30days)"
    )
    p.add_argument("--until", type=_when, default="now", help="sacct -E (default now)")
    p.add_argument(
        "--comment-trace",
        action="store_true",
        help="count jobs whose comment lacks %s as untuned (the site records the trace)" % TRACE,
    )
    p.add_argument(
        "--space", help="knob space that prices a sweep (default: the site's space.yaml)"
    )
    p.add_argument(
        "--out", help="folder for coverage.md, .csv and .png (default: coverage-<site>/)"
    )


def main(args):
    """`tunedmpi coverage`: exit 0, or 2 (one line) without accounting or on bad input."""
    from tunedmpi.modules import sites

    site = sites.load_named(args.site)
    if args.sacct_file:
        chunks, source = files.read_chunks(args.sacct_file), "file %s" % args.sacct_file
    else:
        chunks = run_sacct(args.since, args.until)
        source = "sacct -S %s -E %s" % (args.since, args.until)
    space = args.space or str(sites.site_dir() / site.name / "space.yaml")
    cov = coverage(site, chunks, args.comment_trace, space, source)
    written = write(cov, args.out or "coverage-%s" % site.name)
    sys.stdout.write(to_markdown(cov))
    print("wrote %s" % ", ".join(written))
    return 0
