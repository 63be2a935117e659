"""Install a site's peer MPIs from PyPI, each into its own venv at its prefix (`make peers`).

    .venv/bin/python tools/peer_mpis.py [--site local] [--root DIR]

The peers are the site.yaml `peers:` entries with a `pypi:` list (site-configs/README.md): for the
`local` site Intel MPI 2021.18.1 (impi-rt, impi-devel) into .peers/intel-mpi/2021.18.1 and MPICH
5.0.2 into .peers/mpich/5.0.2; `tunedmpi render` writes their modules. A relative prefix is
relative to --root (default: this checkout, where the modules look for it).

Idempotent and atomic: a peer whose prefix exists is left alone; otherwise a venv is made in a
temporary folder beside the prefix, pip installs the pinned requirements into it and the folder
is renamed to the prefix only once everything is in (an interrupted or failed install leaves
nothing behind). Exit 0, or 2 with one line saying what failed and what to do.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run by `make peers` with .venv's Python, or from a checkout

from tunedmpi import files  # noqa: E402
from tunedmpi.errors import InputError, InputErrors  # noqa: E402
from tunedmpi.modules import sites  # noqa: E402

MARKER = ".tunedmpi-peer.json"  # in each prefix: what was installed, by which requirements


class PeerError(Exception):
    pass


def prefix_of(peer, root):
    return Path(peer.prefix) if peer.prefix.startswith("/") else Path(root) / peer.prefix


def _one_line(text):
    """pip's reason in one line: its last ERROR line, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


def _repoint(tmp, dest):
    """A venv names its own folder in pip's scripts, activate* and pyvenv.cfg: make those name the
    prefix it is renamed to (the MPI's own files find their prefix from where they are)."""
    old, new = str(tmp).encode(), str(dest).encode()
    scripts = [p for p in (tmp / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    for path in scripts + [tmp / "pyvenv.cfg"]:
        data = files.read_bytes(path)
        if old in data and not data.startswith(b"\x7fELF"):
            files.write_atomic_with(path, lambda fh, data=data: fh.write(data.replace(old, new)))


def install(peer, root, log=print):
    """Install ``peer`` (a sites.Peer with pypi requirements) at its prefix under ``root``.
    Returns "present" or "installed"; raises PeerError with one line."""
    dest = prefix_of(peer, root)
    name = "%s/%s" % (peer.module, peer.version)
    if dest.exists():
        if not (dest / "bin" / "mpirun").is_file():
            raise PeerError(
                "%s: %s exists but holds no bin/mpirun (not an install of this script): "
                "remove it and run `make peers` again" % (name, dest)
            )
        log("ok  %s: present in %s" % (name, dest))
        return "present"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".%s." % dest.name, suffix=".tmp", dir=dest.parent))
        umask = os.umask(0o022)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would keep other users out of the MPI
    except OSError as exc:
        raise PeerError("%s: cannot create %s: %s" % (name, dest.parent, exc.strerror)) from None
    try:
        venv = subprocess.run(
            [sys.executable, "-m", "venv", str(tmp)], capture_output=True, text=True
        )
        if venv.returncode:
            raise PeerError(
                "%s: python -m venv failed: %s (fix: install python3-venv)"
                % (name, _one_line(venv.stderr + venv.stdout))
            )
        pip = subprocess.run(
            [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q"]
            + ["--disable-pip-version-check", "--no-input"]
            + list(peer.pypi),
            capture_output=True,
            text=True,
        )
        if pip.returncode:
            raise PeerError(
                "%s: pip could not install %s: %s (fix: network access to PyPI, or "
                "PIP_INDEX_URL=<a mirror that has them>)"
                % (name, " ".join(peer.pypi), _one_line(pip.stderr + pip.stdout))
            )
        if not (tmp / "bin" / "mpirun").is_file():
            raise PeerError(
                "%s: %s installed but gave no bin/mpirun: not an MPI distribution"
                % (name, " ".join(peer.pypi))
            )
        _repoint(tmp, dest)
        files.write_atomic(
            tmp / MARKER, json.dumps({"module": name, "pypi": list(peer.pypi)}, indent=1) + "\n"
        )
        try:
            os.rename(tmp, dest)  # atomic; fails when another install got there first
        except OSError:
            if (dest / "bin" / "mpirun").is_file():
                log("ok  %s: present in %s (installed meanwhile)" % (name, dest))
                return "present"
            raise
    except OSError as exc:
        raise PeerError("%s: cannot install into %s: %s" % (name, dest, exc)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; else a failed attempt
    log("ok  %s: installed %s into %s" % (name, " ".join(peer.pypi), dest))
    return "installed"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", default="local", help="the site whose peers to install (local)")
    ap.add_argument("--root", default=str(ROOT), help="where relative prefixes are (the checkout)")
    args = ap.parse_args(argv)
    try:
        site = sites.load_named(args.site)
    except (InputError, InputErrors) as exc:
        print("peer_mpis: %s" % str(exc).splitlines()[0], file=sys.stderr)
        return 2
    peers = [p for p in site.peers if p.pypi]
    if not peers:
        print("peer_mpis: site %s names no peers with pypi: (site.yaml peers:)" % site.name)
        return 0
    try:
        for peer in peers:
            install(peer, args.root)
    except PeerError as exc:
        print("peer_mpis: %s" % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("peer_mpis: interrupted; nothing half-installed is left", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
