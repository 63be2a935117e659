"""tools/spack_source_mirror.py on a hostile sources.yaml (issue 42, item 1): every value that
becomes a path part, a git argument or an archive member is refused (exit 2, one line naming the
key) before anything is built, and nothing outside the mirror is written or removed."""

import os

import pytest
import yaml

import spack_source_mirror as mirror
from test_spack_source_mirror import repo

SHA = "ab" * 32


def snapshot(root):
    """Every path under root with its content (files) or kind, to prove nothing changed."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            seen[path] = open(path, "rb").read() if os.path.isfile(path) else "dir"
    return seen


@pytest.mark.parametrize(
    "key, change",
    [
        ("package", lambda e, v: {str(v): e}),
        ("package", lambda e, v: {"../victim": e}),
        ("archive", lambda e, v: {"top": dict(e, archive="../../x.tar.gz")}),
        ("spack_sha256", lambda e, v: {"top": dict(e, spack_sha256="../../../y")}),
        ("version", lambda e, v: {"top": dict(e, version="../../x")}),
        ("prefix", lambda e, v: {"top": dict(e, prefix="../../")}),
        ("repo", lambda e, v: {"top": dict(e, repo="../..")}),
        ("ref", lambda e, v: {"top": dict(e, ref="--output=x")}),
        (
            "commit",
            lambda e, v: {
                "top": dict(e, patches=[{"commit": "--output=../p", "spack_sha256": SHA}])
            },
        ),
        (
            "patches.spack_sha256",
            lambda e, v: {"top": dict(e, patches=[{"commit": "abcdef0", "spack_sha256": "../z"}])},
        ),
    ],
)
def test_hostile_names_are_refused_before_anything_is_written(tmp_path, capsys, key, change):
    git = tmp_path / "git"
    repo(git / "me+top" / "repo", {"a.c": "int a;\n"})
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious\n")
    entry = {"version": "1.0", "repo": "me/top", "ref": "v1.0", "archive": "t-1.0.tar.gz"}
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump(change(dict(entry, spack_sha256=SHA), victim)))
    out = tmp_path / "a" / "b" / "mirror"
    before = snapshot(tmp_path)
    assert mirror.main([str(sources), str(out), "--git-root", str(git)]) == 2
    err = capsys.readouterr().err
    assert key in err and err.count("\n") == 1, err
    assert snapshot(tmp_path) == before  # nothing written, nothing removed, not even the mirror
