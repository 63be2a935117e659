"""Drop-ins for a site's MPI module, with real Lmod and real Environment Modules: where the site's own
MPI module (mpi.base_module) is itself in family "mpi" (Spack's and EasyBuild's are, in a hierarchy),
tuned and baseline still swap cleanly in both directions, with the other MPIs of the tree too."""

import re

import pytest
import yaml

import envmodules
import lmod
from conftest import ROOT
from tunedmpi.modules import install, render, sites
from tunedmpi.modules.render import render_site

TOOLS = [
    pytest.param(lmod, marks=pytest.mark.skipif(not lmod.available(), reason="no Lmod")),
    pytest.param(
        envmodules,
        marks=pytest.mark.skipif(not envmodules.available(), reason=envmodules.WHY_MISSING),
    ),
]
# What each tool keeps in the environment for itself: not compared.
BOOKKEEPING = re.compile(
    r"^(_ModuleTable|__LMOD|_LMFILES_|LOADEDMODULES|LMOD_|__MODULES_|MODULES_)"
)
TUNING = ("UCX_", "UCC_", "OMPI_MCA_", "PRTE_MCA_", "HCOLL_", "SLURM_DISTRIBUTION")


def dump(name):
    """Shell lines printing the environment and the loaded modules under the mark @@name."""
    return "echo '@@%s'; env -0 | tr '\\0' '\\036'; echo; echo '@@list'; module -t list 2>&1" % name


def parse(stdout):
    """{name: (env without bookkeeping, [loaded modules])} from dump()'s output."""
    out, last = {}, None
    for part in stdout.split("@@")[1:]:
        name, _, rest = part.partition("\n")
        if name == "list":
            listed = [w for w in rest.split() if "/" in w and not w.endswith(":")]
            out[last] = (out[last][0], sorted(listed))
            continue
        pairs = [item.partition("=") for item in rest.strip("\n").split("\036") if "=" in item]
        out[name] = ({k: v for k, _, v in pairs if not BOOKKEEPING.match(k)}, [])
        last = name
    return out


def swap(tool, old, new):
    """Lmod swaps family members on `module load`; Environment Modules 5.2 refuses a second member
    of a family (a conflict): there the user switches."""
    return "module load %s" % new if tool is lmod else "module switch %s %s" % (old, new)


@pytest.mark.parametrize("tool", TOOLS)
def test_base_module_in_family_mpi_swaps_cleanly(tool, tmp_path):
    """The bug of issue 38: with the site's HPC-X module in family "mpi", loading the baseline after
    the tuned module left both loaded and UCX_TLS set. Now each step has one MPI and its own
    variables, from Open MPI to HPC-X tuned, untuned, tuned again and back, and unload is clean."""
    site = sites.load_named("oci-bm-optimized3.36")
    hpcx = site.hpcx
    ompi = "%s/%s" % (site.tuned_module, site.mpi_version)
    tuned, base = (
        "%s/%s" % (m, hpcx.mpi_version) for m in (hpcx.tuned_module, hpcx.baseline_module)
    )
    steps = [("ompi", ompi, None), ("tuned", tuned, ompi), ("base", base, tuned)]
    steps += [("again", tuned, base), ("ompi_again", ompi, tuned)]
    script = [dump("start")]
    for name, new, old in steps:
        script += [swap(tool, old, new) if old else "module load %s" % new, dump(name)]
    script += ["module unload %s" % ompi, dump("end")]
    paths = tool.site_modulepaths(hpcx, tmp_path, ROOT, family=True)
    proc = tool.shell(paths, "\n".join(script), TUNEDMPI_NODES="2", TUNEDMPI_PPN="16")
    assert proc.returncode == 0, proc.stderr
    got = parse(proc.stdout)
    site_mpi = hpcx.base_module
    assert got["ompi"][1] == [ompi]
    assert got["tuned"][1] == sorted([site_mpi, tuned])
    assert got["base"][1] == sorted([site_mpi, base]), proc.stderr
    left = {k for k in got["base"][0] if k.startswith(TUNING)}
    assert not left, "tuned variables survive the swap to the baseline: %s" % sorted(left)
    assert "untuned baseline" in got["base"][0]["TUNEDMPI_SELECTION"]
    assert got["again"] == got["tuned"]
    assert got["ompi_again"] == got["ompi"]
    assert got["end"][0] == got["start"][0] and got["end"][1] == []


def hierarchy_site(tmp_path, kind):
    """The `local` site in an MPI hierarchy whose MPI level is tmp_path/mpi-level, holding a tiny
    MPI-dependent hdf5/1.14 (Lua and Tcl); kind "base": the MPI comes from a site module
    OpenMPI/5.0.8 (in family mpi, adding the same level, as Spack's and EasyBuild's do)."""
    doc = yaml.safe_load((ROOT / "site-configs" / "local" / "site.yaml").read_text())
    doc.pop("peers")
    level = tmp_path / "mpi-level"
    doc["hierarchy"] = {"mpi_level": str(level)}
    if kind == "base":
        doc["mpi"] = {"flavour": "openmpi", "version": doc["mpi"]["version"]}
        doc["mpi"]["base_module"] = "OpenMPI/%s" % doc["mpi"]["version"]
    conf = tmp_path / "conf" / "local" / "site.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(yaml.safe_dump(doc))
    site = sites.load_site(str(conf))
    for rel, text in render_site(site).items():
        (tmp_path / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / rel).write_text(text)
    (level / "hdf5").mkdir(parents=True)
    (level / "hdf5" / "1.14.lua").write_text('setenv("HDF5_TEST_ROOT", "/hdf5")\n')
    (level / "hdf5" / "1.14").write_text("#%Module1.0\nsetenv HDF5_TEST_ROOT /hdf5\n")
    return site, level


@pytest.mark.parametrize("kind", ["prefix", "base"])
@pytest.mark.parametrize("tool", TOOLS)
def test_mpi_dependent_module_stays_through_swaps_in_a_hierarchy(tool, kind, tmp_path):
    """hierarchy.mpi_level: tuned and baseline add the MPI level as the site's MPI module does, so
    hdf5 built with that MPI stays loaded and set through tuned -> baseline -> tuned swaps."""
    site, level = hierarchy_site(tmp_path, kind)
    tuned, base = (
        "%s/%s" % (m, site.mpi_version) for m in (site.tuned_module, site.baseline_module)
    )
    script = [dump("start"), "module load %s hdf5/1.14" % tuned, dump("tuned")]
    script += [swap(tool, tuned, base), dump("base"), swap(tool, base, tuned), dump("back")]
    script += ["module unload hdf5 %s" % tuned, dump("end")]
    paths = tool.site_modulepaths(
        site, tmp_path, ROOT, family=True, mpi_level=level, tree=tmp_path / "tree" / "local"
    )
    proc = tool.shell(paths, "\n".join(script), TUNEDMPI_NODES="1", TUNEDMPI_PPN="2")
    assert proc.returncode == 0, proc.stderr
    got = parse(proc.stdout)
    site_mpi = [site.base_module] if site.base_module else []
    assert got["tuned"][1] == sorted(site_mpi + [tuned, "hdf5/1.14"]), proc.stderr
    assert got["base"][1] == sorted(site_mpi + [base, "hdf5/1.14"]), proc.stderr
    assert got["base"][0].get("HDF5_TEST_ROOT") == "/hdf5"
    assert str(level) in got["base"][0]["MODULEPATH"].split(":")
    assert not {k for k in got["base"][0] if k.startswith(TUNING)}
    assert got["back"] == got["tuned"]
    assert got["end"][1] == [] and str(level) not in got["end"][0]["MODULEPATH"]
    assert "inactive" not in proc.stderr.lower()


def test_install_takes_the_builds_mpi_level_or_makes_the_sites_absolute():
    """install-module --mpi-level (what Spack's and EasyBuild's layouts give) becomes the installed
    site's hierarchy.mpi_level; without it a relative one of the site's is made absolute, as
    mpi.prefix is, since the installed module no longer lives in the checkout."""
    doc = {"mpi": {"flavour": "openmpi", "version": "5.0.8", "prefix": ".venv"}}
    got = install.derive(dict(doc, hierarchy="flat"), "/ck", "spack", mpi_level="/lmod/ompi/Core")
    assert got["hierarchy"] == {"mpi_level": "/lmod/ompi/Core"}
    got = install.derive(dict(doc, hierarchy={"mpi_level": "mods/ompi"}), "/ck", "easybuild")
    assert got["hierarchy"] == {"mpi_level": "/ck/mods/ompi"}
    assert "hierarchy" not in install.derive(doc, "/ck", "spack")


@pytest.mark.skipif(not lmod.available(), reason="no Lmod")
def test_what_docs_easybuild_says_of_unload_and_another_mpi_is_what_lmod_does(tmp_path):
    """docs/easybuild.md, "Unload" (issue 50 item 5), with real Lmod over a site MPI module in family
    mpi (EasyBuild's OpenMPI in a hierarchy): unloading the tuned module unloads the OpenMPI it
    loaded, not one loaded before it; loading another MPI swaps OpenMPI out and leaves the tuned
    module (a known limit the page states), whose launch check then refuses in one line naming
    `module unload`, and which `module unload` clears."""
    text = " ".join((ROOT / "docs" / "easybuild.md").read_text().split())
    assert "also unloads the Open MPI module it loaded, not an earlier one" in text
    assert "leaves `openmpi-tuned` and its variables (mpirun refuses): unload it first" in text
    site, level = hierarchy_site(tmp_path, "base")
    tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
    (tmp_path / "base" / "MPICH").mkdir(parents=True)
    (tmp_path / "base" / "MPICH" / "4.2.0.lua").write_text('family("mpi")\n')
    script = [dump("start"), "module load %s" % tuned, "module unload %s" % tuned, dump("own")]
    script += ["module load %s %s" % (site.base_module, tuned), "module unload %s" % tuned]
    script += [dump("earlier"), "module purge", "module load %s" % tuned, "module load MPICH/4.2.0"]
    script += [dump("other"), "mpirun --version >/dev/null 2>/tmp/.r_$$"]
    script += ['echo "REFUSED rc=$? $(cat /tmp/.r_$$)" >&2; rm -f /tmp/.r_$$']
    script += ["module unload %s" % tuned, dump("cleared")]
    for launcher in (tmp_path / "tree").rglob("bin/*"):
        render.make_executable(launcher)  # as `tunedmpi render` writes them
    paths = lmod.site_modulepaths(
        site, tmp_path, ROOT, family=True, mpi_level=level, tree=tmp_path / "tree" / "local"
    )
    proc = lmod.shell(paths, "\n".join(script), TUNEDMPI_NODES="1", TUNEDMPI_PPN="2")
    assert proc.returncode == 0, proc.stderr
    got = parse(proc.stdout)
    assert got["own"][1] == [] and got["earlier"][1] == [site.base_module], proc.stderr
    assert got["other"][1] == sorted(["MPICH/4.2.0", tuned]), proc.stderr
    assert {k for k in got["other"][0] if k.startswith(TUNING)}  # the limit: still set
    refused = [line for line in proc.stderr.splitlines() if line.startswith("REFUSED ")]
    assert refused == [
        "REFUSED rc=1 %s: its MPI %s was swapped for MPICH; run 'module unload %s' before mpirun"
        % (tuned, site.base_module, site.tuned_module)
    ], proc.stderr
    assert got["cleared"][1] == ["MPICH/4.2.0"]
    assert not {k for k in got["cleared"][0] if k.startswith(TUNING)}
