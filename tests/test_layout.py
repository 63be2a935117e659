"""The package shows the data flow (docs/design.md, "Stages"): each stage is a subpackage, and no stage
imports one that comes after it. Shared helpers (files, errors, paths, yamlsrc, argtypes) and the
statistics layer (stats, its policy) sit below them all; cli.py sits on top. One-off importers (importers/) sit beside
the engine, just under cli.py: they may use the stages, no stage may use them."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tunedmpi"
# In data-flow order: a module may import its own stage or an earlier one.
STAGES = [
    "<shared>",
    "tables",
    "modules",
    "bench",
    "acceptance",
    "regenerate",
    "importers",
    "<cli>",
]
SHARED = {
    "errors",
    "files",
    "paths",
    "yamlsrc",
    "stats",
    "policy",
    "argtypes",
    "__init__",
}


def stage_of(dotted):
    """'tunedmpi.modules.render' -> 'modules'; top-level helpers -> '<shared>'; cli -> '<cli>'."""
    parts = dotted.split(".")[1:]
    if not parts or parts[0] in SHARED:
        return "<shared>"
    if parts[0] in ("cli", "__main__"):
        return "<cli>"
    return parts[0]


def imports_of(path):
    """Absolute tunedmpi modules that ``path`` imports, anywhere in it (lazy imports included)."""
    rel = path.relative_to(SRC.parent).with_suffix("")
    pkg = list(rel.parts[:-1])  # the package that relative imports start from
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            if mod.startswith("tunedmpi"):
                found.update(
                    [mod]
                    if node.module and mod != "tunedmpi"
                    else [mod + "." + a.name for a in node.names]
                )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tunedmpi"))
    return found


MODULES = sorted(p for p in SRC.rglob("*.py"))


def test_every_stage_is_a_subpackage_and_nothing_else_sits_at_the_top():
    top = sorted(p.stem for p in SRC.glob("*.py"))
    assert set(top) == SHARED | {"cli", "__main__"}, (
        "a new top-level module belongs in a stage subpackage: %s" % top
    )
    for stage in STAGES[1:-1]:
        assert (SRC / stage / "__init__.py").is_file(), stage


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_stage_imports_a_later_one(path):
    own = STAGES.index(
        stage_of("tunedmpi." + ".".join(path.relative_to(SRC).with_suffix("").parts))
    )
    later = sorted(m for m in imports_of(path) if STAGES.index(stage_of(m)) > own)
    assert not later, "%s (stage %s) imports later stages: %s" % (
        path.relative_to(SRC),
        STAGES[own],
        later,
    )


def test_only_cli_imports_the_one_off_importers():
    users = sorted(
        str(p.relative_to(SRC))
        for p in MODULES
        if stage_of("tunedmpi." + ".".join(p.relative_to(SRC).with_suffix("").parts))
        not in ("importers", "<cli>")
        and any(stage_of(m) == "importers" for m in imports_of(p))
    )
    assert not users, "the engine imports a one-off importer: %s" % users


def test_statistics_is_one_layer_below_both_stages_that_use_it():
    """stats.py (issue 32): acceptance/ (validate, history, power) and regenerate/ (tune, persize,
    regret) both judge with it, so it sits below both and imports no stage; and no other module
    defines one of its primitives again (Holm, Welch's side variance, Satterthwaite, ...)."""
    stats_py = SRC / "stats.py"
    assert not list(SRC.glob("*/stats.py")), "one statistics layer, not one per stage"
    assert imports_of(stats_py) <= {"tunedmpi.policy"}, "stats imports no stage, only its policy"
    for stage in ("acceptance", "regenerate"):
        users = [p for p in MODULES if p.parent.name == stage and "tunedmpi.stats" in imports_of(p)]
        assert users, "%s/ does not use the statistics layer" % stage
    public = {
        n.name
        for n in ast.parse(stats_py.read_text()).body
        if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    }
    again = sorted(
        "%s: %s" % (p.relative_to(SRC), n.name)
        for p in MODULES
        if p != stats_py
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name.lstrip("_") in public
    )
    assert not again, "stats' primitives defined again: %s" % again


def test_render_and_install_module_need_only_pyyaml_and_jinja2(tmp_path):
    """Spack's and EasyBuild's installs run tunedmpi with the system's Python and only PyYAML and
    Jinja2 (docs/spack.md): the modules stage must not import SciPy, NumPy or matplotlib, even
    through the command line's shared options."""
    import subprocess
    import sys

    blocked = "import sys\nfor m in ('scipy', 'numpy', 'matplotlib'):\n    sys.modules[m] = None\n"
    for args in (
        ["render", "--check"],
        ["install-module", "--help"],
        ["explain", "--site", "local"],
    ):
        code = blocked + "from tunedmpi.cli import main\nsys.exit(main(%r))\n" % (args,)
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=SRC.parents[1],
            timeout=300,
        )
        assert proc.returncode == 0, (args, proc.stderr[-1500:])
