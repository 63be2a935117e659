"""Algorithm bands end to end. A table whose collectives carry coll_tuned `bands`
(tests/fixtures/tables/bands.yaml, site "bands": the local site's config with that table) renders
one checked rules file per geometry beside the tuned module, in
modulefiles/<site>/<tuned>/__<version>.rules/<nodes>x<ppn>.rules (a folder real Lmod never walks);
the module points Open MPI at it with an absolute path found at load from myFileName(); explain
says exactly the same, also between rows, after the tree moved and with the file deleted; unload
restores everything; and with the real Open MPI 5.0.8 wheel the algorithm each band names is the
one that runs (traffic fingerprints, as tests/test_rulesfile_real_mpi.py). About 20 s."""

import dataclasses
import os
import shlex
import shutil
import statistics
import subprocess
import warnings

import pytest

import lmod
from conftest import FIXTURES, ROOT
from ompi_lookup import select
from tunedmpi.errors import InputError
from tunedmpi.files import write_atomic
from tunedmpi.modules import explain, render, selector, sites
from tunedmpi.tables import rulesfile

FIXTURE = FIXTURES / "tables" / "bands.yaml"
PLATFORM, SITE, VERSION = "bands-fixture", "bands", "5.0.8"
TUNED, BASE = "openmpi-tuned/%s" % VERSION, "openmpi/%s" % VERSION
RULES_DIR = "%s/openmpi-tuned/__%s.rules" % (SITE, VERSION)
USE, FILE = render.RULES_VARS
BIN = ROOT / ".venv" / "bin"
needs_lmod = pytest.mark.skipif(
    not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"
)
needs_mpi = pytest.mark.skipif(
    not (BIN / "mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(root, site): a project root holding the fixture table and a site config that uses it."""
    root = tmp_path_factory.mktemp("project")
    table = root / "tuning-tables" / PLATFORM / ("openmpi-%s.yaml" % VERSION)
    table.parent.mkdir(parents=True)
    shutil.copy(FIXTURE, table)
    text = (ROOT / "site-configs" / "local" / "site.yaml").read_text(encoding="utf-8")
    for old, new in (
        ("site: local", "site: " + SITE),
        ("table: local/openmpi-5.0.8", "table: %s/openmpi-%s" % (PLATFORM, VERSION)),
        ("prefix: .venv", "prefix: %s" % (ROOT / ".venv")),
    ):
        assert old in text
        text = text.replace(old, new)
    conf = root / "site-configs" / SITE / "site.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEDMPI_ROOT", str(root))
        site = sites.load_named(SITE)
    return root, site


def write_tree(site, out):
    """What `tunedmpi render --out OUT` writes for the site; returns the tuned module's path."""
    for rel, text in render.render_site(site).items():
        write_atomic(out / rel, text)
        render.make_executable(out / rel)
    return out / SITE / "openmpi-tuned" / ("%s.lua" % VERSION)


def banded(site):
    return site.table.algorithm_bands()


def test_one_checked_rules_file_per_geometry_with_bands_beside_the_module(project, tmp_path):
    _, site = project
    files = render.render_site(site)
    assert list(files) == [
        "%s/1x2.rules" % RULES_DIR,
        "%s/1x4.rules" % RULES_DIR,
        "%s/2x4.rules" % RULES_DIR,
        "%s/openmpi-tuned/%s.lua" % (SITE, VERSION),
        "%s/openmpi/%s.lua" % (SITE, VERSION),
    ] + (
        # the local site's config, copied, also renders Tcl modules (module_formats): same rules files
        ["%s/openmpi-tuned/%s" % (SITE, VERSION), "%s/openmpi/%s" % (SITE, VERSION)]
        if "tcl" in site.module_formats
        else []
    ) + [  # the launch checks in the module's side folder (selector.SEEN), then the peers'
        "%s/bin/%s" % (RULES_DIR, launcher) for launcher in selector.LAUNCHERS
    ] + [  # modules (site.yaml peers:), each in every format
        "%s/%s/%s%s" % (SITE, peer.module, peer.version, ext)
        for peer in site.peers
        for ext in [".lua"] + ([""] if "tcl" in site.module_formats else [])
    ]
    assert render.render_site(site) == files  # deterministic
    for (nodes, ppn), colls in banded(site).items():
        rel = "%s/%dx%d.rules" % (RULES_DIR, nodes, ppn)
        write_atomic(tmp_path / rel, files[rel])
        parsed = rulesfile.check((tmp_path / rel).read_text(), VERSION)  # as Open MPI will read it
        n = nodes * ppn
        assert sorted(parsed.collectives) == sorted(colls)
        for coll, case in colls.items():
            for band in case.bands:
                for size in (band.lo, band.lo + 4, (band.hi or band.lo * 64 + 4096) - 4):
                    rule = select(parsed, coll, n, size)
                    if band.algorithm == 0:
                        assert rule is None
                        continue
                    assert (rule.algorithm, rule.segsize, rule.faninout) == (
                        band.algorithm,
                        band.segsize,
                        band.faninout,
                    ), (rel, coll, size)
                # exactly nodes x ppn ranks: other communicators keep Open MPI's fixed decision
                for other in (n - 1, n + 1):
                    if other >= 2:
                        assert select(parsed, coll, other, band.lo) is None
        text = files[rel]
        assert "from tuning-tables/%s/openmpi-%s.yaml" % (PLATFORM, VERSION) in text
        assert ("coll/han takes allreduce" in text) == (nodes >= 2)
    # the row without bands has no file, and the modulefile names each row's file
    lua = files["%s/openmpi-tuned/%s.lua" % (SITE, VERSION)]
    assert '{ 1, 8, 0, "none", {  } },' in lua and '{ 1, 4, 0, "none", {  }, "1x4.rules" },' in lua


def test_tables_without_bands_have_no_rules():
    """Shipped tables without bands (the seed tables): no rules file, no rules variable (and their
    modules are byte-identical to before: tests/test_render.py test_committed_modulefiles_are_current).
    The local table has bands: exactly its geometry's rules file."""
    for name in sites.site_names():
        site = sites.load_named(name)
        rules = [r for r in render.render_site(site) if "__" in r and "/bin/" not in r]
        if site.table and site.table.algorithm_bands():
            assert rules == [
                "%s/openmpi-tuned/__%s.rules/%dx%d.rules" % (name, site.mpi_version, n, p)
                for n, p in site.table.algorithm_bands()
            ]
            continue
        assert not rules
        if site.table:
            data, names = render.rows_for(site)
            assert FILE not in names and not any(r["rules"] for rows in data.values() for r in rows)


def test_render_cli_writes_and_check_flags_stale_or_missing_rules(
    project, run_cli, tmp_path, monkeypatch
):
    root, _ = project
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    out = tmp_path / "mf"
    code, stdout, err = run_cli("render", "--site", SITE, "--out", out)
    assert code == 0, err
    victim = out / RULES_DIR / "1x4.rules"
    assert "wrote %s" % victim in stdout
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0
    victim.write_text(victim.read_text() + "# edited by hand\n")
    code, _, err = run_cli("render", "--check", "--site", SITE, "--out", out)
    assert code == 1 and "stale" in err and "1x4.rules" in err
    victim.unlink()
    code, _, err = run_cli("render", "--check", "--site", SITE, "--out", out)
    assert code == 1 and "1x4.rules" in err
    assert run_cli("render", "--site", SITE, "--out", out)[0] == 0
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0


def test_a_new_mpi_version_removes_the_old_versions_modules(
    project, run_cli, tmp_path, monkeypatch
):
    """The site's version changes: `render --check` names every file of the old version
    (modules of both formats and its rules files), `render` removes them, and then all match."""
    root = tmp_path / "project"
    shutil.copytree(project[0], root)
    conf = root / "site-configs" / SITE / "site.yaml"
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    out = tmp_path / "mf"
    assert run_cli("render", "--site", SITE, "--out", out)[0] == 0
    old = sorted(str(p.relative_to(out)) for p in out.rglob("*%s*" % VERSION) if p.is_file())
    old += sorted(str(p.relative_to(out)) for p in (out / RULES_DIR).rglob("*") if p.is_file())
    assert "%s/openmpi/%s" % (SITE, VERSION) in old and any(RULES_DIR in p for p in old)
    text = conf.read_text().replace("table: %s/openmpi-%s" % (PLATFORM, VERSION), "table: null")
    conf.write_text(text.replace("version: %s" % VERSION, "version: 5.0.9"))
    code, _, err = run_cli("render", "--check", "--site", SITE, "--out", out)
    assert code == 1
    for rel in old:
        assert "stale: %s/%s is no longer rendered" % (out, rel) in err, (rel, err)
    code, stdout, _ = run_cli("render", "--site", SITE, "--out", out)
    assert code == 0 and all("removed %s/%s" % (out, rel) in stdout for rel in old)
    assert not (out / RULES_DIR).exists() and not list(out.rglob("*%s*" % VERSION))
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0


def test_a_rules_file_open_mpi_would_misread_is_refused_at_render(
    project, run_cli, tmp_path, monkeypatch
):
    root, site = project
    # Bands the site's Open MPI has no algorithm table for: the table's file, line and fix.
    with pytest.raises(InputError) as err:
        render.render_site(dataclasses.replace(site, mpi_version="4.1.2"))
    first = banded(site)[(1, 2)]["alltoall"]
    assert (err.value.path, err.value.line) == (site.table.path, first.bands[0].line)
    assert "no coll_tuned algorithm table for Open MPI 4.1.2" in err.value.problem and err.value.fix
    # A file rulesfile.check refuses (here: a broken writer) is never written.
    good = rulesfile.render

    def broken(rules, version):
        return good(rules, version).replace("\n0 0 0 0 ", "\n1 0 0 0 ", 1)

    monkeypatch.setattr(rulesfile, "render", broken)
    with pytest.raises(InputError) as err:
        render.render_site(site)
    assert (
        err.value.path == "%s/1x2.rules" % RULES_DIR
        and err.value.line
        and "not 0" in err.value.problem
    )
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    code, _, stderr = run_cli("render", "--site", SITE, "--out", tmp_path / "mf")
    assert code == 2 and "1x2.rules:" in stderr and "fix:" in stderr
    assert not (tmp_path / "mf").exists()


def geometry_envs():
    g = lambda n, p, **kw: dict(TUNEDMPI_NODES=str(n), TUNEDMPI_PPN=str(p), **kw)  # noqa: E731
    return [
        {},
        g(1, 2),
        g(1, 4),
        g(1, 3),
        g(1, 6),
        g(1, 8),
        g(2, 4),
        g(4, 4),
        g(2, 2),
        g(1, 16),
        g(1, 4, TUNEDMPI_PROFILE="bcast"),
        g(1, 2, TUNEDMPI_PROFILE="alltoall"),
        g(2, 4, TUNEDMPI_PROFILE="alltoall"),
        g(1, 8, TUNEDMPI_PROFILE="allgather"),
        {"SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "4"},
        {"SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)", "TUNEDMPI_PROFILE": "alltoall"},
        g(1, 0, TUNEDMPI_PROFILE="junk"),
    ]


def conforms(site, paths, module_file, envs):
    results = lmod.load_many(paths, TUNED, envs)
    for env, (got, err) in zip(envs, results):
        want = explain.select(site, env, str(module_file))
        assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (env, err)
        assert "error" not in err.lower() and "Traceback" not in err, (env, err)
    return results


@needs_lmod
def test_lmod_load_equals_explain_between_rows_after_a_move_and_without_the_file(project, tmp_path):
    _, site = project
    module_file = write_tree(site, tmp_path / "modulefiles")
    results = conforms(site, [tmp_path / "modulefiles" / SITE], module_file, geometry_envs())
    env14 = results[2][0]
    assert env14[USE] == "1" and env14[FILE] == str(
        tmp_path / "modulefiles" / RULES_DIR / "1x4.rules"
    )
    assert (
        env14["TUNEDMPI_ROW"] == "allreduce:1x4:rules"
        and " rules=1x4.rules" in env14["TUNEDMPI_SELECTION"]
    )
    assert FILE not in results[5][0]  # 1x8: no bands, no file
    assert (
        results[3][0][FILE].endswith("/1x2.rules")
        and "match=nearest" in results[3][0]["TUNEDMPI_SELECTION"]
    )
    assert (
        results[1][0]["OMPI_MCA_coll_tuned_bcast_algorithm"] == "6"
    )  # forced beside the file: other collective

    # The installed tree moves: the module finds its files where it now is.
    moved = tmp_path / "elsewhere" / "tree"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "modulefiles"), str(moved))
    got = conforms(
        site,
        [moved / SITE],
        moved / SITE / "openmpi-tuned" / ("%s.lua" % VERSION),
        geometry_envs()[1:3],
    )
    assert got[1][0][FILE] == str(moved / RULES_DIR / "1x4.rules")

    # The file is gone: both variables stay unset, the shell is fine, stderr says why, explain agrees.
    (moved / RULES_DIR / "1x4.rules").unlink()
    envs = [
        dict(TUNEDMPI_NODES="1", TUNEDMPI_PPN="4"),
        dict(TUNEDMPI_NODES="1", TUNEDMPI_PPN="4", TUNEDMPI_PROFILE="bcast"),
        dict(TUNEDMPI_NODES="1", TUNEDMPI_PPN="2"),
    ]
    module_file = moved / SITE / "openmpi-tuned" / ("%s.lua" % VERSION)
    got = conforms(site, [moved / SITE], module_file, envs)
    said = "the coll_tuned rules file %s is missing" % (moved / RULES_DIR / "1x4.rules")
    assert any(
        m.startswith(said) for m in explain.select(site, envs[0], str(module_file))["messages"]
    )
    for env, err in got[:2]:
        assert USE not in env and FILE not in env and " rules=missing" in env["TUNEDMPI_SELECTION"]
        assert env["TUNEDMPI_ROW"].endswith(":1x4")
        assert said in " ".join(err.split())
    assert (
        got[2][0][FILE].endswith("/1x2.rules") and got[2][1] == ""
    )  # the others still work, quietly


def env_block(name):
    return "echo '@@%s'; env -0 | tr '\\0' '\\036'; echo" % name


def blocks(stdout):
    """{name: environment} of the env_block() dumps, without Lmod's bookkeeping and the geometry
    the script itself exports."""
    out = {}
    for part in stdout.split("@@")[1:]:
        name, _, rest = part.partition("\n")
        pairs = [item.partition("=") for item in rest.strip("\n").split("\036") if "=" in item]
        out[name] = {
            k: v
            for k, _, v in pairs
            if not k.startswith(("_ModuleTable", "__LMOD", "_LMFILES_", "LOADEDMODULES", "LMOD_"))
            and k not in ("TUNEDMPI_NODES", "TUNEDMPI_PPN", "TUNEDMPI_PROFILE")
        }
    return out


@needs_lmod
def test_unload_restores_everything_whatever_happened_to_the_file(project, tmp_path):
    _, site = project
    write_tree(site, tmp_path / "modulefiles")
    paths = [tmp_path / "modulefiles" / SITE]
    rules14 = tmp_path / "modulefiles" / RULES_DIR / "1x4.rules"
    # (values set before the load stay the user's, never the module's: tests/test_modules_users.py)
    script = "\n".join(
        [
            env_block("before"),
            # 1x2: the rules file and a forced bcast over the user's values; the geometry changes before unload
            "export TUNEDMPI_NODES=1 TUNEDMPI_PPN=2",
            "module load %s" % TUNED,
            env_block("a_loaded"),
            "export TUNEDMPI_NODES=2 TUNEDMPI_PPN=4 TUNEDMPI_PROFILE=bcast",
            "module unload %s" % TUNED,
            "unset TUNEDMPI_NODES TUNEDMPI_PPN TUNEDMPI_PROFILE",
            env_block("a_after"),
            # 1x4: the file disappears between load and unload
            "export TUNEDMPI_NODES=1 TUNEDMPI_PPN=4",
            "module load %s" % TUNED,
            env_block("b_loaded"),
            "mv %s %s.away" % (shlex.quote(str(rules14)), shlex.quote(str(rules14))),
            "module unload %s" % TUNED,
            env_block("b_after"),
            # 1x4: missing at load, back before unload
            "module load %s 2>/dev/null" % TUNED,
            env_block("c_loaded"),
            "mv %s.away %s" % (shlex.quote(str(rules14)), shlex.quote(str(rules14))),
            "module unload %s" % TUNED,
            "unset TUNEDMPI_NODES TUNEDMPI_PPN",
            env_block("c_after"),
            # tuned <-> baseline swap drops the rules variables and brings them back
            "export TUNEDMPI_NODES=1 TUNEDMPI_PPN=4",
            "module load %s" % TUNED,
            env_block("d_tuned"),
            "module load %s" % BASE,
            env_block("d_base"),
            "module swap %s %s" % (BASE, TUNED),
            env_block("d_back"),
            "module unload %s" % TUNED,
            "unset TUNEDMPI_NODES TUNEDMPI_PPN",
            env_block("d_after"),
        ]
    )
    proc = lmod.shell(paths, script)
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    for step in ("a", "b", "c", "d"):
        assert got[step + "_after"] == got["before"], step
    assert got["a_loaded"][USE] == "1" and got["a_loaded"][FILE].endswith("/1x2.rules")
    assert got["a_loaded"]["OMPI_MCA_coll_tuned_bcast_algorithm"] == "6"
    assert got["b_loaded"][FILE] == str(rules14)
    assert USE not in got["c_loaded"] and FILE not in got["c_loaded"]  # untouched
    assert USE not in got["d_base"] and got["d_back"] == got["d_tuned"]
    # quiet by default: only Lmod's family swap speaks (the missing-file load's stderr went to /dev/null)
    assert " ".join(proc.stderr.split()) == 'Lmod is automatically replacing "%s" with "%s".' % (
        TUNED,
        BASE,
    )


@needs_lmod
def test_lmod_never_takes_the_rules_folder_for_a_module(project, tmp_path):
    """Even a file in __<version>.rules/ that looks like a Tcl modulefile is never listed, spidered,
    loadable or chosen as the default version: Lmod skips names that start with "__"."""
    _, site = project
    write_tree(site, tmp_path / "modulefiles")
    (tmp_path / "modulefiles" / RULES_DIR / "decoy").write_text("#%Module\nsetenv DECOY 1\n")
    script = "\n".join(
        [
            "export LMOD_IGNORE_CACHE=1",
            "module -t avail 2>&1; module -t --show_hidden avail 2>&1; module -t spider 2>&1",
            "module -t --show_hidden spider 2>&1; echo @@load",
            "module load openmpi-tuned/__%s.rules/decoy >/dev/null 2>&1 && echo LOADED-RULES"
            % VERSION,
            "module load openmpi-tuned/__%s.rules/1x4 >/dev/null 2>&1 && echo LOADED-RULES"
            % VERSION,
            "module load openmpi-tuned 2>/dev/null; module -t list 2>&1; echo DECOY=${DECOY:-unset}",
        ]
    )
    proc = lmod.shell(
        [tmp_path / "modulefiles" / SITE], script, TUNEDMPI_NODES="1", TUNEDMPI_PPN="4"
    )
    listing, _, loaded = proc.stdout.partition("@@load")
    assert TUNED in listing and "rules" not in listing and "decoy" not in listing
    assert "LOADED-RULES" not in loaded and "DECOY=unset" in loaded
    assert loaded.split("\n")[1:3] == [TUNED, "DECOY=unset"]


# --- the proof with the real Open MPI 5.0.8 wheel -----------------------------------------------

GEOMETRY = (1, 4)  # the fixture's row where every collective has bands: 4 ranks (oversubscribed)


def phases(site):
    """(collective, IMB bytes, band index) for a few sizes in every band of the row."""
    out = []
    for coll, case in sorted(banded(site)[GEOMETRY].items()):
        for k, band in enumerate(case.bands):
            for size in ([64] if band.lo == 0 else [band.lo]) + (
                [band.lo * 16] if band.hi is None else []
            ):
                out.append((coll, size, k))
    return out


def forced(site, k):
    """Every collective of the row forced to the algorithm of its band k (Open MPI's own switch)."""
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    for coll, case in banded(site)[GEOMETRY].items():
        band = case.bands[k]
        env["OMPI_MCA_coll_tuned_%s_algorithm" % coll] = str(band.algorithm)
        used = rulesfile.takes(coll, band.algorithm, VERSION)
        if "segsize" in used:
            env["OMPI_MCA_coll_tuned_%s_algorithm_segmentsize" % coll] = str(band.segsize)
        if "faninout" in used:
            env["OMPI_MCA_coll_tuned_%s_algorithm_chain_fanout" % coll] = str(band.faninout)
    return env


RUN_ENV = dict(
    OMPI_ALLOW_RUN_AS_ROOT="1",
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    OMPI_MCA_pml_monitoring_enable="2",
)


def read_fingerprints(out, n):
    fps = []
    for i in range(n):
        lines = []
        for f in sorted(out.glob("p.%d.*.prof" % i)):
            lines += [
                tuple(line.split("\t"))
                for line in f.read_text().splitlines()
                if line[:2] in ("I\t", "E\t")
            ]
        assert lines, ("no traffic recorded", out, i)
        fps.append(tuple(sorted(lines)))
    return fps


def mpirun(program, out, plist):
    """The command line of one run (4 ranks on 2 cores, under nice); its profiles go to OUT."""
    out.mkdir()
    args = [
        "nice",
        "-n",
        "19",
        "mpirun",
        "--oversubscribe",
        "-np",
        str(GEOMETRY[0] * GEOMETRY[1]),
        str(program),
        str(out / "p"),
    ] + ["%s:%d" % (c, s) for c, s, _ in plist]
    return " ".join(shlex.quote(a) for a in args)


@needs_lmod
@needs_mpi
def test_under_the_module_each_band_runs_the_algorithm_it_names(project, tmp_path):
    _, site = project
    program = tmp_path / "coll_traffic"
    subprocess.run(
        [str(BIN / "mpicc"), "-O1", "-o", str(program), str(ROOT / "tests/mpi/coll_traffic.c")],
        check=True,
    )
    write_tree(site, tmp_path / "modulefiles")
    plist = phases(site)
    nbands = max(k for _, _, k in plist) + 1
    runs = {}
    # References without any module: Open MPI's fixed decision, and each band's algorithm forced.
    for tag, extra in [("default", {})] + [
        ("forced%d" % k, forced(site, k)) for k in range(nbands)
    ]:
        env = lmod.clean_env(**RUN_ENV)
        env.update(extra)
        env["PATH"] = "%s:%s" % (BIN, env["PATH"])
        proc = subprocess.run(
            mpirun(program, tmp_path / tag, plist),
            shell=True,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, (tag, proc.stderr[-3000:])
        runs[tag] = read_fingerprints(tmp_path / tag, len(plist))
    # The module, loaded by real Lmod for the row's geometry, then mpirun from the module's MPI.
    script = 'module load %s && type -ap mpirun | sed -n 2p && echo "$%s" && %s' % (
        TUNED,
        FILE,
        mpirun(program, tmp_path / "module", plist),
    )
    proc = lmod.shell(
        [tmp_path / "modulefiles" / SITE],
        script,
        TUNEDMPI_NODES=str(GEOMETRY[0]),
        TUNEDMPI_PPN=str(GEOMETRY[1]),
        **RUN_ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == str(BIN / "mpirun") and lines[1] == str(
        tmp_path / "modulefiles" / RULES_DIR / "1x4.rules"
    )
    runs["module"] = read_fingerprints(tmp_path / "module", len(plist))
    visible = set()
    for i, (coll, size, k) in enumerate(plist):
        assert runs["module"][i] == runs["forced%d" % k][i], (
            "%s at %d B under the module ran other than band %d's algorithm" % (coll, size, k)
        )
        if runs["forced%d" % k][i] != runs["default"][i] and all(
            runs["forced%d" % j][i] != runs["forced%d" % k][i] for j in range(nbands) if j != k
        ):
            visible.add((coll, k))
    # In every band of every collective the named algorithm leaves traffic that neither Open MPI's
    # own choice nor the other band's algorithm leaves: the equality above can fail.
    assert visible == {
        (c, k) for c, case in banded(site)[GEOMETRY].items() for k in range(len(case.bands))
    }


# --- load time ---------------------------------------------------------------------------------

LOADS = 25


@needs_lmod
def test_load_time_with_rules_stays_within_30_ms_of_the_baseline(
    project, tmp_path, capsys, request
):
    """Median of 25 fresh-shell loads each, measured in interleaved rounds (one load of every case per
    round, so a slow spell of this host hits all cases alike): the bands module on a row with its
    rules file, the same module on a row without, the shipped local tuned module and the untuned
    baseline. A timing is a report here, not a gate (a 2-core CI host has slow spells): over 30 ms
    warns, and fails only with TUNEDMPI_NOISE_GATE=1 (a quiet machine)."""
    _, site = project
    write_tree(site, tmp_path / "modulefiles")
    cases = {
        "rules (1x4)": (tmp_path / "modulefiles" / SITE, TUNED, "1", "4"),
        "bands module, no-rules row (1x8)": (tmp_path / "modulefiles" / SITE, TUNED, "1", "8"),
        "shipped local tuned": (ROOT / "modulefiles" / "local", TUNED, "1", "2"),
        "untuned baseline": (ROOT / "modulefiles" / "local", BASE, "1", "2"),
    }
    one = (
        "s=$(date +%%s%%N); ( MODULEPATH=%s TUNEDMPI_NODES=%s TUNEDMPI_PPN=%s module load %s ) >/dev/null 2>&1; "
        "e=$(date +%%s%%N); echo %s $(( (e - s) / 1000 ))"
    )
    body = "; ".join(
        one % (shlex.quote(str(path)), nodes, ppn, module, i)
        for i, (path, module, nodes, ppn) in enumerate(cases.values())
    )
    proc = lmod.shell(
        [ROOT / "modulefiles" / "local"], "for r in $(seq %d); do %s; done" % (LOADS, body)
    )
    times = {i: [] for i in range(len(cases))}
    for line in proc.stdout.split("\n"):
        if line.strip():
            i, t = line.split()
            times[int(i)].append(int(t) / 1000.0)
    assert all(len(v) == LOADS for v in times.values()), proc.stderr
    medians = {name: statistics.median(times[i]) for i, name in enumerate(cases)}
    if request.config.getoption("verbose") > 0:
        with capsys.disabled():
            print(
                "\nmodule load, median of %d (ms): %s"
                % (LOADS, ", ".join("%s %.1f" % kv for kv in medians.items()))
            )
    over = {
        ref: medians["rules (1x4)"] - medians[ref]
        for ref in ("untuned baseline", "shipped local tuned")
        if medians["rules (1x4)"] - medians[ref] >= 30.0
    }
    if over and os.environ.get("TUNEDMPI_NOISE_GATE") == "1":
        pytest.fail(
            "module load with rules is 30 ms or more slower than %s: %s"
            % (", ".join(over), medians)
        )
    if over:
        warnings.warn(
            "module load with rules %s ms slower than %s (host noise? rerun with TUNEDMPI_NOISE_GATE=1 "
            "on a quiet machine): %s"
            % (", ".join("%.0f" % v for v in over.values()), ", ".join(over), medians)
        )
