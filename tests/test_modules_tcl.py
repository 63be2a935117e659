"""The Tcl twin with real Environment Modules 5: for the same grid of environments as the Lua
conformance test (tests/test_modules_conformance.py) over every site, `module load` of the Tcl
tuned module yields exactly what `tunedmpi explain` predicts; hostile values never break the shell
and never execute; unload and switch to the baseline leave nothing behind; Lmod and Environment
Modules each see exactly one module per name/version in a tree that holds both formats."""

import dataclasses
import random
import re

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import (
    CASES_PER_SITE,
    assert_node_types_conform,
    cases,
    expected,
    load_mpi,
    mpis,
    partition_cases,
    two_partitions,
)
from tunedmpi.modules import explain, render, selector, sites
from tunedmpi.modules.writers import TCL

pytestmark = pytest.mark.skipif(not envmodules.available(), reason=envmodules.WHY_MISSING)
SITES = sites.site_names()
AUTO_HANDLING = re.compile(
    r"^(Loading|Unloading) \S+$|^  (Loading requirement|Unloading useless requirement): \S+$"
)


def tcl_tree(site, tmp_path):
    """The site rendered as Tcl only into tmp_path/mf (every site, whatever its module_formats):
    (the site as rendered, its modulepaths, the tuned module's file)."""
    site = dataclasses.replace(site, module_formats=("tcl",))
    for rel, text in render.render_site(site).items():
        path = tmp_path / "mf" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        render.make_executable(path)  # the launch checks, as `tunedmpi render` writes them
    paths = [tmp_path / "mf" / site.name] + envmodules.site_modulepaths(site, tmp_path, ROOT)[1:]
    return site, paths, explain.modulefile(site, tmp_path / "mf", "tcl")


def names(site):
    return "%s/%s" % (site.tuned_module, site.mpi_version), "%s/%s" % (
        site.baseline_module,
        site.mpi_version,
    )


@pytest.mark.parametrize("site_name,tuned", mpis())
def test_modulecmd_load_equals_explain(site_name, tuned, tmp_path):
    site, paths, module_file = tcl_tree(load_mpi(site_name, tuned), tmp_path)
    profiles = sorted({c.collective for c in site.table.cases}) if site.table else ["allreduce"]
    envs = cases(
        random.Random(site_name), tmp_path, profiles, CASES_PER_SITE
    )  # the Lua test's grid
    results = envmodules.load_many(paths, names(site)[0], envs)
    for env, (got, err) in zip(envs, results):
        assert got == expected(env, explain.select(site, env, module_file)), (env, err)
        assert "ERROR" not in err and "error" not in err.lower(), (env, err)


def test_the_tcl_grid_is_as_large_as_the_lua_one():
    assert len(SITES) * (CASES_PER_SITE + 1) >= 280


# Each is put into every variable the rule reads, and into TUNEDMPI_PROFILE/ROW/VERBOSE.
HOSTILE = [
    "[exec touch {P}]",
    "$(touch {P})",
    "`touch {P}`",
    '"; touch {P}; "',
    "'; touch {P}; '",
    "{{}}}} [exec touch {P}] {{",
    "a\nb",
    "4\n",
    "36(x2);touch {P}",
    "$env(HOME)",
    "${{HOME}}",
    "\\",
    "\\[exec touch {P}\\]",
    "x;y",
    "2 ]]",
    "3 [",
    "8(x2),[exec touch {P}]",
    "\x01\x7f",
    "ノード",
]


def test_hostile_values_never_break_the_shell_and_never_execute(tmp_path):
    site, paths, module_file = tcl_tree(sites.load_named("oci-bm-optimized3.36"), tmp_path)
    pwned = tmp_path / "pwned"
    variables = selector.variables() + ["TUNEDMPI_PROFILE", "TUNEDMPI_ROW", "TUNEDMPI_VERBOSE"]
    envs = []
    for text in HOSTILE:
        value = text.format(P=pwned)
        for name in variables:
            envs.append({name: value})
        envs.append({name: value for name in variables})
    # `extra` runs after each load in the same subshell: the shell must still be alive to say so.
    results = envmodules.load_many(
        paths, names(site)[0], envs, extra="echo @@ALIVE >>/tmp/.lmod_err_$$;"
    )
    broken = [
        (env, err)
        for env, (got, err) in zip(envs, results)
        if "@@ALIVE" not in err
        or re.search(r"syntax error|command not found|unexpected|ERROR", err)
    ]
    assert broken == [] and len(results) == len(envs) >= 280
    assert not pwned.exists()
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, module_file)
        assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (env, err)


def test_tcl_strings_are_inert_data(tmp_path):
    """Help, whatis and every rendered word go through the Tcl writer's string(): tclsh prints them back."""
    pwned = tmp_path / "pwned"
    corpus = [t.format(P=pwned) for t in HOSTILE] + [
        "}",
        "{",
        '"',
        "\\u0041",
        "a\tb\r\n",
        "\U0001f600",
    ]
    script = "".join("puts -nonewline %s\nputs -nonewline \\x00\n" % TCL.string(t) for t in corpus)
    (tmp_path / "s.tcl").write_text(script, encoding="ascii")
    import subprocess

    out = subprocess.run(
        [envmodules.TCLSH, str(tmp_path / "s.tcl")], capture_output=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    got = out.stdout.decode("utf-8").split("\x00")[:-1]
    assert got == [t if t != "\U0001f600" else "\ufffd" for t in corpus]
    assert not pwned.exists()


def test_hostile_site_text_is_shown_verbatim_in_help(tmp_path):
    nasty = 'x [exec touch %s] $(touch %s) {"}\n`id`' % (tmp_path / "p1", tmp_path / "p2")
    site = dataclasses.replace(sites.load_named("local"), description=nasty)
    site, paths, _ = tcl_tree(site, tmp_path)
    tuned, base = names(site)
    proc = envmodules.shell(
        paths, "module help %s; module whatis %s; module load %s; echo ok" % (tuned, base, tuned)
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert nasty in proc.stderr
    assert not (tmp_path / "p1").exists() and not (tmp_path / "p2").exists()


def env_dump(name):
    return "echo '@@%s'; env -0 | tr '\\0' '\\036'; echo" % name


def dumps(stdout):
    out = {}
    for part in stdout.split("@@")[1:]:
        name, _, rest = part.partition("\n")
        pairs = [item.partition("=") for item in rest.strip("\n").split("\036") if "=" in item]
        out[name] = {k: v for k, _, v in pairs if not k.startswith(envmodules.BOOKKEEPING)}
    return out


@pytest.mark.parametrize("site_name,tuned", mpis())
def test_unload_and_switch_leave_nothing_behind(site_name, tuned, tmp_path):
    site, paths, _ = tcl_tree(load_mpi(site_name, tuned), tmp_path)
    tuned, base = names(site)
    script = "\n".join(
        [
            "export UCX_RNDV_THRESH=user-value OMPI_MCA_pml=ob1 TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_dump("start"),
            "module load %s" % tuned,
            env_dump("tuned"),
            # The geometry "changes" before unload: the module must still undo exactly what it set.
            "export TUNEDMPI_NODES=16 TUNEDMPI_PPN=36 TUNEDMPI_PROFILE=alltoall SLURM_NNODES=3",
            "module unload %s" % tuned,
            "unset SLURM_NNODES TUNEDMPI_PROFILE; export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_dump("unloaded"),
            "module load %s" % tuned,
            "module switch %s %s" % (tuned, base),
            env_dump("base"),  # family mpi: switch, not load
            "module switch %s %s" % (base, tuned),
            env_dump("back"),
            "module unload %s" % tuned,
            env_dump("end"),
            "module list -t 2>&1",
        ]
    )
    proc = envmodules.shell(paths, script)
    assert proc.returncode == 0, proc.stderr
    got = dumps(proc.stdout)
    assert got["unloaded"] == got["start"]
    assert got["end"] == got["start"]
    assert got["back"] == got["tuned"]
    assert got["tuned"]["TUNEDMPI_SELECTION"].startswith(
        "site=%s nodes=2 ppn=8 source=explicit" % site.name
    )
    assert "untuned baseline" in got["base"]["TUNEDMPI_SELECTION"]
    tuned_vars = {
        k
        for k in got["tuned"]
        if k.startswith(("UCX_", "OMPI_MCA_", "PRTE_MCA_", "HCOLL_", "SLURM_"))
    }
    assert {k: got["base"].get(k) for k in tuned_vars} == {
        k: got["start"].get(k) for k in tuned_vars
    }
    if site.table:
        assert got["tuned"] != got["start"]
    assert "No Modulefiles Currently Loaded" in proc.stderr or proc.stderr.strip().endswith("")


@pytest.mark.parametrize("site_name,tuned", mpis())
def test_unload_restores_what_was_set_before_the_load(site_name, tuned, tmp_path):
    """As the Lmod test of the same name: values set before the load come back, and unload undoes
    what load set even when the geometry and TUNEDMPI_ROW changed in between."""
    from test_modules_hygiene import BEFORE_LOAD, CHANGED

    site, paths, _ = tcl_tree(load_mpi(site_name, tuned), tmp_path)
    tuned, base = names(site)
    script = "\n".join(
        [
            BEFORE_LOAD + " TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_dump("before"),
            "module load %s" % tuned,
            env_dump("loaded"),
            CHANGED,
            "module unload %s" % tuned,
            "unset SLURM_NNODES TUNEDMPI_PROFILE; export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8",
            env_dump("after"),
            "module load %s; module unload %s" % (base, base),
            env_dump("after_base"),
        ]
    )
    proc = envmodules.shell(paths, script)
    assert proc.returncode == 0, proc.stderr
    got = dumps(proc.stdout)
    assert got["loaded"]["TUNEDMPI_SELECTION"].startswith("site=%s nodes=2" % site.name)
    assert got["after"] == got["before"]
    assert got["after_base"] == got["before"]


@pytest.mark.parametrize("site_name", SITES)
def test_quiet_by_default_and_help_tells_the_choice(site_name, tmp_path):
    site, paths, _ = tcl_tree(sites.load_named(site_name), tmp_path)
    tuned, base = names(site)
    exact = "TUNEDMPI_NODES=%d TUNEDMPI_PPN=%d" % (site.default_nodes, site.default_ppn)
    proc = envmodules.shell(
        paths,
        "( export %s; module load %s; module unload %s; module load %s; module unload %s )"
        % (exact, tuned, tuned, base, base),
    )
    # Environment Modules itself reports the modules it loads and unloads for a depends-on (the
    # site's own MPI module); nothing else may be said.
    ours = [line for line in proc.stderr.splitlines() if not AUTO_HANDLING.match(line)]
    assert proc.returncode == 0 and proc.stdout == "" and ours == []
    proc = envmodules.shell(paths, "module help %s; module whatis %s" % (tuned, base))
    assert proc.returncode == 0 and proc.stdout == ""
    text = proc.stderr
    assert "for site %s" % site.name in text and "docs/users.md" in text
    assert "module switch %s %s" % (tuned, base) in text
    assert "with its own defaults, no tuning (site %s)" % site.name in text


def test_verbose_and_extrapolation_speak_on_stderr(tmp_path):
    site, paths, _ = tcl_tree(sites.load_named("oci-bm-optimized3.36"), tmp_path)
    tuned = names(site)[0]

    def load(**env):
        proc = envmodules.shell(paths, 'module load %s; echo "$TUNEDMPI_SELECTION"' % tuned, **env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip(), " ".join(proc.stderr.split())

    sel, err = load(TUNEDMPI_NODES="2", TUNEDMPI_PPN="8")
    assert "match=exact" in sel and err == ""
    sel, err = load(TUNEDMPI_NODES="2", TUNEDMPI_PPN="8", TUNEDMPI_VERBOSE="1")
    assert "%s: %s" % (tuned, sel) in err
    sel, err = load(TUNEDMPI_NODES="64", TUNEDMPI_PPN="36")
    assert "match=extrapolated" in sel and sel in err
    sel, err = load(TUNEDMPI_PROFILE="no;such")
    assert "TUNEDMPI_PROFILE=? has no table rows here; using %s" % site.default_profile in err


def test_both_systems_see_one_module_per_name_in_a_tree_with_both_formats(tmp_path):
    """The committed local tree holds <version>.lua and <version> side by side: Lmod lists and loads
    the .lua, Environment Modules lists and loads the Tcl file; neither lists the rules folder."""
    site = sites.load_named("local")
    assert site.module_formats == ("lua", "tcl")
    tuned, base = names(site)
    script = 'module -t avail 2>&1; echo @@; module load %s; echo "$_LMFILES_"' % tuned
    for tool, suffix in ((envmodules, ""), (lmod, ".lua")):
        proc = tool.shell(tool.site_modulepaths(site, tmp_path, ROOT), script)
        assert proc.returncode == 0, proc.stderr
        listing, _, loaded = proc.stdout.partition("@@")
        modules = [
            line for line in listing.split() if not line.endswith(":") and not line.endswith("/")
        ]
        peers = ["%s/%s" % (p.module, p.version) for p in site.peers]
        assert sorted(modules) == sorted([base, tuned] + peers), (
            tool.__name__,
            listing,
        )  # once each, no rules files
        assert loaded.strip() == str(
            ROOT / "modulefiles" / "local" / "openmpi-tuned" / ("5.0.8" + suffix)
        )


def test_hpcx_and_open_mpi_switch_cleanly(tmp_path):
    """The committed oci-bm-optimized3.36 tree with Environment Modules: both MPIs listed, and
    switching Open MPI <-> HPC-X (family mpi) leaves nothing behind, the stand-in HPC-X included."""
    site = sites.load_named("oci-bm-optimized3.36")
    assert "tcl" in site.module_formats and site.hpcx
    ompi, ompi_base = names(site)
    tuned, base = names(site.hpcx)
    script = "\n".join(
        [
            "module -t avail 2>&1 | grep -v ':$' | sort",
            env_dump("start"),
            "module load %s" % ompi,
            env_dump("ompi"),
            "module switch %s %s" % (ompi, tuned),
            env_dump("hpcx"),
            "module switch %s %s" % (tuned, base),
            env_dump("hpcx_base"),
            "module switch %s %s" % (base, ompi),
            env_dump("ompi_again"),
            "module unload %s" % ompi,
            env_dump("end"),
        ]
    )
    proc = envmodules.shell(
        envmodules.site_modulepaths(site.hpcx, tmp_path, ROOT),
        script,
        TUNEDMPI_NODES="2",
        TUNEDMPI_PPN="16",
    )
    assert proc.returncode == 0, proc.stderr
    listed = (proc.stdout.split("@@")[0] + proc.stderr).split()
    assert {ompi, ompi_base, tuned, base} <= set(listed)
    got = dumps(proc.stdout)
    assert got["hpcx"]["TUNEDMPI_SELECTION"].startswith("site=%s nodes=2 ppn=16" % site.name)
    assert got["hpcx"]["TUNEDMPI_TEST_BASE_PREFIX"].endswith("stand-in/%s" % site.hpcx.base_module)
    assert "MPI_HOME" not in got["hpcx"]
    assert "untuned baseline" in got["hpcx_base"]["TUNEDMPI_SELECTION"]
    assert not {k for k in got["hpcx"] if k.startswith(("UCX_", "OMPI_MCA_", "SLURM_"))} & set(
        got["hpcx_base"]
    )
    assert "TUNEDMPI_TEST_BASE_PREFIX" not in got["ompi_again"]
    assert got["ompi_again"] == got["ompi"]
    assert got["end"] == got["start"]


def test_a_two_partition_site_loads_in_environment_modules_what_explain_predicts(tmp_path):
    """The Lua test's grid of partition variables: real Environment Modules loads the row of the
    node type `tunedmpi explain` picks, for each partition variable and for none."""
    site, paths, module_file, module = two_partitions(tmp_path, "tcl")
    paths += envmodules.site_modulepaths(site, tmp_path, ROOT)[1:]
    envs = partition_cases(tmp_path)
    results = envmodules.load_many(paths, module, envs)
    assert_node_types_conform(site, module_file, envs, results)
    assert not any("ERROR" in err for _, err in results)
    assert not (tmp_path / "ran").exists()
