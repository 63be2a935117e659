"""Bad input values a hostile site admin tried (issue 29, part A): each must be refused with one
line `file[:line]: key: problem (fix: ...)` (or argparse's one line for an option) and exit 2,
never a traceback, and nothing may be written."""

import ast
import json
import random
import re

import pytest

from conftest import FIXTURES, ROOT
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.modules import sites


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "0", "-1", "1e9"])
@pytest.mark.parametrize("verb", [["validate"], ["sweep", "--site", "local"]])
def test_timeout_must_be_positive_and_finite(run_cli, capsys, verb, value):
    with pytest.raises(SystemExit) as exc:
        run_cli(*verb, "--timeout", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "--timeout" in err and "below 604800" in err


# ---- site configs: trailing newlines, non-ASCII digits, equal module names ----------------------

SITE = (ROOT / "site-configs" / "local" / "site.yaml").read_text(encoding="utf-8")

# (name, text in site-configs/local/site.yaml, replacement, key the one error names)
SITE_CORPUS = [
    ("prefix-newline", "  prefix: .venv", '  prefix: ".venv\\n"', "mpi.prefix"),
    ("prefix-newline-shell", "  prefix: .venv", '  prefix: "/opt/x\\necho hi"', "mpi.prefix"),
    ("version-newline", "  version: 5.0.8", '  version: "5.0.8\\n"', "mpi.version"),
    ("version-arabic-digits", "  version: 5.0.8", '  version: "٥.٠.٨"', "mpi.version"),
    ("version-fullwidth-digits", "  version: 5.0.8", '  version: "５.0.8"', "mpi.version"),
    (
        "tuned-newline",
        "modules: {tuned: openmpi-tuned,",
        'modules: {tuned: "openmpi-tuned\\n",',
        "modules.tuned",
    ),
    (
        "baseline-newline",
        "baseline: openmpi}",
        'baseline: "openmpi\\n"}',
        "modules.baseline",
    ),
    (
        "base-module-newline",
        "  prefix: .venv",
        '  base_module: "openmpi/5.0.8\\n"',
        "mpi.base_module",
    ),
    ("modules-equal", "baseline: openmpi}", "baseline: openmpi-tuned}", "modules.baseline"),
    ("ucx-arabic-digits", 'ucx_version: "1.18"', 'ucx_version: "١.١٨"', "ucx_version"),
    # issue 50: YAML numbers (1.20 is 1.2): refused with the fix (quote it)
    ("ucx-version-a-number", 'ucx_version: "1.18"', "ucx_version: 1.20", "ucx_version"),
    ("mpi-version-a-number", "  version: 5.0.8", "  version: 5.10", "mpi.version"),
    (
        "users-page-code",
        'ucx_version: "1.18"',
        'ucx_version: "1.18"\nusers_page: "https://x/\\"$(id)"',
        "users_page",
    ),
    # issue 50: outside the table (selector.OUTSIDE_CHOICES)
    (
        "outside-factor",
        'ucx_version: "1.18"',
        'ucx_version: "1.18"\noutside: {factor: 1.5}',
        "outside.factor",
    ),
    (
        "outside-then",
        'ucx_version: "1.18"',
        'ucx_version: "1.18"\noutside: {then: guess}',
        "outside.then",
    ),
    (
        "users-page-relative",
        'ucx_version: "1.18"',
        'ucx_version: "1.18"\nusers_page: docs/u.md',
        "users_page",
    ),
    ("table-newline", "table: local/openmpi-5.0.8", 'table: "local/openmpi-5.0.8\\n"', "table"),
    ("site-newline", "site: local", 'site: "local\\n"', "site"),
    ("flavour-unknown", "  flavour: openmpi", "  flavour: mpich", "mpi.flavour"),
    ("flavour-newline", "  flavour: openmpi", '  flavour: "openmpi\\n"', "mpi.flavour"),
    # peers: (other MPIs, rendered as modules; `make peers` hands pypi: to pip)
    ("peer-module-newline", "- module: mpich", '- module: "mpich\\n"', "peers[1].module"),
    ("peer-module-versioned", "- module: mpich", "- module: mpich/5.0.2", "peers[1].module"),
    ("peer-module-taken", "- module: mpich", "- module: openmpi-tuned", "peers[1].module"),
    ("peer-version-newline", '  version: "5.0.2"', '  version: "5.0.2\\n"', "peers[1].version"),
    ("peer-version-arabic", '  version: "2021.18.1"', '  version: "٢٠٢١.18.1"', "peers[0].version"),
    (
        "peer-named-twice",
        '- module: mpich\n  version: "5.0.2"',
        '- module: intel-mpi\n  version: "2021.18.1"',
        "peers[1].version",
    ),
    ("peer-flavour-unknown", "  flavour: mpich", "  flavour: mvapich2", "peers[1].flavour"),
    (
        "peer-flavour-newline",
        "  flavour: intel-mpi",
        '  flavour: "intel-mpi\\n"',
        "peers[0].flavour",
    ),
    (
        "peer-prefix-dotdot",
        "  prefix: .peers/mpich/5.0.2",
        "  prefix: ../../etc",
        "peers[1].prefix",
    ),
    (
        "peer-prefix-shell",
        "  prefix: .peers/mpich/5.0.2",
        '  prefix: "/opt/x\\necho hi"',
        "peers[1].prefix",
    ),
    (
        "peer-description-newline",
        '  description: "MPICH 5.0.2 from PyPI',
        '  description: "MPICH\\n]] os.exit(1) --',
        "peers[1].description",
    ),
    ("peer-pypi-unpinned", "  pypi: [mpich==5.0.2]", "  pypi: [mpich]", "peers[1].pypi"),
    (
        "peer-pypi-option",
        "  pypi: [mpich==5.0.2]",
        '  pypi: ["--index-url=http://elsewhere/", mpich==5.0.2]',
        "peers[1].pypi",
    ),
    (
        "peer-pypi-shell",
        "  pypi: [mpich==5.0.2]",
        '  pypi: ["mpich==5.0.2; touch PWNED"]',
        "peers[1].pypi",
    ),
    ("peer-pypi-newline", "  pypi: [mpich==5.0.2]", '  pypi: ["mpich==5.0.2\\n"]', "peers[1].pypi"),
    (
        "peer-unknown-key",
        "  pypi: [mpich==5.0.2]",
        "  pypi: [mpich==5.0.2]\n  modules: mpich",
        "peers[1].modules",
    ),
    (
        "hierarchy-kind",
        "default_profile: allreduce",
        "default_profile: allreduce\nhierarchy: tree",
        "hierarchy",
    ),
    (
        "hierarchy-level-lua",
        "default_profile: allreduce",
        'default_profile: allreduce\nhierarchy: {mpi_level: "/m\\"]] os.exit(1) --"}',
        "hierarchy.mpi_level",
    ),
    (
        "hierarchy-level-up",
        "default_profile: allreduce",
        "default_profile: allreduce\nhierarchy: {mpi_level: /modules/../../etc}",
        "hierarchy.mpi_level",
    ),
]


def _site_errors(tmp_path, text):
    folder = tmp_path / "local"
    folder.mkdir(exist_ok=True)
    path = folder / "site.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises((InputError, InputErrors)) as exc:
        sites.load_site(str(path))
    errors = exc.value.errors if isinstance(exc.value, InputErrors) else [exc.value]
    return path, errors


def test_site_fixture_loads():
    assert sites.load_site(str(ROOT / "site-configs" / "local" / "site.yaml")).name == "local"


@pytest.mark.parametrize("name,old,new,key", SITE_CORPUS, ids=[c[0] for c in SITE_CORPUS])
def test_hostile_site_value_is_refused(tmp_path, name, old, new, key):
    assert SITE.count(old) == 1, "the corpus entry no longer matches site-configs/local/site.yaml"
    path, errors = _site_errors(tmp_path, SITE.replace(old, new, 1))
    assert [e.key for e in errors] == [key], [e.format() for e in errors]
    assert errors[0].path == str(path) and errors[0].line and errors[0].fix


# ---- every regex check in src/: `$` matches before a final newline, \d matches ٥ -----------------


def test_no_regex_in_src_ends_in_dollar_or_uses_unicode_digits():
    """re.match(r"^[a-z]+$", "x\\n") matches: checks anchor with \\Z (or fullmatch); \\d matches
    every script's digits, which int() then accepts: checks say [0-9]."""
    funcs = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "split"}
    bad = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in funcs
                and node.args
            ):
                continue
            pat = node.args[0].left if isinstance(node.args[0], ast.BinOp) else node.args[0]
            if not (isinstance(pat, ast.Constant) and isinstance(pat.value, str)):
                continue
            flags = " ".join(
                ast.unparse(a) for a in node.args[1:] + [k.value for k in node.keywords]
            )
            where = "%s:%d" % (path.relative_to(ROOT), node.lineno)
            if pat.value.endswith("$") and "re.M" not in flags:
                bad.append("%s: %r ends in $ (use \\Z)" % (where, pat.value))
            if "\\d" in pat.value and "re.A" not in flags:
                bad.append("%s: %r uses \\d (use [0-9])" % (where, pat.value))
    assert not bad, "\n".join(bad)


# ---- tables: dates, sizes ----------------------------------------------------------------------

VALID = (FIXTURES / "tables" / "valid.yaml").read_text(encoding="utf-8")
SPACE = (ROOT / "site-configs" / "local" / "space.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "old,new,key,message",
    [
        ("  date: null", "  date: '2026-13-45'", "provenance.date", "not a calendar date"),
        ("  date: null", "  date: '2026-02-30'", "provenance.date", "not a calendar date"),
        ("  date: null", "  date: '٢٠٢٦-01-01'", "provenance.date", "not a calendar date"),
        ("  date: null", "  date: 2026-13-45", "provenance.date", "not a valid value"),
        (
            "ucx_rndv_thresh: 32KB",
            "ucx_rndv_thresh: 99999999999999999999999kb",
            None,
            "largest size",
        ),
        ("ucx_rndv_thresh: 32KB", "ucx_rndv_thresh: 9223372036854775808", None, "largest size"),
        ("ucx_rndv_thresh: 32KB", "ucx_rndv_thresh: ٨kb", None, "not a size"),
    ],
)
def test_hostile_table_value_is_refused(tmp_path, run_cli, old, new, key, message):
    assert VALID.count(old) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(VALID.replace(old, new, 1), encoding="utf-8")
    code, out, err = run_cli("check", bad)
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    m = re.match(r"error: (.+?):(\d+): (\S+): (.*) \(fix: (.+)\)$", errors[0])
    assert m and m.group(1) == str(bad), errors[0]
    assert key is None or m.group(3) == key
    assert message in m.group(4)


def test_valid_dates_pass(tmp_path, run_cli):
    for date in ("'2026-11-26'", '"2022-04"', "'2024'", "null"):
        ok = tmp_path / "ok.yaml"
        ok.write_text(VALID.replace("  date: null", "  date: %s" % date, 1), encoding="utf-8")
        assert run_cli("check", ok)[0] == 0, date


# ---- YAML anchors and aliases: refused in every file the project reads ----------------------

ALIASES = {
    "self-reference": "a: &a [*a]\n",
    "billion-laughs": "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(
        "%s: &%s [%s]\n" % (c, c, ", ".join(["*" + p] * 9)) for p, c in zip("abcdefgh", "bcdefghi")
    ),
    "merge-key": "base: &b {x: 1}\nother:\n  <<: *b\n",
    "anchor-only": "schema: &s 1\n",
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_yaml_aliases_are_refused_with_the_line(tmp_path, run_cli, name):
    bad = tmp_path / ("%s.yaml" % name)
    bad.write_text(ALIASES[name], encoding="utf-8")
    code, out, err = run_cli("check", bad)
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: %s:1: " % bad), err
    assert "anchors and aliases" in errors[0]


def test_yaml_alias_in_a_site_config_is_refused(tmp_path):
    text = SITE.replace("  version: 5.0.8", "  version: &v 5.0.8", 1)
    path, errors = _site_errors(tmp_path, text)
    assert len(errors) == 1 and "anchors and aliases" in errors[0].problem
    assert errors[0].line == SITE.splitlines().index("  version: 5.0.8") + 1


def test_no_shipped_yaml_uses_anchors():
    """Refusing anchors costs nothing: no file of ours uses one (they would fail to load)."""
    import subprocess

    import yaml

    files = subprocess.run(
        ["git", "ls-files", "*.yaml", "*.yml"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    for name in files:
        text = (ROOT / name).read_text(encoding="utf-8")
        if "{%" in text or "{{" in text:  # a template (Jinja, ReFrame), not YAML we read
            continue
        events = yaml.parse(text, Loader=yaml.SafeLoader)
        assert not any(
            isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None) for e in events
        ), name


# ---- impossible timings (item 6): refused at the door, readers name the file ----------------

IMB_LOG = sorted((FIXTURES / "imb").glob("imb-mpi1_mem0.001_msglog0-20_allreduce*.txt"))[0]
AA = FIXTURES / "power" / "aa-campaign" / "results.json"


def _imb_with(value):
    """The real IMB Allreduce log with the t_avg of its 4-byte row replaced by `value`."""
    lines = IMB_LOG.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        f = line.split()
        if len(f) == 5 and f[0] == "4" and f[1].isdigit():
            f[4] = value
            lines[i] = "  ".join(f)
            return "\n".join(lines) + "\n", i + 1
    raise AssertionError("no 4-byte row in %s" % IMB_LOG)


def test_a_printed_zero_is_the_middle_of_its_rounding_interval():
    from tunedmpi.bench import parse

    text, _ = _imb_with("0.00")
    parsed = parse.parse_output(text)
    assert parsed.status == "ok"
    assert dict(parsed.series[0].points)[4] == 0.0025  # "0.00" is [0, 0.005)
    assert parse.zero_value("0") == 0.25 and parse.zero_value("0.0e-1") == 0.0025


@pytest.mark.parametrize("value", ["-1.50", "1e308", "1e400", "-0.01"])
def test_ingest_refuses_impossible_times_with_file_and_line(tmp_path, run_cli, value):
    text, line = _imb_with(value)
    log = tmp_path / "imb.txt"
    log.write_text(text, encoding="utf-8")
    store = tmp_path / "store"
    code, out, err = run_cli(
        "ingest", "--site", "local", "--nodes", "1", "--ppn", "2", "--store", store, log
    )
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: %s:%d: allreduce t_avg[usec]: %s " % (log, line, value)), err
    assert len(err.strip().splitlines()) == 1
    assert not store.exists() or not any(p.is_file() for p in store.rglob("*"))


def _campaign(tmp_path, record_text):
    cdir = tmp_path / "store" / "local-1x2-x"
    (cdir / "ingested" / "baseline").mkdir(parents=True)
    (cdir / "campaign.json").write_text(json.dumps({"site": "local", "nodes": 1, "ppn": 2}))
    rec = cdir / "ingested" / "baseline" / "collectives-rep1.json"
    rec.write_text(record_text)
    return cdir, rec


RECORD = {
    "stage": "ingested",
    "config": {},
    "config_id": "baseline",
    "run": "collectives",
    "rep": 1,
    "status": "ok",
    "series": {
        "allreduce": {"metric": "latency_us", "suite": "imb", "points": {"4": 1.5, "8": 1.7}}
    },
}


@pytest.mark.parametrize(
    "damage",
    ["truncated", "nan", "negative", "text", "infinity", "size"],
)
def test_damaged_store_record_is_one_line_naming_the_file(tmp_path, run_cli, damage):
    good = json.dumps(RECORD, indent=1)
    text = {
        "truncated": good[: len(good) // 2],
        "nan": good.replace("1.5", "NaN"),
        "negative": good.replace("1.5", "-1.5"),
        "text": good.replace("1.5", '"fast"'),
        "infinity": good.replace("1.5", "Infinity"),
        "size": good.replace('"4"', '"four"'),
    }[damage]
    cdir, rec = _campaign(tmp_path, text)
    for args in (
        ("tune", "--site", "local", "--store", tmp_path / "store", "--out", tmp_path / "t.yaml"),
        ("regret", "--table", ROOT / "tuning-tables/local/openmpi-5.0.8.yaml", "--campaign", cdir),
    ):
        code, out, err = run_cli(*args)
        assert code == 2 and "Traceback" not in err, err
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith("error: %s" % rec), err
        assert "fix: delete the file" in errors[0]
    assert not (tmp_path / "t.yaml").exists()


def test_a_stored_zero_reads_as_a_positive_time(tmp_path):
    from tunedmpi.bench import store

    _, rec = _campaign(tmp_path, json.dumps(RECORD).replace("1.5", "0.0"))
    _, records = store.load_campaign(rec.parents[2])
    assert records[0]["series"]["allreduce"]["points"] == {4: 0.0025, 8: 1.7}


def _damaged_results(tmp_path, damage):
    doc = json.loads(AA.read_text(encoding="utf-8"))
    run = next(r for r in doc["runs"] if r["status"] == "ok")
    points = next(iter(run["series"].values()))["points"]
    size = next(iter(points))
    out = tmp_path / "run"
    out.mkdir()
    # damaged shape: what power and --reanalyse read (results.check_runs)
    shape = {
        "runs-not-list": lambda: doc.update(runs=5),
        "run-not-mapping": lambda: doc["runs"].__setitem__(0, "run"),
        "run-without-role": lambda: run.pop("role"),
        "role-unknown": lambda: run.update(role="both"),
        "series-not-mapping": lambda: run["series"].update(x=3),
        "series-without-points": lambda: next(iter(run["series"].values())).pop("points"),
        "no-modules": lambda: doc.pop("modules"),
        "no-per-size": lambda: doc.pop("per_size", None),
    }
    if damage == "truncated":
        text = AA.read_text(encoding="utf-8")[:5000]
    elif damage in shape:
        shape[damage]()
        text = json.dumps(doc)
    else:
        points[size] = {"zero": 0, "negative": -3.0, "nan": float("nan"), "text": "fast"}[damage]
        text = json.dumps(doc)
    (out / "results.json").write_text(text, encoding="utf-8")
    return out


SHAPES = ["runs-not-list", "run-not-mapping", "run-without-role", "role-unknown"]
SHAPES += ["series-not-mapping", "series-without-points", "no-modules", "no-per-size"]


@pytest.mark.parametrize("damage", ["truncated", "negative", "nan", "text"] + SHAPES)
def test_damaged_results_json_is_one_line_naming_it(tmp_path, run_cli, damage):
    out = _damaged_results(tmp_path, damage)
    for args in (
        ("power", out, "--draws", "10"),
        ("validate", "--reanalyse", out, "--out", tmp_path / "again"),
    ):
        if damage == "no-per-size" and args[0] == "power":
            continue  # power reads the runs only
        code, stdout, err = run_cli(*args)
        assert code == 2 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert str(out / "results.json") in err
    assert not (tmp_path / "again").exists() or not any((tmp_path / "again").iterdir())


def test_a_zero_in_results_json_does_not_stop_power(tmp_path, run_cli):
    out = _damaged_results(tmp_path, "zero")
    code, stdout, err = run_cli("power", out, "--draws", "10")
    assert "Traceback" not in err and "math domain error" not in err
    assert code == 0, err


# ---- seeded fuzz over the classes above: no traceback, only InputError(s) -------------------

HOSTILE = [
    '"x\\n"',
    '"5.0.8\\n"',
    '"٥.٠.٨"',
    "&a 1",
    "*a",
    "1e400",
    "-1",
    "0",
    ".nan",
    ".inf",
    "99999999999999999999999kb",
    "2026-13-45",
    '"a\\nb"',
    "[*a]",
    "openmpi-tuned",
]


def _mutate(text, rng):
    lines = text.splitlines()
    for _ in range(rng.randint(1, 2)):
        cand = [
            i for i, line in enumerate(lines) if ": " in line and not line.lstrip().startswith("#")
        ]
        i = rng.choice(cand)
        key, _, _ = lines[i].partition(": ")
        lines[i] = key + ": " + rng.choice(HOSTILE)
    return "\n".join(lines) + "\n"


def test_fuzz_hostile_values_never_escape_as_tracebacks(tmp_path):
    """80 site configs, 80 tables, 80 knob spaces, 80 IMB logs, 40 results.json: 360 cases."""
    from tunedmpi.acceptance import power
    from tunedmpi.bench import parse
    from tunedmpi.regenerate import space
    from tunedmpi.tables import schema

    rng = random.Random(29)
    local = sites.load_named("local")
    before = set(p for p in tmp_path.rglob("*"))
    for n in range(80):
        folder = tmp_path / "local"
        folder.mkdir(exist_ok=True)
        (folder / "site.yaml").write_text(_mutate(SITE, rng), encoding="utf-8")
        try:
            sites.load_site(str(folder / "site.yaml"))
        except (InputError, InputErrors) as exc:
            assert "fix:" in str(exc)
        try:
            schema.load_table("fuzz-%d.yaml" % n, _mutate(VALID, rng))
        except (InputError, InputErrors) as exc:
            assert "fix:" in str(exc)
        (folder / "space.yaml").write_text(_mutate(SPACE, rng), encoding="utf-8")
        try:
            space.load_space(str(folder / "space.yaml"), local)
        except (InputError, InputErrors) as exc:
            assert "fix:" in str(exc)
        text, _ = _imb_with(rng.choice(["-1", "1e400", "1e308", "0", "0.00", "nan", "1e11", "-0"]))
        parsed = parse.parse_output(text)
        for s in parsed.series:
            assert all(0 < v < parse.MAX_VALUE for _, v in s.points)
    for n in range(40):
        out = tmp_path / ("r%d" % n)
        doc = json.loads(AA.read_text(encoding="utf-8"))
        run = rng.choice(doc["runs"])
        for s in run["series"].values():
            k = rng.choice(list(s["points"]))
            s["points"][k] = rng.choice([0, -1, float("nan"), float("inf"), "x", None, [], 1e300])
        out.mkdir()
        (out / "results.json").write_text(json.dumps(doc), encoding="utf-8")
        try:
            power._validate_source(out)
        except InputError as exc:
            assert str(out / "results.json") in str(exc)
    written = set(p for p in tmp_path.rglob("*")) - before
    assert all(
        p.name in ("local", "site.yaml", "space.yaml", "results.json") or p.name.startswith("r")
        for p in written
    )


# ---- fuzz through to the shell: a site config that passes its check renders modules that load ----

SHELL_HOSTILE = HOSTILE + [
    '"a\\"]] os.exit(1) --[["',
    '"$(touch PWNED)"',
    '"[exec touch PWNED]"',
    '"`touch PWNED`"',
    '"{"',
    '"}\\\\"',
    '"%s%n"',
    '"/opt/with space"',
    '"/opt/x;touch PWNED"',
    '"' + "x" * 5000 + '"',
]


def _mutate_for_shell(text, rng):
    """The free text (description) always, and in a third of the cases one other value too."""
    lines = text.splitlines()
    cand = [i for i, line in enumerate(lines) if ": " in line and not line.lstrip().startswith("#")]
    targets = [next(i for i in cand if lines[i].startswith("description:"))]
    if rng.random() < 1 / 3:
        targets.append(rng.choice(cand))
    for i in targets:
        key, _, _ = lines[i].partition(": ")
        lines[i] = key + ": " + rng.choice(SHELL_HOSTILE)
    return "\n".join(lines) + "\n"


def test_fuzz_site_configs_that_pass_render_modules_that_load(tmp_path):
    """60 mutated site configs: each is refused with a fix, or its tuned and baseline modules load
    and unload in Lmod and Environment Modules without an error, a command run, or a trace left."""
    import envmodules
    import lmod
    from tunedmpi.modules import render

    if not (lmod.available() and envmodules.available()):
        pytest.skip("needs Lmod and Environment Modules (tools/system-packages.sh test)")
    rng = random.Random(2929)
    loaded = 0
    for n in range(60):
        folder = tmp_path / ("case%d" % n)
        (folder / "local").mkdir(parents=True)
        (folder / "local" / "site.yaml").write_text(_mutate_for_shell(SITE, rng), encoding="utf-8")
        try:
            site = sites.load_site(str(folder / "local" / "site.yaml"))
        except (InputError, InputErrors) as exc:
            assert "fix:" in str(exc)
            continue
        for rel, text in render.render_site(site).items():
            out = folder / "modulefiles" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
        base = "%s/%s" % (site.baseline_module, site.mpi_version)
        script = (
            "cd %s; module load %s || echo LOADFAIL; module unload %s || echo LOADFAIL; "
            "module load %s || echo LOADFAIL; module unload %s || echo LOADFAIL; "
            "env | grep '^TUNEDMPI_' | grep -vc '^TUNEDMPI_MEASURE_LOCK=' || true"
        ) % (folder, tuned, tuned, base, base)
        for system in (lmod, envmodules):
            paths = [folder / "modulefiles" / site.name]
            init = {} if system is lmod else {"init": envmodules.init()}
            proc = lmod.shell(paths, script) if system is lmod else _tcl_shell(paths, script, init)
            assert "LOADFAIL" not in proc.stdout, (n, system.__name__, proc.stderr[-800:])
            assert proc.stdout.strip().splitlines()[-1] == "0", (n, proc.stdout[-400:])
            assert "rror" not in proc.stderr, (n, system.__name__, proc.stderr[-800:])
        assert not list(folder.rglob("PWNED"))
        loaded += 1
    assert loaded >= 20  # (24 with this seed) the corpus reaches the shell, not only the checks


def _tcl_shell(paths, script, init):
    import shlex
    import subprocess

    import lmod

    head = ["set -u", init["init"]] + ["module use %s" % shlex.quote(str(p)) for p in paths]
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(head + [script])],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fuzz_peers_that_pass_render_modules_that_load(tmp_path):
    """40 site configs with a peer's description mutated, and in a third of them one other value
    of the peers: list: each is refused with a fix, or its peer modules load and unload in Lmod and
    Environment Modules without an error, a command run, or a variable left (the peers' own,
    TUNEDMPI_*)."""
    import envmodules
    import lmod
    from tunedmpi.modules import render

    if not (lmod.available() and envmodules.available()):
        pytest.skip("needs Lmod and Environment Modules (tools/system-packages.sh test)")
    rng = random.Random(3131)
    lines = SITE.splitlines()
    start = lines.index("peers:")
    cand = [i for i in range(start + 1, len(lines)) if ": " in lines[i]]
    cand = [i for i in cand if lines[i].startswith(("- ", "  "))]
    loaded = 0
    for n in range(40):
        mutated = list(lines)
        targets = [rng.choice([i for i in cand if lines[i].startswith("  description:")])]
        if rng.random() < 1 / 3:
            targets.append(rng.choice(cand))
        for i in targets:
            key, _, _ = mutated[i].partition(": ")
            mutated[i] = key + ": " + rng.choice(SHELL_HOSTILE)
        folder = tmp_path / ("case%d" % n)
        (folder / "local").mkdir(parents=True)
        (folder / "local" / "site.yaml").write_text("\n".join(mutated) + "\n", encoding="utf-8")
        try:
            site = sites.load_site(str(folder / "local" / "site.yaml"))
        except (InputError, InputErrors) as exc:
            assert "fix:" in str(exc)
            continue
        for rel, text in render.render_peers(site).items():
            out = folder / "modulefiles" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        script = "cd %s; " % folder + " ".join(
            "module load %s/%s || echo LOADFAIL; module unload %s/%s || echo LOADFAIL;"
            % (p.module, p.version, p.module, p.version)
            for p in site.peers
        )
        script += (
            " env | grep -v '^TUNEDMPI_MEASURE_LOCK='"
            " | grep -c '^TUNEDMPI_\\|^I_MPI_ROOT=\\|^MPI_HOME=\\|^FI_PROVIDER_PATH=' || true"
        )
        for system in (lmod, envmodules):
            paths = [folder / "modulefiles" / site.name]
            init = {} if system is lmod else {"init": envmodules.init()}
            proc = lmod.shell(paths, script) if system is lmod else _tcl_shell(paths, script, init)
            assert "LOADFAIL" not in proc.stdout, (n, system.__name__, proc.stderr[-800:])
            assert proc.stdout.strip().splitlines()[-1] == "0", (n, proc.stdout[-400:])
            assert "rror" not in proc.stderr, (n, system.__name__, proc.stderr[-800:])
        assert not list(folder.rglob("PWNED"))
        loaded += 1
    assert loaded >= 15, loaded  # the corpus reaches the shell, not only the checks


def test_install_module_refuses_a_site_mpi_version_that_is_a_yaml_number(tmp_path):
    """Issue 50: the derived config of install-module must not make YAML's 5.1 (an unquoted 5.10)
    a version by str(): refused naming the key and the fix."""
    from tunedmpi.errors import InputError
    from tunedmpi.modules import install

    folder = tmp_path / "site-configs" / "local"
    folder.mkdir(parents=True)
    (folder / "site.yaml").write_text(SITE.replace("  version: 5.0.8", "  version: 5.10", 1))
    with pytest.raises(InputError) as caught:
        install._site_doc(str(tmp_path), "local", "spack", {}, "5.10", None, False)
    assert caught.value.key == "mpi.version" and "5.1 is a number" in str(caught.value)
    assert "quote" in caught.value.fix
