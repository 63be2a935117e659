"""Which MPI build a campaign measures: a sweep's campaign is resumed only on the build that began
it, since after a rebuild (another configure, another Spack hash, another UCX or UCC) the same
knob space measures something else, and mixing the two builds' runs in one table is wrong."""

import hashlib

from tunedmpi.bench.runner import CannotRun, shell

MARK = "__TUNEDMPI_BUILD__"


def identity(runner, module):
    """{mpirun: resolved path (a Spack prefix holds the hash), mpi: Open MPI's version line,
    configure: sha256 of ompi_info's config lines, ucx, ucc: their version lines or None} of the
    MPI `module` loads, as `runner` loads it."""
    commands = (
        'readlink -f "$(command -v mpirun)" || echo',
        "ompi_info --parsable 2>/dev/null | grep -E '^(ompi:version:full|config:)' || true",
        "ucx_info -v 2>/dev/null | head -n 1 || true",
        "ucc_info -v 2>/dev/null | head -n 1 || true",
    )
    body = "; ".join("echo %s; %s" % (MARK, command) for command in commands)
    code, out, _, _ = shell(runner.script(module, [], body), runner.env, 60)
    parts = [p.strip() for p in out.split(MARK)]
    if code != 0 or len(parts) < 5:
        raise CannotRun("%s: could not load it to see which build it is" % module)
    mpirun, config, ucx, ucc = parts[1:5]
    version = next((ln for ln in config.splitlines() if ln.startswith("ompi:version:full:")), "")
    return {
        "mpirun": mpirun,
        "mpi": version.rpartition(":")[2] or None,
        "configure": hashlib.sha256(config.encode()).hexdigest()[:16] if config else None,
        "ucx": ucx.lstrip("# ") or None,
        "ucc": ucc.lstrip("# ") or None,
    }


def describe(build):
    return "mpirun %s, Open MPI %s, configure %s, UCX %s, UCC %s" % tuple(
        build.get(k) or "?" for k in ("mpirun", "mpi", "configure", "ucx", "ucc")
    )


def check_same(cdir, old, new):
    """CannotRun, naming both builds, when campaign `cdir` began on another build than `new`."""
    if old and old != new:
        raise CannotRun(
            "campaign %s measured the build %s; this one is %s: a campaign measures one build, "
            "so give another --campaign (or rebuild as it was)"
            % (cdir, describe(old), describe(new))
        )
