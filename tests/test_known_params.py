"""Every variable a module sets is one its library knows (tunedmpi known-params, issue 28): every
shipped module and every name envmap can emit, against known-params/; a misspelt mapping fails
naming the variable, the version and the list; and the PyPI wheel's real mpirun agrees with the
lists (UCX warns about a name not in them, Open MPI refuses a component not in them, skips one
it lacks in an exclusion, and PRRTE reads the stand-in name)."""

import re
import shutil
import subprocess
from collections import OrderedDict

import pytest

from conftest import ROOT
from tunedmpi.modules import envmap, knownparams, paramlists, sites

BIN = ROOT / ".venv" / "bin"
LISTS = ROOT / "known-params"
needs_wheel = pytest.mark.skipif(
    not (BIN / "mpicc").exists() or not shutil.which("cc"),
    reason="no Open MPI wheel in .venv or no C compiler (run make)",
)


def problems(report):
    return [text for _, text in report.problems]


@pytest.mark.parametrize("site", sites.site_names())
def test_every_shipped_module_and_every_envmap_name_is_known(site):
    report = knownparams.check([site])
    assert report.ok(), "\n".join(problems(report))
    counts = report.counts[site]
    assert counts["envmap_names"] > 10, counts
    if sites.load_named(site).table:
        assert counts["module_files"] >= 2 and counts["module_variables"] > 0, counts


def test_the_cli_reports_counts_and_stand_ins(run_cli):
    code, out, _ = run_cli("known-params", "--site", "oci-bm-optimized3.36")
    assert code == 0, out
    assert re.search(r"^ok   oci-bm-optimized3\.36: \d+ variables in 8 module files", out, re.M), (
        out
    )
    assert "stand-in used (oci-bm-optimized3.36): known-params/ucx-1.18.1.txt for ucx 1.17" in out
    assert "HCOLL_ML_DISABLE_ALLGATHER" in out  # HCOLL: names only, said so


def _respelt(monkeypatch, old, new):
    real = envmap.knob_env

    def knob_env(site, values, multi_node):
        env, notes = real(site, values, multi_node)
        return OrderedDict((new if k == old else k, v) for k, v in env.items()), notes

    monkeypatch.setattr(envmap, "knob_env", knob_env)


@pytest.mark.parametrize(
    "old, new, version, listfile",
    [
        (
            "OMPI_MCA_coll_tuned_alltoall_algorithm",
            "OMPI_MCA_coll_tuned_alltoal_algorithm",
            "Open MPI 5.0.8",
            "known-params/openmpi-5.0.8.txt",
        ),
        ("UCX_RNDV_THRESH", "UCX_RNDV_THRESHOLD", "UCX 1.18", "known-params/ucx-1.18.1.txt"),
        (
            "PRTE_MCA_rmaps_default_ranking_policy",
            "PRTE_MCA_rmaps_ranking_policy",
            "Open MPI 5.0.8",
            "known-params/openmpi-5.0.8.txt",
        ),
    ],
)
def test_a_misspelt_mapping_fails_naming_variable_version_and_list(
    monkeypatch, old, new, version, listfile
):
    _respelt(monkeypatch, old, new)
    report = knownparams.check(["local"])
    assert not report.ok()
    hits = [
        p
        for p in problems(report)
        if ": %s: not a parameter of %s (%s)" % (new, version, listfile) in p
    ]
    assert hits and hits[0].startswith("envmap (site local, Open MPI 5.0.8), knob "), problems(
        report
    )


def test_a_misspelt_name_or_value_in_a_shipped_module_fails(tmp_path):
    shutil.copytree(str(ROOT / "modulefiles" / "local"), str(tmp_path / "local"))
    lua = tmp_path / "local" / "openmpi-tuned" / "5.0.8.lua"
    tcl = tmp_path / "local" / "openmpi-tuned" / "5.0.8"
    lua.write_text(lua.read_text().replace('"OMPI_MCA_pml_ucx_tls"', '"OMPI_MCA_pml_ucx_tsl"'))
    tcl.write_text(tcl.read_text().replace('"OMPI_MCA_pml" "ucx"', '"OMPI_MCA_pml" "ucxx"', 1))
    got = problems(knownparams.check(["local"], root=tmp_path))
    assert (
        "modulefiles/local/openmpi-tuned/5.0.8.lua: OMPI_MCA_pml_ucx_tsl: not a parameter of Open MPI 5.0.8 "
        "(known-params/openmpi-5.0.8.txt)"
    ) in got, got
    assert [
        p
        for p in got
        if p.startswith(
            "modulefiles/local/openmpi-tuned/5.0.8: OMPI_MCA_pml=ucxx: Open MPI 5.0.8 "
            "has no ucxx (it lists: cm monitoring ob1 ucx v)"
        )
    ], got
    assert not [p for p in got if "modulefiles/local/openmpi/" in p]


def test_an_unknown_ucc_algorithm_in_a_module_fails_naming_file_key_and_fix(tmp_path):
    """UCC ignores an algorithm it lacks (TL_UCP logs an error, the collective runs UCC's default):
    the check refuses every '@<algorithm>' of a tuning string that `ucc_info -A` does not list."""
    shutil.copytree(str(ROOT / "modulefiles" / "local-source"), str(tmp_path / "local-source"))
    lua = tmp_path / "local-source" / "openmpi-tuned" / "5.0.6.lua"
    token = "allreduce:1023-65535:@knomial#allreduce:65535-inf:@sra_knomal"
    lua.write_text(
        lua.read_text().replace('{ "OMPI_MCA_pml", "ucx" }', '{ "UCC_TL_UCP_TUNE", "%s" }' % token)
    )
    got = problems(knownparams.check(["local-source"], root=tmp_path))
    want = (
        "modulefiles/local-source/openmpi-tuned/5.0.6.lua: UCC_TL_UCP_TUNE=%s: UCC (no version "
        "named) has no algorithm allreduce@sra_knomal (it lists: " % token
    )
    hits = [p for p in got if p.startswith(want)]
    assert hits and "fix: choose one of those" in hits[0], got
    assert "allreduce@sra_knomial" in hits[0] and "@knomial " not in hits[0].split("(it")[0]
    # every algorithm tables may choose is one UCC 1.3.0 lists (no note: envmap emits them all)
    report = knownparams.check(["local-source"])
    assert report.ok() and not [n for n in report.notes if "UCC_TL_UCP_TUNE" in n], report.notes


UCC_INFO_A = """cl/hier algorithms:
  Allreduce
    0 :              rab : intra-node reduce, followed by inter-node allreduce
tl/ucp algorithms:
  Allreduce
    0 :          knomial : recursive knomial with arbitrary radix (optimized for latency)
    1 :      sra_knomial : recursive knomial scatter-reduce followed by knomial allgather
  Reduce_scatter
    0 :             ring : O(N) ring
"""


def test_the_importer_keeps_uccs_algorithms_per_tuning_string(tmp_path):
    names = paramlists.ucc_algorithms(UCC_INFO_A)
    assert names == {
        "UCC_CL_HIER_TUNE": ("algorithms", frozenset({"allreduce@rab"})),
        "UCC_TL_UCP_TUNE": (
            "algorithms",
            frozenset({"allreduce@knomial", "allreduce@sra_knomial", "reduce_scatter@ring"}),
        ),
    }
    path = tmp_path / "ucc-9.9.txt"
    path.write_text(paramlists.render("ucc", "9.9", names, [("date", "2026-01-01")]))
    assert paramlists.read(path).names == names
    shipped = paramlists.read(LISTS / "ucc-1.3.0.txt").names["UCC_TL_UCP_TUNE"]
    assert {"allreduce@sra_knomial", "bcast@dbt", "alltoall@bruck"} <= shipped[1]


def test_values_follow_what_the_library_does():
    known = knownparams.resolve("openmpi", "5.0.8")
    smsc = known.lookup("OMPI_MCA_smsc")[0]
    # Exclusions skip components the build lacks (Open MPI does: test_exclusion_of_a_missing_component_runs)
    assert knownparams.check_value("^cma,xpmem,knem,accelerator", smsc, known) is None
    assert "has no xpmem" in knownparams.check_value("xpmem", smsc, known)
    alg = known.lookup("OMPI_MCA_coll_tuned_alltoall_algorithm")[0]
    assert knownparams.check_value("2", alg, known) is None
    assert knownparams.check_value("pairwise", alg, known) is None
    assert "is not one of" in knownparams.check_value("6", alg, known)
    rank = known.lookup("PRTE_MCA_rmaps_default_ranking_policy")[0]
    assert "is not one of" in knownparams.check_value(
        "core", rank, known
    )  # PRRTE 3 exits 213 on it
    ucx = knownparams.resolve("ucx", "1.18")
    tls = ucx.lookup("UCX_TLS")[0]
    assert knownparams.check_value("self,sm,rc", tls, ucx) is None
    assert knownparams.check_value("^nosuch", tls, ucx) is None
    assert "has no nosuch" in knownparams.check_value("self,nosuch", tls, ucx)


def test_a_version_without_a_list_or_stand_in_is_an_error(tmp_path):
    for f in LISTS.glob("*.txt"):
        shutil.copy(str(f), str(tmp_path))  # no STAND-INS.yaml: UCX 1.17 has no list
    got = problems(knownparams.check(["oci-bm-standard-e6.256"], folder=tmp_path))
    assert [p for p in got if "UCX_RNDV_THRESH: no list of UCX 1.17 in known-params/" in p], got


OMPI_INFO = """\
ompi:version:full:5.0.8
mca:btl:sm:version:mca:2.1.0
mca:btl:tcp:version:mca:2.1.0
mca:btl:base:param:btl:value:
mca:smsc:base:param:smsc:value:
mca:btl:sm:param:btl_sm_eager_limit:value:4096
mca:btl:vader:param:btl_vader_eager_limit:deprecated:yes
mca:coll:tuned:param:coll_tuned_bcast_algorithm:enumerator:value:0:ignore
mca:coll:tuned:param:coll_tuned_bcast_algorithm:enumerator:value:1:basic_linear
mca:coll:tuned:pvar:coll_tuned_x:value:1
"""
PRTE_INFO = """\
                    PRTE: 3.0.11a12025-05-30
               MCA rmaps: ppr (MCA v2.1.0, API v4.0.0, Component v3.0.11)
               MCA rmaps: round_robin (MCA v2.1.0, API v4.0.0, Component
                          v3.0.8)
               MCA rmaps: "rmaps" (current value: "", data source: default,
                          type: string)
               MCA rmaps: "rmaps_default_ranking_policy" (current value: "",
                          data source: default, type: string)
                          Default ranking Policy [slot | node | span | fill]
"""
UCX_INFO = """\
# sysv transport configuration
UCX_SYSV_FIFO_SIZE=64
#
# Comma-separated list of transports to use. The order is not meaningful.
#  - all     : use all the available transports.
#  - sm/shm  : all shared memory transports (mm, cma, knem).
#  - dc/dc_x : dc with accelerated verbs.
#
UCX_TLS=all
UCX_MEM_CUDA_RELOC (deprecated)
"""


def test_the_importer_reads_each_tool_and_round_trips(tmp_path):
    version, names = paramlists.ompi_info(OMPI_INFO)
    assert version == "5.0.8"
    assert names["OMPI_MCA_btl"] == ("list", frozenset({"sm", "tcp"}))
    assert names["OMPI_MCA_smsc"] == (
        "list",
        frozenset(),
    )  # a framework this build has no component of
    assert names["OMPI_MCA_btl_sm_eager_limit"] is None
    assert names["OMPI_MCA_btl_vader_eager_limit"] == ("deprecated", None)
    assert names["OMPI_MCA_coll_tuned_bcast_algorithm"] == (
        "one-of",
        {"0": "ignore", "1": "basic_linear"},
    )
    assert "OMPI_MCA_coll_tuned_x" not in names  # a performance variable, not settable
    pversion, pnames = paramlists.prte_info(PRTE_INFO)
    assert pversion == "3.0.11a1"
    assert pnames["PRTE_MCA_rmaps"] == ("list", frozenset({"ppr", "round_robin"}))
    assert pnames["PRTE_MCA_rmaps_default_ranking_policy"][1] == {
        w: w for w in ("slot", "node", "span", "fill")
    }
    assert paramlists.ucx_transports(UCX_INFO) == {"sysv", "all", "sm", "shm", "dc", "dc_x"}
    assert paramlists.config_names(UCX_INFO) == {
        "UCX_SYSV_FIFO_SIZE": None,
        "UCX_TLS": None,
        "UCX_MEM_CUDA_RELOC": ("deprecated", None),
    }
    names.update(pnames)
    path = tmp_path / "openmpi-5.0.8.txt"
    path.write_text(
        paramlists.render("openmpi", "5.0.8", names, [("build", "test"), ("date", "2025-01-01")])
    )
    back = paramlists.read(path)
    assert (back.library, back.version, back.names) == ("openmpi", "5.0.8", names)


@needs_wheel
def test_the_wheel_list_is_what_the_importer_makes_from_the_wheel_now(tmp_path):
    (written,) = paramlists.import_install(str(ROOT / ".venv"), tmp_path, build="test")
    assert written.name == "openmpi-5.0.8.txt"
    assert paramlists.read(written).names == paramlists.read(LISTS / "openmpi-5.0.8.txt").names


@pytest.fixture(scope="module")
def hello(tmp_path_factory):
    exe = tmp_path_factory.mktemp("mpi") / "hello"
    subprocess.run(
        [str(BIN / "mpicc"), "-O1", "-o", str(exe), str(ROOT / "tests/mpi/hello.c")], check=True
    )
    return exe


def mpirun(hello, env, *args, np=2):
    import os

    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PRTE_", "UCX_", "PMIX_"))
    }
    full.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    proc = subprocess.run(
        [str(BIN / "mpirun")] + list(args) + ["-np", str(np), str(hello)],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout


@needs_wheel
def test_ucx_warns_about_a_name_the_list_lacks_and_not_about_the_ones_it_has(hello):
    ucx = paramlists.read(LISTS / "ucx-1.18.1.txt").names
    # The UCX names envmap emits for the local site, with values it emits, and one misspelling.
    env = {
        "UCX_TLS": "self,posix",
        "UCX_RNDV_THRESH": "32kb",
        "UCX_ZCOPY_THRESH": "128kb",
        "UCX_RNDV_THRESHOLD": "8kb",
    }
    assert (
        all(n in ucx for n in env if n != "UCX_RNDV_THRESHOLD") and "UCX_RNDV_THRESHOLD" not in ucx
    )
    code, out = mpirun(
        hello,
        dict(env, OMPI_MCA_pml="ucx", OMPI_MCA_pml_ucx_tls="any", OMPI_MCA_pml_ucx_devices="any"),
    )
    assert code == 0, out
    unused = set(re.findall(r"unused environment variable: (UCX_\w+)", out))
    assert unused == {"UCX_RNDV_THRESHOLD"}, out
    # UCX's own suggestion is a name of the list
    assert set(re.findall(r"maybe: (UCX_\w+)\?", out)) <= set(ucx), out


@needs_wheel
def test_open_mpi_refuses_a_component_the_list_lacks_and_skips_it_in_an_exclusion(hello):
    smsc = paramlists.read(LISTS / "openmpi-5.0.8.txt").names["OMPI_MCA_smsc"][1]
    assert "xpmem" not in smsc and "cma" in smsc
    # One rank: with two, the second may wait for the first's abort for ever.
    code, out = mpirun(hello, {"OMPI_MCA_smsc": "xpmem"}, np=1)
    # (the "requested component was not found" help text is sometimes lost in the abort)
    assert code != 0 and re.search(
        r"A requested component was not found|error occurred in MPI_Init", out
    ), out
    code, out = mpirun(
        hello, {"OMPI_MCA_smsc": "^cma,xpmem,knem,accelerator"}
    )  # what envmap's smsc=none sets
    assert code == 0, out


@needs_wheel
def test_prrte_reads_the_stand_in_binding_name_and_not_a_misspelling(hello):
    code, out = mpirun(
        hello, {"PRTE_MCA_hwloc_default_binding_policy": "none"}, "--report-bindings"
    )
    assert code == 0 and re.search(r"Rank \d is not bound", out), out
    code, out = mpirun(hello, {"PRTE_MCA_hwloc_default_binding_polcy": "none"}, "--report-bindings")
    assert code == 0 and re.search(r"Rank \d bound to", out), out


def test_open_mpi_4_gets_the_names_it_reads():
    """Found by this check: Open MPI 4.1 has btl vader (not sm), vader's single-copy mechanism (not
    smsc), and an mpirun (ORTE) that reads no PRTE_MCA_ variable (known-params/openmpi-4.1.4.txt)."""
    import dataclasses

    nagoya = sites.load_named("nagoya-flow-type2")
    values = {"btl_sm_eager_limit": 8192, "smsc": "none", "mapping": "cyclic"}
    env, notes = envmap.knob_env(nagoya, values, True)
    assert dict(env) == {
        "SLURM_DISTRIBUTION": "block:cyclic",
        "OMPI_MCA_btl_vader_eager_limit": "8192",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    }
    assert [
        n
        for n in notes
        if n.startswith("PRTE_MCA_ placement not set: Open MPI 4.1.2's mpirun (ORTE)")
    ]
    five = dataclasses.replace(nagoya, mpi_version="5.0.6")
    env, _ = envmap.knob_env(five, values, True)
    assert (
        env["OMPI_MCA_btl_sm_eager_limit"] == "8192"
        and env["OMPI_MCA_smsc"] == "^cma,xpmem,knem,accelerator"
    )
    assert env["PRTE_MCA_rmaps_default_mapping_policy"] == "numa"


@pytest.mark.parametrize(
    "tls,multi_node,is_set",
    [
        ("self,posix", False, True),  # shared memory: meaningful on one node
        ("self,posix", True, True),
        ("self,tcp", True, True),  # sockets: every site's nodes have them
        ("self,tcp,posix", True, True),
        ("self,tcp", False, False),  # one node of this site needs no sockets table row
        ("rc,self,posix", True, False),  # RDMA: only where the site has that network
        ("^tcp", True, False),
    ],
)
def test_ucx_tls_is_set_where_the_sites_nodes_have_those_transports(tls, multi_node, is_set):
    """Issue 41: a 2 x 1 space gives UCX (UCC's transport) `self,tcp` on local-source, a site without
    an RDMA network: namespace hosts share a kernel, and UCX would take them for one node."""
    site = sites.load_named("local-source")
    assert not site.network_transports
    env, notes = envmap.knob_env(site, {"ucx_tls": tls}, multi_node)
    assert (env.get("UCX_TLS") == tls) == is_set, (env, notes)
    assert is_set or [n for n in notes if n.startswith("UCX_TLS %s not set" % tls)], notes
