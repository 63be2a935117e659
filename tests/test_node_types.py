"""One site, several node types (site.yaml node_types; selector's node-type rule): `tunedmpi check`
refuses a bad node_types block naming file, key and fix; render writes each node type's rules
files under its own name; with real Lmod and Environment Modules the launch check re-selects for a
job on another partition than the one the module was loaded for, `module reload` picks that partition's
node type, and unload in yet another partition gives back exactly what was there. The twins'
agreement over the grid of partition variables: tests/test_modules_conformance.py and
tests/test_modules_tcl.py (two_partitions)."""

import re
import shutil

import pytest

import envmodules
import lmod
from conftest import FIXTURES, ROOT
from test_modules_conformance import TWO_PARTITIONS, two_partitions
from tunedmpi.modules import explain, install, render, sites

BIN = ROOT / ".venv" / "bin"
TEXT = TWO_PARTITIONS.read_text(encoding="utf-8")


def site_copy(tmp_path, old, new):
    """The two-partition site.yaml with ``old`` replaced by ``new``, in a folder of its name."""
    assert old in TEXT
    path = tmp_path / "two-partitions" / "site.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(TEXT.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "old,new,key,problem,fix",
    [
        (
            "table: oci-bm-standard-e6.256/openmpi-5.0.6",
            "table: nowhere/openmpi-5.0.6",
            "node_types.types[1].table",
            "no table",
            "name an existing table",
        ),
        (
            "table: oci-bm-standard-e6.256/openmpi-5.0.6",
            "table: nagoya-flow-type2/openmpi-4.1.2",
            "node_types.types[1].table",
            "Open MPI 4.1.2 is not mpi.version 5.0.6",
            "measured with Open MPI 5.0.6",
        ),
        (
            "partitions: [large, large.long]",
            "partitions: [large, debug]",
            "node_types.types[1].partitions[1]",
            "duplicate partition debug: node types cpu and large list it",
            "list each partition under one node type",
        ),
        (
            "  default: cpu\n",
            "",
            "node_types.default",
            "missing or unknown default node type None",
            "one of: cpu, large",
        ),
        (
            "default: cpu",
            "default: gpu",
            "node_types.default",
            "unknown default node type 'gpu'",
            "one of: cpu, large",
        ),
        (
            "partitions: [large, large.long]",
            'partitions: [large, "$(id)"]',
            "node_types.types[1].partitions[1]",
            "not a plain name",
            "letters, digits",
        ),
        (
            "variable: SITE_PARTITION",
            'variable: "X; rm"',
            "node_types.variable",
            "not an environment variable name",
            "SITE_PARTITION",
        ),
        (
            "- {name: cpu,",
            "- {name: large,",
            "node_types.types[1].name",
            "node type large is named twice",
            "name each once",
        ),
    ],
)
def test_check_refuses_a_bad_node_types_block_naming_file_key_and_fix(
    tmp_path, run_cli, old, new, key, problem, fix
):
    path = site_copy(tmp_path, old, new)
    code, out, err = run_cli("check", path)
    assert code == 2, out
    line = next(line for line in err.splitlines() if key + ":" in line)
    assert line.startswith("error: %s:" % path) and problem in line and fix in line, err


def test_check_passes_the_two_partition_site_and_names_its_node_types(run_cli):
    code, out, err = run_cli("check", TWO_PARTITIONS)
    assert code == 0, err
    assert "node types cpu (oci-bm-optimized3.36/openmpi-5.0.6, default)" in out
    assert "large (oci-bm-standard-e6.256/openmpi-5.0.6)" in out


def test_each_node_type_has_its_own_rules_files(tmp_path, monkeypatch):
    """Two node types whose tables both have bands at 1x4: two files, each named by its node type,
    each row pointing at its own; a node type's file render no longer writes is stale."""
    root = tmp_path / "root"
    for platform in ("bands-a", "bands-b"):
        table = root / "tuning-tables" / platform / "openmpi-5.0.8.yaml"
        table.parent.mkdir(parents=True)
        text = (FIXTURES / "tables" / "bands.yaml").read_text(encoding="utf-8")
        table.write_text(text.replace("bands-fixture", platform), encoding="utf-8")
    conf = root / "site-configs" / "two" / "site.yaml"
    conf.parent.mkdir(parents=True)
    local = (ROOT / "site-configs" / "local" / "site.yaml").read_text(encoding="utf-8")
    conf.write_text(
        local.replace("site: local", "site: two").replace(
            "local/openmpi-5.0.8", "bands-a/openmpi-5.0.8"
        )
        + "node_types:\n  default: a\n  types:\n  - {name: a, partitions: [pa]}\n"
        "  - {name: b, table: bands-b/openmpi-5.0.8, partitions: [pb]}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    site = sites.load_named("two")
    out = render.render_site(site)
    rules = sorted(rel for rel in out if rel.endswith(".rules"))
    assert "two/openmpi-tuned/__5.0.8.rules/a.1x4.rules" in rules
    assert "two/openmpi-tuned/__5.0.8.rules/b.1x4.rules" in rules
    assert not [r for r in rules if not re.search(r"/[ab]\.[0-9]+x[0-9]+\.rules\Z", r)]
    for partition, name in (("pa", "a"), ("pb", "b")):
        row = explain.select(site, {"SLURM_JOB_PARTITION": partition, "TUNEDMPI_PPN": "4"})["row"]
        assert row["rules"] == "%s.1x4.rules" % name
    tree = tmp_path / "mf"
    for rel, text in out.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    gone = tree / "two" / "openmpi-tuned" / "__5.0.8.rules" / "c.1x4.rules"
    gone.write_text("left by a node type since removed\n")
    assert render.stale_rules(tree, site, set(out)) == [str(gone.relative_to(tree))]


def systems(tmp_path):
    """(name, shell, modulepaths, module) of each real module system, the two-partition site."""
    out = []
    for name, tool, fmt in (("lmod", lmod, "lua"), ("tcl", envmodules, "tcl")):
        if tool.available():
            _, paths, _, module = two_partitions(tmp_path / fmt, fmt)
            out.append((name, tool.shell, paths, module))
    return out


@pytest.mark.skipif(not (BIN / "mpirun").exists(), reason="no Open MPI wheel in .venv (run make)")
@pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed")
def test_a_job_on_another_partition_is_re_selected_at_launch_and_unload_gives_all_back(tmp_path):
    watched = "env | grep -E '^(%s)' | sort" % "|".join(re.escape(w) for w in lmod.WATCHED)
    script = "\n".join(
        [
            "export SLURM_JOB_PARTITION=cpu",
            "%s > /tmp/.nt_before_$$" % watched,
            "module load {module}",
            'echo "@cpu $TUNEDMPI_SELECTION"',
            'mpirun --version >/dev/null 2>/tmp/.nt_$$; echo "@same $(cat /tmp/.nt_$$)"',
            "export SLURM_JOB_PARTITION=large",  # a job on the other partition
            'mpirun --version >/dev/null 2>/tmp/.nt_$$; echo "@other rc=$? $(cat /tmp/.nt_$$)"',
            "module reload >/dev/null 2>&1",
            'echo "@large $TUNEDMPI_SELECTION $TUNEDMPI_ROW"',
            'mpirun --version >/dev/null 2>/tmp/.nt_$$; echo "@reloaded $(cat /tmp/.nt_$$)"',
            "export SLURM_JOB_PARTITION=cpu",  # unload in yet another environment
            "module unload {module} >/dev/null 2>&1",
            "%s | diff /tmp/.nt_before_$$ - && echo '@restored yes'" % watched,
            "rm -f /tmp/.nt_$$ /tmp/.nt_before_$$",
        ]
    )
    for name, shell, paths, module in systems(tmp_path):
        proc = shell(paths, script.format(module=module), PATH="%s:/usr/bin:/bin" % BIN)
        assert proc.returncode == 0, (name, proc.stderr)
        got = dict(line[1:].split(" ", 1) for line in proc.stdout.splitlines() if line[:1] == "@")
        assert "node_type=cpu:slurm" in got["cpu"] and "row=1x36" in got["cpu"], (name, got)
        assert got["same"] == "", (name, got)
        # re-selected for the launch: the other partition's row, and the row it was loaded for
        assert got["other"].startswith("rc=0 ") and "re-selected for this job" in got["other"]
        assert "node_type=large:slurm" in got["other"], (name, got)
        assert "was loaded for " in got["other"] and "node_type=cpu:slurm" in got["other"], got
        assert "node_type=large:slurm" in got["large"] and "row=1x256" in got["large"], name
        assert got["large"].endswith(" large@allreduce:1x256"), (name, got)
        assert got["reloaded"] == "", (name, got)
        assert got.get("restored") == "yes", (name, proc.stdout)


def test_module_help_names_the_node_types_and_what_chooses_them():
    site = sites.load_site(str(TWO_PARTITIONS))
    text = render._help(site, True)
    assert "cpu (default; partitions cpu, debug); large (partitions large, large.long)" in text
    assert "Chosen by SLURM_JOB_PARTITION, PBS_QUEUE, LSB_QUEUE, SITE_PARTITION;" in text
    assert "Node types" not in render._help(sites.load_named("local"), True)


def test_explain_prints_the_node_type(run_cli, monkeypatch, tmp_path):
    """`tunedmpi explain --node-type` (or the partition variables) names the node type chosen."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "tuning-tables", root / "tuning-tables")
    shutil.copytree(TWO_PARTITIONS.parent, root / "site-configs" / "two-partitions")
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    monkeypatch.setenv("PBS_QUEUE", "large.long")
    code, out, _ = run_cli("explain", "--site", "two-partitions")
    assert code == 0 and "node_type=large:pbs nodes=1 ppn=256" in out
    code, out, _ = run_cli("explain", "--site", "two-partitions", "--node-type", "cpu")
    assert code == 0 and "node_type=cpu:explicit nodes=1 ppn=36" in out
    assert "TUNEDMPI_ROW=cpu@allreduce:1x36" in out


def test_install_module_brings_every_node_types_table(tmp_path):
    """Spack's and EasyBuild's install routine copies each node type's table with the site config,
    so the installed module holds both node types' rows."""
    checkout = tmp_path / "checkout"
    shutil.copytree(TWO_PARTITIONS.parent, checkout / "site-configs" / "two-partitions")
    for ref in ("oci-bm-optimized3.36", "oci-bm-standard-e6.256"):
        shutil.copytree(ROOT / "tuning-tables" / ref, checkout / "tuning-tables" / ref)
    share = tmp_path / "prefix" / "share" / "tunedmpi"
    got = install.install(
        str(checkout),
        "two-partitions",
        str(share),
        "spack",
        mpi_prefix="/opt/ompi",
        log=lambda _: None,
    )
    for ref in ("oci-bm-optimized3.36", "oci-bm-standard-e6.256"):
        assert (share / "tuning-tables" / ref / "openmpi-5.0.6.yaml").is_file()
    text = open(got["rendered"]).read()
    assert '["large"] = { 1, 256, "allreduce", 2, {' in text and '["large.long"] = "large"' in text
