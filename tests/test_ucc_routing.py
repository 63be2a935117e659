"""UCC per collective and message size: what a module sets (envmap.ucc_env, from a table's `choice`)
and, on the Spack-built Open MPI 5.0.6 + UCC 1.3.0 of site local-source, that exactly the routed
collectives and sizes run in UCC and the others in Open MPI's own components.

Two independent witnesses on the real stack: UCC's own log (coll_ucc_verbose prints a line per
collective it runs) and the pml's traffic counters (UCC's TL/UCP talks to UCX directly, so a
collective UCC runs moves no bytes through Open MPI's pml; one that coll_tuned runs does).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

import lmod
from conftest import ROOT
from tunedmpi.modules import envmap, sites

# The local-source site's Spack view (its spack.yaml; docs/spack.md), or a prefix named by the variable.
VIEW = Path(
    os.environ.get("TUNEDMPI_UCC_MPI") or ROOT / "site-configs/local-source/.spack-env/view"
)
needs_stack = pytest.mark.skipif(
    not (VIEW / "bin" / "ompi_info").exists(),
    reason="needs the Spack-built local-source stack (Open MPI + UCC): spack -e site-configs/local-source "
    "install, docs/spack.md 'The local-source environment' (or TUNEDMPI_UCC_MPI=<prefix>)",
)
RUN_ENV = dict(
    OMPI_ALLOW_RUN_AS_ROOT="1",
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    OMPI_MCA_pml="ucx",
    OMPI_MCA_pml_ucx_tls="any",
    OMPI_MCA_pml_ucx_devices="any",
)


def test_gaps_are_the_sizes_the_bands_leave_out():
    assert envmap.gaps([(65536, None)]) == [(0, 65536)]
    assert envmap.gaps([(0, 1024)]) == [(1024, None)]
    assert envmap.gaps([(0, None)]) == []
    assert envmap.gaps([(8, 256), (4096, 65536)]) == [(0, 8), (256, 4096), (65536, None)]


def test_ucc_env_routes_collectives_and_declines_sizes_with_one_tuning_string():
    env = envmap.ucc_env(
        ["allreduce", "bcast"], [("allreduce", 0, 65536), ("bcast", 1048576, None)], 2
    )
    assert env == {
        "OMPI_MCA_coll_ucc_enable": "1",
        "OMPI_MCA_coll_ucc_priority": "100",
        "OMPI_MCA_coll_ucc_cts": "allreduce,bcast",
        "UCC_CL_BASIC_TUNE": "allreduce:0-65535:0#bcast:1048575-inf:0",
    }
    assert "UCC_CL_BASIC_TUNE" not in envmap.ucc_env(["alltoall"])


def test_ucc_tokens_use_uccs_sizes_and_range_ends():
    # UCC: a size belongs to the first range whose inclusive end reaches it, so a declined range
    # that starts at S is written from S - 1; alltoall and allgather count the whole buffer
    assert envmap.ucc_token("bcast", 1024, 65536, 4) == "bcast:1023-65535:0"
    assert envmap.ucc_token("alltoall", 1024, None, 4) == "alltoall:4095-inf:0"
    assert envmap.ucc_token("allgather", 0, 64, 36) == "allgather:0-2303:0"


def test_a_sweep_component_knob_routes_its_collective_whole():
    site = sites.load_named("local-source")
    env, _ = envmap.knob_env(site, {"pml": "ucx", "coll_allgather_component": "ucc"}, False)
    assert env["OMPI_MCA_coll_ucc_cts"] == "allgather" and "UCC_CL_BASIC_TUNE" not in env
    env, _ = envmap.knob_env(site, {"coll_allgather_component": "none"}, False)
    assert not any(k.startswith(("OMPI_MCA_coll_ucc", "UCC_")) for k in env)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("ucc") / "coll_sizes"
    subprocess.run(
        [str(VIEW / "bin" / "mpicc"), "-O1", "-o", str(exe), str(ROOT / "tests/mpi/coll_sizes.c")],
        check=True,
    )
    return exe


def component(program, call, env):
    """Which component ran one call ("allreduce:8") in a 2-rank run: "ucc" where coll_ucc ran it,
    "fallback" where UCC declined it and handed it on, "none" where coll_ucc never saw it (UCC's
    log: coll_ucc_verbose 3 prints "running ucc <coll>", then "running fallback <coll>" when UCC
    answers not supported). One run per call: the ranks' logs arrive in no fixed order."""
    full = dict(
        os.environ,
        **RUN_ENV,
        **env,
        OMPI_MCA_coll_ucc_verbose="3",
        PATH="%s:%s" % (VIEW / "bin", os.environ["PATH"]),
    )
    res = subprocess.run(
        [str(VIEW / "bin" / "mpirun"), "-np", "2", "--bind-to", "none", str(program), call],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ran = re.findall(r"running (ucc|fallback) (\w+)", res.stdout + res.stderr)
    coll = call.split(":")[0]
    assert all(c == coll for _, c in ran), ran
    kinds = {k for k, _ in ran}
    return "fallback" if "fallback" in kinds else "ucc" if kinds else "none"


@needs_stack
def test_the_build_has_ucc():
    text = subprocess.run(
        [str(VIEW / "bin" / "ompi_info")], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"MCA coll: ucc ", text), text


@needs_stack
def test_ucc_runs_the_routed_collectives_and_sizes_and_nothing_else(program):
    # allreduce and alltoall to UCC from 64 KB / 1 KB on, bcast below 1 MB; allgather to Open MPI
    env = envmap.ucc_env(
        ["allreduce", "alltoall", "bcast"],
        [("allreduce", 0, 65536), ("alltoall", 0, 1024), ("bcast", 1048576, None)],
        2,
    )
    want = {
        "allreduce:65532": "fallback",
        "allreduce:65536": "ucc",
        "alltoall:1023": "fallback",
        "alltoall:1024": "ucc",
        "bcast:1048575": "ucc",
        "bcast:1048576": "fallback",
        "allgather:8": "none",
    }
    got = {call: component(program, call, env) for call in want}
    assert got == want


@needs_stack
@pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)")
def test_a_shipped_tuned_module_sends_ucc_exactly_the_sizes_its_table_chose(program, tmp_path):
    """BM.Optimized3.36's openmpi-tuned/5.0.6 (Open MPI 5.0.6 + UCC, as this build), loaded with real
    Lmod at its 1 x 16 row: the seed table chose UCC for allreduce from 32 KB to 32 MB only. Run on
    this build with the variables the module set, UCC runs exactly those sizes."""
    site = sites.load_named("oci-bm-optimized3.36")
    ((env, err),) = lmod.load_many(
        lmod.site_modulepaths(site, tmp_path, ROOT),
        "openmpi-tuned/5.0.6",
        [{"TUNEDMPI_NODES": "1", "TUNEDMPI_PPN": "16"}],
    )
    assert env.get("OMPI_MCA_coll_ucc_cts") == "allreduce", (env, err)
    case = site.table.case(1, 16, "allreduce")
    bands = [(ch.band.lo, ch.band.hi) for ch in case.choice if ch.component == "ucc"]
    assert bands == [(32768, 33554432)]
    module_env = {k: v for k, v in env.items() if k.startswith(("OMPI_MCA_coll_", "UCC_"))}
    want = {
        "allreduce:8": "fallback",
        "allreduce:32764": "fallback",
        "allreduce:32768": "ucc",
        "allreduce:1048576": "ucc",
        "bcast:8": "none",
        "alltoall:8": "none",
    }
    assert {call: component(program, call, module_env) for call in want} == want
