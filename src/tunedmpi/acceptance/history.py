"""`tunedmpi history`: validation campaigns over time, per module, benchmark and band, with drift alerts.

A tuned module is right on the day it was measured. This reads the result directories that
`tunedmpi validate` wrote (results.json each), groups them into *series* (same site, tuned and
baseline module, geometry, set and benchmark suite: only those are comparable), orders each series
by start time, prints every band's gain and verdict over time, writes one trend plot per benchmark
and flags **drift** (rule in DRIFT_RULE, docs in validate/README.md "History and drift").

Result formats (schema_version 1, or no such field; results.check_schema refuses any other):
- current (bands carry `test`, written since the t-test verdict: Yuen-Welch, then Welch): the
  stored verdicts are used;
- older (Mann-Whitney bands, no `test` key): every band is re-judged from the stored per-run points
  with today's statistics, one look at the campaign's own alpha and tolerance (what `validate
  --no-extend` would say), and marked "re-judged";
- anything else is refused with an InputError naming the file and the missing key.
"""

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tunedmpi import paths, stats
from tunedmpi.acceptance import report, results, trend, validate
from tunedmpi.acceptance.rows import SUMMARY as ROWS_SUMMARY
from tunedmpi.errors import InputError, InputErrors, printable
from tunedmpi.files import read_text
from tunedmpi.policy import POLICY

EXIT_OK, EXIT_DRIFT = 0, 1
DRIFT_RULE = (
    "A series is the campaigns of one site, tuned and baseline module, geometry, set and benchmark "
    "suite, in time order. Each campaign's size bands are compared with the campaign before that "
    "measured them: DRIFT when the gain fell significantly, a two-sided Welch t test on the change "
    "of the log gain (the two campaigns' baseline-minus-tuned differences of per-run band scores) "
    "with Holm's step-down over the campaign's bands at alpha, its estimate a fall and the reported "
    "gain down by at least the tolerance (now <= before / (1 + tolerance)). A verdict changing "
    "(won, now ties) is no drift by itself. Exit 1 when the newest campaign of any series drifted."
)
FORMAT_HELP = (
    "history reads results.json written by `tunedmpi validate` (validate/run.sh); rerun the "
    "validation, or leave this directory out"
)


@dataclass
class Band:
    """One benchmark x band of one campaign, as the history uses it."""

    gain: Optional[float]
    verdict: str
    sizes: List[int]
    metric: Optional[str] = None
    baseline: list = field(default_factory=list)  # per-run {size: value} of the benchmark
    tuned: list = field(default_factory=list)
    undecided: bool = False  # a tie whose interval reaches beyond the tolerance (module_verdict)


@dataclass
class Campaign:
    path: Path
    started: str
    series: Tuple  # (site, tuned, baseline, nodes, ppn, set, suite)
    verdict: str
    rejudged: bool
    bands: Dict[Tuple[str, str], Band]
    revision: str = "-"  # the table revision the campaign judged (results.json, since issue 49)


@dataclass
class Drift:
    bench: str
    band: str
    index: int  # campaign position in its series (0-based)
    why: str


# ---- reading ---------------------------------------------------------------------------------


def _need(res, key, path, kind=None, where=""):
    """res[key], refused with an InputError naming the file and the key when it is not there."""
    if not isinstance(res, dict) or key not in res or not isinstance(res[key], kind or object):
        what = "" if kind is None else " (%s)" % kind.__name__
        problem = "unknown results format: no %s%s" % (key, what)
        raise InputError(path, None, where + key, problem, FORMAT_HELP)
    return res[key]


def _reps(value, path, key):
    """Per-run {size: value} from JSON (sizes are strings there)."""
    problem = "not a list of runs"
    if isinstance(value, list):
        problem = "a run is not {size: value}"
        try:
            return [{int(s): float(v) for s, v in run.items()} for run in value]
        except (AttributeError, TypeError, ValueError):
            pass
    raise InputError(path, None, key, "unknown results format: " + problem, FORMAT_HELP)


REVISION = re.compile(r"^[0-9a-f]{12}\Z")  # modules/revisions.revision: printed, so checked


def load_campaign(directory):
    """One validate result directory as a Campaign; None when it could not run (no data)."""
    path = Path(directory) / "results.json"
    try:
        res = json.loads(read_text(path))
    except OSError as exc:
        raise InputError(path, None, None, "cannot read: %s" % exc.strerror, FORMAT_HELP)
    except ValueError as exc:
        problem = "not JSON (%s): a results.json cut short?" % exc
        raise InputError(path, None, None, problem, FORMAT_HELP)
    tool = res.get("tool") if isinstance(res, dict) else None
    if tool != "tunedmpi validate":
        problem = "not a validation result (tool is %r, not 'tunedmpi validate')" % (tool,)
        raise InputError(path, None, "tool", problem, FORMAT_HELP)
    results.check_schema(res, path)
    started = _need(res, "started", path, str)
    modules = _need(res, "modules", path, dict)
    geo = _need(res, "geometry", path, dict)
    per_size = _need(res, "per_size", path, dict)
    stored = _need(res, "bands", path, list)
    for key in ("site", "set", "suite", "verdict"):
        _need(res, key, path, str)
    tuned, baseline = (_need(modules, key, path, str) for key in ("tuned", "baseline"))
    nodes, ppn = (_need(geo, key, path, int) for key in ("nodes", "ppn"))
    series = (res["site"], tuned, baseline, nodes, ppn, res["set"], res["suite"])
    if res["verdict"] in ("COULD-NOT-RUN", "NO-DATA"):
        return None
    data = {}
    for bench, d in per_size.items():
        paths.safe_name(bench, path, "per_size")  # it names a plot file: never ../x.png
        metric = d.get("metric") if isinstance(d, dict) else None
        if metric is None:
            continue
        if metric not in stats.LOWER_IS_BETTER:
            raise InputError(
                path, None, "per_size.%s.metric" % bench, "unknown metric %r" % metric, FORMAT_HELP
            )
        runs = (_reps(d.get(r), path, "per_size.%s.%s" % (bench, r)) for r in results.ROLES)
        data[bench] = (metric, *runs)
    for i, b in enumerate(stored):
        for key in ("benchmark", "band", "verdict", "gain", "sizes"):
            _need(b, key, path, where="bands[%d]." % i)
        paths.safe_name(b["benchmark"], path, "bands[%d].benchmark" % i)
    # Current results carry the test's name in every size band; older ones (Mann-Whitney) do not.
    rejudged = any(b["band"] != "reliability" and not b.get("test") for b in stored)
    rows = [b for b in stored if b["band"] == "reliability"]
    if rejudged:
        tol = float(res.get("tolerance", POLICY.tolerance))
        alpha = float(res.get("alpha", POLICY.alpha))
        for bench, (metric, base, tuned) in data.items():
            rows += [vars(r) for r in stats.compare_bands(bench, metric, base, tuned, tol, alpha)]
    else:
        rows = stored
    bands = {}
    for b in rows:
        metric, base, tuned = data.get(b["benchmark"], (None, [], []))
        undecided = bool(b.get("undecided"))
        band = Band(b["gain"], b["verdict"], list(b["sizes"]), metric, base, tuned, undecided)
        bands[(b["benchmark"], b["band"])] = band
    verdict = stats.module_verdict(list(bands.values())) if rejudged else res["verdict"]
    if rejudged and verdict != res["verdict"]:
        verdict = "%s (stored %s)" % (verdict, res["verdict"])
    revision = res.get("table_revision")
    revision = revision if isinstance(revision, str) and REVISION.match(revision) else "-"
    return Campaign(Path(directory), started, series, verdict, rejudged, bands, revision)


def _result_dirs(path, depth):
    if (path / ROWS_SUMMARY).is_file():  # a validate --rows campaign: its rows' campaigns
        return _result_dirs(path / "rows", 2)
    if (path / "results.json").is_file() or validate.incomplete(path):
        return [path]
    if depth == 0 or not path.is_dir():
        return []
    return [
        d
        for child in sorted(path.iterdir())
        if child.is_dir()
        for d in _result_dirs(child, depth - 1)
    ]


def load(paths, site=None):
    """Campaigns from result directories or folders of them (validate-results/, two levels down),
    grouped by series and ordered by start time: {series: [Campaign, ...]}."""
    seen, found = set(), []
    for p in map(Path, paths):
        if not p.is_dir():
            fix = "give validate result directories (validate-results/<site>-<time>/) or folders of them"
            raise InputError(p, None, None, "no such directory", fix)
        dirs = _result_dirs(p, 2)
        if not dirs:
            fix = "give the --out directory of validate/run.sh (default validate-results/) or its subdirectories"
            problem = "no validation result here (no results.json in it or below it)"
            raise InputError(p, None, None, problem, fix)
        for d in dirs:
            if d.resolve() not in seen:
                seen.add(d.resolve())
                found.append(d)
    campaigns, refused = [], []
    for d in found:
        why = validate.incomplete(d)
        if why:  # killed or interrupted: said, not silently skipped
            sys.stderr.write(
                "history: %s is incomplete (STATUS: %s): left out\n" % (d, printable(why))
            )
            continue
        try:
            c = load_campaign(d)
        except InputError as exc:  # an unreadable campaign (or a newer schema): left out, said
            refused.append(exc)
            continue
        if c is None:
            sys.stderr.write("history: %s could not run (no data): left out\n" % d)
        elif site is None or c.series[0] == site:
            campaigns.append(c)
    if not campaigns and refused:  # nothing else to show: the refusal itself is the error
        raise refused[0] if len(refused) == 1 else InputErrors(refused)
    for exc in refused:
        sys.stderr.write("history: %s: left out\n" % exc.format())
    if not campaigns:
        problem = "no campaign with data%s" % (" for site %s" % site if site else "")
        fix = "check --site, or give other directories"
        raise InputError(" ".join(map(str, paths)), None, "--site" if site else None, problem, fix)
    out = {}
    for c in sorted(campaigns, key=lambda c: (c.started, str(c.path))):
        out.setdefault(c.series, []).append(c)
    return out


# ---- drift -----------------------------------------------------------------------------------


def drifts(campaigns, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """Every drift in one series (campaigns in time order), by DRIFT_RULE: each campaign's size
    bands against the campaign before that measured them, one stats.drifted family per campaign."""
    out = []
    for k in range(1, len(campaigns)):
        now, tested = campaigns[k], []
        for key, b in sorted(now.bands.items()):
            ref = next((j for j in range(k - 1, -1, -1) if key in campaigns[j].bands), None)
            a = None if ref is None else campaigns[ref].bands[key]
            if a is None or not (a.gain and b.gain) or key[1] == "reliability":
                continue
            sizes = set(a.sizes) & set(b.sizes)
            change = stats.gain_change(
                (a.baseline, a.tuned), (b.baseline, b.tuned), sizes, b.metric
            )
            if change is not None:
                tested.append((key, ref, a, b, change))
        judged = stats.drifted([(b.gain / a.gain, t) for _, _, a, b, t in tested], tolerance, alpha)
        for (key, ref, a, b, t), (level, drift) in zip(tested, judged):
            if drift:
                fell = "gain fell %s -> %s vs #%d" % (
                    trend.gain(a.gain),
                    trend.gain(b.gain),
                    ref + 1,
                )
                test = (math.exp(t.diff), t.p, level, len(tested))
                why = fell + " (x%.2f, p=%.2g <= %.2g, Holm over %d bands)" % test
                out.append(Drift(key[0], key[1], k, why))
    return out


# ---- output ----------------------------------------------------------------------------------


def table(series, campaigns, found):
    """The trend table of one series: campaigns, then per benchmark and band the gain and verdict
    in every campaign, and its drift."""
    lines = [
        "== %s (%d campaign%s)"
        % (trend.describe(series), len(campaigns), "" if len(campaigns) == 1 else "s")
    ]
    for i, c in enumerate(campaigns):
        note = "  (older results format: re-judged)" if c.rejudged else ""
        what = (i + 1, c.started, c.verdict, c.revision, c.path, note)
        lines.append("  #%d  %s  %-4s  table %-12s  %s%s" % what)
    head = ["benchmark", "band"] + ["#%d" % (i + 1) for i in range(len(campaigns))] + ["drift"]
    rows = []
    for key, bands, marked, why in trend.band_rows(campaigns, found):
        cells = [
            "%s %s%s" % (trend.gain(b.gain), b.verdict, " !" if i in marked else "") if b else ""
            for i, b in enumerate(bands)
        ]
        rows.append([key[0], key[1]] + cells + [why])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head) - 1)]
    for r in [head] + rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return "\n".join(lines)


GAIN_TICKS = (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8)
MARK = {"win": ("o", "full"), "tie": ("o", "none"), "lose": ("X", "full"), "no-data": ("", "none")}


def plot(series, campaigns, found, outdir):
    """One PNG per benchmark: the gain of each band over the campaigns (log scale), filled = win,
    open = tie, X = lose, the tolerance around 1 shaded, drifted points ringed in red."""
    plt = report.pyplot()
    if plt is None:
        return []
    from matplotlib import ticker

    written = []
    labels = [
        "#%d\n%s" % (i + 1, c.started[:16].replace("T", " ")) for i, c in enumerate(campaigns)
    ]
    for bench in sorted({k[0] for c in campaigns for k in c.bands}):
        bands = [
            name for name, _, _ in stats.BANDS if any((bench, name) in c.bands for c in campaigns)
        ]
        if not bands:
            continue
        fig, ax = plt.subplots(figsize=report.FIGSIZE)
        ax.axhspan(1 / (1 + POLICY.tolerance), 1 + POLICY.tolerance, color="tab:gray", alpha=0.15)
        ax.axhline(1.0, color="tab:gray", lw=0.8)
        for colour, band in zip(("tab:blue", "tab:orange", "tab:green", "tab:purple"), bands):
            pts = [
                (i, c.bands[(bench, band)])
                for i, c in enumerate(campaigns)
                if (bench, band) in c.bands and c.bands[(bench, band)].gain
            ]
            if not pts:
                continue
            ax.plot([i for i, _ in pts], [b.gain for _, b in pts], color=colour, lw=1, label=band)
            for i, b in pts:
                marker, fill = MARK[b.verdict]
                ax.plot([i], [b.gain], marker=marker, ms=7, color=colour, fillstyle=fill, ls="")
            ring = [d.index for d in trend.drifts_by_band(found).get((bench, band), [])]
            gains = [campaigns[i].bands[(bench, band)].gain for i in ring]
            ax.plot(ring, gains, marker="o", ms=14, fillstyle="none", color="red", ls="")
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()  # gains read as 1.25x, not as powers of ten
        ax.set_yticks([t for t in GAIN_TICKS if lo <= t <= hi])
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: "%.3gx" % v))
        ax.set_xticks(range(len(campaigns)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_xlim(-0.5, len(campaigns) - 0.5)
        ax.set_ylabel("gain (tuned vs baseline), > 1 better")
        title = "%s [%s]: %s vs %s, %d x %d, %s" % ((bench, series[6]) + series[1:6])
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        key = "filled win, open tie, X lose, red ring drift"
        ax.legend(fontsize=8, title=key, title_fontsize=7)
        fig.tight_layout()
        path = Path(outdir) / trend.slug(series) / ("%s.png" % bench)
        report.save_png(fig, path)
        written.append(path)
    return written


def run(paths, site=None, tolerance=POLICY.tolerance, alpha=POLICY.alpha, plots=None, html=None):
    """Print the history of every series, write the plots under `plots` (default: beside the
    dashboard, `html`/plots; neither: no plots) and with `html` a dashboard there; EXIT_DRIFT when
    the newest campaign of any series drifted. Bad input raises InputError (the CLI exits 2)."""
    all_series = load(paths, site)
    plots = plots or (html and Path(html) / "plots")
    newest, shown = [], []
    for series, campaigns in all_series.items():
        found = drifts(campaigns, tolerance, alpha)
        print(table(series, campaigns, found))
        written = plot(series, campaigns, found, plots) if plots else []
        shown.append((series, campaigns, found, written))
        if written:
            print("  plots: %s" % (Path(plots) / trend.slug(series)))
        newest += [(series, d) for d in found if d.index == len(campaigns) - 1]
        none = "none" if len(campaigns) > 1 else "nothing to compare yet (one campaign)"
        drift = trend.newest(found, len(campaigns)) or none
        print("  drift in the newest campaign (#%d): %s\n" % (len(campaigns), drift))
    rule = "tolerance %.0f%%, alpha %.2g" % (tolerance * 100, alpha)
    if html:
        from tunedmpi.acceptance import dashboard

        print("dashboard: %s" % dashboard.write(html, shown, tolerance, alpha))
    if newest:
        print(
            "DRIFT: %d band(s) in the newest campaign of %d series (%s)"
            % (len(newest), len({s for s, _ in newest}), rule)
        )
        return EXIT_DRIFT
    print("no drift in the newest campaigns (%s)" % rule)
    return EXIT_OK
