"""File system, paths, interruption and concurrency (issue 29, part B): names never lead outside
their folder, a full disk or an unwritable output is "could not run" (exit 2, one line) and loses no
earlier result, render writes all files or none, one sweep per campaign, an interrupted validate
says so."""

import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import time

import pytest

import lmod
from conftest import FIXTURES, ROOT, VERDICT_EXITS
from tunedmpi import files
from tunedmpi.modules import render

CLI = ROOT / ".venv" / "bin" / "tunedmpi"
RUN = ROOT / "validate" / "run.sh"
FULL = FIXTURES / "campaigns" / "local-full-imb-osu"  # results.json only (fixtures README)
IMB_LOG = FIXTURES / "imb" / "imb-mpi1_mem0.001_msglog0-20_allreduce_default-ompi.txt"
needs_mpi = pytest.mark.skipif(
    not lmod.available() or not (ROOT / ".venv/bin/mpicc").exists(),
    reason="needs Lmod and the Open MPI wheel (run make)",
)


def cli(*args, fsize=None, timeout=120, cmd=CLI):
    """`tunedmpi ARGS` (or validate/run.sh), optionally with files limited to `fsize` bytes."""

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [str(cmd)] + [str(a) for a in args],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit if fsize else None,
    )


def one_line(proc, after=0):
    """The one line of a command that could not run (exit 2), after `after` lines of progress."""
    lines = proc.stderr.strip().splitlines()
    ok = proc.returncode == 2 and len(lines) == after + 1 and "Traceback" not in proc.stderr
    assert ok, proc.stderr
    return lines[-1]


def tree(root):
    """{relative path: bytes} of every file under root but render's lock file."""
    return {
        os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
        for d, _, names in os.walk(root)
        for n in names
        if n != ".tunedmpi-render.lock"
    }


def result_with_site(tmp_path, site):
    src = tmp_path / "src"
    src.mkdir()
    res = json.loads((FULL / "results.json").read_text())
    res["site"] = site
    (src / "results.json").write_text(json.dumps(res))
    return src


# ---- item 2: names that become path components -------------------------------------------------


@pytest.mark.parametrize("site", ["../../escaped", "/tmp/tunedmpi-escaped", ".hidden", "a/b"])
def test_reanalyse_never_writes_outside_out(tmp_path, site):
    src = result_with_site(tmp_path, site)
    before = set(os.listdir(tmp_path))
    proc = cli("validate", "--reanalyse", src, "--out", tmp_path / "a" / "b" / "out")
    line = one_line(proc)
    assert str(src / "results.json") in line and "cannot be a file name" in line
    assert set(os.listdir(tmp_path)) == before and not glob.glob("/tmp/tunedmpi-escaped*")


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "--campaign", "../../escaped"],
        ["ingest", "--stage", "../../escaped"],
        ["ingest", "--campaign", "/tmp/tunedmpi-escaped"],
        ["sweep", "--campaign", "../../escaped"],
        ["sweep", "--campaign", ".."],
    ],
)
def test_campaign_and_stage_names_stay_inside_the_store(tmp_path, args):
    store = tmp_path / "a" / "b" / "store"
    extra = ["--nodes", "1", "--ppn", "2", IMB_LOG] if args[0] == "ingest" else []
    proc = cli(*args, "--site", "local", "--store", store, *extra, timeout=60)
    line = one_line(proc)
    assert args[1] in line and "cannot be a file name" in line
    assert not (tmp_path / "escaped").exists() and not glob.glob("/tmp/tunedmpi-escaped*")
    assert not (tmp_path / "a").exists()


# ---- item 3: a full disk or an unwritable output ------------------------------------------------


def test_reanalyse_on_a_file_size_limit_exits_2_and_keeps_earlier_results(tmp_path):
    """RLIMIT_FSIZE: every write past 8 KB fails (EFBIG), as on a full disk, without root."""
    out = tmp_path / "out"
    earlier = out / "local-20250101T000000Z"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text("earlier\n")
    proc = cli("validate", "--reanalyse", FULL, "--out", out, fsize=8192)
    line = one_line(proc)
    assert "results.json: cannot write: File too large (fix: raise the file size limit" in line
    assert (earlier / "results.json").read_text() == "earlier\n"
    (new,) = [d for d in out.iterdir() if d != earlier]
    assert not files.stray_temps(out) and not (new / "results.json").exists()
    assert (new / "STATUS").read_text().startswith("failed: ")


def test_results_json_and_report_come_before_the_plots_which_may_fail(
    tmp_path, monkeypatch, run_cli
):
    import errno

    from tunedmpi.acceptance import report

    pytest.importorskip("matplotlib")

    def full(fig, path):
        report.pyplot().close(fig)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(report, "save_png", full)
    code, stdout, err = run_cli("validate", "--reanalyse", FULL, "--out", tmp_path)
    (new,) = tmp_path.iterdir()
    assert code in VERDICT_EXITS and "verdict: " in stdout
    assert "warning: plots left out: %s/plots/" % new in err and "No space left" in err
    assert json.loads((new / "results.json").read_text())["plots"] == {}
    assert (new / "report.md").is_file() and (new / "junit.xml").is_file()
    assert (new / "STATUS").read_text().startswith("complete: ")
    assert not files.stray_temps(tmp_path)


def test_render_writes_every_file_or_none(tmp_path):
    """A size limit below the largest module: the first files would fit, the largest not; nothing
    may change (no mix of old and new modules), no temporary file stays."""
    out = tmp_path / "mods"
    assert cli("render", "--site", "local", "--out", out).returncode == 0
    files = tree(out)
    for rel in files:
        if not rel.endswith(".lock"):
            (out / rel).write_text("old\n")
    before = tree(out)
    largest = max(len(v) for v in files.values())
    proc = cli("render", "--site", "local", "--out", out, fsize=largest - 1)
    line = one_line(proc)
    assert "cannot write: File too large" in line
    assert tree(out) == before


def test_render_check_reports_stray_temporary_files_and_render_removes_them(tmp_path, run_cli):
    out = tmp_path / "mods"
    assert run_cli("render", "--site", "local", "--out", out)[0] == 0
    stray = out / "local" / "openmpi-tuned" / ".5.0.8.lua.k3j9x_2a.tmp"
    stray.write_text("half a module")
    code, _, err = run_cli("render", "--site", "local", "--out", out, "--check")
    assert code == 1 and "stray: %s" % stray in err
    code, stdout, _ = run_cli("render", "--site", "local", "--out", out)
    assert code == 0 and "removed %s" % stray in stdout and not stray.exists()
    assert run_cli("render", "--site", "local", "--out", out, "--check")[0] == 0


def test_stale_rules_that_another_render_removed_are_no_error(tmp_path):
    render.remove_stale_rules(str(tmp_path), ["local/openmpi-tuned/__5.0.8.rules/2x4.rules"])


TMPFS_WHY = "needs root to mount a 2 MB tmpfs (the portable tests above use RLIMIT_FSIZE)"


def fill(fs):
    """A file as large as the space left on the file system fs."""
    fd = os.open(str(fs / "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 2 MB tmpfs holding an earlier result, then filled to the last byte."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip(TMPFS_WHY)
    fs = tmp_path / "fs"
    fs.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(fs)]).returncode:
        pytest.skip(TMPFS_WHY + ": mount refused")
    try:
        earlier = fs / "out" / "local-20250101T000000Z"
        earlier.mkdir(parents=True)
        (earlier / "results.json").write_text("earlier\n")
        fill(fs)
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)])


@needs_mpi
def test_a_full_disk_is_could_not_run_for_validate_sweep_and_render(full_tmpfs, tmp_path):
    fs = full_tmpfs
    before = tree(fs / "out")
    for args, header in (
        (["validate", "--reanalyse", FULL, "--out", fs / "out"], 0),
        (["validate", "--repetitions", "3", "--benchmarks", "fop_latency", "--out", fs / "out"], 1),
        (["sweep", "--site", "local", "--repetitions", "2", "--store", fs / "store"], 0),
    ):
        line = one_line(cli(*args), header)
        assert "cannot write: No space left on device (fix: free space" in line, args
    assert {k: v for k, v in tree(fs / "out").items() if k in before} == before
    # render into a folder of earlier modules on the full disk: all stay as they were
    mods = tmp_path / "mods"
    assert cli("render", "--site", "local", "--out", mods).returncode == 0
    os.unlink(fs / "filler")
    shutil.copytree(mods, fs / "mods")
    for rel in tree(fs / "mods"):
        if not rel.endswith(".lock"):
            (fs / "mods" / rel).write_text("old\n")
    earlier = tree(fs / "mods")
    fill(fs)
    line = one_line(cli("render", "--site", "local", "--out", fs / "mods"))
    assert "cannot write: No space left on device" in line
    assert tree(fs / "mods") == earlier and not files.stray_temps(fs)


# ---- item 7: one sweep per campaign -------------------------------------------------------------


def test_ingest_refuses_a_campaign_a_sweep_holds(tmp_path):
    cdir = tmp_path / "store" / "c1"
    with files.locked(cdir / ".sweep.lock", "campaign %s" % cdir):
        proc = cli(
            "ingest", "--site", "local", "--nodes", "1", "--ppn", "2", "--campaign", "c1",
            "--store", tmp_path / "store", IMB_LOG,
        )  # fmt: skip
    line = one_line(proc)
    assert "is in use by pid %d on " % os.getpid() in line and ".sweep.lock" in line
    assert sorted(os.listdir(cdir)) == [".sweep.lock"]


@needs_mpi
def test_a_second_sweep_of_a_campaign_refuses_at_once_naming_the_first(tmp_path):
    cdir = tmp_path / "store" / "c1"
    started = time.monotonic()
    with files.locked(cdir / ".sweep.lock", "campaign %s" % cdir):
        proc = cli(
            "sweep", "--site", "local", "--campaign", "c1", "--store", tmp_path / "store",
            timeout=60,
        )  # fmt: skip
    line = one_line(proc)
    assert "campaign %s is in use by pid %d on " % (cdir, os.getpid()) in line
    assert time.monotonic() - started < 30 and sorted(os.listdir(cdir)) == [".sweep.lock"]


# ---- item 9: an interrupted validate says so -----------------------------------------------------


def start_validate(out):
    # SIGINT back to its default: a shell that runs this suite in the background (nohup, &) hands
    # its children SIGINT ignored, and Python then rightly never raises KeyboardInterrupt
    return subprocess.Popen(
        [str(RUN), "--repetitions", "3", "--benchmarks", "fop_latency", "--out", str(out)],
        env=lmod.clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_running(out, proc):
    """The campaign's directory once its first run has started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for d in out.glob("*/logs/*.log") if out.is_dir() else ():
            return d.parent.parent
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("validate did not start a run: %s" % proc.communicate()[1][-2000:])


@needs_mpi
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_validate_interrupted_marks_its_directory_and_exits_2(tmp_path, sig):
    out = tmp_path / "out"
    proc = start_validate(out)
    outdir = wait_running(out, proc)
    assert (outdir / "STATUS").read_text().startswith("running: pid %d on " % proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1] == (
        "validate: interrupted by %s: no verdict; %s says so (rerun validate)"
        % (sig.name, outdir / "STATUS")
    )
    assert (outdir / "STATUS").read_text().startswith("interrupted: by %s at " % sig.name)
    hist = cli("history", out, "--plots", tmp_path / "plots")
    assert "%s is incomplete (STATUS: interrupted: by %s" % (outdir, sig.name) in hist.stderr


@needs_mpi
def test_a_killed_validate_is_reported_by_history_and_reanalyse(tmp_path):
    out = tmp_path / "out"
    proc = start_validate(out)
    outdir = wait_running(out, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    hist = cli("history", out, "--plots", tmp_path / "plots")
    assert hist.returncode == 2
    assert "%s is incomplete (STATUS: running: pid %d" % (outdir, proc.pid) in hist.stderr
    assert "(killed, or still running)): left out" in hist.stderr
    line = one_line(cli("validate", "--reanalyse", outdir, "--out", tmp_path / "again"))
    assert "validate did not finish there (STATUS: running: pid" in line
    assert not (tmp_path / "again").exists()


def test_validate_run_sh_passes_exit_codes_through():
    """run.sh execs the Python (no shell in between to swallow an exit code or a signal)."""
    text = RUN.read_text()
    assert 'exec "$root/.venv/bin/tunedmpi" validate "$@"' in text
    assert "exec python3 -m tunedmpi.cli validate" in text  # the tests above use run.sh
