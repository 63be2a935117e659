"""The reference docs quote the code, not a copy of it (issue 30): every constant a doc quotes is
compared with the code's value, and every relative link in the docs and notes resolves.

Two kinds of quotes are checked:
- a code constant written as `NAME` = value or `module.NAME` = value, anywhere in a reference doc
  (e.g. "`SLOW_FACTOR` = 2.0"), or a policy field as `POLICY.name` = value (policy.py);
- the prose quotes listed in QUOTES below (bands as stats.band_labels() writes them, defaults of
  validate's options, levels): each pattern must still occur in its doc, and every occurrence
  must carry the code's value. A doc rewritten without one of them fails here with the name of
  the quote: move it to the new wording.
"""

import re
from pathlib import Path

import pytest

from tunedmpi import cli, stats
from tunedmpi.acceptance import history, validate
from tunedmpi.bench import suites
from tunedmpi.policy import POLICY
from tunedmpi.tables.operations import OSU_BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = sorted(
    ["README.md", "validate/README.md", "site-configs/README.md", "tuning-tables/README.md"]
    + ["docs/" + p.name for p in (ROOT / "docs").glob("*.md")]
)
NOTES = sorted(
    "results-archive/notes/" + p.name for p in (ROOT / "results-archive" / "notes").glob("*.md")
)
MODULES = {
    "stats": stats,
    "validate": validate,
    "history": history,
    "suites": suites,
    "POLICY": POLICY,
}


def text(doc):
    return (ROOT / doc).read_text(encoding="utf-8")


def validate_defaults():
    return cli.build_parser().parse_args(["validate"])


def pct(x):
    return "%g" % round(x * 100, 6)


WORDS = {2: "twice", 3: "three times"}

# (name, doc, pattern, expected): expected() gives the tuple of strings the groups must equal.
QUOTES = [
    (
        "bands",
        "validate/README.md",
        r"band: (≤ 1 KB, 1–64 KB,\s+64 KB–1 MB, > 1 MB)",
        lambda: (stats.band_labels(),),
    ),
    (
        "bands",
        "docs/design.md",
        r"\(`BANDS`\): (≤ 1 KB, 1–64 KB, 64 KB–1 MB, > 1 MB)",
        lambda: (stats.band_labels(),),
    ),
    (
        "tolerance",
        "validate/README.md",
        r"at least the tolerance \((\d+) %\)",
        lambda: (pct(POLICY.tolerance),),
    ),
    ("tolerance", "validate/README.md", r"±(\d+) %", lambda: (pct(POLICY.tolerance),)),
    (
        "tolerance and alpha",
        "validate/README.md",
        r"`--tolerance`, `--alpha` \| ([0-9.]+), ([0-9.]+) \|",
        lambda: ("%g" % validate_defaults().tolerance, "%g" % validate_defaults().alpha),
    ),
    (
        "cli defaults are stats'",
        "validate/README.md",
        r"`--tolerance`, `--alpha` \| ([0-9.]+), ([0-9.]+) \|",
        lambda: ("%g" % POLICY.tolerance, "%g" % POLICY.alpha),
    ),
    (
        "repetitions",
        "validate/README.md",
        r"`--repetitions N` \| (\d+) \(`--quick`, `--short`\), (\d+) \(`--full`\) \| "
        r"pairs at the first look \(at least (\d+)\)",
        lambda: (
            str(POLICY.first_look["quick"]),
            str(POLICY.first_look["full"]),
            str(POLICY.min_pairs),
        ),
    ),
    (
        "short set like quick",
        "validate/README.md",
        r"`--repetitions N` \| (\d+) \(`--quick`, `--short`\)",
        lambda: (str(POLICY.first_look["short"]),),
    ),
    (
        "--full pairs",
        "validate/README.md",
        r"`--full` defaults to (\d+) pairs",
        lambda: (str(POLICY.first_look["full"]),),
    ),
    (
        "--full pairs",
        "validate/README.md",
        r"--full\s+# the studies' sizes, (\d+) pairs",
        lambda: (str(POLICY.first_look["full"]),),
    ),
    (
        "quick pairs",
        "validate/README.md",
        r"The quick set stays at\s+(\d+) pairs",
        lambda: (str(POLICY.first_look["quick"]),),
    ),
    (
        "extension",
        "validate/README.md",
        r"up to (\w+) the pairs",
        lambda: (WORDS[POLICY.extension_factor],),
    ),
    (
        "extension",
        "docs/design.md",
        r"`Design\(first, final=(\d+) × first\)`",
        lambda: (str(POLICY.extension_factor),),
    ),
    (
        "timeouts and retries",
        "validate/README.md",
        r"\| (\d+) s `--quick`, else (\d+) s; (\d+) \|",
        lambda: (
            "%g" % POLICY.timeout_s["quick"],
            "%g" % POLICY.timeout_s["full"],
            str(validate_defaults().retries),
        ),
    ),
    (
        "Pocock level",
        "docs/design.md",
        r"fraction of 1/2 \(([0-9.]+) for α = ([0-9.]+)\)",
        lambda: (
            "%.4f" % stats.Design(1, 2).level(POLICY.alpha, 1),
            "%g" % POLICY.alpha,
        ),
    ),
    (
        "the band test's name",
        "docs/design.md",
        r"results\.json names it `([^`]+)`",
        lambda: (stats.TEST_NAME,),
    ),
    (
        "runs per campaign",
        "docs/slurm.md",
        r"(\d+) for quick's (\d+)\s+repetitions, (\d+) for full's (\d+)",
        lambda: tuple(
            str(v)
            for v in (
                2 * POLICY.first_look["quick"] * (1 + len(OSU_BENCHMARKS)),
                POLICY.first_look["quick"],
                2 * POLICY.first_look["full"] * (1 + len(OSU_BENCHMARKS)),
                POLICY.first_look["full"],
            )
        ),
    ),
    (
        "validate's exit codes",
        "README.md",
        r"Exit (\d) = PASS, (\d) = FAIL, (\d) = NO-GAIN, (\d) = INCONCLUSIVE",
        lambda: tuple(
            str(validate.EXIT_CODES[v]) for v in ("PASS", "FAIL", "NO-GAIN", "INCONCLUSIVE")
        ),
    ),
    (
        "tune's band gain",
        "docs/regenerate.md",
        r"gain ≥ (\d+) %",
        lambda: (pct(POLICY.tolerance),),
    ),
]


@pytest.mark.parametrize(
    "name, doc, pattern, expected", QUOTES, ids=["%s: %s" % (q[1], q[0]) for q in QUOTES]
)
def test_a_quoted_default_is_the_codes(name, doc, pattern, expected):
    found = [m.groups() for m in re.finditer(pattern, text(doc))]
    assert found, (
        "%s no longer quotes %s (pattern %r): reword the doc to quote it, or change QUOTES in "
        "tests/test_docs.py with the doc" % (doc, name, pattern)
    )
    want = tuple(expected())
    for groups in found:
        assert tuple(" ".join(g.split()) for g in groups) == want, (
            "%s quotes %s as %s, the code says %s" % (doc, name, ", ".join(groups), ", ".join(want))
        )


CONSTANT = re.compile(r"`(?:(\w+)\.)?([A-Z][A-Z0-9_]+|(?<=POLICY\.)[a-z_]+)` = ([0-9][0-9.]*)")


def quoted_constants():
    return [(doc,) + m.groups() for doc in REFERENCE for m in CONSTANT.finditer(text(doc))]


def test_the_docs_quote_some_constants_by_name():
    names = {name for _, _, name, _ in quoted_constants()}
    assert {
        "paired_min",
        "SLOW_FACTOR",
        "FAST_QUANTILE",
        "alpha",
        "tolerance",
    } <= names, names


@pytest.mark.parametrize("doc, module, name, value", quoted_constants(), ids=lambda v: str(v))
def test_a_constant_quoted_by_name_has_the_codes_value(doc, module, name, value):
    owners = [MODULES[module]] if module else [m for m in MODULES.values() if hasattr(m, name)]
    assert module in (None,) + tuple(MODULES), "%s: `%s.%s`: no such module among %s" % (
        doc,
        module,
        name,
        sorted(MODULES),
    )
    assert owners and hasattr(owners[0], name), "%s quotes `%s`, which the code does not define" % (
        doc,
        name,
    )
    assert float(value) == float(getattr(owners[0], name)), "%s: `%s` = %s, but the code has %r" % (
        doc,
        name,
        value,
        getattr(owners[0], name),
    )


def test_the_full_set_is_judged_by_the_crossover_test_and_the_quick_set_is_not():
    """validate/README.md and docs/design.md say so; the rule is the design's (validate.analyse)."""
    assert POLICY.first_look["full"] >= POLICY.paired_min
    assert POLICY.first_look["quick"] < POLICY.paired_min
    assert POLICY.first_look["short"] < POLICY.paired_min


# ---- word budget -------------------------------------------------------------------------------

WORD_BUDGET = 16250  # issue 39: the reference docs' total, counted as `wc -w` counts


def test_the_reference_docs_stay_within_the_word_budget():
    counts = {doc: len(text(doc).split()) for doc in REFERENCE}
    total = sum(counts.values())
    assert total <= WORD_BUDGET, "the reference docs have %d words, the budget is %d: %s" % (
        total,
        WORD_BUDGET,
        ", ".join("%s %d" % (doc, n) for doc, n in sorted(counts.items(), key=lambda kv: -kv[1])),
    )


# ---- links -------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path):
    """GitHub's heading anchors of a Markdown file."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6} +(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def links():
    out = []
    for doc in REFERENCE + NOTES:
        for m in LINK.finditer(text(doc)):
            target = m.group(1)
            if not re.match(r"[a-z]+:", target):
                out.append((doc, target))
    return out


@pytest.mark.parametrize("doc, target", links(), ids=lambda v: str(v))
def test_a_relative_link_resolves(doc, target):
    path, _, anchor = target.partition("#")
    dest = (ROOT / doc).parent / path if path else ROOT / doc
    assert dest.exists(), "%s links to %s, which does not exist" % (doc, target)
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), "%s links to %s: no heading with anchor #%s there" % (
            doc,
            target,
            anchor,
        )
