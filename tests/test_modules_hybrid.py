"""Hybrid MPI+threads jobs (selector.THREADS and BINDING): threads per rank from each scheduler's
variables, a threaded rank is never bound to one core, and unload undoes exactly what a threaded
load set, in real Lmod and real Environment Modules (equal to `tunedmpi explain`)."""

import re

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import load_mpi, twins
from test_modules_hygiene import blocks, env_block
from tunedmpi.modules import explain, selector

pytestmark = pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed")
# Its rows place ranks with PRRTE (mapping by core or NUMA, binding to core).
SITE = ("oci-bm-optimized3.36", "openmpi-tuned")
BIND, (MAP, RANK) = selector.BINDING[0], selector.UNPLACED


def scheduler_cases(tmp_path):
    """(environment, threads per rank) of a 2 x 9 job of 4 threads per rank in each scheduler."""
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("cn1\n" * 9 + "cn2\n" * 9)  # PBS Pro: one line per MPI process
    slurm = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "9"}
    return [
        (dict(slurm, SLURM_CPUS_PER_TASK="4"), 4),
        (dict(slurm, SLURM_CPUS_PER_TASK="1"), 1),
        # PBS Pro: select=2:ncpus=36:mpiprocs=9:ompthreads=4, and without ompthreads
        ({"PBS_NODEFILE": str(nodefile), "NCPUS": "36", "OMP_NUM_THREADS": "4"}, 4),
        ({"PBS_NODEFILE": str(nodefile), "NCPUS": "36", "OMP_NUM_THREADS": "1"}, 4),
        ({"LSB_MCPU_HOSTS": "cn1 9 cn2 9", "OMP_NUM_THREADS": "4"}, 4),
        ({"FLUX_JOB_NNODES": "2", "FLUX_JOB_SIZE": "18", "OMP_NUM_THREADS": "4"}, 4),
        (dict(slurm, SLURM_CPUS_PER_TASK="4", TUNEDMPI_THREADS="1"), 1),  # the user's word wins
        (dict(slurm, OMP_NUM_THREADS="4,2"), 1),  # a nested list is no count
    ]


def test_threaded_ranks_are_never_bound_to_one_core_in_every_twin(tmp_path):
    site = load_mpi(*SITE)
    cases = scheduler_cases(tmp_path)
    envs = [env for env, _ in cases]
    for name, load_many, module_file in twins(site, tmp_path):
        for (env, threads), (got, err) in zip(cases, load_many(envs)):
            want = explain.select(site, env, module_file)
            assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (name, env, err)
            assert want["geometry"].ppn == 9, env
            if threads > 1:
                assert " threads=%d placement=launcher" % threads in want["selection"]
                assert got[BIND] == "none" and MAP not in got and RANK not in got, (name, env)
            else:
                assert "threads=" not in want["selection"] and got[BIND] == "core", (name, env)


# The user's own mapping before the load: it wins (selector.SKIP), threads or not.
USER = "export %s=user-map TUNEDMPI_NODES=2 TUNEDMPI_PPN=8" % MAP


@pytest.mark.parametrize("system", ["lmod", "tcl"])
def test_unload_undoes_a_threaded_load_whatever_the_threads_are_by_then(system, tmp_path):
    site = load_mpi(*SITE)
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    if system == "lmod":
        paths, shell = lmod.site_modulepaths(site, tmp_path, ROOT), lmod.shell
    else:
        if not envmodules.available():
            pytest.skip(envmodules.WHY_MISSING)
        from test_modules_tcl import tcl_tree

        paths, shell = tcl_tree(site, tmp_path)[1], envmodules.shell
    script = "\n".join(
        [
            USER,
            env_block("before"),
            "export OMP_NUM_THREADS=4; module load %s" % module,
            env_block("threaded"),
            "unset OMP_NUM_THREADS; module unload %s" % module,
            env_block("after_threaded"),
            "module load %s" % module,
            env_block("single"),
            "export OMP_NUM_THREADS=4; module unload %s; unset OMP_NUM_THREADS" % module,
            env_block("after_single"),
        ]
    )
    proc = shell(paths, script)
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    assert got["threaded"][BIND] == "none" and got["threaded"][MAP] == "user-map"
    assert got["threaded"]["TUNEDMPI_ROW"].endswith(selector.THREADED_MARK)
    assert got["single"][BIND] == "core" and got["single"][MAP] == "user-map"
    assert ("yours=%s" % MAP) in got["single"]["TUNEDMPI_SELECTION"]
    assert got["after_threaded"] == got["before"]
    assert got["after_single"] == got["before"]


BIN = ROOT / ".venv" / "bin"
RECIPE = re.compile(r"`(mpirun [^`]*)`")


@pytest.mark.skipif(not (BIN / "mpirun").exists(), reason="no Open MPI wheel in .venv (run make)")
@pytest.mark.parametrize("name", ["lmod", "tcl"])
def test_every_mpirun_recipe_of_the_users_page_runs_under_a_threaded_load(name, tmp_path):
    """Issue 50: docs/users.md's hybrid recipe (`mpirun --map-by slot:PE=$OMP_NUM_THREADS`) failed
    under the module ("Policy: NONE": its binding none). Each mpirun recipe of the page, run with
    the real mpirun: a rank gets its PE cores; without PE= a threaded rank stays unbound."""
    # a recipe: an mpirun command with its options' values (not a bare flag named in the text)
    spans = RECIPE.findall((ROOT / "docs" / "users.md").read_text())
    recipes = [r for r in spans if "=" in r or len(r.split()) > 2]
    assert any("PE=" in r for r in recipes), recipes
    site = load_mpi(*SITE)
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    if name == "lmod":
        shell, paths = lmod.shell, lmod.site_modulepaths(site, tmp_path, ROOT)
    else:
        if not envmodules.available():
            pytest.skip(envmodules.WHY_MISSING)
        from test_modules_tcl import tcl_tree

        shell, paths = envmodules.shell, tcl_tree(site, tmp_path)[1]
    run = " -np 1 --report-bindings sh -c 'echo @ran' 2>&1; echo \"@rc $?\""
    script = ["module load %s 2>/dev/null" % module, 'echo "@row $TUNEDMPI_ROW"']
    script += [r + run for r in recipes] + ["mpirun -np 2 --report-bindings true 2>&1"]
    env = dict(OMP_NUM_THREADS="2", TUNEDMPI_NODES="1", TUNEDMPI_PPN="1")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = shell(paths, "\n".join(script), PATH="%s:/usr/bin:/bin" % BIN, **env)
    out = proc.stdout
    assert selector.THREADED_MARK in out.split("@row ", 1)[1].split("\n")[0], out
    assert out.count("@rc 0") == len(recipes) and out.count("@ran") == len(recipes), out
    assert "core:0-1]" in out and "Policy: NONE" not in out, out  # the rank got both cores
    assert out.count("is not bound") == 2, out  # no PE=: the threaded ranks stay unbound
