"""`tunedmpi render` keeps a tuned module's rules folder in step with its table: when a table
loses the bands of a geometry (or all of them), render removes the <nodes>x<ppn>.rules files it
no longer produces (after writing the module that no longer names them) and the folder once it
is empty, and `render --check` calls such a file stale. Nothing else is ever removed. Real files
in a temporary project root and modulefiles tree; pure Python, a few seconds."""

import os
import re
import shutil

import pytest
import yaml

from test_rules_render import PLATFORM, RULES_DIR, SITE, VERSION
from test_rules_render import project as bands_project  # noqa: F401 (a fixture: a table with bands)
from tunedmpi.modules import render, sites

MODULE = "%s/openmpi-tuned/%s.lua" % (SITE, VERSION)


@pytest.fixture
def root(bands_project, tmp_path, monkeypatch):  # noqa: F811
    """A copy of the bands project root (its table is edited by the tests), in use."""
    copy = tmp_path / "project"
    shutil.copytree(bands_project[0], copy)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(copy))
    return copy


def drop_bands(root, geometries=None):
    """Remove the bands of the table's cases of these (nodes, ppn) geometries (None: all)."""
    path = root / "tuning-tables" / PLATFORM / ("openmpi-%s.yaml" % VERSION)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    for case in doc["cases"]:
        if geometries is None or (case["nodes"], case["ppn"]) in geometries:
            case.pop("bands", None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def lines(stdout, verb):
    return [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith(verb + " ")]


def test_a_geometry_that_loses_its_bands_loses_its_rules_file(root, run_cli, tmp_path):
    out = tmp_path / "mf"
    assert run_cli("render", "--site", SITE, "--out", out)[0] == 0
    folder = out / RULES_DIR
    assert sorted(p.name for p in folder.glob("*.rules")) == ["1x2.rules", "1x4.rules", "2x4.rules"]

    drop_bands(root, {(2, 4)})
    code, _, err = run_cli("render", "--check", "--site", SITE, "--out", out)
    assert code == 1 and "stale: %s is no longer rendered" % (folder / "2x4.rules") in err, err
    assert (folder / "2x4.rules").exists()  # --check writes and removes nothing

    code, stdout, err = run_cli("render", "--site", SITE, "--out", out)
    assert code == 0, err
    assert lines(stdout, "removed") == [str(folder / "2x4.rules")]
    # the module that no longer names 2x4.rules is written before the file goes, and the rules
    # files it does name before it
    wrote = lines(stdout, "wrote")
    assert wrote.index(str(folder / "1x4.rules")) < wrote.index(str(out / MODULE))
    assert stdout.index("wrote %s" % (out / MODULE)) < stdout.index("removed ")
    assert sorted(p.name for p in folder.glob("*.rules")) == ["1x2.rules", "1x4.rules"]
    assert (
        '"2x4.rules"' not in (out / MODULE).read_text()
        and '"1x4.rules"' in (out / MODULE).read_text()
    )
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0

    # no bands left at all: every rules file goes; the side folder keeps only the launch checks
    drop_bands(root)
    code, _, err = run_cli("render", "--check", "--site", SITE, "--out", out)
    assert code == 1 and "1x2.rules" in err and "1x4.rules" in err
    code, stdout, err = run_cli("render", "--site", SITE, "--out", out)
    assert code == 0, err
    assert sorted(lines(stdout, "removed")) == [
        str(folder / "1x2.rules"),
        str(folder / "1x4.rules"),
    ]
    assert [p.name for p in folder.iterdir()] == ["bin"]
    assert (out / MODULE).is_file() and not re.search(
        r'"\d+x\d+\.rules"', (out / MODULE).read_text()
    )
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0


def test_render_removes_only_its_own_rules_files(root, run_cli, tmp_path):
    out = tmp_path / "mf"
    assert run_cli("render", "--site", SITE, "--out", out)[0] == 0
    tuned = out / SITE / "openmpi-tuned"
    folder = out / RULES_DIR
    keep = [folder / "NOTES.txt", folder / "1x4.rules.bak", folder / "0x4.rules"]
    # another version's module and its rules: that module still points at them
    (tuned / "5.0.6.lua").write_text("-- an older module\n")
    keep += [tuned / "__5.0.6.rules" / "1x2.rules"]
    # a symlink that looks like a rules file, and a folder named like one
    elsewhere = tmp_path / "elsewhere.rules"
    elsewhere.write_text("not render's\n")
    (folder / "3x3.rules").symlink_to(elsewhere)
    (folder / "5x5.rules").mkdir()
    # the same names in the baseline module's folder and in another site's tree
    keep += [
        out / SITE / "openmpi" / "__5.0.8.rules" / "1x2.rules",
        out / "other" / "openmpi-tuned" / "__5.0.8.rules" / "1x2.rules",
    ]
    # an orphan: __4.1.2.rules without 4.1.2.lua (nothing points at it): render's to remove
    orphan = tuned / "__4.1.2.rules" / "2x2.rules"
    for path in keep + [orphan]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# kept?\n")

    site = sites.load_named(SITE)
    files = render.render_site(site)
    assert render.stale_rules(out, site, files) == [
        "%s/openmpi-tuned/__4.1.2.rules/2x2.rules" % SITE
    ]

    drop_bands(root)
    code, stdout, err = run_cli("render", "--site", SITE, "--out", out)
    assert code == 0, err
    assert sorted(lines(stdout, "removed")) == sorted(
        [str(folder / n) for n in ("1x2.rules", "1x4.rules", "2x4.rules")] + [str(orphan)]
    )
    for path in keep:
        assert path.read_text() == "# kept?\n", path
    assert os.path.islink(folder / "3x3.rules") and elsewhere.read_text() == "not render's\n"
    assert (folder / "5x5.rules").is_dir()
    assert folder.is_dir()  # not empty: it stays
    assert not orphan.parent.exists()  # empty once its file went
    assert run_cli("render", "--check", "--site", SITE, "--out", out)[0] == 0


def test_check_of_a_tree_without_rules_folders_is_unchanged(run_cli, tmp_path):
    """A site whose table has no bands (a seed site): render and --check behave as before (no removed lines)."""
    out = tmp_path / "mf"
    code, stdout, err = run_cli("render", "--site", "oci-bm-optimized3.36", "--out", out)
    assert code == 0, err
    assert not lines(stdout, "removed") and not [p for p in out.rglob("*.rules") if p.is_file()]
    assert run_cli("render", "--check", "--site", "oci-bm-optimized3.36", "--out", out)[0] == 0
