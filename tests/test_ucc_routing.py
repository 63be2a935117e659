"""UCC per collective and message size: what a module sets (envmap.ucc_env, from a table's `choice`)
and, on the Spack-built Open MPI 5.0.6 + UCC 1.3.0 of site local-source, that exactly the routed
collectives and sizes run in UCC and the others in Open MPI's own components, and each of UCC's
algorithms (ucc@<name>) exactly where it was routed.

Witnesses on the real stack: Open MPI's coll_ucc log (coll_ucc_verbose prints a line per
collective it hands to UCC, and one where UCC declines); for the algorithm, whose name UCC 1.3.0
logs nowhere (its collective trace names the CL and TL only), a gdb breakpoint on each algorithm's
own entry point in libucc_tl_ucp.so, printed in IMB's output before the size it ran at.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import lmod
from conftest import ROOT
from tunedmpi.modules import envmap, sites
from tunedmpi.regenerate import tune
from tunedmpi.tables import schema

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
    assert "UCC_TL_UCP_TUNE" not in env  # ucc alone: UCC's default algorithm choice
    env, _ = envmap.knob_env(site, {"coll_bcast_component": "ucc@dbt"}, False)
    assert env["OMPI_MCA_coll_ucc_cts"] == "bcast"
    assert env["UCC_TL_UCP_TUNE"] == "bcast:0-inf:@dbt"
    env, _ = envmap.knob_env(site, {"coll_allgather_component": "none"}, False)
    assert not any(k.startswith(("OMPI_MCA_coll_ucc", "UCC_")) for k in env)


# allreduce: Open MPI's own below 1 KB and from 1 MB, UCC's knomial from 1 KB, sra_knomial from
# 64 KB (UCC's default choice is sra_knomial from 4 KB on, so 4-32 KB tells the two apart)
ALGORITHM_CHOICE = [
    schema.Choice(schema.Band(0, 1024), "none", []),
    schema.Choice(schema.Band(1024, 65536), "ucc@knomial", []),
    schema.Choice(schema.Band(65536, 1 << 20), "ucc@sra_knomial", []),
    schema.Choice(schema.Band(1 << 20, None), "none", []),
]


def algorithm_row_env():
    """What a local-source module sets at 1 x 2 for a table whose allreduce chose ALGORITHM_CHOICE."""
    site = sites.load_named("local-source")
    case = schema.Case(1, 2, "allreduce", "", {c.component: {} for c in ALGORITHM_CHOICE})
    case.choice = ALGORITHM_CHOICE
    table = schema.Table("<test>", "", "", "openmpi", "5.0.6", (1, 18), {}, {}, "", [case])
    return envmap.row_env(site, table, 1, 2, "allreduce")[0]


def test_a_row_writes_uccs_algorithm_tokens_for_the_bands_that_chose_one():
    env = algorithm_row_env()
    assert env["OMPI_MCA_coll_ucc_cts"] == "allreduce"
    assert env["UCC_CL_BASIC_TUNE"] == "allreduce:0-1023:0#allreduce:1048575-inf:0"
    assert env["UCC_TL_UCP_TUNE"] == (
        "allreduce:1023-65535:@knomial#allreduce:65535-1048575:@sra_knomial"
    )
    # alltoall and allgather: UCC counts the whole buffer, as for the declined ranges
    assert envmap.ucc_env(["alltoall"], [], 4, [("alltoall", 1024, None, "ucc@bruck")]) == dict(
        envmap.ucc_env(["alltoall"]), UCC_TL_UCP_TUNE="alltoall:4095-inf:@bruck"
    )


def test_tune_turns_a_stage_of_ucc_algorithms_into_a_choice_the_schema_takes(tmp_path):
    """The component stage's candidates are keyed by their value (ucc@knomial), persize's bands
    become the case's `choice` with a settings entry per component, and the table loads."""
    cfgs = {
        "baseline": {},
        "job": {"pml": "ucx"},
        "knomial": {"pml": "ucx", "coll_allreduce_component": "ucc@knomial"},
        "sra": {"pml": "ucx", "coll_allreduce_component": "ucc@sra_knomial"},
    }
    geo = {
        ("allreduce-ucc", cid): {"config": cfg, "bench": {"allreduce": ("latency_us", [], 0)}}
        for cid, cfg in cfgs.items()
    }
    knobs = ["coll_allreduce_component"]
    ref, cands = tune._algorithm_runs(geo, "allreduce-ucc", knobs, "allreduce", {"pml": "ucx"})
    assert ref is geo[("allreduce-ucc", "job")]
    assert sorted(cands) == ["ucc@knomial", "ucc@sra_knomial"]
    case = {"settings": {"none": {"pml": "ucx"}}}
    comps = dict(
        stage="allreduce-ucc",
        bands=[(0, 1024, None), (1024, 65536, "ucc@knomial"), (65536, None, "ucc@sra_knomial")],
        tests=[],
        confirmed=False,
    )
    tune._component_choice(case, [], comps)
    assert list(case["settings"]) == ["none", "ucc@knomial", "ucc@sra_knomial"]
    assert [c["component"] for c in case["choice"]] == ["none", "ucc@knomial", "ucc@sra_knomial"]
    path = tmp_path / "t.yaml"
    for component, ok in (("ucc@sra_knomial", True), ("ucc@ring", False)):
        case["choice"][2]["component"] = component
        case["settings"] = {c["component"]: {} for c in case["choice"]}
        path.write_text(table_text(case))
        if ok:
            assert schema.load_table(str(path)).cases[0].choice[2].component == component
        else:  # allgather's algorithm, not allreduce's
            with pytest.raises(Exception, match="unknown component 'ucc@ring'.*ucc@sra_knomial"):
                schema.load_table(str(path))


def test_tune_takes_a_collectives_component_stage_with_the_most_candidates():
    """The main campaign's allreduce-component (none or ucc) and a later campaign's allreduce-ucc
    (UCC's algorithms too) both measured allreduce: the wider stage decides, whatever the order."""
    from tunedmpi.stats import RunPoints

    def runs(t):
        return [RunPoints({1024: t + r / 100, 2048: t + r / 100}) for r in range(3)]

    stages, geo = [], {}
    for stage, values in (
        ("allreduce-component", ["ucc"]),
        ("allreduce-ucc", ["ucc", "ucc@knomial", "ucc@sra_knomial"]),
    ):
        stages.append((stage, ["coll_allreduce_component"]))
        for cid, cfg in [("baseline", {}), ("job", {"pml": "ucx"})] + [
            (v, {"pml": "ucx", "coll_allreduce_component": v}) for v in values
        ]:
            geo[(stage, cid)] = {
                "config": cfg,
                "bench": {"allreduce": ("latency_us", runs(2.0), 0)},
            }
    got = tune.size_bands(geo, stages, "allreduce", {"pml": "ucx"}, components=True)
    assert got["stage"] == "allreduce-ucc"


def table_text(case):
    import yaml

    doc = yaml.safe_load((ROOT / "tuning-tables/local-source/openmpi-5.0.6.yaml").read_text())
    allreduce = next(c for c in doc["cases"] if c["collective"] == "allreduce")
    allreduce.update(settings=case["settings"], choice=[dict(c) for c in case["choice"]])
    doc["cases"] = [allreduce]
    return yaml.safe_dump(doc)


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


# rank 0 under gdb: one line per call of an allreduce algorithm's entry point in UCC's TL/UCP,
# written unbuffered into the same output as IMB's rows (IMB prints a size's row after its calls)
GDB_RANK0 = """#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] || exec "$@"
exec gdb -q -batch -nx -ex 'set breakpoint pending on' \\
  -ex 'set environment LD_PRELOAD=%s' -ex 'set environment _STDBUF_O=0' \\
  -ex 'dprintf ucc_tl_ucp_allreduce_knomial_init,"ALGORITHM knomial\\n"' \\
  -ex 'dprintf ucc_tl_ucp_allreduce_sra_knomial_init,"ALGORITHM sra_knomial\\n"' \\
  -ex run --args "$@"
"""
STDBUF = Path("/usr/libexec/coreutils/libstdbuf.so")


@needs_stack
@pytest.mark.skipif(not shutil.which("gdb") or not STDBUF.exists(), reason="needs gdb, coreutils")
def test_each_ucc_algorithm_runs_exactly_at_the_sizes_routed_to_it(tmp_path):
    """IMB Allreduce, 2 ranks, under the variables a row with ALGORITHM_CHOICE sets: UCC's knomial
    runs at 1-32 KB, its sra_knomial at 64-512 KB, and no UCC allreduce algorithm at any other size
    (TL/UCP has these two only: there Open MPI's own ran)."""
    wrapper = tmp_path / "rank0-under-gdb"
    wrapper.write_text(GDB_RANK0 % STDBUF)
    wrapper.chmod(0o755)
    env = dict(
        os.environ,
        **RUN_ENV,
        **algorithm_row_env(),
        PATH="%s:%s" % (VIEW / "bin", os.environ["PATH"]),
    )
    argv = ["-msglog", "0:21", "-iter", "4", "-iter_policy", "off", "-time", "1", "allreduce"]
    res = subprocess.run(
        [str(VIEW / "bin" / "mpirun"), "-np", "2", "--bind-to", "none", str(wrapper)]
        + [str(VIEW / "bin" / "IMB-MPI1")]
        + argv,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ran, calls = {}, []
    for line in res.stdout.splitlines():
        m = re.match(r"^ALGORITHM (\w+)$", line)
        row = re.match(r"^\s+([0-9]+)\s+[0-9]+\s+[0-9.]+\s", line)
        if m:
            calls.append(m.group(1))
        elif row:
            ran[int(row.group(1))] = sorted(set(calls))
            calls = []
    want = {size: [] for size in [0] + [1 << i for i in range(2, 22)]}  # IMB: floats, from 4 B
    want.update({1 << i: ["knomial"] for i in range(10, 16)})
    want.update({1 << i: ["sra_knomial"] for i in range(16, 20)})
    assert ran == want, res.stdout[-3000:]
