"""Print tables for people: a nodes × ppn grid per collective and component, or CSV rows."""

import csv
import io

from tunedmpi.tables.units import format_size

CSV_COLUMNS = tuple(
    "nodes ppn collective component ucx_tls ucx_rndv_thresh ucx_zcopy_thresh nps mapping".split()
)


def to_csv(table):
    """One row per (case, component), values as UCX writes them, empty where the study has none."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for case in sorted(table.cases, key=lambda c: (c.nodes, c.ppn, c.collective)):
        for comp, values in case.settings.items():
            row = {
                "nodes": case.nodes,
                "ppn": case.ppn,
                "collective": case.collective,
                "component": comp,
            }
            for col in CSV_COLUMNS[4:]:
                value = values.get(col)
                row[col] = "" if value is None else str(value).lower()
            writer.writerow(row)
    return out.getvalue()


def _short_size(text):
    return text.replace("kb", "k").replace("mb", "m").replace("gb", "g")


def cell(values):
    """Compact text of one setting: transports, rndv (i=intra, e=inter), zcopy, NPS, placement."""
    parts = []
    if values.get("ucx_tls"):
        tls = values["ucx_tls"]
        parts.append(tls[len("self,sm,") :] if tls.startswith("self,sm,") else tls)
    if values.get("ucx_rndv_thresh"):
        rndv = (
            values["ucx_rndv_thresh"]
            .replace("intra:", "i")
            .replace("inter:", "e")
            .replace(",", "/")
        )
        parts.append("r" + _short_size(rndv))
    if values.get("ucx_zcopy_thresh"):
        parts.append("z" + _short_size(str(values["ucx_zcopy_thresh"])))
    if values.get("nps"):
        parts.append("N%s" % values["nps"])
    if values.get("mapping"):
        parts.append({"block": "blk", "cyclic": "cyc"}[values["mapping"]])
    for knob in ("pml", "osc"):
        if values.get(knob):
            parts.append("%s=%s" % (knob, values[knob]))
    return " ".join(parts) or "-"


LEGEND = (
    "cell: [transports after self,sm] r<rndv> (i=intra e=inter) z<zcopy> N<NPS> blk|cyc; "
    "'?' = the study gives no value, '' = not measured; +bands = algorithm bands (listed below)"
)


def band_text(band):
    """One algorithm band: 'from - to  name (number) segsize ...'; to 'end' = no upper end."""
    sizes = "%s - %s" % (format_size(band.lo), "end" if band.hi is None else format_size(band.hi))
    algo = (
        "Open MPI's fixed decision (0)"
        if band.algorithm == 0
        else "%s (%d)" % (band.name, band.algorithm)
    )
    extra = [
        ("segsize", format_size(band.segsize) if band.segsize else None),
        ("faninout", band.faninout or None),
        ("max_requests", band.max_requests),
    ]
    return sizes, " ".join([algo] + ["%s %s" % (k, v) for k, v in extra if v is not None])


def bands(table):
    """Lines of the table's coll_tuned algorithm bands, by geometry and collective ([] if none)."""
    rows = []
    for (nodes, ppn), colls in table.algorithm_bands().items():
        for coll, case in colls.items():
            for i, band in enumerate(case.bands):
                sizes, algo = band_text(band)
                first = i == 0
                rows.append(
                    ["%dx%d" % (nodes, ppn) if first else "", coll if first else "", sizes, algo]
                )
    if not rows:
        return []
    rows.insert(0, ["nodes x ppn", "collective", "message size", "coll_tuned algorithm"])
    return [
        "",
        "coll_tuned algorithm bands (from inclusive, to exclusive; one rules file per nodes x ppn)",
    ] + _columns(rows)


def _columns(rows):
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]


def grid(table):
    """Readable text: for each collective and component, rows = nodes, columns = ppn; then the
    algorithm bands, if any."""
    lines = [
        "%s  (%s %s)  %s" % (table.platform, table.mpi_flavour, table.mpi_version, table.path),
        "  " + LEGEND,
    ]
    nodes = sorted({c.nodes for c in table.cases})
    ppns = sorted({c.ppn for c in table.cases})
    for coll in dict.fromkeys(c.collective for c in table.cases):  # in the table's order
        comps = dict.fromkeys(k for c in table.cases if c.collective == coll for k in c.settings)
        for comp in comps:
            rows = [["nodes \\ ppn"] + [str(p) for p in ppns]]
            for n in nodes:
                row = [str(n)]
                for p in ppns:
                    case = table.case(n, p, coll)
                    if case is None or comp not in case.settings:
                        row.append("")
                    else:
                        text = cell(case.settings[comp])
                        row.append(
                            text
                            + (" ?" if case.unstated else "")
                            + (" +bands" if case.bands else "")
                        )
                rows.append(row)
            lines += ["", "%s / %s" % (coll, comp)] + _columns(rows)
    lines += bands(table)
    return "\n".join(lines) + "\n"
