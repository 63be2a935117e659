import shutil
import subprocess

import pytest

from tunedmpi.modules import sites, writers

NASTY = [
    'a"b',
    "a'b",
    "x]]y",
    "x]=]y",
    "line1\nline2",
    "$(rm -rf /)",
    "`id`",
    '"); os.execute("id"); --',
    "\\",
    "\x00\x01",
    "ノード数",
    "]]..os.exit(1)..[[",
]

LUA = shutil.which("lua5.3") or shutil.which("lua")


@pytest.mark.skipif(not LUA, reason="no Lua interpreter (Debian's lmod package brings lua5.3)")
@pytest.mark.parametrize("text", NASTY)
def test_lua_strings_are_inert_data(text, tmp_path):
    script = tmp_path / "s.lua"
    script.write_bytes(b"io.write(" + writers.LUA.string(text).encode("ascii") + b")")
    out = subprocess.run([LUA, str(script)], capture_output=True, timeout=10)
    assert out.returncode == 0 and out.stdout == text.encode("utf-8")


def test_render_check_finds_stale_and_missing_files(run_cli, tmp_path):
    code, out, err = run_cli("render", "--out", tmp_path)
    assert code == 0 and "wrote" in out
    assert run_cli("render", "--check", "--out", tmp_path)[0] == 0
    victim = sorted(tmp_path.rglob("*.lua"))[0]
    victim.write_text(victim.read_text() + "-- edited by hand\n")
    code, out, err = run_cli("render", "--check", "--out", tmp_path)
    assert code == 1 and "stale" in err and victim.name in err
    victim.unlink()
    assert run_cli("render", "--check", "--out", tmp_path)[0] == 1


def test_committed_modulefiles_are_current(run_cli):
    code, out, err = run_cli("render", "--check")
    assert code == 0, err


def test_render_is_deterministic(run_cli, tmp_path):
    run_cli("render", "--out", tmp_path / "a")
    run_cli("render", "--out", tmp_path / "b")
    a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*.lua")}
    b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*.lua")}
    # every site's tuned and baseline modules, the HPC-X pair where a site names HPC-X, its peers
    loaded = [sites.load_named(n) for n in sites.site_names()]
    expected = sum((4 if s.hpcx else 2) + len(s.peers) for s in loaded)
    assert a == b and len(a) == expected
