"""`validate --rows all` (or `--rows 1x2,2x1`): every geometry (nodes x ppn) of the site's table in
one campaign, with one exit code.

Each row is the single-row validate, in this process, as `--nodes N --ppn P` (with `--submit`: its
own Slurm job of exactly that geometry, one after the other) into
`<campaign>/rows/<N>x<P>/`. Then one summary: results-rows.json, summary.md with a rows x bands
matrix, rows-heatmap.png, and junit.xml with a testsuite per row. `--reanalyse` of such a campaign
judges every row again.
"""

import argparse
import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tunedmpi import paths
from tunedmpi.acceptance import report, trend, validate, validate_cli
from tunedmpi.argtypes import argv_without
from tunedmpi.bench.runner import CannotRun
from tunedmpi.files import read_bytes, read_text, write_atomic

SUMMARY = "results-rows.json"
# The campaign's exit code is its worst row's, worst first: a row that could not run hides
# everything else, then a regression, then a module with no benefit, then too much noise.
SEVERITY = (
    validate.EXIT_CANNOT,
    validate.EXIT_FAIL,
    validate.EXIT_NO_GAIN,
    validate.EXIT_INCONCLUSIVE,
    validate.EXIT_PASS,
)
VERDICT_OF = {code: v for v, code in validate.EXIT_CODES.items()}
VERDICT_OF[validate.EXIT_CANNOT] = "COULD-NOT-RUN"
ORDER = " > ".join("%s %d" % (VERDICT_OF[c], c) for c in SEVERITY)


def worst(codes):
    """The campaign's exit code: the first of SEVERITY among the rows' codes (2 for none)."""
    codes = set(codes)
    return next((c for c in SEVERITY if c in codes), validate.EXIT_CANNOT)


def table_rows(site):
    """The (nodes, ppn) geometries of the site's table, in order."""
    if site.table is None:
        return []
    return sorted({(c.nodes, c.ppn) for c in site.table.cases})


def parse_rows(text, site):
    """--rows: "all" (every row of the site's table) or "NxP,NxP" (each one of the table's)."""
    known = table_rows(site)
    fix = "give --rows all or a comma list of the table's rows: %s" % (
        ",".join("%dx%d" % r for r in known) or "none: the site has no measured table"
    )
    if text.strip() == "all":
        if not known:
            raise CannotRun("--rows all: site %s has no tuning table; %s" % (site.name, fix))
        return known
    rows = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        nodes, _, ppn = word.partition("x")
        if not (nodes.isdigit() and ppn.isdigit()) or (int(nodes), int(ppn)) not in known:
            raise CannotRun(
                "--rows %s: %r is not a row of site %s's table (%s); %s"
                % (text, word, site.name, site.table_ref, fix)
            )
        if (int(nodes), int(ppn)) not in rows:
            rows.append((int(nodes), int(ppn)))
    if not rows:
        raise CannotRun("--rows %r names no row; %s" % (text, fix))
    return rows


def run_row(args, row, out):
    """One row by the single-row validate (validate_cli.one). Returns (exit code, why it could not
    run: its "cannot run" line, else "")."""
    sys.stderr.write("validate --rows: row %dx%d into %s\n" % (row + (out,)))
    # a --submit job runs validate/run.sh with these arguments (--out is validate.submit's)
    argv = argv_without(args.argv, {"--rows", "--out", "--nodes", "--ppn"})
    argv += ["--nodes", str(row[0]), "--ppn", str(row[1])]
    one = dict(vars(args), rows=None, nodes=row[0], ppn=row[1], out=str(out), argv=argv)
    try:
        return validate_cli.one(argparse.Namespace(**one)), ""
    except CannotRun as exc:
        why = "validate: cannot run: %s" % exc
        sys.stderr.write(why + "\n")
        return validate.EXIT_CANNOT, why


def row_record(row, folder, code, why, campaign):
    """A row of results-rows.json from its folder: the single-row results.json when there is one,
    else could-not-run with why."""
    found = sorted(Path(folder).glob("*/results.json"))
    record = {"row": "%dx%d" % row, "nodes": row[0], "ppn": row[1]}
    if not found or code not in VERDICT_OF:
        return dict(
            record,
            verdict=VERDICT_OF[validate.EXIT_CANNOT],
            exit_code=validate.EXIT_CANNOT,
            reason=why or "exit %s" % code,
            bands=[],
        )
    doc = json.loads(read_text(found[-1]))
    return dict(
        record,
        verdict=doc["verdict"],
        exit_code=doc["exit_code"],
        tally=report.tally(doc),
        noise=doc.get("noise"),
        dir=str(found[-1].parent.relative_to(campaign)),
        bands=[
            {k: b.get(k) for k in ("benchmark", "band", "gain", "verdict", "undecided")}
            for b in report.sized_bands(doc)
        ],
    )


def run_rows(args):
    """`validate --rows`: each row by the single-row validate, then the summary; the exit code."""
    if args.nodes or args.ppn:
        raise CannotRun("--rows sets --nodes and --ppn per row: drop them, or validate one row")
    site = validate_cli.site_of(args)
    rows = parse_rows(args.rows, site)
    campaign = validate.new_results_dir(args.out, site.name + "-rows")
    records = []

    def work():
        for row in rows:
            folder = campaign / "rows" / ("%dx%d" % row)
            code, why = run_row(args, row, folder)
            records.append(row_record(row, folder, code, why, campaign))
        return write_summary(campaign, site.name, records), campaign

    return finish(*validate.guarded(campaign, work))


def _whole(*numbers):
    """The row (nodes, ppn) when both are whole numbers of 1 or more, else TypeError."""
    if not all(type(n) is int and n >= 1 for n in numbers):
        raise TypeError("rows[].nodes and rows[].ppn must be whole numbers of 1 or more")
    return numbers


def is_rows_campaign(directory):
    """Whether a directory is a --rows campaign (it has results-rows.json)."""
    return (Path(directory) / SUMMARY).is_file()


def reanalyse(source, out):
    """--reanalyse of a rows campaign: every row that has results judged again (validate.reanalyse)
    into a new rows campaign; a row that could not run stays so."""
    src = Path(source)
    try:
        old = json.loads(read_text(src / SUMMARY))
        old_rows = [(r, _whole(r["nodes"], r["ppn"])) for r in old["rows"]]
        site = old["site"]
        for r in old["rows"]:  # a row's folder is read from, never outside the campaign
            if r.get("dir") is not None:
                paths.inside(src, src / str(r["dir"]), src / SUMMARY, "rows[].dir")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CannotRun(
            "%s: not a validate --rows summary (%s); give a directory validate --rows wrote"
            % (src / SUMMARY, exc)
        )
    campaign = validate.new_results_dir(out, site + "-rows", str(src / SUMMARY))

    def work():
        records = []
        for record, row in old_rows:
            if not record.get("dir"):
                records.append(record)
                continue
            folder = campaign / "rows" / ("%dx%d" % row)
            res, _ = validate.reanalyse(src / record["dir"], folder)
            records.append(row_record(row, folder, res["exit_code"], "", campaign))
        return write_summary(campaign, site, records, str(src.resolve())), campaign

    return finish(*validate.guarded(campaign, work))


def finish(doc, campaign):
    """Print the rows and the one verdict line; the campaign's exit code."""
    for r in doc["rows"]:
        print("%-6s %s" % (r["row"], r.get("tally") or "%s: %s" % (r["verdict"], r["reason"])))
    print(
        "\nverdict: %s  (%d rows; summary: %s)"
        % (doc["verdict"], len(doc["rows"]), campaign / "summary.md")
    )
    return doc["exit_code"]


def write_summary(campaign, site, records, reanalysed_from=None):
    """results-rows.json, summary.md, junit.xml, then the heatmap (a plot that fails is a warning).
    Returns the summary document, whose "verdict" is validate.guarded's to record."""
    code = worst(r["exit_code"] for r in records)
    doc = {
        "tool": "tunedmpi validate --rows",
        "schema_version": 1,
        "site": site,
        "verdict": VERDICT_OF[code],
        "exit_code": code,
        "order": "the worst row's verdict: " + ORDER,
        "rows": records,
    }
    if reanalysed_from:
        doc["reanalysed_from"] = reanalysed_from
    write_atomic(campaign / SUMMARY, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    write_atomic(campaign / "junit.xml", junit(campaign, doc))
    heatmap = None
    try:
        heatmap = write_heatmap(campaign, doc)
    except OSError as exc:
        sys.stderr.write("warning: heatmap left out: %s\n" % (exc.strerror or exc))
    write_atomic(campaign / "summary.md", markdown(doc, heatmap))
    return doc


def columns(doc):
    """The matrix's columns: every (benchmark, band) of any row, in the order first met."""
    seen = []
    for r in doc["rows"]:
        for b in r["bands"]:
            if (b["benchmark"], b["band"]) not in seen:
                seen.append((b["benchmark"], b["band"]))
    return seen


def cell(row, col):
    """The row's band: (gain or None, its verdict word), ("-", "") when the row has no such band."""
    for b in row["bands"]:
        if (b["benchmark"], b["band"]) == col:
            return b["gain"], "undecided" if b.get("undecided") else b["verdict"]
    return None, ""


def markdown(doc, heatmap):
    cols = columns(doc)
    out = [
        "# Validation of every row: site %s" % doc["site"],
        "",
        "**Verdict: %s** (exit %d), %s." % (doc["verdict"], doc["exit_code"], doc["order"]),
        "",
        "| row | verdict (exit) | tally | report |",
        "|---|---|---|---|",
    ]
    for r in doc["rows"]:
        verdict = "**%s** (%d)" % (r["verdict"], r["exit_code"])
        tally = r.get("tally") or r.get("reason", "").replace("|", "/")
        if (r.get("noise") or {}).get("too_noisy"):
            tally += " (**host too noisy**)"
        link = "[report.md](%s/report.md)" % r["dir"] if r.get("dir") else "-"
        out.append(report.md_row([r["row"], verdict, tally, link]))
    out += ["", "## Rows x bands: gain (tuned vs baseline) and verdict", ""]
    out += ["| row | %s |" % " | ".join("%s %s" % c for c in cols), "|---|" + "---|" * len(cols)]
    for r in doc["rows"]:
        cells = [
            "%s %s" % (trend.gain(gain), word) if word else "-"
            for gain, word in (cell(r, c) for c in cols)
        ]
        out.append("| %s | %s |" % (r["row"], " | ".join(cells)))
    if heatmap:
        out += ["", "![rows x bands](%s)" % heatmap]
    return "\n".join(out) + "\n"


def write_heatmap(campaign, doc):
    """rows-heatmap.png: rows x bands, coloured by log2 gain (green faster, red slower), each cell
    with its verdict's first letter (W, L, T, U); None without matplotlib or bands."""
    plt, cols = report.pyplot(), columns(doc)
    if plt is None or not cols:
        return None
    rows = doc["rows"]
    grid = [[math.log2(g) if g else math.nan for g, _ in (cell(r, c) for c in cols)] for r in rows]
    fig, ax = plt.subplots(figsize=(max(7, 0.3 * len(cols) + 2), 1.2 + 0.5 * len(rows)))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=-1, vmax=1, aspect="auto")
    for i, r in enumerate(rows):
        if not r["bands"]:
            ax.text((len(cols) - 1) / 2, i, r["verdict"].lower(), ha="center", va="center")
        for j, c in enumerate(cols):
            word = cell(r, c)[1]
            if word:
                ax.text(j, i, word[0].upper(), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(cols)), ["%s %s" % c for c in cols], rotation=90, fontsize=6)
    ax.set_yticks(range(len(rows)), [r["row"] for r in rows])
    ax.set_title("site %s: %s" % (doc["site"], doc["verdict"]))
    fig.colorbar(image, ax=ax, label="log2 gain")
    fig.tight_layout()
    report.save_png(fig, campaign / "rows-heatmap.png")
    return "rows-heatmap.png"


def junit(campaign, doc):
    """<testsuites>: each row's own junit.xml as a testsuite named by its row; a row that could not
    run is a testsuite with one error case giving why."""
    top = ET.Element("testsuites", name="validate --rows %s" % doc["site"])
    for r in doc["rows"]:
        if r.get("dir"):
            suite = ET.fromstring(read_bytes(campaign / r["dir"] / "junit.xml"))
            suite.set("name", "row %s: %s" % (r["row"], suite.get("name")))
        else:
            suite = ET.SubElement(top, "testsuite", name="row %s" % r["row"], tests="1")
            suite.attrib.update(failures="0", skipped="0", errors="1", time="0")
            case = ET.SubElement(suite, "testcase", classname="validate", name="module verdict")
            ET.SubElement(case, "error", message="could not run: %s" % r["reason"])
            continue
        top.append(suite)
    for key in ("tests", "failures", "skipped", "errors"):
        top.set(key, str(sum(int(s.get(key, 0)) for s in top)))
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(top, encoding="unicode") + "\n"
