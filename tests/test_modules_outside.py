"""Geometry outside the table (selector.OUTSIDE_CHOICES, issue 50): a ppn above the node's cores
and a row extrapolated beyond the site's factor are named in TUNEDMPI_SELECTION, and the site's
outside.then (extrapolate, nearest, untuned) decides what the module does there; real Lmod and
Environment Modules equal `tunedmpi explain`, loads and unloads."""

import dataclasses

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import expected, load_mpi
from tunedmpi.modules import explain, render, selector

pytestmark = pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed")


def test_explain_at_oci_names_a_ppn_above_the_nodes_cores():
    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    env = {"TUNEDMPI_NODES": "20", "TUNEDMPI_PPN": "48"}
    sel = explain.select(site, env)["selection"]
    assert " row=8x36 match=extrapolated ppn>cores=36 profile=" in sel, sel
    assert "ppn>cores" not in explain.select(site, dict(env, TUNEDMPI_PPN="36"))["selection"]


@pytest.mark.parametrize("then", selector.OUTSIDE_CHOICES)
def test_outside_the_table_the_sites_choice_in_every_twin(then, tmp_path):
    """OCI's nodes have 36 cores and its rows reach 8 nodes; with outside: {factor: 2, then:
    <choice>} a 20 x 48 job is named as over the cores and beyond x2, and gets the edge row said at
    load (extrapolate), quietly (nearest) or nothing (untuned); 16 x 36 (within x2) stays an
    extrapolated row; unload gives back what was there."""
    base = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    site = dataclasses.replace(
        base, outside_factor=2, outside_then=then, module_formats=("lua", "tcl")
    )
    tree = tmp_path / "mf"
    for rel, text in render.render_site(site).items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    envs = [
        {"TUNEDMPI_NODES": "20", "TUNEDMPI_PPN": "48"},
        {"TUNEDMPI_NODES": "16", "TUNEDMPI_PPN": "36"},
        {"SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "2", "OMP_NUM_THREADS": "4"},
        {"TUNEDMPI_NODES": "17", "TUNEDMPI_PPN": "36", "UCX_TLS": "mine"},
    ]
    far = explain.select(site, envs[0])
    sel = far["selection"]
    assert " ppn>cores=36 beyond=x2 " in sel and "match=%s" % then[:7] in sel, sel
    assert ("row=none" in sel) == (then == "untuned") and ("row=8x36" in sel) != (then == "untuned")
    assert (set(far["env"]) == {"TUNEDMPI_ROW", selector.SEEN}) == (then == "untuned")
    assert "match=extrapolated profile" in explain.select(site, envs[1])["selection"]
    systems = [
        ("lmod", lmod, lmod.site_modulepaths(site, tmp_path, ROOT, tree=tree / site.name), "lua")
    ]
    if envmodules.available():
        paths = [tree / site.name] + envmodules.site_modulepaths(site, tmp_path, ROOT)[1:]
        systems.append(("tcl", envmodules, paths, "tcl"))
    for name, tool, paths, fmt in systems:
        module_file = explain.modulefile(site, tree, fmt)
        for env, (got, err) in zip(envs, tool.load_many(paths, module, envs, timeout=60)):
            want = explain.select(site, env, module_file)
            assert got == expected(env, want), (name, env, err)
            said = any(" match=%s" % k in want["selection"] for k in ("extrapolated", "untuned"))
            assert ("ppn>cores=36" in err) == (said and env is envs[0]), (name, env, err)
        # unload after a load outside the table (each kind) leaves the environment as it was
        script = "export TUNEDMPI_NODES=20 TUNEDMPI_PPN=48; env | sort > /tmp/.o_$$; "
        script += "module load %s 2>/dev/null; export TUNEDMPI_NODES=2 TUNEDMPI_PPN=36; " % module
        script += "module unload %s 2>/dev/null; " % module
        script += "env | sort | diff /tmp/.o_$$ - | grep -vE 'TUNEDMPI_(NODES|PPN)=' "
        script += "| grep -E '^[<>] (UCX|OMPI|TUNEDMPI|HCOLL|UCC|PRTE)'; "
        script += "rm -f /tmp/.o_$$; echo done"
        proc = tool.shell(paths, script)
        assert proc.stdout.strip() == "done", (name, proc.stdout, proc.stderr)
