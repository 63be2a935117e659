"""Issue 42: one safe way to touch files. Each test names the item it keeps fixed; the fuzz over
every file input is in test_files_fuzz.py."""

import os
import shutil

import pytest

from conftest import ROOT
from test_fs_hostile import IMB_LOG, cli, one_line
from tunedmpi import atomic

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
    with pytest.raises(OSError), atomic.locked(tmp_path / "store" / "c9" / ".sweep.lock", "c9"):
        pass
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_lock_is_taken_again_and_its_holder_line_stays_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["tunedmpi", "sweep\n\x1b[2J", "x"])
    lock = tmp_path / "c" / ".sweep.lock"
    for _ in range(2):  # the second time the file exists and holds the first holder's line
        with atomic.locked(lock, "c"):
            assert atomic.HOLDER.match(lock.read_bytes()), lock.read_bytes()


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
