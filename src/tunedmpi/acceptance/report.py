"""Render a validation campaign's results (results.py): report.md, plots/*.png and junit.xml.

Everything is derived from results.json alone, so a report can be rewritten from it.
"""

import math
import sys
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from tunedmpi import stats
from tunedmpi.acceptance.results import ROLES, design_from
from tunedmpi.files import write_atomic, write_atomic_with
from tunedmpi.policy import POLICY

FIGSIZE = (7, 4.2)  # every PNG the acceptance stage writes (reports, history)
UNIT = {
    "latency_us": "latency (us), lower is better",
    "bandwidth_MBps": "bandwidth (MB/s), higher is better",
}


def write_all(outdir, results):
    """results.json (results.Results.write), report.md and junit.xml first (an OutputError there is
    the caller's: exit 2), then the plots, which are optional: a plot that cannot be written is a
    warning, and only when plots were written are results.json and report.md written again to name
    them. Returns the results.json document."""
    outdir = Path(outdir)
    results.plots = {}
    results.write(outdir / "results.json")
    doc = results.to_json()
    write_atomic(outdir / "report.md", markdown(doc))
    write_atomic(outdir / "junit.xml", junit(doc))
    try:
        results.plots = write_plots(outdir, doc)
        if results.plots:
            results.write(outdir / "results.json")
            doc = results.to_json()
            write_atomic(outdir / "report.md", markdown(doc))
    except OSError as exc:
        results.plots = {}
        sys.stderr.write(
            "warning: plots left out: %s: %s (results.json and report.md are complete)\n"
            % (exc.filename or outdir / "plots", exc.strerror or exc)
        )
    return results.to_json()


def describe_method(tolerance, alpha, design=None, host=False, paired=False, family=None):
    """The verdict's method in a few sentences (report.md's Method section); host: the comparison
    held the host state equal (host_strata); paired: the crossover test over the pairs was used;
    family: results.json's "family" (None: results from before it, a family per benchmark)."""
    looks = "one look" if design is None else design.describe(alpha)
    within = (
        ""
        if not host
        else " within each host state (fast, slow, changed: Host state), the states' differences averaged with "
        "weights by runs (states with fewer than 2 runs of a module are left out)"
    )
    compared = (
        "The runs were measured in pairs, the modules one right after the other, half of the pairs "
        "baseline first. From %d pairs at the first look the test is paired (a crossover analysis): "
        "within each pair the tuned score minus the baseline score, and Welch's t test "
        "between the differences of the baseline-first pairs and the negated differences of the "
        "tuned-first pairs, whose half-sum is the module's effect with any effect of running second "
        "cancelled (bands whose pairs are too few use the unpaired test)" % POLICY.paired_min
        if paired
        else "The two modules' band scores are compared with Welch's t test%s" % within
    )
    holm_text = (
        "Holm's step-down over the bands of a benchmark keeps its chance of any false win or "
        "loss at %.2f" % alpha
        if not family
        else "Holm's step-down over all %d band tests of the campaign (every benchmark x band; a win "
        "and a loss alike) keeps the chance of any false win or loss anywhere in the campaign at %.2f"
        % (family["tests"], alpha)
    )
    return (
        "A run's band score is the mean over the band's sizes of its log time (log 1/bandwidth). "
        "%s, two-sided; %s; %s. A band **wins** when the test rejects at its level, "
        "its estimate favours the tuned module and the gain is at least %.0f%%; it **loses** in the mirror "
        "case; otherwise it is a **tie** (undecided when its interval still reaches beyond the tolerance)."
        % (compared, holm_text, looks, tolerance * 100)
    )


# What each module verdict means (report.md's verdict line; stats.module_verdict decides it)
MEANS = {
    stats.PASS: "a band wins and none loses",
    stats.FAIL: "a band loses: a regression",
    stats.NO_GAIN: "no band wins or loses, every band shown equal within the tolerance: "
    "no benefit, do not ship it",
    stats.INCONCLUSIVE: "no band wins or loses, and some are undecided: too noisy to say "
    "(see Undecided bands)",
}


def sized_bands(results):
    """The bands judged over message sizes (no reliability row, no band without data)."""
    return [b for b in results["bands"] if b["band"] != "reliability" and b["verdict"] != "no-data"]


def tally(results):
    """The report's first line, e.g. `PASS: 10 win · 0 lose · 12 tie (3 undecided) · 15+15 pairs ·
    12 min` (size bands; reliability only when a module failed more; pairs: look 1 + extension)."""
    bands = sized_bands(results)
    n = {v: sum(1 for b in bands if b["verdict"] == v) for v in ("win", "lose", "tie")}
    parts = [
        "%d win" % n["win"],
        "%d lose" % n["lose"],
        "%d tie (%d undecided)" % (n["tie"], sum(1 for b in bands if b.get("undecided"))),
    ]
    rel = [b for b in results["bands"] if b["band"] == "reliability" and b["verdict"] != "tie"]
    if rel:
        parts.append(
            "reliability %s" % ", ".join("%s %s" % (b["benchmark"], b["verdict"]) for b in rel)
        )
    design = results.get("design") or {}
    first = design.get("first", results.get("repetitions") or 0)
    more = design.get("final", first) - first if design.get("extended") else 0
    parts.append(("%d+%d pairs" % (first, more)) if more else "%d pairs" % first)
    parts.append("%.0f min" % ((results.get("elapsed_s") or 0) / 60.0))
    return "%s: %s" % (results["verdict"], " · ".join(parts))


def noise_warning(results):
    """A bold warning under the tally when results.json's `noise` says the host was too noisy."""
    noise = results.get("noise") or {}
    if not noise.get("too_noisy"):
        return []
    return [
        "**Host too noisy**: the runs' median per-size CV is %.0f %% (above %.0f %%): verdicts here "
        "are weak; rerun on a quiet host." % (noise["median_cv"] * 100, noise["threshold"] * 100),
        "",
    ]


def undecided_rows(results):
    """For each undecided band: the measured noise (SD of a run's log band score, within each
    module) and the pairs per module a decision would need: 80 % power to find a difference of the
    tolerance at Holm's first level over the campaign's tests (power.reps_needed, unpaired)."""
    from tunedmpi.acceptance import power

    bands = [b for b in sized_bands(results) if b.get("undecided")]
    if not bands:
        return []
    tol, alpha = results["tolerance"], results["alpha"]
    tests = (results.get("family") or {}).get("tests") or len(sized_bands(results))
    out = [
        "## Undecided bands",
        "",
        "Too noisy to decide at these pairs. Noise: the SD of a run's log band score within each "
        "module; pairs needed: per module, for 80 %% power to find a %.0f %% difference at "
        "%.2g / %d tests (unpaired normal model; more than 1000: >1000)."
        % (tol * 100, alpha, tests),
        "",
        "| benchmark | band | runs (baseline+tuned) | noise (SD) | pairs needed |",
        "|---|---|---|---:|---:|",
    ]
    for b in bands:
        resid = []
        for side in (b["baseline_band"], b["tuned_band"]):
            logs = [math.log(v) for v in side if v > 0]
            mean = sum(logs) / len(logs) if logs else 0.0
            resid += [(x - mean) ** 2 for x in logs]
        dof = len(b["baseline_band"]) + len(b["tuned_band"]) - 2
        sd = math.sqrt(sum(resid) / dof) if dof > 0 else None
        runs = "%d+%d" % (len(b["baseline_band"]), len(b["tuned_band"]))
        cells = ["-", "-"]
        if sd is not None:
            need = power.reps_needed(sd, 1 + tol, alpha, tests, limit=1000)
            cells = ["%.3f" % sd, need or ">1000"]
        out.append(md_row([b["benchmark"], b["band"], runs] + cells))
    return out + [""]


def md_row(cells):
    """One row of a markdown table."""
    return "| %s |" % " | ".join(map(str, cells))


def _gain(b):
    return "-" if b["gain"] is None else "%.3fx" % b["gain"]


def _fmt(v, digits=2):
    return "-" if v is None else ("%.*f" % (digits, v))


def figures(reps):
    """{size: seed figure} over repetitions ({size: value} each), for sizes every repetition has."""
    sizes = stats.common_sizes(reps, [])
    return {s: stats.seed_figure([r[s] for r in reps]) for s in sizes}


def _p(b):
    """The band's p and the level it had to reach (Holm, look), e.g. '0.0031 <= 0.025'."""
    if b.get("p_value") is None:
        return "-"
    if b.get("level") is None:
        return "%.3g" % b["p_value"]
    return "%.2g %s %.2g" % (b["p_value"], "<=" if b["p_value"] <= b["level"] else ">", b["level"])


def verdict_table(results):
    rows = [
        "| benchmark | band | sizes | gain (tuned vs baseline) | p | verdict | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in results["bands"]:
        sizes = (
            "%d-%d B (%d)" % (b["sizes"][0], b["sizes"][-1], len(b["sizes"]))
            if b["sizes"]
            else "all runs"
        )
        verdict = "**%s**" % b["verdict"]
        rows.append(
            md_row([b["benchmark"], b["band"], sizes, _gain(b), _p(b), verdict, b["reason"]])
        )
    return "\n".join(rows)


def placement_rows(placement):
    """Where mpirun put the ranks, per module and kind of run ('host (n ranks)'); none for results
    from before validate recorded it."""
    rows = []
    for role, runs in sorted((placement or {}).items()):
        for kind, hosts in sorted(runs.items()):
            if kind == "error":
                rows.append("| hosts, %s | not known: %s |" % (role, hosts.replace("|", "/")))
                continue
            counts = ", ".join("%s (%d)" % (h, hosts.count(h)) for h in sorted(set(hosts)))
            rows.append("| hosts, %s, %s | %s |" % (role, kind.replace("_", "-"), counts))
    return rows


def side_rows(results):
    """Per module: its MPI, launcher and binaries, where results.json records them (validate from
    issue 31 on); one row for both when they are one MPI. Then why a family runs the probes."""
    sides = results.get("sides")
    if not sides:
        return []
    rows = []
    roles = ("both",) if results.get("same_mpi") else ROLES
    for role in roles:
        side = sides["tuned" if role == "both" else role]
        mpi = side.get("mpi") or {}
        label = "" if role == "both" else ", %s" % role
        if mpi:
            rows.append(
                "| MPI%s | %s (`%s`: %s) |" % (label, mpi["name"], mpi["mpirun"], mpi["version"])
            )
        launch = side["launcher"]
        rows.append(
            "| launcher%s | `%s` (collectives), `%s` (one-sided) |"
            % (label, launch["collectives"], launch["one_sided"])
        )
        b = side["binaries"]
        found = (
            [("IMB-MPI1", b.get("imb"))]
            + [("osu_" + n, path) for n, path in sorted((b.get("osu") or {}).items())]
            + [("probe_coll", b.get("probe_coll")), ("probe_osc", b.get("probe_osc"))]
        )
        rows.append(
            "| binaries%s | %s: %s |"
            % (label, side["suite"], ", ".join("%s `%s`" % (n, v) for n, v in found if v))
        )
    for note in results.get("suite_notes") or []:
        rows.append("| same program on both sides | %s |" % note.replace("|", "/"))
    return rows


def titled(results, role):
    """The module, with its MPI where the two modules are different MPIs."""
    side = (results.get("sides") or {}).get(role) or {}
    if results.get("same_mpi", True) or not side.get("mpi"):
        return results["modules"][role]
    return "%s (%s)" % (results["modules"][role], side["mpi"]["name"])


def commands(results):
    """The Commands section: one list, or one per module when they are different MPIs."""
    sides = results.get("sides")
    if not sides or results.get("same_mpi"):
        return ["- `%s`: `%s`" % (k, v) for k, v in results["commands"].items()]
    return [
        "- %s, `%s`: `%s`" % (role, k, v)
        for role in ROLES
        for k, v in sides[role]["commands"].items()
    ]


def markdown(results):
    geo = results["geometry"]
    probe = "probe" in results["suite"]
    out = (
        [
            "# Validation: %s vs %s"
            % tuple(titled(results, role) for role in ("tuned", "baseline")),
            "",
            tally(results),
            "",
        ]
        + noise_warning(results)
        + [
            "**Verdict: %s** (exit %d): %s"
            % (results["verdict"], results["exit_code"], MEANS.get(results["verdict"], "")),
            "",
            "| | |",
            "|---|---|",
            "| site | %s |" % results["site"],
            "| table revision | %s |" % (results.get("table_revision") or "none recorded"),
            "| geometry | %d node(s) x %d ppn = %d ranks (%s) |"
            % (geo["nodes"], geo["ppn"], geo["np"], geo["source"]),
        ]
        + placement_rows(results.get("placement"))
        + [
            "| set | %s, %d repetitions per module, alternating baseline/tuned, %d retry(ies), timeout %.0f s |"
            % (results["set"], results["repetitions"], results["retries"], results["timeout_s"]),
            "| benchmarks | %s%s |"
            % (results["suite"], " — **probes** (validate/probes), not IMB/OSU" if probe else ""),
        ]
        + side_rows(results)
        + [
            "| OSU one-sided | window %s, synchronisation %s |"
            % (results["osu_options"]["window"], results["osu_options"]["sync"]),
            "| started / took | %s / %.0f s |" % (results["started"], results["elapsed_s"]),
        ]
    )
    if results.get("reanalysed_from"):
        out.append(
            "| judged again | the runs of %s, by `validate --reanalyse` |"
            % results["reanalysed_from"]
        )
    out.append("")
    out += module_variables(results)
    design = results.get("design")
    design = design_from(design) if design else None
    out += [
        "## Method",
        "",
        "Per message size the figure is the seed studies' own: of the repetitions, drop the largest and",
        "the smallest and average the rest. Per band (sizes %s; size 0" % stats.band_labels(),
        "moves no data and is left out) the gain is the geometric mean over its sizes of baseline/tuned",
        "time (tuned/baseline for bandwidth): above 1 the tuned module is faster.",
        describe_method(
            results["tolerance"],
            results["alpha"],
            design,
            any(b.get("host_strata") for b in results["bands"]),
            any(b.get("pairs") for b in results["bands"]),
            results.get("family"),
        ),
        "A failed or crashed run counts in the `reliability` row: the module with fewer failures wins it.",
        "The module: **PASS** a band wins, none loses; **FAIL** a band loses; **NO-GAIN** every band "
        "a decided tie; **INCONCLUSIVE** no win or loss, some band undecided. Details: validate/README.md.",
        "",
    ]
    out += ["## Verdict per benchmark and band", "", verdict_table(results), ""]
    out += undecided_rows(results)
    out += host_state(results)
    failed = [r for r in results["runs"] if r["status"] != "ok"]
    if failed:
        out += [
            "## Failed runs",
            "",
            "| benchmark | module | rep | attempt | status | exit | first problem | log |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in failed:
            first = (r["problems"] or [""])[0].replace("|", "/")[:120]
            cells = [r[k] for k in ("run", "role", "rep", "attempt", "status", "exit_code")]
            out.append(md_row(cells + [first, r["log"]]))
        out.append("")
    out += ["## Figures per message size", ""]
    for bench, data in results["per_size"].items():
        if not data["metric"]:
            out += ["### %s" % bench, "", "no successful run of either module", ""]
            continue
        fa, fb = figures(data["baseline"]), figures(data["tuned"])
        plot = results.get("plots", {}).get(bench)
        out += ["### %s — %s" % (bench, UNIT[data["metric"]]), ""]
        if plot:
            out += ["![%s](%s)" % (bench, plot), ""]
        out += ["| bytes | baseline | tuned | tuned/baseline |", "|---:|---:|---:|---:|"]
        for size in sorted(set(fa) | set(fb)):
            a, b = fa.get(size), fb.get(size)
            ratio = "-" if not a or b is None else "%.2f" % (b / a)
            out.append("| %d | %s | %s | %s |" % (size, _fmt(a), _fmt(b), ratio))
        out.append("")
    out += ["## Commands", ""] + commands(results)
    out += [
        "",
        "Each run: `module purge; module load <module>` in a fresh shell, then the command; its log "
        "(in `logs/`) holds the command, the variables the module set, the exit code and the output.",
        "",
    ]
    return "\n".join(out)


STATES = ("fast", "slow", "changed")


def host_state(results):
    """How many runs of each module met which host state, and each band's gain within one state."""
    host = results.get("host_state") or {}
    if not host.get("slow_above_ns"):
        return [
            "## Host state",
            "",
            "Not recorded (no probe_host: the MPI module has no mpicc, or results from "
            "before validate recorded it): every run is compared with every other.",
            "",
        ]
    out = [
        "## Host state",
        "",
        "Before and after each run, two threads on two CPUs bounce a cache line for 0.1 s "
        "(validate/probes/probe_host.c). A figure above %.0f ns (%.1f x the campaign's %d%% quantile) is the "
        "**slow** state, in which latency-bound sizes run 2-3x slower under either module on these machines. "
        "A run is fast or slow when its two figures agree, **changed** when the state changed during it. "
        "The verdict does not hold the state equal (it found fewer real gains so: results-archive/notes/"
        "2026-11-27-campaign-level-verdict.md); the paired test compares each run with the other "
        "module's run next to it (Method)."
        % (host["slow_above_ns"], host["slow_factor"], host["fast_quantile"] * 100),
        "",
        "| module | %s | not known |" % " | ".join(STATES),
        "|---|" + "---:|" * (len(STATES) + 1),
    ]
    for role in ROLES:
        counts = host.get("runs", {}).get(role, {})
        out.append(md_row([role] + [counts.get(s, 0) for s in STATES] + [counts.get("None", 0)]))
    rows = []
    for b in results["bands"]:
        data = results["per_size"].get(b["benchmark"], {})
        if not b["sizes"] or not data.get("metric") or "host_states" not in data:
            continue
        held = "no: %s" % (data.get("host_note") or "no state has 2 runs of each module")
        if b.get("pairs"):
            held = "by pairs (crossover test)"
        if b.get("host_strata"):
            held = "yes"
        rows.append(([b["benchmark"], b["band"], _gain(b)] + _state_cells(b, data), held))
    # the "held equal" column only when the bands differ in it; else said once
    same = len({held for _, held in rows}) <= 1
    out += [
        "",
        "Gain per state (seed figures of the runs in that state; - : fewer than 2 runs of a module)%s:"
        % ("; host state held equal in every band: %s" % rows[0][1] if same and rows else ""),
        "",
        "| benchmark | band | all runs | %s |%s"
        % (" | ".join(STATES), "" if same else " held equal |"),
        "|---|---|---:|" + "---:|" * len(STATES) + ("" if same else "---|"),
    ]
    for cells, held in rows:
        out.append(md_row(cells + ([] if same else [held])))
    return out + [""]


def _state_cells(b, data):
    """The band's gain within each host state ('-': fewer than 2 runs of a module in it)."""
    cells = []
    for state in STATES:
        pick = {
            role: [p for p, label in zip(data[role], data["host_states"][role]) if label == state]
            for role in ROLES
        }
        rel = (
            stats.relative_times(pick["baseline"], pick["tuned"], data["metric"])
            if min(len(v) for v in pick.values()) >= 2
            else {}
        )
        gain = stats.geomean([1 / rel[s] for s in b["sizes"] if s in rel])
        cells.append(
            "-"
            if gain is None
            else "%.3fx (%d+%d)" % (gain, len(pick["baseline"]), len(pick["tuned"]))
        )
    return cells


def module_variables(results):
    """What each module set (from its first run), and a warning when they set the same tuning."""
    seen = {}
    for r in results["runs"]:
        seen.setdefault(r["role"], r.get("env") or {})
    if not seen:
        return []
    out = ["## Variables the modules set", ""]
    for role in ROLES:
        env = sorted(seen.get(role, {}).items())
        shown = [kv for kv in env if not kv[0].startswith(("TUNEDMPI_NODES", "TUNEDMPI_PPN"))]
        sets = ", ".join("`%s=%s`" % kv for kv in shown) or "nothing"
        out.append("- **%s** (`%s`): %s" % (role, results["modules"][role], sets))
    tuning = {
        role: {k: v for k, v in env.items() if not k.startswith("TUNEDMPI_")}
        for role, env in seen.items()
    }
    if tuning.get("baseline") == tuning.get("tuned") and results.get("same_mpi", True):
        out += [
            "",
            "**The tuned module sets no tuning variable the baseline does not set at this geometry**:"
            " every difference below is noise, and the module cannot pass.",
        ]
    return out + [""]


def pyplot():
    """matplotlib.pyplot on the file-only backend, or None without matplotlib (the `plots` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_png(fig, path):
    """Save a figure atomically (a reader never sees half a PNG; no temporary file is left when it
    fails) and close it."""
    try:
        write_atomic_with(path, lambda fh: fig.savefig(fh, dpi=90, format="png"))
    finally:
        pyplot().close(fig)


# A band's verdict on the plots: its colour and its word (an undecided tie shows as undecided)
MARK_COLOURS = {"win": "tab:green", "lose": "tab:red", "tie": "tab:gray", "undecided": "tab:orange"}


def band_marks(results, bench):
    """[(first size, last size, label, colour)] of the benchmark's judged size bands, e.g.
    (2048, 65536, "win 1.23x", "tab:green"): what write_plots shades and names per band."""
    marks = []
    for b in sized_bands(results):
        sizes = [s for s in b["sizes"] if s > 0]
        if b["benchmark"] != bench or not sizes:
            continue
        word = "undecided" if b.get("undecided") else b["verdict"]
        gain = "" if b["gain"] is None else " %.2fx" % b["gain"]
        marks.append((sizes[0], sizes[-1], word + gain, MARK_COLOURS.get(word, "tab:gray")))
    return marks


def mark_bands(ax, marks):
    """Shade each band in its verdict's colour between dashed edges (halfway, on the log axis, to
    the next size) and write its verdict and gain at the top."""
    for lo, hi, label, colour in marks:
        left, right = lo / math.sqrt(2), hi * math.sqrt(2)
        ax.axvspan(left, right, color=colour, alpha=0.15, lw=0)
        for edge in (left, right):
            ax.axvline(edge, color="black", ls="--", lw=0.6, alpha=0.6)
        style = dict(ha="center", va="top", fontsize=7, color=colour, fontweight="bold")
        ax.text(math.sqrt(left * right), 0.98, label, transform=ax.get_xaxis_transform(), **style)


def write_plots(outdir, results):
    """One PNG per benchmark: figure per size for both modules, with the min-max spread shaded, and
    each size band's edges and verdict (mark_bands)."""
    plt = pyplot()
    if plt is None:
        return {}
    plots = {}
    (outdir / "plots").mkdir(exist_ok=True)
    for bench, data in results["per_size"].items():
        if not data["metric"]:
            continue
        fig, ax = plt.subplots(figsize=FIGSIZE)
        for role, colour in (("baseline", "tab:gray"), ("tuned", "tab:blue")):
            reps = data[role]
            per_size = {s: v for s, v in figures(reps).items() if s > 0}  # log axes: no size 0
            if not per_size:
                continue
            sizes = sorted(per_size)
            label = "%s (%s, n=%d)" % (role, results["modules"][role], len(reps))
            ax.plot(
                sizes, [per_size[s] for s in sizes], marker="o", ms=3, color=colour, label=label
            )
            low = [min(r[s] for r in reps) for s in sizes]
            high = [max(r[s] for r in reps) for s in sizes]
            ax.fill_between(sizes, low, high, color=colour, alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        mark_bands(ax, band_marks(results, bench))
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(UNIT[data["metric"]])
        label = " [probe]" if data.get("suite") == "probe" else ""
        geo = results["geometry"]
        ax.set_title("%s%s: %d x %d" % (bench, label, geo["nodes"], geo["ppn"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        rel = "plots/%s.png" % bench
        save_png(fig, outdir / rel)
        plots[bench] = rel
    return plots


def _testcase(classname, name, kind, text):
    """A junit test case: a `failure` or `skipped` with `text` its message, else (kind None) a
    passed case with `text` its output."""
    body = "<system-out>%s</system-out>" % escape(text)
    if kind:
        body = "<%s message=%s/>" % (kind, quoteattr(text))
    case = '  <testcase classname=%s name=%s time="0">%s</testcase>'
    return case % (quoteattr(classname), quoteattr(name), body)


def junit(results):
    """One test case per benchmark x band (lose = failure, no-data = skipped, win/tie = pass), then
    one for the module's verdict: FAIL and NO-GAIN a failure, INCONCLUSIVE (and no verdict) a
    skipped case, each with its reason; PASS passes."""
    cases = []
    for b in results["bands"]:
        kind = {"lose": "failure", "no-data": "skipped"}.get(b["verdict"])
        text = b["reason"] if kind else "%s: %s" % (b["verdict"], b["reason"])
        cases.append(_testcase("validate.%s" % b["benchmark"], b["band"], kind, text))
    verdict = results["verdict"]
    why = "%s: %s" % (tally(results), MEANS.get(verdict, "no verdict"))
    kind = None if verdict == stats.PASS else "skipped"
    if verdict in (stats.FAIL, stats.NO_GAIN):
        kind = "failure"
    cases.append(_testcase("validate", "module verdict", kind, why))
    fails = sum(1 for c in cases if "<failure " in c)
    skips = sum(1 for c in cases if "<skipped " in c)
    modules = results["modules"]
    name = "validate %s %s vs %s" % (results["site"], modules["tuned"], modules["baseline"])
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<testsuite name=%s tests="%d" failures="%d" skipped="%d" errors="0" time="%.1f">\n%s\n</testsuite>\n'
        % (quoteattr(name), len(cases), fails, skips, results["elapsed_s"], "\n".join(cases))
    )
