"""A real run: every row of every shipped tuned module, loaded with real Lmod, drives a real
`mpirun -np 2` of the PyPI Open MPI 5.0.8 wheel (UCX 1.18), and Open MPI, PRRTE and UCX accept every
variable the module sets: exit 0, no unused-variable warning, no unrecognised value, and every
OMPI_MCA_ name is a parameter the MPI registers."""

import os
import re
import subprocess

import pytest

import lmod
from conftest import ROOT
from tunedmpi.modules import sites
from tunedmpi.modules.render import RULES_VARS, rows_for

BIN = ROOT / ".venv" / "bin"
pytestmark = [
    pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"),
    pytest.mark.skipif(
        not (BIN / "mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
    ),
]
RUN_ENV = dict(
    OMPI_ALLOW_RUN_AS_ROOT="1",
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    # No InfiniBand here: without these pml ucx disqualifies itself (docs/design.md, "Knob facts").
    OMPI_MCA_pml_ucx_tls="any",
    OMPI_MCA_pml_ucx_devices="any",
)
# Parameters of components this wheel lacks (no UCC, no HCOLL), as Open MPI 5.0's
# coll_ucc_component.c and coll_hcoll_component.c register them; checked by name only.
ABSENT_COMPONENT_PARAMS = {
    "coll_hcoll_enable",
    "coll_ucc_enable",
    "coll_ucc_priority",
    "coll_ucc_cts",
}
# Lines the wheel prints on every one-sided run with default settings (see shared fixtures README).
BENIGN = re.compile(
    r"osc_ucx_component\.c:\d+ +Error: OSC UCX component priority set inside "
    r"component query failed|^\s*$"
)
TROUBLE = re.compile(
    r"unused environment variable|not recognized|invalid|unknown|error|abort|"
    r"not available",
    re.I,
)


@pytest.fixture(scope="module")
def hello(tmp_path_factory):
    exe = tmp_path_factory.mktemp("mpi") / "hello"
    subprocess.run(
        [str(BIN / "mpicc"), "-O1", "-o", str(exe), str(ROOT / "tests/mpi/hello.c")], check=True
    )
    return exe


@pytest.fixture(scope="module")
def registered():
    out = subprocess.run(
        [str(BIN / "ompi_info"), "--param", "all", "all", "--level", "9", "--parsable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(re.findall(r"^mca:[^:]+:[^:]+:param:([^:]+):", out, re.M))


def loaded_rows(tmp_path):
    """(site, profile, row, environment the real module set) for every row of every site."""
    out = []
    for name in sites.site_names():
        site = sites.load_named(name)
        if not site.table:
            continue
        data, _ = rows_for(site)
        geos = [(p, r) for p, rows in data.items() for r in rows]
        envs = [
            {
                "TUNEDMPI_NODES": str(r["nodes"]),
                "TUNEDMPI_PPN": str(r["ppn"]),
                "TUNEDMPI_PROFILE": p,
            }
            for p, r in geos
        ]
        got = lmod.load_many(
            lmod.site_modulepaths(site, tmp_path, ROOT),
            "%s/%s" % (site.tuned_module, site.mpi_version),
            envs,
        )
        for (p, r), (env, err) in zip(geos, got):
            assert "match=exact" in env["TUNEDMPI_SELECTION"], (name, p, r["nodes"], r["ppn"], err)
            want = dict(r["env"])
            if r["rules"]:  # a banded geometry: the module adds its rules file, which must exist
                path = env.get(RULES_VARS[1], "")
                assert path.endswith(
                    "/__%s.rules/%s" % (site.mpi_version, r["rules"])
                ) and os.path.isfile(path), env
                want.update(zip(RULES_VARS, ("1", path)))
            assert {k: v for k, v in env.items() if not k.startswith("TUNEDMPI_")} == want
            out.append((site, p, r, env))
    return out


def run(hello, env):
    full = lmod.clean_env(**RUN_ENV)
    full.update(env)
    full.setdefault(
        "OMPI_MCA_pml", "ucx"
    )  # so that UCX starts and reads its variables in every run
    proc = subprocess.run(
        [str(BIN / "mpirun"), "-np", "2", str(hello)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, proc.stdout + proc.stderr


def test_every_row_runs_and_every_variable_is_accepted(hello, registered, tmp_path):
    rows = loaded_rows(tmp_path)
    assert len(rows) >= 60
    distinct = {}
    for site, profile, row, env in rows:
        key = tuple(sorted((k, v) for k, v in env.items() if not k.startswith("TUNEDMPI_")))
        distinct.setdefault(key, (site, profile, row))
    for key, (site, profile, row) in distinct.items():
        env = dict(key)
        for name in env:
            if name.startswith("OMPI_MCA_"):
                param = name[len("OMPI_MCA_") :]
                assert param in registered or param in ABSENT_COMPONENT_PARAMS, (site.name, name)
        network = site.network_transports and any(
            t in env.get("UCX_TLS", "").split(",")
            for t in ("rc", "ud", "dc", "rc_x", "dc_x", "ud_x")
        )
        proc, text = run(hello, env)
        where = (site.name, profile, row["nodes"], row["ppn"], env)
        assert proc.returncode == 0, (where, text[-3000:])
        assert sorted(re.findall(r"hello rank (\d) of 2 sum 2", proc.stdout)) == ["0", "1"], (
            where,
            text,
        )
        for line in (proc.stderr + proc.stdout).splitlines():
            if BENIGN.search(line) or line.startswith("hello rank"):
                continue
            # A network transport named for a multi-node row is absent on this build machine only.
            if network and re.search(r"transport '(rc|ud|dc)\w*' is not available", line):
                continue
            assert not TROUBLE.search(line), (where, line)
            raise AssertionError("unexpected output %r for %r" % (line, where))
    # The shipped tables reach UCX thresholds, placement and one-sided choices in these runs.
    names = {k for key in distinct for k, _ in key}
    assert {
        "UCX_RNDV_THRESH",
        "UCX_ZCOPY_THRESH",
        "PRTE_MCA_rmaps_default_mapping_policy",
        "PRTE_MCA_rmaps_default_ranking_policy",
        "PRTE_MCA_hwloc_default_binding_policy",
        "OMPI_MCA_pml",
        "OMPI_MCA_osc",
        "OMPI_MCA_coll_hcoll_enable",
    } <= names


def test_a_bad_value_is_caught_by_this_check(hello):
    """The check above can fail: PRRTE refuses an unknown ranking policy, UCX names an unused variable."""
    proc, _ = run(hello, {"PRTE_MCA_rmaps_default_ranking_policy": "bogus"})
    assert proc.returncode != 0
    proc, text = run(hello, {"UCX_RNDV_THRESHOLD": "32kb"})
    assert "unused environment variable: UCX_RNDV_THRESHOLD" in text
    proc, text = run(hello, {"UCX_RNDV_THRESH": "intra:32kb"})  # a lone key is fatal in UCX 1.18
    assert proc.returncode != 0 or TROUBLE.search(text)


def test_loading_the_local_tuned_module_gives_a_working_mpi(hello, tmp_path):
    site = sites.load_named("local")
    script = "module load %s/%s >/dev/null && type -ap mpirun | head -2 && mpirun -np 2 %s" % (
        site.tuned_module,
        site.mpi_version,
        hello,
    )
    proc = lmod.shell(lmod.site_modulepaths(site, tmp_path, ROOT), script, **RUN_ENV)
    assert proc.returncode == 0, proc.stderr
    # the module's launch check first (it runs the next one, silent here), then the MPI's own
    first, second = proc.stdout.splitlines()[:2]
    assert first.endswith("/__%s.rules/bin/mpirun" % site.mpi_version) and second == str(
        BIN / "mpirun"
    )
    assert "module reload" not in proc.stderr
    assert proc.stdout.count("of 2 sum 2") == 2


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_a_two_thread_rank_is_bound_to_two_cores(tmp_path):
    """The placement a real Lmod load of a row that binds to cores sets (oci-bm-optimized3.36), given
    to a real mpirun -n 1: one core for a single-threaded rank, both cores with OMP_NUM_THREADS=2
    (selector.BINDING; PRRTE binds 1-2 ranks to a core by its own default)."""
    site = sites.load_named("oci-bm-optimized3.36")
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    loads = lmod.load_many(
        lmod.site_modulepaths(site, tmp_path, ROOT), module, [{}, {"OMP_NUM_THREADS": "2"}]
    )
    allowed = []
    for got, _ in loads:
        placement = {k: v for k, v in got.items() if k.startswith("PRTE_MCA_")}
        proc = subprocess.run(
            [str(BIN / "mpirun"), "-n", "1", "grep", "Cpus_allowed_list", "/proc/self/status"],
            env=lmod.clean_env(PATH="%s:%s" % (BIN, os.environ["PATH"]), **RUN_ENV, **placement),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        allowed.append(proc.stdout.split()[-1])
    assert loads[0][0]["PRTE_MCA_hwloc_default_binding_policy"] == "core"
    assert re.fullmatch(r"[0-9]+", allowed[0]), allowed  # one core
    with open("/proc/self/status") as fh:  # unbound: every core this test may use
        assert allowed[1] == re.search(r"Cpus_allowed_list:\s*(\S+)", fh.read()).group(1)
