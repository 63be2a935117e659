"""`tunedmpi history --html OUT`: the history as one static page, OUT/index.html.

Per site, then per series (row nodes x ppn, modules, set, suite): the campaigns (verdict, links to
report.md, results.json and plots/), each benchmark x band's gain and verdict over time with an
inline SVG trend and the drift marks, the drift alert of the newest campaign, and history's trend
PNGs. It is built from what history already loaded and judged (run() hands its series, drifts and
plots over); nothing is read again. No script, no server, nothing from the network: it opens from
file:// (links are relative to OUT) or from any web server. Every string from a results.json goes
through Jinja2's autoescape, every link through quote (a directory named `javascript:...` stays a
relative path).
"""

import datetime
import math
import os
from pathlib import Path
from urllib.parse import quote

from tunedmpi.acceptance import trend
from tunedmpi.files import write_atomic

# band verdicts, then module verdicts (stats.module_verdict): NO-GAIN reads as a failure (do not
# ship), INCONCLUSIVE as a warning (too noisy to say)
VERDICT_CLASS = {
    "win": "win",
    "tie": "tie",
    "lose": "lose",
    "PASS": "pass",
    "FAIL": "fail",
    "NO-GAIN": "fail",
    "INCONCLUSIVE": "inconclusive",
}
SPARK = (18, 28, 1.25)  # px per campaign, height, least gain at the top edge (inverse: bottom)

TEMPLATE = """{% macro spark(points) %}<svg width="{{ points.width }}" height="{{ points.height }}"
 role="img"><line x1="0" x2="{{ points.width }}" y1="{{ points.one }}" y2="{{ points.one }}"
 stroke="#999" stroke-dasharray="2"/><polyline fill="none" stroke="#468"
 points="{{ points.line }}"/>{% for x, y, cls in points.marks %}<circle cx="{{ x }}" cy="{{ y }}"
 r="3" class="{{ cls }}"/>{% endfor %}</svg>{% endmacro %}
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'">
<title>tunedmpi validation history</title>
<style>
body { font: 14px sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; white-space: nowrap; }
.win { background: #c8f0c8; } .tie { background: #eee; } .lose { background: #f6c0c0; }
.pass { color: #060; font-weight: bold; } .fail { color: #a00; font-weight: bold; }
.inconclusive { color: #a60; font-weight: bold; }
.other { color: #850; font-weight: bold; }
td.drift { outline: 3px solid #d00; outline-offset: -3px; }
.alert { background: #fdd; border: 2px solid #d00; padding: .5em; margin: .5em 0; }
.ok { background: #dfd; border: 1px solid #6a6; padding: .5em; }
.why { white-space: normal; font-size: 12px; color: #a00; }
.plots img { width: 32%; min-width: 300px; border: 1px solid #ccc; }
svg circle.win { fill: #2a2; } svg circle.tie { fill: #fff; stroke: #666; }
svg circle.lose { fill: #d22; } svg circle.drift { stroke: #d00; stroke-width: 2; }
</style></head><body>
<h1>Validation history</h1>
<p>{{ campaigns }} campaign(s) in {{ series_count }} series, written {{ written }}. Drift: a
significant fall of the gain by at least {{ tolerance }} % (alpha {{ alpha }}).</p>
{% if alerts %}<div class="alert" id="drift-summary"><b>DRIFT</b> in the newest campaign of
{{ alerts|length }} series:<ul>{% for a in alerts %}<li><a href="#{{ a.anchor }}">{{ a.title }}</a>:
{{ a.bands }}</li>{% endfor %}</ul></div>
{% else %}<p class="ok" id="drift-summary">no drift in the newest campaigns</p>{% endif %}
<p>Sites: {% for site in sites %}<a href="#{{ site.anchor }}">{{ site.name }}</a> {% endfor %}</p>
{% for site in sites %}<section class="site" id="{{ site.anchor }}">
<h2>site {{ site.name }}</h2>
{% for s in site.series %}<section class="series" id="{{ s.anchor }}">
<h3>{{ s.row }}: {{ s.tuned }} vs {{ s.baseline }}, {{ s.set }} set, {{ s.suite }}</h3>
{% if s.newest %}<div class="alert drift-alert">drift in the newest campaign (#{{ s.count }}):
{{ s.newest }}</div>{% endif %}
<table class="campaigns"><tr><th>#</th><th>started</th><th>verdict</th><th>files</th></tr>
{% for c in s.campaigns %}<tr><td>#{{ loop.index }}</td><td>{{ c.started }}</td>
<td class="{{ c.vclass }}">{{ c.verdict }}{% if c.rejudged %} (re-judged){% endif %}</td><td>
{% for name, href in c.links %}<a href="{{ href }}">{{ name }}</a> {% endfor %}</td></tr>
{% endfor %}</table>
<table class="bands"><tr><th>benchmark</th><th>band</th><th>trend</th>
{% for c in s.campaigns %}<th>#{{ loop.index }}</th>{% endfor %}<th>drift</th></tr>
{% for r in s.rows %}<tr><td>{{ r.bench }}</td><td>{{ r.band }}</td><td>{{ spark(r.points) }}</td>
{% for cell in r.cells %}<td class="{{ cell.vclass }}{% if cell.drift %} drift{% endif %}">
{{ cell.text }}</td>{% endfor %}<td class="why">{{ r.why }}</td></tr>
{% endfor %}</table>
{% if s.plots %}<div class="plots">{% for name, href in s.plots %}<a href="{{ href }}"><img
 src="{{ href }}" alt="trend plot {{ name }}" loading="lazy"></a>{% endfor %}</div>{% endif %}
</section>
{% endfor %}</section>
{% endfor %}
</body></html>
"""


def _href(path, out):
    """A link from OUT/index.html to `path`, relative (so the page moves with its files) and quoted."""
    return quote(os.path.relpath(os.path.abspath(path), os.path.abspath(out)), safe="/")


def _vclass(verdict):
    return VERDICT_CLASS.get(str(verdict).split(" ")[0], "other")


def _spark(bands, marked):
    """Inline-SVG geometry of one row's gains over the campaigns, log scale, 1x dashed, scaled to
    the row (a trend of 1.5x to 1.2x must show)."""
    step, height, top = SPARK
    pad = 4
    shown = [
        (i, b)
        for i, b in enumerate(bands)
        if b is not None and isinstance(b.gain, (int, float)) and b.gain > 0
    ]
    top = max([top] + [max(b.gain, 1 / b.gain) for _, b in shown])

    def y(gain):
        frac = math.log(min(max(gain, 1 / top), top)) / math.log(top)  # -1 .. 1
        return round(height / 2 - frac * (height / 2 - pad), 1)

    marks = [
        (pad + i * step, y(b.gain), _vclass(b.verdict) + (" drift" if i in marked else ""))
        for i, b in shown
    ]
    return {
        "width": 2 * pad + step * max(len(bands) - 1, 1),  # one campaign: still a 1x line
        "height": height,
        "one": y(1.0),
        "line": " ".join("%s,%s" % (x, yy) for x, yy, _ in marks),
        "marks": marks,
    }


def _series(series, campaigns, found, plots, out):
    site, tuned, baseline, nodes, ppn, set_name, suite = series
    rows = []
    for key, bands, marked, why in trend.band_rows(campaigns, found):
        rows.append(
            {
                "bench": key[0],
                "band": key[1],
                "points": _spark(bands, marked),
                "cells": [
                    {
                        "text": "" if b is None else "%s %s" % (trend.gain(b.gain), b.verdict),
                        "vclass": "" if b is None else _vclass(b.verdict),
                        "drift": i in marked,
                    }
                    for i, b in enumerate(bands)
                ],
                "why": why,
            }
        )
    links = (("report", "report.md"), ("results.json", "results.json"), ("plots", "plots"))
    return {
        "anchor": "series-" + trend.slug(series),
        "title": trend.describe(series),
        "row": "%d x %d" % (nodes, ppn),
        "tuned": tuned,
        "baseline": baseline,
        "set": set_name,
        "suite": suite,
        "count": len(campaigns),
        "newest": trend.newest(found, len(campaigns)),
        "campaigns": [
            {
                "started": c.started,
                "verdict": c.verdict,
                "vclass": _vclass(c.verdict),
                "rejudged": c.rejudged,
                "links": [
                    (name, _href(c.path / f, out)) for name, f in links if (c.path / f).exists()
                ],
            }
            for c in campaigns
        ],
        "rows": rows,
        "plots": [(Path(p).stem, _href(p, out)) for p in plots],
    }


def write(out, shown, tolerance, alpha):
    """OUT/index.html from history's [(series, campaigns, drifts, plot paths)]; returns its path."""
    import jinja2

    sites = {}
    for series, campaigns, found, plots in shown:
        sites.setdefault(series[0], []).append(_series(series, campaigns, found, plots, out))
    page = [
        {"name": name, "anchor": "site-%d" % i, "series": s}
        for i, (name, s) in enumerate(sorted(sites.items()))
    ]
    alerts = [
        {"anchor": s["anchor"], "title": s["title"], "bands": s["newest"]}
        for site in page
        for s in site["series"]
        if s["newest"]
    ]
    template = jinja2.Environment(autoescape=True).from_string(TEMPLATE)
    html = template.render(
        sites=page,
        alerts=alerts,
        campaigns=sum(len(c) for _, c, _, _ in shown),
        series_count=len(shown),
        written=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        tolerance="%g" % (tolerance * 100),
        alpha="%g" % alpha,
    )
    path = Path(out) / "index.html"
    write_atomic(path, html)
    return path
