"""`tunedmpi history --html OUT`: the dashboard rendered from archived campaigns and opened in a real
headless Chromium (Debian's `chromium`): what its DOM shows after the browser parsed it (sites, rows,
bands, verdicts, the drift alert), that a screenshot of it is a picture (not blank, the alert and the
verdict colours drawn), and that hostile strings from a results.json stay text.

The campaigns: results-archive's five full local campaigns of openmpi-tuned/5.0.8 vs openmpi/5.0.8
(1 x 2, all PASS, back to back: no drift), the same module against Intel MPI (one campaign, FAIL:
four bands lose), the two local-source campaigns (a second site) and test_history's quick probe
series with a drifted campaign derived from it (its tuned runs replaced by its baseline's)."""

import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from conftest import unpack_archive
from test_history import P1, P2, untuned_copy
from tunedmpi.acceptance import history, trend

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (tools/system-packages.sh test)"
)
ARCHIVES = [
    "validate-local-20261123T205744Z",
    "validate-local-20261123T213812Z",
    "validate-local-20261124T002110Z",
    "validate-local-20261124T020900Z",
    "validate-local-20261124T023513Z",
    "validate-local-vs-intel-mpi-20261127T044735Z",
    "validate-local-source-20261126T231944Z",
    "validate-local-source-20261127T014343Z",
]
VOID = {"meta", "img", "br", "hr", "link", "input", "line", "circle", "polyline"}


class Node:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.children, self.parts = tag, dict(attrs), [], []

    def text(self):
        return " ".join("".join(p if isinstance(p, str) else p.text() for p in self.parts).split())

    def all(self, tag=None, cls=None):
        for child in self.children:
            if tag in (None, child.tag) and (
                cls is None or cls in child.attrs.get("class", "").split()
            ):
                yield child
            yield from child.all(tag, cls)


class Tree(HTMLParser):
    """The browser's serialized DOM as a tree of Nodes (it closes every non-void element)."""

    def __init__(self, markup):
        super().__init__()
        self.root = Node("document", {})
        self.stack = [self.root]
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs)
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        if tag not in VOID and self.stack[-1].tag == tag:
            self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def chromium(tmp_path, page, *args):
    """Headless Chromium on file://page, its profile and caches under tmp_path."""
    home = tmp_path / "chromium-home"
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(home / "config")}
    env["XDG_CACHE_HOME"] = str(home / "cache")
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--user-data-dir=%s" % home]
    proc = subprocess.run(
        cmd + list(args) + [page.as_uri()], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """history --html over the campaigns, its plots beside the page by default: (exit code, page,
    campaigns by series)."""
    from tunedmpi.cli import main

    tmp = tmp_path_factory.mktemp("dashboard")
    for name in ARCHIVES:
        unpack_archive(name, tmp / "archive")
    dirs = sorted(p.parent for p in (tmp / "archive").rglob("results.json"))
    dirs += [P1, P2, untuned_copy(P2, tmp / "local-drifted")]
    out = tmp / "site" / "html"
    code = main(["history", "--html", str(out)] + list(map(str, dirs)))
    return code, out / "index.html", history.load(dirs)


def test_the_browser_shows_sites_rows_bands_verdicts_and_the_drift_alert(dashboard, tmp_path):
    code, page, loaded = dashboard
    assert code == 1  # the derived campaign drifted: history's own exit code
    dom = Tree(chromium(tmp_path, page, "--dump-dom"))
    assert not list(dom.root.all("script"))
    assert [h.text() for h in dom.root.all("h2")] == ["site local", "site local-source"]
    sections = {s.attrs["id"]: s for s in dom.root.all("section", "series")}
    assert len(sections) == len(loaded) == 4
    for series, campaigns in loaded.items():
        found = history.drifts(campaigns)
        s = sections["series-" + trend.slug(series)]
        (title,) = s.all("h3")
        assert title.text().startswith("%d x %d: %s vs %s" % (series[3], series[4], *series[1:3]))
        campaigns_table, bands_table = s.all("table")
        verdicts = [row.children[2].text() for row in list(campaigns_table.all("tr"))[1:]]
        assert verdicts == [c.verdict + (" (re-judged)" if c.rejudged else "") for c in campaigns]
        rows = {
            (r.children[0].text(), r.children[1].text()): r for r in list(bands_table.all("tr"))[1:]
        }
        assert list(rows) == trend.band_keys(campaigns)
        for key, row in rows.items():
            cells = row.children[3 : 3 + len(campaigns)]
            for i, (cell, c) in enumerate(zip(cells, campaigns)):
                b = c.bands.get(key)
                if b is None:
                    assert cell.text() == "", (key, i)
                    continue
                assert cell.text() == "%s %s" % (trend.gain(b.gain), b.verdict)
                assert b.verdict in cell.attrs["class"].split()
                drifted = any(d.index == i and (d.bench, d.band) == key for d in found)
                assert ("drift" in cell.attrs["class"].split()) == drifted, (key, i)
            assert len(list(row.all("circle"))) == sum(key in c.bands for c in campaigns)
        newest = [d for d in found if d.index == len(campaigns) - 1]
        alerts = [a.text() for a in s.all("div", "drift-alert")]
        assert alerts == (
            [
                "drift in the newest campaign (#%d): %s"
                % (len(campaigns), "; ".join("%s %s" % (d.bench, d.band) for d in newest))
            ]
            if newest
            else []
        )
    local = sections["series-local_openmpi-tuned_5.0.8_vs_openmpi_5.0.8_1x2_full_imb_osu"]
    assert not list(local.all("div", "drift-alert")) and not list(local.all("td", "drift"))
    quick = sections["series-local_openmpi-tuned_5.0.8_vs_openmpi_5.0.8_1x2_quick_probe"]
    assert "allreduce 1KB-64KB; alltoall 1KB-64KB" in quick.text()
    intel = sections["series-local_openmpi-tuned_5.0.8_vs_intel-mpi_2021.18.1_1x2_full_imb_osu"]
    assert "FAIL" in intel.text() and "0.72x lose" in intel.text()
    (summary,) = (d for d in dom.root.all("div") if d.attrs.get("id") == "drift-summary")
    assert summary.text().startswith("DRIFT in the newest campaign of 1 series")
    # links to every campaign's report and the trend plots, relative, and there
    hrefs = [a.attrs["href"] for a in dom.root.all("a") if not a.attrs["href"].startswith("#")]
    reports = [h for h in hrefs if h.endswith("/report.md")]
    assert len(reports) == sum(
        (c.path / "report.md").exists() for cs in loaded.values() for c in cs
    )
    imgs = [i.attrs["src"] for i in dom.root.all("img")]
    assert len(imgs) == 3 * 12 + 3  # one trend plot per benchmark and series
    assert all(i.startswith("plots/") for i in imgs)  # beside the page
    assert all((page.parent / h).resolve().exists() for h in hrefs + imgs)


def test_a_screenshot_is_a_picture_with_the_alert_and_the_verdict_colours(dashboard, tmp_path):
    from matplotlib import image

    _, page, _ = dashboard
    shot = tmp_path / "shot.png"
    chromium(
        tmp_path, page, "--hide-scrollbars", "--window-size=1400,1800", "--screenshot=%s" % shot
    )
    pixels = (image.imread(shot)[:, :, :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (1800, 1400)
    colours = {tuple(p) for p in pixels.reshape(-1, 3)}
    assert len(colours) > 100  # text, tables, plots: not a blank page
    for colour in ((255, 221, 221), (200, 240, 200), (238, 238, 238)):  # alert, win, tie
        assert colour in colours, colour


def test_hostile_strings_from_a_results_json_stay_text(run_cli, tmp_path):
    res = json.loads((P1 / "results.json").read_text())
    # strings that reach the page, not file names (the plots' names are history's business)
    res["site"] = "<script>document.title='owned'</script>"
    res["modules"]["tuned"] = '"><img src=x onerror=alert(1)>'
    res["started"] += "<b>bold</b>"
    campaign = tmp_path / "javascript:alert(1)"
    campaign.mkdir()
    (campaign / "results.json").write_text(json.dumps(res))
    code, out, err = run_cli(
        "history", "--plots", tmp_path / "plots", "--html", tmp_path / "html", campaign
    )
    assert code == 0, out + err
    dom = Tree(chromium(tmp_path, tmp_path / "html" / "index.html", "--dump-dom"))
    assert not list(dom.root.all("script")) and not list(dom.root.all("b"))
    assert not [n.attrs for n in dom.root.all() if any(a.startswith("on") for a in n.attrs)]
    assert res["started"] in dom.root.text()
    (title,) = dom.root.all("title")
    assert title.text() == "tunedmpi validation history"
    assert [h.text() for h in dom.root.all("h2")] == ["site " + res["site"]]
    assert res["modules"]["tuned"] in " ".join(h.text() for h in dom.root.all("h3"))
    hrefs = [a.attrs["href"] for a in dom.root.all("a") if "results.json" in a.attrs["href"]]
    assert hrefs == ["../javascript%3Aalert%281%29/results.json"], hrefs


def test_an_unwritable_out_exits_2_naming_the_file(run_cli, tmp_path):
    (tmp_path / "a-file").write_text("")
    code, _, err = run_cli(
        "history", "--plots", tmp_path / "plots", "--html", tmp_path / "a-file" / "out", P1
    )
    assert code == 2 and "a-file/out/index.html: cannot write" in err, err
