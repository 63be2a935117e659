"""tools/spack_source_mirror.py on small git repositories made here: archives stored under the
checksum Spack's package records (with the <pkg>/<archive> link), a GitHub-style tag archive
reproduced byte for byte, submodules at the recorded commit, omitted paths, SOURCES.json."""

import hashlib
import subprocess
import tarfile

import pytest
import yaml

import spack_source_mirror as mirror

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]


def repo(path, files):
    path.mkdir(parents=True)
    subprocess.run(GIT + ["init", "-q", str(path)], check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run(GIT + ["-C", str(path), "add", "-A"], check=True)
    subprocess.run(GIT + ["-C", str(path), "commit", "-q", "-m", "c"], check=True)
    subprocess.run(GIT + ["-C", str(path), "tag", "v1.0"], check=True)
    return path


def github_archive(path, prefix):
    tar = subprocess.run(
        ["git", "-C", str(path), "archive", "--format=tar", "--prefix=" + prefix, "v1.0"],
        capture_output=True,
        check=True,
    ).stdout
    return subprocess.run(["gzip", "-n"], input=tar, capture_output=True, check=True).stdout


def test_a_mirror_spack_can_read(tmp_path):
    root = tmp_path / "git"
    repo(root / "me+sub" / "repo", {"sub.c": "int x;\n"})
    top = repo(
        root / "me+top" / "repo", {"configure.ac": "AC_INIT\n", "big.tar.gz": "not in the mirror\n"}
    )
    subprocess.run(
        GIT + ["-C", str(top), "submodule", "add", "-q", "../../me+sub/repo", "sub"],
        check=True,
        capture_output=True,
    )
    (top / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ../../me/sub\n')
    subprocess.run(GIT + ["-C", str(top), "commit", "-qam", "sub"], check=True)
    subprocess.run(GIT + ["-C", str(top), "tag", "-f", "v1.0"], check=True, capture_output=True)
    lib = repo(root / "me+lib" / "repo", {"lib.c": "int y;\n"})
    want = hashlib.sha256(github_archive(lib, "lib-1.0/")).hexdigest()
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        yaml.safe_dump(
            {
                "top": {
                    "version": "1.0",
                    "repo": "me/top",
                    "ref": "v1.0",
                    "archive": "top-1.0.tar.bz2",
                    "omit": ["big.tar.gz"],
                    "prepare": ["touch", "configure"],
                    "spack_sha256": "ab" + "0" * 62,
                },
                "lib": {
                    "version": "1.0",
                    "repo": "me/lib",
                    "ref": "v1.0",
                    "archive": "lib-1.0.tar.gz",
                    "prefix": "lib-1.0/",
                    "spack_sha256": want,
                },
            }
        )
    )
    out = tmp_path / "mirror"
    assert mirror.main([str(sources), str(out), "--git-root", str(root)]) == 0
    # lib: GitHub's archive byte for byte, so Spack's checksum holds
    stored = out / "_source-cache" / "archive" / want[:2] / (want + ".tar.gz")
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == want
    assert (out / "lib" / "lib-1.0.tar.gz").resolve() == stored.resolve()
    # top: made release-like, stored under the checksum Spack looks it up by, with its submodule
    made = out / "_source-cache" / "archive" / "ab" / ("ab" + "0" * 62 + ".tar.bz2")
    with tarfile.open(made) as tar:
        names = set(tar.getnames())
    assert {"top-1.0/configure", "top-1.0/configure.ac", "top-1.0/sub/sub.c"} <= names
    assert "top-1.0/big.tar.gz" not in names
    index = __import__("json").loads((out / "SOURCES.json").read_text())
    assert index["lib"]["checksum_matches_spack"] and not index["top"]["checksum_matches_spack"]
    assert set(index["top"]["commits"]) == {".", "sub"}


def test_a_missing_repository_is_one_line_and_exit_2(tmp_path, capsys):
    sources = tmp_path / "s.yaml"
    sources.write_text(
        "x: {version: '1', repo: a/b, ref: v1, archive: x-1.tar.gz, spack_sha256: '"
        + "0" * 64
        + "'}\n"
    )
    assert mirror.main([str(sources), str(tmp_path / "m"), "--git-root", str(tmp_path)]) == 2
    assert "no git repository for a/b" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bad",
    [
        "x: {version: '1', repo: a/b}\n",
        "x: {version: '1', repo: a/b, ref: v, archive: x.zip, spack_sha256: '00'}\n",
    ],
)
def test_bad_entries_name_the_key(tmp_path, capsys, bad):
    sources = tmp_path / "s.yaml"
    sources.write_text(bad)
    assert mirror.main([str(sources), str(tmp_path / "m")]) == 2
    assert "x:" in capsys.readouterr().err
