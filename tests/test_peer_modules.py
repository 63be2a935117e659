"""The local site's peer MPIs (site.yaml `peers:`): their Lua and Tcl modules, with real Lmod and
real Environment Modules, set the same environment, give back on unload what was there, say they
are peers with no tuning, and (with `make peers` installed, or installed here into a temporary
folder from PyPI) run a 2-rank MPI program built with the peer's own mpicc."""

import os
import shutil
import subprocess

import pytest

import envmodules
import lmod
import peer_mpis  # tools/peer_mpis.py, what `make peers` runs
from conftest import ROOT
from test_modules_hygiene import blocks, env_block
from tunedmpi.errors import InputErrors
from tunedmpi.modules import explain, render, sites

LOCAL = sites.load_named("local")
PEERS = {"%s/%s" % (p.module, p.version): p for p in LOCAL.peers}
SYSTEMS = ["lmod", "envmodules"]
# What each system keeps for itself (compared away), and what Lmod edits on its own.
OWN = ("_ModuleTable", "__LMOD", "_LMFILES_", "LOADEDMODULES", "LMOD_", "BASH_FUNC_")
OWN += envmodules.BOOKKEEPING
# Set before a load, by the user or an outer module: each must come back on unload.
BEFORE = (
    "export MPI_HOME=/user/mpi I_MPI_ROOT=/user/impi FI_PROVIDER_PATH=/user/fi "
    "TUNEDMPI_SELECTION=user-selection TUNEDMPI_SAVED='user saved' PATH=/user/bin:$PATH "
    "LD_LIBRARY_PATH=/user/lib"
)
HELLO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, one = 1, sum = 0, len;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Get_library_version(lib, &len);
  if (rank == 0) printf("ranks=%d sum=%d %.60s\n", size, sum, lib);
  MPI_Finalize();
  return 0;
}
"""
LIBRARY = {"intel-mpi": "Intel(R) MPI Library 2021.18.1", "mpich": "MPICH Version:"}


def _system(name):
    mod = lmod if name == "lmod" else envmodules
    if not mod.available():
        pytest.skip(
            "Lmod is not installed (apt-get install lmod)"
            if mod is lmod
            else envmodules.WHY_MISSING
        )
    return mod


def _env(block):
    return {k: v for k, v in block.items() if not k.startswith(OWN)}


def _run(system, paths, script, **env):
    proc = _system(system).shell(paths, script, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_local_site_names_intel_mpi_and_mpich():
    assert sorted(PEERS) == ["intel-mpi/2021.18.1", "mpich/5.0.2"]
    assert {p.flavour for p in LOCAL.peers} == {"intel-mpi", "mpich"}
    for p in LOCAL.peers:
        assert p.prefix == ".peers/%s/%s" % (p.module, p.version) and p.pypi


@pytest.mark.parametrize("module", sorted(PEERS))
def test_lua_and_tcl_twins_set_the_same_and_unload_gives_back(module):
    """Both twins, loaded over values a user had: the same environment once loaded; unload gives
    back exactly what was there, in each system; the environment is the flavour's (render.FLAVOUR_ENV)."""
    peer = PEERS[module]
    prefix = str(ROOT / peer.prefix)
    script = "\n".join(
        [
            BEFORE,
            env_block("before"),
            "module load %s" % module,
            env_block("loaded"),
            "module unload %s" % module,
            env_block("after"),
        ]
    )
    got = {}
    for system in SYSTEMS:
        proc = _run(system, [ROOT / "modulefiles" / "local"], script)
        assert proc.stdout.count("@@") == 3 and "rror" not in proc.stderr, proc.stderr
        envs = {k: _env(v) for k, v in blocks(proc.stdout).items()}
        assert envs["after"] == envs["before"], system
        got[system] = envs["loaded"]
    # The Tcl twin records what it replaced in TUNEDMPI_SAVED (docs/design.md); Lmod's pushenv
    # keeps its stack in __LMOD_* variables.
    got["envmodules"]["TUNEDMPI_SAVED"] = got["lmod"]["TUNEDMPI_SAVED"]
    assert got["lmod"] == got["envmodules"]
    loaded = got["lmod"]
    assert loaded["MPI_HOME"] == prefix
    assert loaded["TUNEDMPI_SELECTION"] == (
        "site=local peer %s for comparison: no variables set" % module
    )
    assert loaded["PATH"].startswith(prefix + "/bin")
    assert loaded["LD_LIBRARY_PATH"] == prefix + "/lib:/user/lib"
    if peer.flavour == "intel-mpi":
        assert loaded["I_MPI_ROOT"] == prefix
        assert loaded["PATH"].startswith("%s/bin/libfabric:%s/bin:" % (prefix, prefix))
        assert loaded["FI_PROVIDER_PATH"] == (
            "%s/lib:/user/fi:/usr/lib/x86_64-linux-gnu/libfabric" % prefix
        )
        assert loaded["LIBRARY_PATH"] == prefix + "/lib"
        assert loaded["CLASSPATH"] == prefix + "/share/java/mpi.jar"
    else:
        assert loaded["I_MPI_ROOT"] == "/user/impi"  # not this module's
    assert not any(k.startswith(("OMPI_MCA_", "UCX_", "PRTE_MCA_", "TUNEDMPI_ROW")) for k in loaded)


@pytest.mark.parametrize("module", sorted(PEERS))
def test_a_peer_and_the_tuned_module_are_one_family(module):
    """Lmod swaps on load, Environment Modules on switch; after the round trip nothing is left."""
    tuned = "%s/%s" % (LOCAL.tuned_module, LOCAL.mpi_version)
    for system, to_peer, back in (
        ("lmod", "module load %s" % module, "module load %s" % tuned),
        (
            "envmodules",
            "module switch %s %s" % (tuned, module),
            "module switch %s %s" % (module, tuned),
        ),
    ):
        script = "\n".join(
            [
                env_block("start"),
                "module load %s" % tuned,
                env_block("tuned"),
                to_peer,
                env_block("peer"),
                back,
                env_block("back"),
                "module purge",
                env_block("end"),
            ]
        )
        proc = _run(system, [ROOT / "modulefiles" / "local"], script)
        envs = {k: _env(v) for k, v in blocks(proc.stdout).items()}
        assert "peer %s" % module in envs["peer"]["TUNEDMPI_SELECTION"], system
        assert "TUNEDMPI_ROW" not in envs["peer"] and "I_MPI_ROOT" not in envs["back"], system
        assert envs["back"] == envs["tuned"] and envs["end"] == envs["start"], system


@pytest.mark.parametrize("system", SYSTEMS)
def test_help_and_whatis_say_peer_for_comparison_no_tuning(system):
    for module, peer in PEERS.items():
        proc = _run(
            system,
            [ROOT / "modulefiles" / "local"],
            "module help %s; module whatis %s" % ((module,) * 2),
        )
        text = " ".join(proc.stderr.split())
        assert "a peer for comparison, no tuning (site local)" in text
        assert "A peer MPI, for comparison" in text and "No tuning" in text
        assert "validate/run.sh --baseline %s" % module in text
        assert peer.description in text


def _hello(system, paths, module, workdir):
    """Build HELLO with the peer's mpicc under its module and run it on 2 ranks; its output."""
    src = workdir / "hello.c"
    src.write_text(HELLO)
    exe = workdir / ("hello-%s-%s" % (module.replace("/", "-"), system))
    script = "module load %s && mpicc -o %s %s && timeout 300 mpirun -np 2 %s" % (
        module,
        exe,
        src,
        exe,
    )
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = _system(system).shell(paths, script, **root)
    assert proc.returncode == 0, (module, system, proc.stdout[-1000:], proc.stderr[-2000:])
    return proc.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (tools/system-packages.sh)")
@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("module", sorted(PEERS))
def test_installed_peer_runs_a_2_rank_program_built_with_its_mpicc(module, system, tmp_path):
    peer = PEERS[module]
    if not (ROOT / peer.prefix / "bin" / "mpirun").is_file():
        pytest.skip("%s is not installed in %s: run `make peers`" % (module, peer.prefix))
    out = _hello(system, [ROOT / "modulefiles" / "local"], module, tmp_path)
    assert "ranks=2 sum=2 %s" % LIBRARY[peer.flavour] in out


def test_make_peers_installs_from_pypi_into_a_fresh_checkout(tmp_path):
    """What `make peers` does, into a temporary checkout (about 45 s from PyPI here, 390 MB):
    each peer lands at its prefix, a re-run leaves everything as it was, and the modules render
    wrote, copied into that checkout, run a 2-rank program with each peer. Skips when PyPI
    cannot be reached."""
    if shutil.which("gcc") is None or not lmod.available():
        pytest.skip("needs gcc and Lmod (tools/system-packages.sh)")
    root = tmp_path / "checkout"
    try:
        done = [peer_mpis.install(p, root, log=lambda line: None) for p in LOCAL.peers]
    except peer_mpis.PeerError as exc:
        if "pip could not install" in str(exc):
            pytest.skip("PyPI not reachable: %s" % exc)
        raise
    assert done == ["installed", "installed"]
    stamps = {p.module: os.stat(root / p.prefix).st_mtime_ns for p in LOCAL.peers}
    assert [peer_mpis.install(p, root, log=lambda line: None) for p in LOCAL.peers] == [
        "present",
        "present",
    ]
    assert stamps == {p.module: os.stat(root / p.prefix).st_mtime_ns for p in LOCAL.peers}
    assert sorted(os.listdir(root / ".peers")) == ["intel-mpi", "mpich"]  # no temporary folders
    for rel, text in render.render_peers(LOCAL).items():
        path = root / "modulefiles" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for module, peer in PEERS.items():
        out = _hello("lmod", [root / "modulefiles" / "local"], module, tmp_path)
        assert "ranks=2 sum=2 %s" % LIBRARY[peer.flavour] in out


def test_pip_failing_is_one_line_exit_2_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds nothing, at once
    root = tmp_path / "checkout"
    assert peer_mpis.main(["--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "pip could not install impi-rt==2021.18.1 impi-devel==2021.18.1" in err
    assert "fix: network access to PyPI" in err
    assert os.listdir(root / ".peers" / "intel-mpi") == []  # the temporary venv is gone


def test_a_prefix_that_is_not_an_install_is_refused(tmp_path):
    peer = PEERS["mpich/5.0.2"]
    (tmp_path / peer.prefix).mkdir(parents=True)
    with pytest.raises(peer_mpis.PeerError, match="holds no bin/mpirun.*make peers"):
        peer_mpis.install(peer, tmp_path)


def test_make_peers_target_is_documented():
    make = subprocess.run(
        ["make", "-n", "-o", ".venv/bin/tunedmpi", "peers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert make.returncode == 0 and "tools/peer_mpis.py" in make.stdout, make.stderr
    text = (ROOT / "Makefile").read_text()
    assert any(line.startswith("peers:") and "##" in line for line in text.splitlines())


def test_render_removes_the_modules_of_a_peer_the_site_dropped(tmp_path, run_cli):
    """A peer that leaves site.yaml (or a new version of it) leaves no module behind: render --check
    names the old one, render removes it and its empty folder; a file render did not write stays."""
    import dataclasses

    old = dataclasses.replace(LOCAL.peers[1], version="5.0.1")
    out = tmp_path / "modulefiles"
    for rel, text in render.render_peers(dataclasses.replace(LOCAL, peers=[old])).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    mine = out / "local" / "intel-mpi" / "mine.lua"
    mine.parent.mkdir(parents=True)
    mine.write_text("-- GENERATED by `tunedmpi render --site local` (not a peer)\n")
    code, _, err = run_cli("render", "--site", "local", "--out", out, "--check")
    assert code != 0 and "local/mpich/5.0.1.lua is no longer rendered" in err, err
    assert "mine.lua" not in err
    assert run_cli("render", "--site", "local", "--out", out)[0] == 0
    code, _, err = run_cli("render", "--site", "local", "--out", out, "--check")
    assert code == 0, err
    assert not (out / "local" / "mpich" / "5.0.1.lua").exists()
    assert not (out / "local" / "mpich" / "5.0.1").exists()
    assert (out / "local" / "mpich" / "5.0.2.lua").is_file() and mine.is_file()


def test_install_module_leaves_the_peers_out():
    """Spack and EasyBuild install the tuned MPI's modules (install-module): not the site's peers,
    whose relative prefixes name a checkout's .peers/."""
    import yaml

    from tunedmpi.modules import install

    doc = yaml.safe_load((ROOT / "site-configs" / "local" / "site.yaml").read_text())
    assert doc["peers"] and "peers" not in install.derive(doc, ROOT, "spack")


def test_render_removes_a_renamed_tuned_module_so_its_old_name_no_longer_loads(tmp_path, run_cli):
    """Issue 50: after modules.tuned is renamed in site.yaml, the module under the old name (Lua
    and Tcl) is no longer rendered: render --check names it, render removes it, Lmod cannot load it."""
    import dataclasses

    import lmod

    out = tmp_path / "modulefiles"
    assert run_cli("render", "--site", "local", "--out", out)[0] == 0
    renamed = dataclasses.replace(LOCAL, tuned_module="ompi-tuned")
    files = render.render_site(renamed)
    stale = render.stale_rules(str(out), renamed, files)
    assert "local/openmpi-tuned/5.0.8.lua" in stale and "local/openmpi-tuned/5.0.8" in stale
    assert not any("/openmpi/" in s or "/mpich/" in s for s in stale), stale  # the others stay
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    render.remove_stale_rules(str(out), stale)
    if lmod.available():
        proc = lmod.shell([out / "local"], "module load openmpi-tuned/5.0.8; echo rc=$?")
        assert "rc=0" not in proc.stdout, proc.stdout + proc.stderr
        proc = lmod.shell([out / "local"], "module load ompi-tuned/5.0.8; echo rc=$?")
        assert "rc=0" in proc.stdout, proc.stderr


def test_other_versions_of_a_sites_mpi_sit_side_by_side(tmp_path):
    """Issue 50: render removed the other version's modules, so two MPI versions of one site could
    not sit side by side. With other_versions in site.yaml render writes both, removes neither
    (render --check passes) and each loads its own table's row in real Lmod."""
    import yaml

    import lmod

    doc = yaml.safe_load((ROOT / "site-configs" / "local" / "site.yaml").read_text())
    doc.pop("peers")
    doc["other_versions"] = [
        {"version": "5.0.6", "table": "local-source/openmpi-5.0.6", "prefix": ".venv"}
    ]
    conf = tmp_path / "conf" / "local" / "site.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(yaml.safe_dump(doc))
    site = sites.load_site(str(conf))
    assert [m.mpi_version for m in site.mpis()] == ["5.0.8", "5.0.6"]
    out = tmp_path / "modulefiles"
    files = render.render_all([site])
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    for version in ("5.0.8", "5.0.6"):
        assert (out / "local" / "openmpi-tuned" / (version + ".lua")).is_file()
        assert (out / "local" / "openmpi" / (version + ".lua")).is_file()
    assert render.stale_rules(str(out), site, files) == []
    if not lmod.available():
        pytest.skip("Lmod is not installed")
    for mpi in site.mpis():
        module = "openmpi-tuned/%s" % mpi.mpi_version
        proc = lmod.shell([out / "local"], 'module load %s; echo "@ $TUNEDMPI_SELECTION"' % module)
        want = explain.select(mpi, {}, explain.modulefile(mpi, out))["selection"]
        assert "@ %s" % want in proc.stdout, (module, proc.stdout, proc.stderr)
    doc["other_versions"].append(
        {"version": 5.1, "table": "local/openmpi-5.0.8", "prefix": ".venv"}
    )
    conf.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputErrors) as caught:
        sites.load_site(str(conf))
    assert "other_versions.1.version" in str(caught.value) or "other_versions[1]" in str(
        caught.value
    )
