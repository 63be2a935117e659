"""Build the validate probes (validate/probes/*.c) with an MPI's own mpicc, once per source and MPI.

The probes stand in for IMB-MPI1 and OSU where neither is installed (docs/design.md, "Benchmarks and probes"):
``probe_coll`` prints IMB-MPI1's table format for Alltoall/Allgather/Allreduce/Bcast, ``probe_osc`` OSU
7.4's one-sided format; both start their output with a ``# tunedmpi-probe`` line. ``probe_host``
uses no MPI: it times a cache-line round trip between two CPUs, the host-state figure that the
runner records before and after every run, with IMB/OSU as with the probes (``host_state``).

A build is cached in ``outdir``: ``<probe>.build-id`` holds a hash of the source text, the compile
flags and the MPI wrapper's identity (its path, ``mpicc --showme`` / ``-show`` and ``--version``
output), so switching MPI (another module) or editing a probe rebuilds it, and nothing else does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Union

from tunedmpi.files import read_bytes, read_text, replaced_by, write_atomic
from tunedmpi.tables.operations import BENCHMARKS, COLLECTIVES, OSU_BENCHMARKS

PROBES = ("probe_coll", "probe_osc")  # the benchmark stand-ins
HOST_PROBE = "probe_host"
# src/tunedmpi/bench/probes.py -> <repo>/validate/probes
SOURCE_DIR = Path(__file__).resolve().parents[3] / "validate" / "probes"
CFLAGS = ("-O2",)
_TIMEOUT = 300


class ProbeBuildError(RuntimeError):
    """No usable mpicc, a missing source, or a failed compile (the message has the compiler output)."""


def _run(argv: List[str], env=None) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError):
        return None


def _wrapper_identity(mpicc: str, env=None) -> str:
    """What decides the binary besides the source: the wrapper, what it expands to, its compiler."""
    parts = ["path=" + mpicc, "real=" + os.path.realpath(mpicc)]
    for flag in ("--showme", "-show"):  # Open MPI; MPICH, Intel MPI, Cray
        r = _run([mpicc, flag], env)
        if r is not None and r.returncode == 0 and r.stdout.strip():
            parts.append(flag + "=" + r.stdout.strip())
            break
    r = _run([mpicc, "--version"], env)
    if r is not None and r.returncode == 0:
        parts.append("version=" + r.stdout.strip())
    return "\n".join(parts)


def _resolve(mpicc: Union[str, os.PathLike], env=None) -> str:
    found = shutil.which(str(mpicc), path=(env or os.environ).get("PATH"))
    if not found:
        raise ProbeBuildError(
            "mpicc not found: %s (load the MPI module, or pass the wrapper's path)" % mpicc
        )
    # Not realpath: Open MPI's mpicc is a symlink to opal_wrapper, which reads its own name.
    return os.path.abspath(found)


def build(
    mpicc: Union[str, os.PathLike],
    outdir: Union[str, os.PathLike],
    source_dir: Union[str, os.PathLike, None] = None,
    env=None,
    names=PROBES,
) -> Dict[str, Path]:
    """Compile the probes ``names`` with ``mpicc -O2`` into ``outdir``; returns {probe name: executable}.

    ``env``: the environment the wrapper runs in (the MPI module's; default this process's).
    Up-to-date probes are not recompiled. Raises ProbeBuildError with the command and the
    compiler's output when a compile fails.
    """
    wrapper = _resolve(mpicc, env)
    identity = _wrapper_identity(wrapper, env)
    src_dir = Path(source_dir) if source_dir is not None else SOURCE_DIR
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    built = {}
    for name in names:
        src = src_dir / (name + ".c")
        try:
            # the probe and the headers it shares (probe_common.h): either change means a rebuild
            text = read_bytes(src) + b"".join(read_bytes(h) for h in sorted(src_dir.glob("*.h")))
        except OSError as exc:
            raise ProbeBuildError("probe source %s: %s" % (src, exc.strerror or exc)) from exc
        digest = hashlib.sha256()
        for part in (text, " ".join(CFLAGS).encode(), identity.encode()):
            digest.update(len(part).to_bytes(8, "big") + part)
        key = digest.hexdigest()
        exe, stamp = out / name, out / (name + ".build-id")
        try:
            current = read_text(stamp, 4096).strip() == key and os.access(exe, os.X_OK)
        except (OSError, UnicodeError):
            current = False
        if not current:
            _compile(wrapper, src, exe, env)
            write_atomic(stamp, key + "\n")
        built[name] = exe
    return built


def _compile(wrapper: str, src: Path, exe: Path, env=None) -> None:
    # Compile beside the target and rename: a reader never runs half a binary.
    with replaced_by(exe, 0o755) as tmp:
        argv = [wrapper, *CFLAGS, "-o", tmp, str(src)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT, env=env)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ProbeBuildError("cannot run %s: %s" % (" ".join(argv), exc)) from exc
        if r.returncode != 0:
            output = (r.stdout + r.stderr).strip() or "(no output)"
            raise ProbeBuildError(
                "compiling %s failed (exit %d): %s\n%s"
                % (src.name, r.returncode, " ".join(argv), output)
            )


def command(binaries: Dict[str, Path], benchmark: str, *args: str) -> List[str]:
    """argv (without mpirun) running ``benchmark`` ("allreduce", "osu_put_bw", ...) with its probe."""
    name = benchmark.lower()
    name = name[4:] if name.startswith("osu_") else name
    if name in COLLECTIVES:
        return [str(binaries["probe_coll"]), *args, name]
    if name in OSU_BENCHMARKS:
        return [str(binaries["probe_osc"]), name, *args]
    raise ValueError("no probe runs %r (known: %s)" % (benchmark, ", ".join(BENCHMARKS)))


HOST_MARK = "# tunedmpi-host-probe "
HOST_PROBE_MS = 100


def host_state(executable, env=None) -> Optional[float]:
    """The host probe's median cache-line round trip in ns, measured now for HOST_PROBE_MS; None
    when it cannot tell (one CPU to pin to, or it did not run)."""
    r = _run([str(executable), str(HOST_PROBE_MS)], env)
    if r is None or r.returncode != 0:
        return None
    for line in r.stdout.splitlines():
        if line.startswith(HOST_MARK + "round_trip_ns="):
            try:
                return float(line[len(HOST_MARK + "round_trip_ns=") :].split()[0])
            except ValueError:
                return None
    return None
