"""Issue 42: one safe way to touch files. Each test names the item it keeps fixed; the fuzz over
every file input is in test_files_fuzz.py."""

import os
import shutil
import time

import pytest

from conftest import ROOT, VERDICT_EXITS
from test_fs_hostile import IMB_LOG, cli, needs_mpi, one_line
from tunedmpi import files

# ---- item 2: lock files are never opened through a link nor truncated unless they are locks -----


def plant(kind, at, victim):
    """At `at`, something that is not a lock file: a link to victim, a hard link to it, a FIFO, a
    folder, a regular file with other content."""
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        at.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, at)
    elif kind == "fifo":
        os.mkfifo(at)
    elif kind == "dir":
        at.mkdir()
    else:
        at.write_text("not a lock\n")


KINDS = ["symlink", "hardlink", "fifo", "dir", "other"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_sweep_lock_is_refused_and_the_victim_kept(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    plant(kind, tmp_path / "store" / "c9" / ".sweep.lock", victim)
    proc = cli(
        "ingest", "--site", "local", "--nodes", "1", "--ppn", "2", "--campaign", "c9",
        "--store", tmp_path / "store", IMB_LOG, timeout=60,
    )  # fmt: skip
    assert ".sweep.lock: lock:" in one_line(proc)
    assert victim.read_text() == "precious\n"
    assert sorted(os.listdir(tmp_path / "store" / "c9")) == [".sweep.lock"]


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_planted_render_lock_is_refused_and_the_victim_kept(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    plant(kind, tmp_path / "mods" / ".tunedmpi-render.lock", victim)
    proc = cli("render", "--site", "local", "--out", tmp_path / "mods", timeout=60)
    assert ".tunedmpi-render.lock: lock:" in one_line(proc)
    assert victim.read_text() == "precious\n"


def test_a_lock_folder_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "c9").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError), files.locked(tmp_path / "store" / "c9" / ".sweep.lock", "c9"):
        pass
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_lock_is_taken_again_and_its_holder_line_stays_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["tunedmpi", "sweep\n\x1b[2J", "x"])
    lock = tmp_path / "c" / ".sweep.lock"
    for _ in range(2):  # the second time the file exists and holds the first holder's line
        with files.locked(lock, "c"):
            assert files.HOLDER.match(lock.read_bytes()), lock.read_bytes()


# ---- item 3: install-module checks every input first, then writes everything or nothing ---------


def snapshot(root):
    """{relative path: bytes or 'dir'} of everything under root (links as their target)."""
    seen = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                seen[rel] = "-> " + os.readlink(path)
            else:
                seen[rel] = open(path, "rb").read() if os.path.isfile(path) else "dir"
    return seen


def install(share, *extra):
    return cli(
        "install-module", "--installer", "spack", "--share", share, "--mpi-version", "5.0.8",
        *extra, timeout=60,
    )  # fmt: skip


HOSTILE_INSTALLS = {
    "site": ["--site", "EVIL"],
    "mpi.prefix": ["--site", "local", "--mpi-prefix", "/opt/../../etc\nx"],
    "modules": ["--site", "local", "--modules", "../tuned", "openmpi"],
    "module_formats": ["--site", "local", "--formats", "lua,sh"],
    "ucx_version": ["--site", "local", "--ucx-version", "one.two"],
    "base_module": ["--site", "local", "--base-module", "x/../../y z"],
}


@pytest.mark.parametrize("key", sorted(HOSTILE_INSTALLS))
def test_a_hostile_install_leaves_share_and_its_folder_untouched(tmp_path, key):
    """An earlier install stays byte for byte: nothing is written before every input is checked."""
    share = tmp_path / "p" / "q" / "r" / "share"
    assert install(share, "--site", "local").returncode == 0
    # a site.yaml outside the checkout's site-configs/, named relative to it
    evil = tmp_path / "evil"
    evil.mkdir()
    shutil.copy(ROOT / "site-configs" / "local" / "site.yaml", evil)
    site = os.path.relpath(evil, ROOT / "site-configs")
    before = snapshot(tmp_path)
    proc = install(share, *[site if a == "EVIL" else a for a in HOSTILE_INSTALLS[key]])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert key in proc.stderr.splitlines()[0], proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--site", "../local"],
        ["render", "--site", "../site-configs/local", "--out", "OUT"],
        ["validate", "--site", "../local", "--out", "OUT"],
    ],
    ids=lambda a: a[0],
)
def test_site_of_explain_render_validate_is_a_plain_name(tmp_path, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    line = one_line(cli(*args, timeout=60))
    assert "--site: site: '../" in line and "plain name" in line, line
    assert not (tmp_path / "out").exists()


# ---- item 7: one exception boundary: an OS error is one line and exit 2, STATUS never running ----


@pytest.mark.parametrize("out", ["a-file", "a" * 4300], ids=["existing-file", "4300-chars"])
def test_validate_out_that_cannot_be_a_folder_is_one_line_exit_2(tmp_path, out):
    (tmp_path / "a-file").write_text("x\n")
    proc = cli(
        "validate", "--out", tmp_path / out, "--repetitions", "3", "--benchmarks", "fop_latency",
        timeout=120,
    )  # fmt: skip
    assert "cannot" in one_line(proc)


def test_validate_marks_failed_whatever_ends_it(tmp_path):
    from tunedmpi.acceptance import validate

    def work():
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    with pytest.raises(UnicodeError):
        validate.guarded(tmp_path, work)
    assert validate.read_status(tmp_path).startswith("failed: not UTF-8 text")


# ---- the keeper: no file is opened, copied or locked outside the file layer ---------------------

LAYER = {"src/tunedmpi/files.py"}
# calls that touch a file by name: open(), Path's readers and writers, os/io/shutil/fcntl/tempfile
FILE_CALLS = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "fdopen", "flock", "lockf",
    "copy", "copy2", "copyfile", "copytree", "move", "mkstemp", "TemporaryFile",
    "NamedTemporaryFile", "SpooledTemporaryFile",
}  # fmt: skip


OUTSIDE = {"os", "io", "shutil", "fcntl", "tempfile", "pathlib", "builtins"}


def touches_outside_the_layer():
    """'path:line: call' of every file-touching call in src/ and tools/ outside the layer. A call
    given a file object (tarfile.open(fileobj=...)) touches no name and is left alone."""
    import ast

    found = []
    for path in sorted([*ROOT.glob("src/tunedmpi/**/*.py"), *ROOT.glob("tools/*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel in LAYER:
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.ImportFrom) and node.module in OUTSIDE:
                found += [
                    "%s:%d: from %s import %s" % (rel, node.lineno, node.module, a.name)
                    for a in node.names
                    if a.name in FILE_CALLS
                ]
            if not isinstance(node, ast.Call) or any(k.arg == "fileobj" for k in node.keywords):
                continue
            f = node.func
            if isinstance(f, ast.Name):  # a bare name: the builtin open, or the layer's own
                bad = f.id == "open"
            else:
                owner = f.value.id if isinstance(f.value, ast.Name) else None
                bad = getattr(f, "attr", None) in FILE_CALLS and owner != "files"
            if bad:
                found.append("%s:%d: %s" % (rel, node.lineno, ast.unparse(f)))
    return found


def test_nothing_opens_copies_or_locks_a_file_outside_the_layer():
    """Every read, write, copy and lock goes through tunedmpi.files (docs/design.md, "Files")."""
    assert touches_outside_the_layer() == []


# ---- item 5: special files everywhere, and a STAND-INS.yaml list: stays in its folder ------------


@pytest.mark.parametrize("list_", ["../../victim.txt", "/etc/passwd"])
def test_a_stand_in_list_outside_its_folder_is_refused(tmp_path, list_):
    kp = tmp_path / "kp"
    shutil.copytree(ROOT / "known-params", kp)
    (kp / "STAND-INS.yaml").write_text(
        "- for: [openmpi 9.9.9]\n  list: %s\n  why: w\n  confirm: c\n" % list_
    )
    line = one_line(cli("known-params", "--lists", kp, timeout=60))
    assert "STAND-INS.yaml: [0].list:" in line and "plain name" in line, line


def test_a_stand_ins_file_that_is_a_fifo_is_refused_not_ignored(tmp_path):
    kp = tmp_path / "kp"
    shutil.copytree(ROOT / "known-params", kp)
    (kp / "STAND-INS.yaml").unlink()
    os.mkfifo(kp / "STAND-INS.yaml")
    assert "is a FIFO, not a regular file" in one_line(cli("known-params", "--lists", kp))


# ---- item 6: --reanalyse copies logs/ without following links, bounded -------------------------

FULL = ROOT / "tests" / "fixtures" / "campaigns" / "local-full-imb-osu"


def test_reanalyse_copies_logs_without_links(tmp_path):
    src = tmp_path / "src"
    (src / "logs" / "run1").mkdir(parents=True)
    shutil.copy(FULL / "results.json", src)
    (src / "logs" / "run1" / "imb.log").write_text("a log\n")
    (src / "logs" / "loop").symlink_to(".")
    (src / "logs" / "etc").symlink_to("/etc")
    (src / "logs" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(src / "logs" / "fifo")
    proc = cli("validate", "--reanalyse", src, "--out", tmp_path / "out", timeout=120)
    assert proc.returncode in VERDICT_EXITS and "Traceback" not in proc.stderr, proc.stderr
    (new,) = (tmp_path / "out").iterdir()
    copied = sorted(
        os.path.relpath(os.path.join(d, n), new / "logs")
        for d, dirs, names in os.walk(new / "logs")
        for n in dirs + names
    )
    assert copied == ["run1", "run1/imb.log"]
    assert (new / "STATUS").read_text().startswith("complete")


def test_copy_tree_is_bounded(tmp_path):

    (tmp_path / "src").mkdir()
    for i in range(3):
        (tmp_path / "src" / str(i)).write_bytes(b"x" * 1000)
    with pytest.raises(files.FileRefused, match="more than 2500 bytes"):
        files.copy_tree(tmp_path / "src", tmp_path / "dst", max_bytes=2500)
    with pytest.raises(files.FileRefused, match="more than 2 files"):
        files.copy_tree(tmp_path / "src", tmp_path / "dst2", max_files=2)


# ---- items 4 and 12: history's plots stay in --plots; one bad results.json does not stop it -----

GOOD = ROOT / "tests" / "fixtures" / "history" / "local-20261123T050113Z" / "results.json"


def a_result(folder, name, change=None):
    import json

    d = folder / name
    d.mkdir(parents=True)
    res = json.loads(GOOD.read_text())
    if change:
        change(res)
    (d / "results.json").write_text(json.dumps(res))
    return d


def rename_benchmark(res, to="../../../x"):
    old = next(iter(res["per_size"]))
    res["per_size"][to] = res["per_size"].pop(old)
    for b in res["bands"]:
        if b["benchmark"] == old:
            b["benchmark"] = to


def test_history_plots_never_leave_plots(tmp_path):
    a_result(tmp_path / "res", "bad", rename_benchmark)
    proc = cli("history", "--plots", tmp_path / "p" / "q" / "plots", tmp_path / "res")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot be a file name" in proc.stderr
    assert not list(tmp_path.rglob("*.png"))


def test_one_unreadable_or_newer_results_json_is_left_out_and_said(tmp_path):
    a_result(tmp_path / "res", "good")
    a_result(tmp_path / "res", "newer", lambda r: r.update(schema_version=999, runs="?"))
    (a_result(tmp_path / "res", "cut") / "results.json").write_text('{"tool": "tunedmpi va')
    proc = cli("history", "--plots", tmp_path / "plots", tmp_path / "res")
    assert proc.returncode in VERDICT_EXITS and "Traceback" not in proc.stderr, proc.stderr
    left_out = [line for line in proc.stderr.splitlines() if line.endswith(": left out")]
    assert len(left_out) == 2 and "cut" in left_out[0] and "newer" in left_out[1], proc.stderr
    assert "== local" in proc.stdout


def test_history_echoes_status_without_terminal_controls(tmp_path):
    d = tmp_path / "res" / "r1"
    d.mkdir(parents=True)
    (d / "STATUS").write_text("running: \x9b2J\u202eevil\x1b[31m\n")
    a_result(tmp_path / "res", "good")
    proc = cli("history", "--plots", tmp_path / "plots", tmp_path / "res")
    line = [x for x in proc.stderr.splitlines() if "incomplete" in x][0]
    assert "running: ?2J?evil?[31m" in line and line.isprintable(), line


# ---- item 11: one measurement per machine --------------------------------------------------------


def measure(tmp_path, verb, *extra):
    args = {
        "validate": [
            "--out",
            tmp_path / "out",
            "--repetitions",
            "3",
            "--benchmarks",
            "fop_latency",
        ],
        "sweep": ["--site", "local", "--store", tmp_path / "store", "--campaign", "c1"],
    }[verb]
    return cli(verb, *args, *extra, timeout=120)


@pytest.mark.parametrize("verb", ["validate", "sweep"])
def test_a_second_measurement_on_the_machine_refuses_naming_the_first(tmp_path, verb):
    from tunedmpi.bench import machine

    with machine.measuring():
        line = one_line(measure(tmp_path, verb))
        assert "measuring on this machine" in line and "in use by pid %d " % os.getpid() in line
        started = time.monotonic()
        line = one_line(measure(tmp_path, verb, "--wait", "1.5"))
        assert "(waited 1.5s)" in line and time.monotonic() - started >= 1.5
    assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


def test_the_measurement_lock_is_the_sessions_not_the_machines(measure_lock):
    from tunedmpi.bench import machine

    assert machine.lock_path() == str(measure_lock) != machine.MEASURE_LOCK


# ---- item 8: a non-finite or missing timing is refused with log:line, not dropped -------------


@pytest.mark.parametrize(
    "value", ["inf", "nan", "-Infinity", ""], ids=["inf", "nan", "-inf", "missing"]
)
def test_ingest_refuses_non_finite_or_missing_times_with_file_and_line(tmp_path, value):
    from test_hostile_input import _imb_with

    text, line = _imb_with(value)
    log = tmp_path / "imb.txt"
    log.write_text(text, encoding="utf-8")
    store = tmp_path / "store"
    proc = cli("ingest", "--site", "local", "--nodes", "1", "--ppn", "2", "--store", store, log)
    assert one_line(proc).startswith("error: %s:%d: allreduce t_avg[usec]: " % (log, line))
    assert not store.exists() or not any(p.is_file() for p in store.rglob("*.json"))


# ---- item 13: counts bounded; no terminal controls in descriptions or --site echoes -------------


def test_an_absurd_count_is_refused_before_anything_is_stored(tmp_path):
    proc = cli(
        "ingest", "--site", "local", "--nodes", "99999999999999999999", "--ppn", "2",
        "--store", tmp_path / "store", IMB_LOG,
    )  # fmt: skip
    assert proc.returncode == 2 and "at most 1000000" in proc.stderr, proc.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("char", ["\u0085", "\u009b", "\u202e", "\u2028"])
@pytest.mark.parametrize("where", ["description", "peers"])
def test_descriptions_with_control_or_bidi_characters_are_refused(tmp_path, char, where):
    from tunedmpi.errors import InputErrors
    from tunedmpi.modules import sites

    text = (ROOT / "site-configs" / "local" / "site.yaml").read_text()
    char = "\\u%04x" % ord(char)  # YAML's escape: the raw C1 characters YAML itself refuses
    if where == "description":
        text = text.replace('description: "This build', 'description: "Th%sis build' % char, 1)
    else:
        text = text.replace('description: "Intel MPI', 'description: "Intel%s MPI' % char, 1)
        assert char in text
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "site.yaml").write_text(text)
    with pytest.raises(InputErrors, match="control or bidi character"):
        sites.load_site(tmp_path / "local" / "site.yaml")


def test_a_site_error_echoes_no_terminal_control():
    line = one_line(cli("explain", "--site", "x\u009b2J\u202e"))
    assert line.isprintable() and "\\x9b2J\\u202e" in line, line


# ---- item 14: a campaign is resumed only on the MPI build that began it --------------------------


@needs_mpi
def test_a_campaign_of_another_build_is_not_resumed_naming_both(tmp_path):
    import json

    other = {
        "mpirun": "/opt/spack/linux/openmpi-5.0.8-abcdefg/bin/mpirun",
        "mpi": "5.0.8",
        "configure": "0123456789abcdef",
        "ucx": None,
        "ucc": None,
    }
    cdir = tmp_path / "store" / "c1"
    cdir.mkdir(parents=True)
    (cdir / "campaign.json").write_text(json.dumps({"site": "local", "build": other}))
    before = sorted(os.listdir(cdir))
    proc = cli("sweep", "--site", "local", "--store", tmp_path / "store", "--campaign", "c1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr
    assert "openmpi-5.0.8-abcdefg/bin/mpirun" in err and "configure 0123456789abcdef" in err, err
    assert str(ROOT / ".venv") in err.split("this one is", 1)[1], err  # the build found now
    assert sorted(os.listdir(cdir)) == before


@needs_mpi
def test_a_campaign_records_the_build_it_measures():
    from tunedmpi.bench import build
    from tunedmpi.modules import sites
    from tunedmpi.regenerate import sweep

    site = sites.load_named("local")
    runner = sweep.make_runner(site, None, 1, 2, 60, 0, ())
    found = build.identity(runner, sweep.baseline_module(site))
    assert found["mpirun"].startswith(str(ROOT / ".venv")) and found["mpi"] == site.mpi_version
    assert len(found["configure"]) == 16


# ---- item 15: a real-run test does not depend on the host's load --------------------------------


def test_the_probe_format_check_takes_a_bandwidth_a_loaded_host_prints_as_zero():
    from test_probes import OSU_BW_HEADER, osu_table

    lines = [
        "# tunedmpi-probe 2: OSU-compatible output, not OSU Micro-Benchmarks",
        "# tunedmpi-probe settings: get_bw -w dynamic -s fence",
        "# OSU MPI_Get Bandwidth Test v7.4",
        "# Window creation: MPI_Win_create_dynamic",
        "# Synchronization: MPI_Win_fence",
        "# Datatype: MPI_CHAR.",
        OSU_BW_HEADER,
        "%-10d%18.2f" % (1, 0.004),  # 1 byte at < 0.005 MB/s: what failed once under load
        "%-10d%18.2f" % (2, 0.01),
    ]
    rows = osu_table(lines, "get_bw", window="MPI_Win_create_dynamic", sync="MPI_Win_fence")
    assert rows == [(1, 0.0), (2, 0.01)]


# ---- item 9: the twins read the same PBS_NODEFILE: a leading ~ is no home folder in any ----------


def test_a_nodefile_path_with_a_tilde_means_the_same_in_every_twin(tmp_path):
    from test_modules_conformance import load_mpi, twins
    from tunedmpi.modules import explain

    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    home = tmp_path / "home"
    home.mkdir()
    (home / "nodes").write_text("cn1\n" * 8 + "cn2\n" * 8)
    envs = [{"HOME": str(home), "PBS_NODEFILE": "~/nodes"}]
    for name, load_many, module_file in twins(site, tmp_path):
        ((got, err),) = load_many(envs)
        want = explain.select(site, envs[0], module_file)
        assert want["geometry"].source == "default"  # ~/nodes is a relative path, as in Lua
        assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (name, err)


def test_lsf_host_names_that_differ_as_bytes_mean_the_same_in_every_twin(tmp_path):
    """Under LANG=C.UTF-8, b"h\\xc3\\xa9" and b"h\\xe9" were one host to Tcl and two to Lmod and
    explain: a host name must be printable ASCII in all three, else there is no LSF geometry."""
    from test_modules_conformance import load_mpi, twins
    from tunedmpi.modules import explain

    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    raw = os.fsdecode(b"h\xc3\xa9 16 h\xe9 16")
    envs = [{"LANG": "C.UTF-8", "LSB_MCPU_HOSTS": raw}, {"LSB_MCPU_HOSTS": "h1 16 h2 16"}]
    for name, load_many, module_file in twins(site, tmp_path):
        for env, (got, err) in zip(envs, load_many(envs)):
            want = explain.select(site, env, module_file)
            assert got == dict(want["env"], TUNEDMPI_SELECTION=want["selection"]), (name, err)
    assert explain.select(site, envs[0], module_file)["geometry"].source == "default"
    assert explain.select(site, envs[1], module_file)["geometry"].nodes == 2


# ---- item 10: the Tcl twin's unload takes no empty or cut TUNEDMPI_SAVED for the whole record ----

CUTS = {
    "empty": "export TUNEDMPI_SAVED=",
    "cut": 'set -- $TUNEDMPI_SAVED; shift 2; export TUNEDMPI_SAVED="$*"',  # still a Tcl dict
}


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_tcl_unload_with_an_empty_or_cut_record_leaves_nothing_set(tmp_path, cut):
    import envmodules
    from test_modules_conformance import load_mpi
    from test_modules_tcl import dumps, env_dump, names, tcl_tree

    if not envmodules.available():
        pytest.skip("needs Environment Modules (tools/system-packages.sh test)")
    site, paths, _ = tcl_tree(load_mpi("oci-bm-optimized3.36", "openmpi-tuned"), tmp_path)
    tuned, _ = names(site)
    steps = ["export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8", env_dump("before")]
    steps += ["module load " + tuned, env_dump("loaded"), CUTS[cut]]
    steps += ["module unload " + tuned, env_dump("after")]
    proc = envmodules.shell(paths, "\n".join(steps))
    assert proc.returncode == 0, proc.stderr
    got = dumps(proc.stdout)
    assert len(set(got["loaded"]) - set(got["before"])) > 3  # the row set several variables
    assert got["after"] == got["before"]


def test_lmod_unload_does_not_trust_a_rewritten_row(tmp_path):
    """TUNEDMPI_ROW rewritten to another valid row between load and unload: unload still undoes
    what load set, and a variable of that other row the user set after the load stays."""
    import re

    import lmod
    from test_modules_conformance import load_mpi
    from test_modules_hygiene import blocks, env_block, modules
    from tunedmpi.modules import explain

    if not lmod.available():
        pytest.skip("needs Lmod")
    site = load_mpi("oci-bm-optimized3.36", "openmpi-tuned")
    here = {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "8"}
    a = explain.select(site, here)
    for nodes, ppn in [(16, 36), (8, 36), (4, 36), (2, 36), (1, 36), (1, 8), (1, 16), (2, 16)]:
        b = explain.select(site, {"TUNEDMPI_NODES": str(nodes), "TUNEDMPI_PPN": str(ppn)})
        mine = sorted(set(b["env"]) - set(a["env"]))
        if mine:
            break
    row, profile = re.search(r" row=(\d+x\d+) match=\S+ profile=(\S+) ", b["selection"]).groups()
    tuned, _ = modules(site)
    steps = ["export TUNEDMPI_NODES=2 TUNEDMPI_PPN=8", env_block("before"), "module load " + tuned]
    steps += ["export TUNEDMPI_ROW=%s:%s %s=mine" % (profile, row, mine[0])]
    steps += ["module unload " + tuned, env_block("after")]
    proc = lmod.shell(lmod.site_modulepaths(site, tmp_path, ROOT), "\n".join(steps))
    assert proc.returncode == 0, proc.stderr
    got = blocks(proc.stdout)
    assert got["after"] == dict(got["before"], **{mine[0]: "mine"})


def test_the_command_lines_count_bound_is_the_modules():
    from tunedmpi import argtypes
    from tunedmpi.modules import selector

    assert argtypes.MAX_COUNT == selector.MAX_COUNT
