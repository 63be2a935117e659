"""Drop-ins for a site's MPI module, with real Lmod and real Environment Modules: where the site's own
MPI module (mpi.base_module) is itself in family "mpi" (Spack's and EasyBuild's are, in a hierarchy),
tuned and baseline still swap cleanly in both directions, with the other MPIs of the tree too."""

import re

import pytest

import envmodules
import lmod
from conftest import ROOT
from tunedmpi.modules import sites

TOOLS = [
    pytest.param(lmod, marks=pytest.mark.skipif(not lmod.available(), reason="no Lmod")),
    pytest.param(
        envmodules,
        marks=pytest.mark.skipif(not envmodules.available(), reason=envmodules.WHY_MISSING),
    ),
]
# What each tool keeps in the environment for itself: not compared.
BOOKKEEPING = re.compile(r"^(_ModuleTable|__LMOD|_LMFILES_|LOADEDMODULES|LMOD_|__MODULES_|MODULES)")
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
            out[last] = (out[last][0], listed)
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
    assert sorted(got["tuned"][1]) == sorted([site_mpi, tuned])
    assert sorted(got["base"][1]) == sorted([site_mpi, base]), proc.stderr
    left = {k for k in got["base"][0] if k.startswith(TUNING)}
    assert not left, "tuned variables survive the swap to the baseline: %s" % sorted(left)
    assert "untuned baseline" in got["base"][0]["TUNEDMPI_SELECTION"]
    assert got["again"] == got["tuned"]
    assert got["ompi_again"] == got["ompi"]
    assert got["end"][0] == got["start"][0] and got["end"][1] == []
