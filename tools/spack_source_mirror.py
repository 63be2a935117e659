"""Turn upstream git trees into a Spack source mirror, for a site that builds without internet.

    python3 tools/spack_source_mirror.py SOURCES.yaml MIRROR --git-root DIR [--git owner/name=PATH ...]
    spack mirror add --scope site tunedmpi-sources MIRROR

SOURCES.yaml (e.g. site-configs/local-source/sources.yaml) names, per Spack package, the repository,
the tag, the archive name Spack looks for and the command that makes a git tree release-like
(`autogen.pl`, `autogen.sh`). Each archive is written to MIRROR/<package>/<archive>, Spack's mirror
layout, with its submodules at the commits the tag records (found by owner/name like the top
repository). A repository is looked for as --git owner/name=PATH, else under --git-root as
<owner>+<name>/repo, <owner>/<name>.git, <owner>/<name> or <name>. MIRROR/SOURCES.json records the
commit and sha256 of every archive. Needs git, tar and what the prepare commands run (perl,
autoconf, automake, libtool). Exit 0 written, 2 could not (one line saying why).
"""

import argparse
import bz2
import fnmatch
import gzip
import hashlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run with any python3 that has yaml, from a checkout

from tunedmpi import paths  # noqa: E402
from tunedmpi.errors import InputError  # noqa: E402


class MirrorError(Exception):
    pass


SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
COMMIT = re.compile(r"^[0-9a-f]{7,64}\Z")
REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/-]{0,127}\Z")  # a tag or branch, never an option


def checked(pattern, value, where, key, want):
    """value when it matches pattern, else a MirrorError naming the entry, the key and the fix."""
    if isinstance(value, str) and pattern.match(value):
        return value
    raise MirrorError(f"{where}: {key}: {value!r} is not {want} (fix: write {want})")


def check_entry(name, entry, where):
    """Every value of an entry that becomes a path part, a git argument or an archive member is a
    plain name, checked before anything is built: a package named /some/dir, an archive
    ../../x.tar.gz or a checksum ../../y would otherwise write (and remove) outside the mirror."""
    if not isinstance(entry, dict):
        raise MirrorError(f"{where}: {name!r}: write a mapping (version, repo, ref, archive, ...)")
    for key in ("version", "repo", "ref", "archive", "spack_sha256"):
        if not entry.get(key):
            raise MirrorError(
                f"{name}: {key} is missing (each entry needs version, repo, ref, archive, spack_sha256)"
            )
    try:
        paths.safe_name(name, where, "package")
        paths.safe_name(str(entry["version"]), where, f"{name}.version")
        paths.safe_name(entry["archive"], where, f"{name}.archive")
        owner, _, repo = str(entry["repo"]).partition("/")
        paths.safe_name(owner, where, f"{name}.repo")
        paths.safe_name(repo, where, f"{name}.repo")
        if entry.get("prefix") is not None:
            paths.safe_name(str(entry["prefix"]).removesuffix("/"), where, f"{name}.prefix")
    except InputError as exc:
        raise MirrorError(exc.format()) from exc
    if not entry["archive"].endswith((".tar.gz", ".tar.bz2")):
        raise MirrorError(f"{name}: archive {entry['archive']}: write a .tar.gz or .tar.bz2 name")
    checked(REF, entry["ref"], where, f"{name}.ref", "a tag, branch or commit")
    checked(SHA256, entry["spack_sha256"], where, f"{name}.spack_sha256", "64 hex digits")
    for patch in entry.get("patches") or []:
        if not isinstance(patch, dict) or not patch.get("commit") or not patch.get("spack_sha256"):
            raise MirrorError(f"{name}: each patch needs commit and spack_sha256")
        checked(COMMIT, patch["commit"], where, f"{name}.patches.commit", "a commit hash")
        checked(
            SHA256, patch["spack_sha256"], where, f"{name}.patches.spack_sha256", "64 hex digits"
        )


def run(cmd, cwd=None, stdout=None, stdin_data=None):
    res = subprocess.run(cmd, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, input=stdin_data)
    if res.returncode:
        err = res.stderr.decode(errors="replace").strip().splitlines()
        raise MirrorError(
            "%s failed (exit %d): %s" % (" ".join(cmd), res.returncode, err[-1] if err else "")
        )
    return res.stdout


class Repos:
    """owner/name -> a git directory, as the command line says where to look."""

    def __init__(self, explicit, root):
        self.explicit = explicit
        self.root = Path(root) if root else None

    def find(self, slug):
        if slug in self.explicit:
            return self.explicit[slug]
        owner, name = slug.split("/", 1)
        if not (paths.SAFE_NAME.match(owner) and paths.SAFE_NAME.match(name)):
            raise MirrorError(f"{slug}: not an owner/name of plain names (a submodule URL?)")
        if self.root:
            for cand in (f"{owner}+{name}/repo", f"{owner}/{name}.git", f"{owner}/{name}", name):
                path = self.root / cand
                if path.exists():
                    return str(path)
        raise MirrorError(
            "no git repository for %s: pass --git %s=PATH or --git-root DIR" % (slug, slug)
        )


def gitdir_of(path):
    """A bare repository (or a fetched mirror) is its own git dir; a checkout has .git inside."""
    return os.path.join(path, ".git") if os.path.isdir(os.path.join(path, ".git")) else path


def commit_of(gitdir, ref):
    """The commit a tag, branch or hash names in that repository."""
    return (
        run(
            ["git", "--git-dir", gitdir, "rev-parse", "--verify", f"{ref}^{{commit}}"],
            stdout=subprocess.PIPE,
        )
        .decode()
        .strip()
    )


def submodule_urls(gitdir, commit):
    """path -> url from .gitmodules at that commit ({} when there is none)."""
    try:
        text = run(
            ["git", "--git-dir", gitdir, "show", f"{commit}:.gitmodules"], stdout=subprocess.PIPE
        )
    except MirrorError:
        return {}
    urls, path = {}, None
    for line in text.decode().splitlines():
        key, _, val = (s.strip() for s in line.partition("="))
        if key == "path":
            path = val
        elif key == "url" and path:
            urls[path] = val
    return urls


def slug_of(url, parent):
    """A submodule URL (relative ../../owner/name or absolute) -> owner/name."""
    if url.startswith("../"):
        url = posixpath.normpath(posixpath.join(parent, url))
    parts = url.rstrip("/").removesuffix(".git").split("/")
    return "/".join(parts[-2:])


def extract(repos, slug, ref, dest, omit=(), where=""):
    """The tree of slug at ref into dest, submodules included (recursively); paths in omit (files,
    or submodules, relative to the top tree; glob patterns allowed) are left out."""
    gitdir = gitdir_of(repos.find(slug))
    commit = commit_of(gitdir, ref)
    dest.mkdir(parents=True, exist_ok=True)
    here = [
        p[len(where) + 1 :] if where else p for p in omit if not where or p.startswith(where + "/")
    ]
    archive = run(
        [
            "git",
            "--git-dir",
            gitdir,
            "archive",
            "--format=tar",
            commit,
            "--",
            ".",
            *(f":(exclude,glob){p}" for p in here),
        ],
        stdout=subprocess.PIPE,
    )
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(dest, filter="tar")
    commits = {where or ".": f"{slug}@{commit}"}
    urls = submodule_urls(gitdir, commit)
    tree = run(
        ["git", "--git-dir", gitdir, "ls-tree", "-r", commit], stdout=subprocess.PIPE
    ).decode()
    for line in tree.splitlines():
        meta, path = line.split("\t", 1)
        mode, kind, sub = meta.split()
        full = posixpath.join(where, path) if where else path
        if kind != "commit" or any(fnmatch.fnmatch(full, p) for p in omit):
            continue
        if path not in urls:
            raise MirrorError(
                f"{slug}@{ref}: submodule {path} has no .gitmodules entry: add it to omit:"
            )
        commits.update(extract(repos, slug_of(urls[path], slug), sub, dest / path, omit, full))
    return commits


def write_archive(tree, top, out, name):
    """tree as the file out, compressed as name says (.tar.gz / .tar.bz2), every member under top/."""
    opener = (
        (lambda f: gzip.GzipFile(fileobj=f, mode="wb", mtime=0))
        if name.endswith(".gz")
        else (lambda f: bz2.BZ2File(f, "wb"))
    )
    with open(out, "wb") as raw, opener(raw) as comp, tarfile.open(fileobj=comp, mode="w") as tar:
        tar.add(tree, arcname=top)


def store(mirror, name, entry, made):
    """made (a temporary file) -> Spack's storage path for the package's recorded checksum, and
    <package>/<archive> a relative link to it, as `spack mirror create` lays a mirror out."""
    ext = entry["archive"].split(".tar.", 1)[-1]
    sha = hashlib.sha256(made.read_bytes()).hexdigest()
    storage = (
        mirror
        / "_source-cache"
        / "archive"
        / entry["spack_sha256"][:2]
        / f"{entry['spack_sha256']}.tar.{ext}"
    )
    storage.parent.mkdir(parents=True, exist_ok=True)
    os.replace(made, storage)
    alias = mirror / name / entry["archive"]
    alias.parent.mkdir(parents=True, exist_ok=True)
    tmp = alias.with_name(f".{alias.name}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(os.path.relpath(storage, alias.parent))
    os.replace(tmp, alias)
    return sha


def store_patch(mirror, name, gitdir, patch):
    """A commit as GitHub serves <commit>.patch?full_index=1, at Spack's storage path for a patch
    (no extension); its checksum must be the package's, since Spack checks patches always."""
    text = run(
        [
            "git",
            "--git-dir",
            gitdir,
            "format-patch",
            "-1",
            "--stdout",
            "--full-index",
            "--no-signature",
            patch["commit"],
        ],
        stdout=subprocess.PIPE,
    )
    sha = hashlib.sha256(text).hexdigest()
    if sha != patch["spack_sha256"]:
        raise MirrorError(
            f"{name}: patch {patch['commit']} has sha256 {sha}, not Spack's {patch['spack_sha256']}"
        )
    path = mirror / "_source-cache" / "archive" / sha[:2] / sha
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{sha}.tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
    return {f"patch {patch['commit'][:12]}": f"sha256 {sha}"}


def make_one(repos, name, entry, mirror, scratch):
    made = scratch / f"{name}.archive"
    gitdir = gitdir_of(repos.find(entry["repo"]))
    if entry.get("prefix"):
        # As GitHub makes tag archives (git archive | gzip -n): byte for byte where Spack's checksum is.
        commit = commit_of(gitdir, entry["ref"])
        commits = {".": f"{entry['repo']}@{commit}"}
        data = run(
            [
                "git",
                "--git-dir",
                gitdir,
                "archive",
                "--format=tar",
                f"--prefix={entry['prefix']}",
                commit,
            ],
            stdout=subprocess.PIPE,
        )
        made.write_bytes(run(["gzip", "-n"], stdout=subprocess.PIPE, stdin_data=data))
    else:
        tree = scratch / name
        commits = extract(repos, entry["repo"], entry["ref"], tree, tuple(entry.get("omit") or ()))
        if entry.get("prepare"):
            run([str(c) for c in entry["prepare"]], cwd=tree, stdout=subprocess.DEVNULL)
        write_archive(tree, f"{name}-{entry['version']}", made, entry["archive"])
        shutil.rmtree(tree)
    sha = store(mirror, name, entry, made)
    for patch in entry.get("patches") or []:
        commits.update(store_patch(mirror, name, gitdir, patch))
    return {
        "version": str(entry["version"]),
        "archive": f"{name}/{entry['archive']}",
        "sha256": sha,
        "spack_sha256": entry["spack_sha256"],
        "checksum_matches_spack": sha == entry["spack_sha256"],
        "commits": commits,
        "prepare": [str(c) for c in entry.get("prepare") or []],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", help="e.g. site-configs/local-source/sources.yaml")
    ap.add_argument("mirror", help="the mirror folder to write (created)")
    ap.add_argument("--git-root", help="folder that holds the upstream repositories")
    ap.add_argument("--git", action="append", default=[], metavar="OWNER/NAME=PATH")
    ap.add_argument(
        "--only", action="append", default=[], metavar="PACKAGE", help="just these packages"
    )
    args = ap.parse_args(argv)
    try:
        explicit = {}
        for item in args.git:
            slug, sep, path = item.partition("=")
            if not sep or "/" not in slug:
                raise MirrorError(f"--git {item}: write OWNER/NAME=PATH")
            explicit[slug] = path
        try:
            with open(args.sources, encoding="utf-8") as fh:
                sources = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise MirrorError(f"{args.sources}: cannot read: {exc}") from exc
        if not isinstance(sources, dict):
            raise MirrorError(f"{args.sources}: write a mapping of package: entry")
        unknown = set(args.only) - set(sources)
        if unknown:
            raise MirrorError(f"--only {', '.join(sorted(unknown))}: not in {args.sources}")
        for name, entry in sources.items():
            check_entry(name, entry, args.sources)
        repos = Repos(explicit, args.git_root)
        mirror = Path(args.mirror)
        index_path = mirror / "SOURCES.json"
        index = json.loads(index_path.read_text()) if index_path.is_file() else {}
        with tempfile.TemporaryDirectory(prefix="tunedmpi-mirror-") as scratch:
            for name, entry in sources.items():
                if args.only and name not in args.only:
                    continue
                index[name] = make_one(repos, name, entry, mirror, Path(scratch))
                done = index[name]
                print(
                    f"wrote {mirror / done['archive']}  sha256 {done['sha256']}"
                    + (
                        "  = Spack's"
                        if done["checksum_matches_spack"]
                        else "  (not Spack's: install it with --no-checksum)"
                    )
                )
        tmp = index_path.with_name(".SOURCES.json.tmp")
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, index_path)
    except (MirrorError, OSError) as exc:
        print(f"spack_source_mirror: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
