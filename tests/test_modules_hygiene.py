"""Module hygiene with real Lmod: unload leaves nothing behind (even when the geometry changed in
between), pushenv restores what the user had, tuned and baseline swap cleanly, nothing reaches stdout,
stderr speaks only when asked or when extrapolating, and help/whatis tell the user what they need."""

import dataclasses
import re

import pytest

import lmod
from conftest import ROOT
from test_modules_conformance import load_mpi, mpis
from tunedmpi.modules import sites
from tunedmpi.modules.render import render_site, rows_for

pytestmark = pytest.mark.skipif(
    not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"
)
SITES = sites.site_names()
LMOD_BOOKKEEPING = re.compile(r"^(_ModuleTable|__LMOD|_LMFILES_|LOADEDMODULES|LMOD_)")


def env_block(name):
    return "echo '@@%s'; env -0 | tr '\\0' '\\036'; echo" % name


def blocks(stdout):
    """{name: {var: value}} from the env dumps of env_block()."""
    out = {}
    for part in stdout.split("@@")[1:]:
        name, _, rest = part.partition("\n")
        pairs = [item.partition("=") for item in rest.strip("\n").split("\036") if "=" in item]
        out[name] = {k: v for k, _, v in pairs if not LMOD_BOOKKEEPING.match(k)}
    return out


def modules(site):
    return (
        "%s/%s" % (site.tuned_module, site.mpi_version),
        "%s/%s" % (site.baseline_module, site.mpi_version),
    )


@pytest.mark.parametrize("site_name,tuned_name", mpis())
def test_unload_leaves_nothing_behind_and_restores_user_values(site_name, tuned_name, tmp_path):
    site = load_mpi(site_name, tuned_name)
    tuned, _ = modules(site)
    script = "\n".join(
        [
            "export UCX_RNDV_THRESH=user-value OMPI_MCA_pml=ob1 TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_block("before"),
            "module load %s" % tuned,
            env_block("loaded"),
            # The job's geometry "changes" before unload: the module must still undo what it set.
            "export TUNEDMPI_NODES=16 TUNEDMPI_PPN=36 TUNEDMPI_PROFILE=alltoall SLURM_NNODES=3",
            "module unload %s" % tuned,
            "unset SLURM_NNODES TUNEDMPI_PROFILE; export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_block("after"),
        ]
    )
    proc = lmod.shell(lmod.site_modulepaths(site, tmp_path, ROOT), script)
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    assert got["after"] == got["before"]
    assert got["loaded"]["TUNEDMPI_SELECTION"].startswith(
        "site=%s nodes=2 ppn=8 source=explicit" % site.name
    )
    if site.table:  # a tuned row was applied over the user's values, and the user's came back after
        assert got["loaded"] != got["before"]


# Set before the load (an outer shell's module, the user): each comes back on unload.
BEFORE_LOAD = (
    "export MPI_HOME=/user/mpi TUNEDMPI_SELECTION=user-selection TUNEDMPI_ROW=allreduce:1x1 "
    "TUNEDMPI_SAVED='user saved' UCX_TLS=user:tls OMPI_MCA_coll_ucc_enable=0"
)
# Between load and unload the geometry changes, and so does the load's record of its row.
CHANGED = (
    "export TUNEDMPI_NODES=16 TUNEDMPI_PPN=36 TUNEDMPI_PROFILE=alltoall SLURM_NNODES=3 "
    "TUNEDMPI_ROW=alltoall:16x36"
)


@pytest.mark.parametrize("site_name,tuned_name", mpis())
def test_unload_restores_what_was_set_before_the_load(site_name, tuned_name, tmp_path):
    site = load_mpi(site_name, tuned_name)
    tuned, base = modules(site)
    script = "\n".join(
        [
            BEFORE_LOAD + " TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_block("before"),
            "module load %s" % tuned,
            env_block("loaded"),
            CHANGED,
            "module unload %s" % tuned,
            "unset SLURM_NNODES TUNEDMPI_PROFILE; export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_block("after"),
            "module load %s; module unload %s" % (base, base),
            env_block("after_base"),
        ]
    )
    proc = lmod.shell(lmod.site_modulepaths(site, tmp_path, ROOT), script)
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    assert got["loaded"]["TUNEDMPI_SELECTION"].startswith("site=%s nodes=2" % site.name)
    assert got["after"] == got["before"]
    assert got["after_base"] == got["before"]


@pytest.mark.parametrize("site_name,tuned_name", mpis())
def test_tuned_and_baseline_swap_cleanly(site_name, tuned_name, tmp_path):
    site = load_mpi(site_name, tuned_name)
    tuned, base = modules(site)
    script = "\n".join(
        [
            env_block("start"),
            "module load %s" % tuned,
            env_block("tuned"),
            "module load %s" % base,
            env_block("base"),  # family("mpi"): Lmod swaps them
            "module swap %s %s" % (base, tuned),
            env_block("back"),
            "module unload %s" % tuned,
            env_block("end"),
            "module list -t 2>&1 | grep -c . || true",
        ]
    )
    proc = lmod.shell(
        lmod.site_modulepaths(site, tmp_path, ROOT), script, TUNEDMPI_NODES="2", TUNEDMPI_PPN="8"
    )
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    tuned_vars = {
        k
        for k in got["tuned"]
        if k.startswith(("UCX_", "OMPI_MCA_", "PRTE_MCA_", "HCOLL_", "SLURM_"))
    }
    assert not tuned_vars & set(got["base"]), "tuned variables survive the swap to the baseline"
    assert "untuned baseline" in got["base"]["TUNEDMPI_SELECTION"]
    assert got["back"] == got["tuned"]
    assert got["end"] == got["start"]
    assert "swap" not in proc.stderr.lower() or "inactive" not in proc.stderr.lower()


@pytest.mark.parametrize("site_name", SITES)
def test_stdout_stays_empty_and_stderr_quiet_by_default(site_name, tmp_path):
    site = sites.load_named(site_name)
    tuned, base = modules(site)
    exact = "TUNEDMPI_NODES=%d TUNEDMPI_PPN=%d" % (site.default_nodes, site.default_ppn)
    script = "\n".join(
        [
            "( export %s; module load %s; module unload %s; module load %s; module unload %s )"
            % (exact, tuned, tuned, base, base)
        ]
    )
    proc = lmod.shell(lmod.site_modulepaths(site, tmp_path, ROOT), script)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr == ""


def load_messages(paths, module, **env):
    """(TUNEDMPI_SELECTION, stderr with Lmod's line wrapping undone)."""
    proc = lmod.shell(paths, 'module load %s; echo "$TUNEDMPI_SELECTION"' % module, **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), " ".join(proc.stderr.split())


def test_verbose_and_extrapolation_speak_on_stderr(tmp_path):
    site = sites.load_named("oci-bm-optimized3.36")
    paths, (tuned, _) = lmod.site_modulepaths(site, tmp_path, ROOT), modules(site)
    sel, err = load_messages(paths, tuned, TUNEDMPI_NODES="2", TUNEDMPI_PPN="8")
    assert "match=exact" in sel and err == ""
    sel, err = load_messages(
        paths, tuned, TUNEDMPI_NODES="2", TUNEDMPI_PPN="8", TUNEDMPI_VERBOSE="1"
    )
    assert "%s: %s" % (tuned, sel) in err
    sel, err = load_messages(paths, tuned, TUNEDMPI_NODES="64", TUNEDMPI_PPN="36")
    assert "match=extrapolated" in sel and sel in err  # beyond the largest node count
    sel, err = load_messages(paths, tuned, TUNEDMPI_NODES="3", TUNEDMPI_PPN="20")
    assert "match=nearest" in sel and err == ""  # between measured keys: quiet
    sel, err = load_messages(paths, tuned, TUNEDMPI_PROFILE="no;such")
    assert "profile=%s" % site.default_profile in sel
    assert "TUNEDMPI_PROFILE=? has no table rows here; using %s" % site.default_profile in err
    sel, err = load_messages(paths, tuned, SLURM_NNODES="abc", SLURM_NTASKS_PER_NODE="x")
    assert "source=default" in sel and "Error" not in err  # junk geometry falls back quietly


def test_nps_mismatch_is_reported(tmp_path):
    """This VM has one NUMA node on one socket (NPS1); the OCI rows that prefer NPS2 say so."""
    numa = open("/sys/devices/system/node/online").read().strip()
    if numa != "0":
        pytest.skip("needs a one-NUMA-node machine, this one has %s" % numa)
    site = dataclasses.replace(sites.load_named("oci-bm-optimized3.36"), sockets=1)
    for rel, text in render_site(site).items():
        path = tmp_path / "mf" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    tuned, _ = modules(site)
    rows = rows_for(site)[0][site.default_profile]
    nps2 = next(r for r in rows if r["nps"] == 2)
    nps1 = next(r for r in rows if r["nps"] == 1)
    paths = [tmp_path / "mf" / site.name]
    geo = dict(TUNEDMPI_NODES=str(nps2["nodes"]), TUNEDMPI_PPN=str(nps2["ppn"]))
    sel, err = load_messages(paths, tuned, **geo)
    assert sel.endswith("nps=table:2,node:1")
    assert err == ""  # a fact, shown only when verbose
    sel, err = load_messages(paths, tuned, TUNEDMPI_VERBOSE="1", **geo)
    assert "the table's best NPS is 2 but this node has NPS1 (a BIOS setting)" in err
    sel, err = load_messages(
        paths, tuned, TUNEDMPI_NODES=str(nps1["nodes"]), TUNEDMPI_PPN=str(nps1["ppn"])
    )
    assert "match=exact" in sel and "nps=" not in sel


@pytest.mark.parametrize("site_name", SITES)
def test_help_and_whatis_tell_site_provenance_override_and_choice(site_name, tmp_path):
    site = sites.load_named(site_name)
    tuned, base = modules(site)
    paths = lmod.site_modulepaths(site, tmp_path, ROOT)
    proc = lmod.shell(
        paths, "module help %s; module whatis %s; module whatis %s" % (tuned, tuned, base)
    )
    text = proc.stderr  # Lmod writes help and whatis to stderr
    assert proc.returncode == 0 and proc.stdout == ""
    assert "for site %s" % site.name in text
    assert "echo $TUNEDMPI_SELECTION" in text and "docs/users.md" in text
    assert "tunedmpi explain" not in text  # users do not have the admins' tool
    assert "TUNEDMPI_NODES=N TUNEDMPI_PPN=P TUNEDMPI_PROFILE=" in text
    assert "Untuned baseline: module load %s" % base in text
    if site.table:
        assert "Tuning table: tuning-tables/%s.yaml" % site.table_ref in text
        assert site.table.provenance["document"][:40] in text
    else:
        assert "Tuning table: none yet" in text
    assert "with its own defaults, no tuning (site %s)" % site.name in text


def test_hpcx_and_open_mpi_swap_cleanly(tmp_path):
    """oci-bm-optimized3.36 ships HPC-X as its alternative tuned MPI: `module avail` lists both
    MPIs (tuned and untuned), and swapping between them (family "mpi") leaves nothing behind,
    the stand-in HPC-X module (its prefix on PATH) included."""
    site = sites.load_named("oci-bm-optimized3.36")
    hpcx = site.hpcx
    ompi, ompi_base = modules(site)
    tuned, base = modules(hpcx)
    script = "\n".join(
        [
            "module -t avail 2>&1 | grep -v ':$' | sort",
            env_block("start"),
            "module load %s" % ompi,
            env_block("ompi"),
            "module load %s" % tuned,
            env_block("hpcx"),  # Lmod swaps the family member
            "module load %s" % base,
            env_block("hpcx_base"),
            "module load %s" % ompi,
            env_block("ompi_again"),
            "module unload %s" % ompi,
            env_block("end"),
        ]
    )
    proc = lmod.shell(
        lmod.site_modulepaths(hpcx, tmp_path, ROOT), script, TUNEDMPI_NODES="2", TUNEDMPI_PPN="16"
    )
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("@@")[0].split()
    assert {ompi, ompi_base, tuned, base} <= set(listed)
    got = blocks(proc.stdout)
    assert got["hpcx"]["TUNEDMPI_SELECTION"].startswith("site=%s nodes=2 ppn=16" % site.name)
    assert got["hpcx"]["TUNEDMPI_TEST_BASE_PREFIX"].endswith("stand-in/%s" % hpcx.base_module)
    assert "MPI_HOME" not in got["hpcx"] and "/opt/openmpi-5.0.6/bin" not in got["hpcx"]["PATH"]
    assert "untuned baseline" in got["hpcx_base"]["TUNEDMPI_SELECTION"]
    assert not {k for k in got["hpcx"] if k.startswith(("UCX_", "OMPI_MCA_", "SLURM_"))} & set(
        got["hpcx_base"]
    )
    assert "TUNEDMPI_TEST_BASE_PREFIX" not in got["ompi_again"]
    assert got["ompi_again"] == got["ompi"]
    assert got["end"] == got["start"]
