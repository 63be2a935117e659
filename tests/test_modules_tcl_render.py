"""module_formats in site configs: checked with a clear error; [lua] (the default) renders the Lua
modules byte for byte as before; Tcl files sit beside the .lua; `render --check` covers them and
reports the ones a site no longer renders; the three twins take the rule from selector.py."""

import shutil

import pytest

from tunedmpi.errors import InputError, InputErrors
from tunedmpi.modules import geometry, render, selector, sites
from tunedmpi.modules.writers import LUA, TCL, WRITERS


def site_copy(tmp_path, monkeypatch, name, extra):
    """A copy of site ``name`` with ``extra`` appended to its site.yaml, loaded from tmp_path."""
    folder = tmp_path / "site-configs" / name
    shutil.copytree(sites.site_dir() / name, folder)
    with open(folder / "site.yaml", "a") as fh:
        fh.write(extra)
    return folder / "site.yaml"


@pytest.mark.parametrize(
    "bad",
    [
        "module_formats: [lmod]",
        "module_formats: []",
        "module_formats: tcl",
        "module_formats: [tcl, tcl]",
        "module_formats: [lua, 3]",
    ],
)
def test_bad_module_formats_name_file_key_and_fix(tmp_path, monkeypatch, bad):
    text = (sites.site_dir() / "oci-bm-standard-e6.256" / "site.yaml").read_text()
    path = site_copy(tmp_path, monkeypatch, "oci-bm-standard-e6.256", "\n" + bad + "\n")
    with pytest.raises((InputError, InputErrors)) as exc:
        sites.load_site(str(path))
    msg = str(exc.value)
    assert str(path) in msg and "module_formats" in msg and "[lua, tcl]" in msg
    assert "module_formats" not in text


def test_formats_default_to_lua_and_choose_the_files(tmp_path, monkeypatch):
    site = sites.load_named("oci-bm-standard-e6.256")
    assert site.module_formats == ("lua",)
    lua_only = render.render_site(site)
    launch = {k for k in lua_only if render.EXECUTABLE.search(k)}  # the launch checks: any format
    assert len(launch) == len(selector.LAUNCHERS)
    assert all(rel.endswith(".lua") for rel in set(lua_only) - launch)
    path = site_copy(
        tmp_path, monkeypatch, "oci-bm-standard-e6.256", "\nmodule_formats: [lua, tcl]\n"
    )
    both = render.render_site(sites.load_site(str(path)))
    assert {k: v for k, v in both.items() if k.endswith(".lua") or k in launch} == lua_only
    tcl = {
        k: v for k, v in both.items() if not k.endswith(".lua") and not render.EXECUTABLE.search(k)
    }
    assert sorted(tcl) == [
        "oci-bm-standard-e6.256/openmpi-tuned/5.0.6",
        "oci-bm-standard-e6.256/openmpi/5.0.6",
    ]
    assert all(v.startswith("#%Module1.0\n") for v in tcl.values())
    path = site_copy(
        tmp_path / "t", monkeypatch, "oci-bm-standard-e6.256", "\nmodule_formats: [tcl]\n"
    )
    assert sorted(render.render_site(sites.load_site(str(path)))) == sorted(set(tcl) | launch)


def test_render_check_covers_tcl_and_finds_tcl_no_longer_rendered(run_cli, tmp_path):
    out = tmp_path / "mf"
    assert run_cli("render", "--site", "local", "--out", out)[0] == 0
    tcl = out / "local" / "openmpi-tuned" / "5.0.8"
    assert tcl.is_file() and (out / "local" / "openmpi-tuned" / "5.0.8.lua").is_file()
    assert run_cli("render", "--site", "local", "--check", "--out", out)[0] == 0
    tcl.write_text(tcl.read_text() + "# edited\n")
    code, _, err = run_cli("render", "--site", "local", "--check", "--out", out)
    assert code == 1 and "local/openmpi-tuned/5.0.8 (run" in err
    # A site that stops rendering Tcl: its old Tcl modules are reported, and render removes them.
    site = sites.load_named("local")
    import dataclasses

    lua_only = dataclasses.replace(site, module_formats=("lua",))
    files = render.render_site(lua_only)
    stale = render.stale_rules(str(out), lua_only, files)
    peers = ["local/%s/%s" % (p.module, p.version) for p in site.peers]  # their Tcl twins too
    assert sorted(stale) == sorted(["local/openmpi-tuned/5.0.8", "local/openmpi/5.0.8"] + peers)
    render.remove_stale_rules(str(out), stale)
    assert not tcl.exists() and (out / "local" / "openmpi-tuned" / "5.0.8.lua").is_file()
    assert all(not (out / p).exists() and (out / (p + ".lua")).is_file() for p in peers)


def test_selectors_are_generated_from_the_one_description():
    """Every source and variable of selector.SOURCES appears, in order, in both generated chains,
    and the Python twin reads exactly those variables."""
    lua, tcl = LUA.chain(), TCL.chain()
    read = selector.variables()[len(selector.EXPLICIT) : -len(selector.THREAD_VARIABLES)]
    for text in (lua, tcl):
        where = [text.index('"%s"' % n if text is lua else " %s]" % n) for n, _ in selector.SOURCES]
        assert where == sorted(where)
        for var in read:
            assert var in text
    for text in (LUA.threads(), TCL.threads()):
        assert [text.index(v) for v in selector.THREAD_VARIABLES] == sorted(
            text.index(v) for v in selector.THREAD_VARIABLES
        )
    site = sites.load_named("local")
    for fmt in site.module_formats:
        text = render.render_site(site)[render.module_path(site, site.tuned_module, fmt)]
        assert WRITERS[fmt].chain() in text and WRITERS[fmt].threads() in text
        assert str(selector.MAX_COUNT) in text and selector.EXPLICIT[0] in text

    class Spy(dict):
        def get(self, key, default=None):
            self.seen.append(key)
            return default

    spy = Spy()
    spy.seen = []
    assert geometry.from_scheduler(spy) is None
    assert geometry.threads(spy, 9) == 1
    assert spy.seen[-len(selector.THREAD_VARIABLES) :] == selector.THREAD_VARIABLES
    assert spy.seen[: -len(selector.THREAD_VARIABLES)] == [
        v
        for v in read
        if v
        not in (
            "SLURM_NTASKS_PER_NODE",
            "SLURM_TASKS_PER_NODE",
            "SLURM_NTASKS",
            "PBS_NUM_PPN",
            "FLUX_JOB_SIZE",
        )
    ]  # ppn is read only once nodes are found


@pytest.mark.parametrize(
    "text,want",
    [
        ("4\n", None),
        ("010", 10),
        ("0000000", None),
        ("1000000", 1000000),
        ("1000001", None),
        ("00000001", None),
        ("٣", None),
    ],
)
def test_count_is_the_same_rule_in_python(text, want):
    assert geometry.count(text) == want
