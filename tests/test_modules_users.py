"""Users in control (selector.SKIP): TUNEDMPI_SKIP leaves named variables alone, a value set
before the load wins, both are named in TUNEDMPI_SELECTION, a word that names nothing is ignored
with a note, and unload leaves all of them as they are: real Lmod and Environment Modules, equal
to `tunedmpi explain`."""

import dataclasses

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import expected, load_mpi
from test_modules_hygiene import blocks, env_block
from tunedmpi.modules import envmap, explain, render, selector, sites

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

    text = (ROOT / "docs" / "users.md").read_text()
    for name in list(selector.EXPLICIT) + [selector.THREADS_EXPLICIT, selector.SKIP]:
        assert name in text, name
    assert "TUNEDMPI_PROFILE" in text and "module reload" in text
    assert "tunedmpi " not in text and "tunedmpi explain" not in text


@pytest.mark.parametrize("site_name", ["local", "oci-bm-optimized3.36"])
def test_module_help_gives_each_values_row_evidence_and_origin_in_every_twin(site_name, tmp_path):
    """`module help` in this shell: the selection, the row's evidence (campaign and measured gain,
    or study section and findings) and for each value what it comes from, as explain says it."""
    site = load_mpi(site_name, "openmpi-tuned")
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    env = {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "8", "OMP_NUM_THREADS": "4"}
    for name in ("lmod", "tcl"):
        shell, paths, module_file = system(name, site, tmp_path / name)
        proc = shell(paths, "module help %s" % module, **env)
        want = explain.select(site, env, module_file)["why"]
        lines = (proc.stderr + proc.stdout).splitlines()
        assert want[0] in lines, (name, proc.stderr)
        start = lines.index(want[0])
        assert lines[start : start + len(want)] == want, name
        assert want[1].startswith(
            "  evidence: " + ("campaign" if site_name == "local" else "study")
        )
        assert all(line.split(": ", 1)[1] for line in want[2:])  # every value has an origin
    if site_name != "local":  # a threaded rank: the binding says why it is none
        assert any(selector.BINDING_WHY in line for line in want)


@pytest.mark.parametrize("name", ["lmod", "tcl"])
@pytest.mark.parametrize("site_name", ["local", "oci-bm-optimized3.36"])
def test_module_help_after_loading_equals_help_before(site_name, name, tmp_path):
    """Issue 50: once loaded, `module help` still gives the row load chose, what the user's values
    and TUNEDMPI_SKIP kept (not every variable the module set itself as `yours=`) and each value's
    origin; in a shell whose geometry changed since, still the loaded row."""
    site = load_mpi(site_name, "openmpi-tuned")
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    env = {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "36", "UCX_TLS": "mine"}
    env["TUNEDMPI_SKIP"] = "UCX_RNDV_THRESH"
    if site_name == "local":  # its 1x2 row sets UCX_TLS
        env.update(TUNEDMPI_NODES="1", TUNEDMPI_PPN="2", TUNEDMPI_SKIP="OMPI_MCA_pml")
    shell, paths, module_file = system(name, site, tmp_path)
    split = "echo @@SPLIT; echo @@SPLIT >&2"
    script = "module help {m}; {s}; module load {m}; {s}; module help {m}; {s}; "
    script += "export TUNEDMPI_NODES=4; module help {m}"
    proc = shell(paths, script.format(m=module, s=split), **env)
    assert proc.returncode == 0, proc.stderr
    out, err = proc.stdout.split("@@SPLIT\n"), proc.stderr.split("@@SPLIT\n")
    helps = [(e + o).splitlines() for o, e in zip(out, err)]
    want = explain.select(site, env, module_file)
    assert "yours=UCX_TLS" in want["selection"] and " skip=" in want["selection"]
    for got in (helps[0], helps[2], helps[3]):
        start = got.index(want["why"][0])
        assert got[start : start + len(want["why"])] == want["why"], (name, got)
    assert helps[0] == helps[2], name


def test_every_variable_a_row_sets_has_an_origin():
    for site_name in sites.site_names():
        for mpi in sites.load_named(site_name).mpis():
            if mpi.table:
                for name in render.rows_for(mpi)[1]:
                    assert envmap.origin(name), (site_name, name)


def test_hostile_opt_outs_and_values_never_break_the_shell_in_every_twin(tmp_path):
    """TUNEDMPI_SKIP, a value set before the load and the launch record holding shell and Tcl
    code: every load completes, nothing runs, and both twins equal explain."""
    from test_modules_conformance import twins
    from test_modules_tcl import HOSTILE

    site = load_mpi("local", "openmpi-tuned")
    pwned = tmp_path / "pwned"
    envs = []
    for text in HOSTILE:
        value = text.format(P=pwned)
        envs += [
            {"UCX_TLS": value},
            {"TUNEDMPI_SKIP": "UCX_TLS," + value},
        ]
    for name, load_many, module_file in twins(site, tmp_path):
        for env, (got, err) in zip(envs, load_many(envs)):
            want = expected(env, explain.select(site, env, module_file))
            if "UCX_TLS" in env:  # the user's, kept: load_many reads `env` line by line
                want["UCX_TLS"] = env["UCX_TLS"].split("\n")[0]
            assert got == want, (name, env, err)
            assert "error" not in err.lower(), (name, env, err)
    assert not pwned.exists()


@pytest.mark.parametrize("name", ["lmod", "tcl"])
def test_install_module_installs_the_users_guide_that_module_help_names(name, tmp_path):
    """Issue 50: `module help` named docs/users.md "ask your site for its copy", and install-module
    installed none. Now the installed module's help names the copy it installed (or the page a
    site names in users_page: a web address or an absolute path)."""
    from test_fs_hostile import cli

    share = tmp_path / "share"
    proc = cli(
        "install-module", "--installer", "spack", "--share", share, "--mpi-version", "5.0.8",
        "--site", "local", "--mpi-prefix", ROOT / ".venv", "--formats", "lua,tcl", timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    guide = share / "doc" / "users.md"
    assert guide.read_text() == (ROOT / "docs" / "users.md").read_text()
    site = sites.load_site(str(share / "site-configs" / "local" / "site.yaml"))
    assert site.users_page == str(guide)
    tool = lmod if name == "lmod" else envmodules
    if not tool.available():
        pytest.skip("%s is not installed" % name)
    proc = tool.shell([share / "modulefiles" / "local"], "module help openmpi-tuned/5.0.8")
    assert "Users' guide:     %s" % guide in proc.stderr + proc.stdout, proc.stderr
    mine = dataclasses.replace(site, users_page="https://hpc.example.org/tuned-mpi")
    assert "Users' guide:     https://hpc.example.org/tuned-mpi" in render._help(mine, True)
