"""Users in control (selector.SKIP): TUNEDMPI_SKIP leaves named variables alone, a value set
before the load wins, both are named in TUNEDMPI_SELECTION, a word that names nothing is ignored
with a note, and unload leaves all of them as they are: real Lmod and Environment Modules, equal
to `tunedmpi explain`."""

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import expected, load_mpi
from test_modules_hygiene import blocks, env_block
from tunedmpi.modules import explain

pytestmark = pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed")
# The local site's row sets UCX_TLS and OMPI_MCA_pml (and pml_ucx_tls/devices: no InfiniBand).
BEFORE = "export UCX_TLS=user:tls TUNEDMPI_SKIP='OMPI_MCA_pml, nope ;$(x) OMPI_MCA_pml_ucx_tls'"
ENV = {"UCX_TLS": "user:tls", "TUNEDMPI_SKIP": "OMPI_MCA_pml, nope ;$(x) OMPI_MCA_pml_ucx_tls"}


def system(name, site, tmp_path):
    if name == "lmod":
        return lmod.shell, lmod.site_modulepaths(site, tmp_path, ROOT), None
    if not envmodules.available():
        pytest.skip(envmodules.WHY_MISSING)
    from test_modules_tcl import tcl_tree

    _, paths, module_file = tcl_tree(site, tmp_path)
    return envmodules.shell, paths, module_file


@pytest.mark.parametrize("name", ["lmod", "tcl"])
def test_skip_and_values_set_before_the_load_are_left_alone_through_unload(name, tmp_path):
    site = load_mpi("local", "openmpi-tuned")
    shell, paths, module_file = system(name, site, tmp_path)
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    script = "\n".join(
        [
            BEFORE,
            env_block("before"),
            "module load %s 2>/tmp/.users_$$" % module,
            env_block("loaded"),
            "cat /tmp/.users_$$; rm -f /tmp/.users_$$; echo",
            # the opt-out is dropped and UCX_TLS changed by hand: unload still leaves them
            "unset TUNEDMPI_SKIP; export UCX_TLS=changed",
            "module unload %s" % module,
            env_block("after"),
        ]
    )
    proc = shell(paths, script)
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    want = explain.select(site, ENV, module_file)
    watched = {k: v for k, v in got["loaded"].items() if k.startswith(lmod.WATCHED)}
    assert watched == expected(ENV, want)
    assert want["selection"].endswith(" skip=OMPI_MCA_pml,OMPI_MCA_pml_ucx_tls yours=UCX_TLS")
    assert got["loaded"]["UCX_TLS"] == "user:tls" and "OMPI_MCA_pml" not in got["loaded"]
    assert got["loaded"]["OMPI_MCA_pml_ucx_devices"] == "any"
    said = "TUNEDMPI_SKIP: nope, ? not set by this module (ignored)"
    assert said in want["messages"] and said in " ".join(proc.stdout.split()), proc.stdout
    before = {k: v for k, v in got["before"].items() if k != "TUNEDMPI_SKIP"}
    assert dict(before, UCX_TLS="changed") == got["after"]


def test_the_users_page_names_every_users_variable_and_no_admin_tool():
    """docs/users.md (what `module help` points to) tells each variable a user may set and uses
    no command users do not have (`tunedmpi` is the admins')."""
    from tunedmpi.modules import selector

    text = (ROOT / "docs" / "users.md").read_text()
    for name in list(selector.EXPLICIT) + [selector.THREADS_EXPLICIT, selector.SKIP]:
        assert name in text, name
    assert "TUNEDMPI_PROFILE" in text and "module reload" in text
    assert "tunedmpi " not in text and "tunedmpi explain" not in text
