"""Issue 42: one safe way to touch files. Each test names the item it keeps fixed; the fuzz over
every file input is in test_files_fuzz.py."""

import os

import pytest

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
