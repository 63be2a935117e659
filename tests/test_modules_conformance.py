"""Conformance: for hundreds of (geometry, environment) cases over every shipped site, real Lmod's
`module load` yields exactly the environment `tunedmpi explain` (the Python twin) predicts."""

import dataclasses
import os
import random
import time

import pytest

import envmodules
import lmod
from conftest import ROOT
from tunedmpi.modules import explain, render, selector, sites

pytestmark = pytest.mark.skipif(
    not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"
)

JUNK = ["", "0", "-1", "abc", "2.5", "99999999", " 4", "1e3", "0x10", "4\n", "010", "0000000"]
CASES_PER_SITE = 70  # + the empty environment; tests/test_modules_tcl.py runs the same grid


# Names rows set (and one that is no name at all) for TUNEDMPI_SKIP and values set before the load.
OWN = [
    "UCX_TLS",
    "UCX_RNDV_THRESH",
    "OMPI_MCA_pml",
    "OMPI_MCA_coll_hcoll_enable",
    "PRTE_MCA_hwloc_default_binding_policy",
    "NOT_SET_HERE",
    "bogus;$(x)",
]


def expected(env, want):
    """What a load in ``env`` leaves in the watched variables: the ones set before, then the
    module's (explain's ``want``)."""
    out = {k: v for k, v in env.items() if k.startswith(lmod.WATCHED)}
    return dict(out, **want["env"], TUNEDMPI_SELECTION=want["selection"])


def value(rng, good):
    return rng.choice(good) if rng.random() < 0.75 else rng.choice(JUNK)


def cases(rng, tmp_path, profiles, n):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("cn1\n" * 36 + "cn2\n" * 36 + "cn3\n" * 20)
    counts = ["1", "2", "3", "4", "6", "8", "16", "32", "36", "48", "64", "128", "256", "300"]
    out = [{}]
    for _ in range(n):
        env = {}
        kind = rng.randrange(7)
        if kind == 0:
            env["TUNEDMPI_NODES"] = value(rng, counts)
            env["TUNEDMPI_PPN"] = value(rng, counts)
        if kind in (1, 6):
            env["SLURM_JOB_NUM_NODES" if rng.random() < 0.5 else "SLURM_NNODES"] = value(
                rng, counts
            )
            pick = rng.randrange(3)
            if pick == 0:
                env["SLURM_NTASKS_PER_NODE"] = value(rng, counts)
            elif pick == 1:
                env["SLURM_TASKS_PER_NODE"] = rng.choice(
                    ["36(x2),20", "8", "16(x4)", "2,4(x3)", "x(2)", ""]
                )
            else:
                env["SLURM_NTASKS"] = value(rng, counts)
            if kind == 6:
                env["TUNEDMPI_PPN"] = value(rng, counts)
        if kind == 2:
            if rng.random() < 0.5:
                env["PBS_NUM_NODES"], env["PBS_NUM_PPN"] = value(rng, counts), value(rng, counts)
            else:
                env["PBS_NODEFILE"] = rng.choice([str(nodefile), str(tmp_path / "missing"), ""])
        if kind == 3:
            env["LSB_MCPU_HOSTS"] = rng.choice(
                ["a 36 b 36", "a 8", "a 16 b 16 c 16 d 16", "a 36 b", "a x b 2", "a 4 a 4"]
            )
        if kind == 4:
            env["FLUX_JOB_NNODES"], env["FLUX_JOB_SIZE"] = value(rng, counts), value(rng, counts)
        if rng.random() < 0.35:  # threads per rank (selector.THREADS): hybrid jobs
            name = rng.choice(
                ["SLURM_CPUS_PER_TASK", "NCPUS", "OMP_NUM_THREADS", "TUNEDMPI_THREADS"]
            )
            env[name] = value(rng, ["1", "2", "4", "36", "72"])
        if rng.random() < 0.25:  # users in control (selector.SKIP): opt-outs, values set before
            some = rng.sample(OWN, rng.randrange(1, 4))
            env["TUNEDMPI_SKIP"] = rng.choice([",", " , ", " "]).join(some)
        if rng.random() < 0.2:
            env[rng.choice(OWN[:-1])] = rng.choice(["user", ""])
        if rng.random() < 0.3:
            env["TUNEDMPI_PROFILE"] = rng.choice(profiles + ["bogus", ""])
        out.append(env)
    return out


def mpis():
    """(site, tuned module name) of every tuned module render writes: each site's MPI and its HPC-X
    alternative (sites.Site.mpis)."""
    return [
        (name, mpi.tuned_module)
        for name in sites.site_names()
        for mpi in sites.load_named(name).mpis()
    ]


def load_mpi(site_name, tuned):
    return next(m for m in sites.load_named(site_name).mpis() if m.tuned_module == tuned)


@pytest.mark.parametrize("site_name,tuned", mpis())
def test_lmod_load_equals_explain(site_name, tuned, tmp_path):
    site = load_mpi(site_name, tuned)
    profiles = sorted({c.collective for c in site.table.cases}) if site.table else ["allreduce"]
    envs = cases(random.Random(site_name), tmp_path, profiles, CASES_PER_SITE)  # one grid per site
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    paths = lmod.site_modulepaths(site, tmp_path, ROOT)
    results = lmod.load_many(paths, module, envs)
    for env, (got, err) in zip(envs, results):
        assert got == expected(env, explain.select(site, env)), (env, err)
        assert "Traceback" not in err and "error" not in err.lower(), (env, err)


def test_at_least_200_cases_are_compared():
    assert len(sites.site_names()) * (CASES_PER_SITE + 1) >= 280


def test_the_grid_reaches_outside_the_table(tmp_path):
    """The grid both twins are held to holds geometries outside OCI's table (selector's outside
    rule, issue 50): ppn above its 36 cores and rows extrapolated; the site's choices are held
    equal in tests/test_modules_outside.py."""
    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    profiles = sorted({c.collective for c in site.table.cases})
    envs = cases(random.Random(site.name), tmp_path, profiles, CASES_PER_SITE)  # the site's grid
    selections = [explain.select(site, env)["selection"] for env in envs]
    assert sum(" ppn>cores=36 " in s for s in selections) >= 5
    assert sum(" match=extrapolated" in s for s in selections) >= 5


def twins(site, tmp_path):
    """(name, load_many-like function, module file explain should assume) for each module system
    here: Lmod on the committed tree; Environment Modules on a Tcl render, where it is unpacked."""
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    out = [
        (
            "lmod",
            lambda envs: lmod.load_many(
                lmod.site_modulepaths(site, tmp_path, ROOT), module, envs, timeout=60
            ),
            None,
        )
    ]
    if envmodules.available():
        from test_modules_tcl import tcl_tree

        tsite, paths, module_file = tcl_tree(site, tmp_path / "tcl")
        out.append(
            ("tcl", lambda envs: envmodules.load_many(paths, module, envs, timeout=60), module_file)
        )
    return out


def test_a_nodefile_that_is_no_regular_file_falls_back_at_once(tmp_path):
    """PBS_NODEFILE as a FIFO (opening it blocks), through a link, a directory, /dev/zero (never
    ends) or a regular file over selector.NODEFILE_MAX_BYTES: every twin takes the site default,
    and each load returns at once (a blocked one fails after 60 s, not never)."""
    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    fifo, folder, big = tmp_path / "fifo", tmp_path / "folder", tmp_path / "big"
    os.mkfifo(fifo)
    os.symlink(fifo, tmp_path / "link")
    folder.mkdir()
    with open(big, "wb") as fh:  # hosts at the start, then sparse
        fh.write(b"cn1\ncn2\n")
        fh.truncate(selector.NODEFILE_MAX_BYTES + 1)
    odd = [fifo, tmp_path / "link", folder, "/dev/zero", big]
    envs = [{"PBS_NODEFILE": str(path)} for path in odd]
    for name, load_many, module_file in twins(site, tmp_path):
        start = time.monotonic()
        results = load_many(envs)
        assert time.monotonic() - start < 30, name
        for env, (got, err) in zip(envs, results):
            want = explain.select(site, env, module_file)
            assert want["geometry"].source == "default", env
            assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (name, env, err)
            assert "error" not in err.lower(), (name, env, err)


def test_an_unknown_profile_is_named_cut_in_every_twin(tmp_path):
    """A 10,000-character TUNEDMPI_PROFILE is named by its first selector.PROFILE_SHOWN characters;
    one that is no word is "?"; Lmod, Environment Modules and explain say the same."""
    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    long = "x" * 10000
    envs = [{"TUNEDMPI_PROFILE": long}, {"TUNEDMPI_PROFILE": "no;such"}]
    shown = ["x" * selector.PROFILE_SHOWN + "...", "?"]
    for name, load_many, module_file in twins(site, tmp_path):
        for env, want_shown, (got, err) in zip(envs, shown, load_many(envs)):
            said = "TUNEDMPI_PROFILE=%s has no table rows here; using %s" % (
                want_shown,
                site.default_profile,
            )
            assert said in explain.select(site, env, module_file)["messages"]
            assert said in " ".join(err.split()), (name, err)
            assert long[: selector.PROFILE_SHOWN + 1] not in err, name


# A site of two node types (site.yaml node_types), rendered into a test tree: not a shipped site.
TWO_PARTITIONS = ROOT / "tests" / "fixtures" / "sites" / "two-partitions" / "site.yaml"
PARTITION_VARIABLES = [var for _, var in selector.PARTITIONS] + ["SITE_PARTITION"]
PARTITION_VALUES = [
    "cpu",
    "debug",
    "large",
    "large.long",
    "gpu",
    "LARGE",
    "large;x",
    "large ",
    "$(id)",
]


def two_partitions(tmp_path, fmt):
    """The two-node-type site rendered in format ``fmt`` into tmp_path/mf: (site, modulepaths,
    the tuned module's file, its name)."""
    site = dataclasses.replace(sites.load_site(str(TWO_PARTITIONS)), module_formats=(fmt,))
    for rel, text in render.render_site(site).items():
        path = tmp_path / "mf" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        render.make_executable(path)
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    return (
        site,
        [tmp_path / "mf" / site.name],
        explain.modulefile(site, tmp_path / "mf", fmt),
        module,
    )


def partition_cases(tmp_path):
    """Each partition variable alone with each value (the node types' partitions, unknown and
    hostile ones: code for the shell, Tcl and Lua patterns, a newline, 10,000 characters), none,
    two at once, TUNEDMPI_NODE_TYPE good and bad, then the geometry grid with partition variables
    drawn at random. Nothing in them may run: tmp_path/ran must not appear."""
    ran = tmp_path / "ran"
    hostile = ["[exec touch %s]" % ran, "$(touch %s)" % ran, "`touch %s`" % ran, "%a", "large\n"]
    out = [{}]
    out += [{var: value} for var in PARTITION_VARIABLES for value in hostile + ["l" * 10000]]
    out += [{var: value} for var in PARTITION_VARIABLES for value in PARTITION_VALUES]
    out += [
        {"SLURM_JOB_PARTITION": "debug", "PBS_QUEUE": "large"},
        {"SLURM_JOB_PARTITION": "gpu", "LSB_QUEUE": "large.long"},
        {"TUNEDMPI_NODE_TYPE": "large"},
        {"TUNEDMPI_NODE_TYPE": "cpu", "SLURM_JOB_PARTITION": "large"},
        {"TUNEDMPI_NODE_TYPE": "bogus", "SLURM_JOB_PARTITION": "large"},
        {"TUNEDMPI_NODE_TYPE": "large;x"},
        {"TUNEDMPI_NODE_TYPE": "x" * 10000, "PBS_QUEUE": "large"},
        {"TUNEDMPI_NODE_TYPE": "[exec touch %s]" % ran},
    ]
    rng = random.Random("two-partitions")
    for env in cases(rng, tmp_path, ["allreduce", "bcast", "bogus"], 40):
        for var in rng.sample(PARTITION_VARIABLES, rng.randrange(3)):
            env[var] = rng.choice(PARTITION_VALUES)
        out.append(env)
    return out


def test_a_two_partition_site_loads_in_lmod_what_explain_predicts(tmp_path):
    """Every partition variable and none: real Lmod loads the row of the node type `tunedmpi
    explain` picks (TUNEDMPI_SELECTION, TUNEDMPI_ROW and TUNEDMPI_SEEN name it), and says the
    same of a TUNEDMPI_NODE_TYPE that names no node type."""
    site, paths, module_file, module = two_partitions(tmp_path, "lua")
    envs = partition_cases(tmp_path)
    assert_node_types_conform(site, module_file, envs, lmod.load_many(paths, module, envs))
    assert not (tmp_path / "ran").exists()


def assert_node_types_conform(site, module_file, envs, results):
    """Each load equals explain's prediction and says its TUNEDMPI_NODE_TYPE message; the grid
    reached each node type from each of its sources (the default only for the default)."""
    picked, said = set(), 0
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, module_file)
        assert got == expected(env, want), (env, err)
        note = explain.node_type_message(site, env)
        if note:
            assert note in " ".join(err.split()), (env, err)
            said += 1
        assert "error" not in err.lower(), (env, err)
        picked.add(want["selection"].split()[1])
    sources = [source for source, _ in site.node_type_variables()] + ["explicit"]
    want = {"node_type=%s:%s" % (t, s) for t in ("cpu", "large") for s in sources}
    assert picked == want | {"node_type=cpu:default"} and said >= 2
