"""A history series as people read it (its trend): its name, its file-safe slug, its band rows, a
gain, the drifts of a row. history.py (the text table, the plots) and dashboard.py (the HTML
page) both show a series this way; neither imports the other for it."""

import re

from tunedmpi import stats


def describe(series):
    return "%s: %s vs %s, %d x %d, %s set, %s" % series


def slug(series):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "%s_%s_vs_%s_%dx%d_%s_%s" % series)


def gain(g):
    return "-" if g is None else "%.2fx" % g


def band_keys(campaigns):
    """The (benchmark, band) rows of a series: bands by size, reliability last and only where some
    campaign did not tie it."""
    order = {name: i for i, (name, _, _) in enumerate(stats.BANDS)}
    keys = sorted(
        {k for c in campaigns for k in c.bands},
        key=lambda k: (k[0], order.get(k[1], len(order)), k[1]),
    )
    return [
        k
        for k in keys
        if k[1] != "reliability"
        or any(c.bands.get(k) and c.bands[k].verdict != "tie" for c in campaigns)
    ]


def band_rows(campaigns, found):
    """Each row of a series: its key, its band in each campaign (None: not measured), the
    campaigns it drifted in and its drifts in words."""
    flags = drifts_by_band(found)
    for key in band_keys(campaigns):
        drifts = flags.get(key, [])
        yield key, [c.bands.get(key) for c in campaigns], {d.index for d in drifts}, why(drifts)


def drifts_by_band(found):
    """{(benchmark, band): [its drifts]} of a series' drifts."""
    flags = {}
    for d in found:
        flags.setdefault((d.bench, d.band), []).append(d)
    return flags


def why(drifts):
    """A row's drifts in words: "#3: gain fell ...; #5: ..."."""
    return "; ".join("#%d: %s" % (d.index + 1, d.why) for d in drifts)


def newest(found, count):
    """The bands that drifted in the newest of `count` campaigns: "bench band; ..." ("" if none)."""
    return "; ".join("%s %s" % (d.bench, d.band) for d in found if d.index == count - 1)
