"""Run real Lmod (Debian's `lmod` package) from tests: load modules in clean subshells, read env."""

import os
import shlex
import signal
import subprocess

from tunedmpi.bench import machine

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
WATCHED = (
    "UCX_",
    "UCC_",
    "OMPI_MCA_",
    "PRTE_MCA_",
    "HCOLL_",
    "SLURM_DISTRIBUTION",
    "TUNEDMPI_SELECTION",
    "TUNEDMPI_ROW",
    "TUNEDMPI_SEEN",
)


def available():
    return os.path.isfile(LMOD_INIT)


def clean_env(**extra):
    """This process's environment without scheduler, tuning, MPI or Lmod state (tests set their own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "SLURM_",
                "PBS_",
                "LSB_",
                "FLUX_",
                "TUNEDMPI_",
                "UCX_",
                "UCC_",  # a value set before the load would be kept (selector.SKIP)
                "OMPI_MCA_",
                "HCOLL_",
                "PRTE_MCA_",
                "LMOD",
                "MODULE",
                "_LMFILES_",
                "LOADEDMODULES",
                "__LM",
                "OMP_NUM_THREADS",  # threads per rank (selector.THREADS)
                "NCPUS",
            )
        )
    }
    # Lmod drops duplicate PATH entries as it edits PATH: start without any, so before/after compare.
    seen = []
    for part in env.get("PATH", "").split(":"):
        if part not in seen:
            seen.append(part)
    env["PATH"] = ":".join(seen)
    if machine.ENV in os.environ:  # the session's own (conftest): suites side by side
        env[machine.ENV] = os.environ[machine.ENV]
    env.update(extra)
    return env


def stand_in_prefix(site, tmp_path):
    """A stand-in install prefix for the site's own MPI module (Nagoya's openmpi_cuda, an HPC-X
    module), which does not exist on a build machine: its bin/ goes on PATH."""
    prefix = tmp_path / "stand-in" / site.base_module
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    return prefix


def site_modulepaths(site, tmp_path, root, family=False, mpi_level=None, tree=None):
    """The site's generated modulefiles (or ``tree``), plus a stand-in for the site's own MPI module
    where it names one: it sets TUNEDMPI_TEST_BASE_PREFIX and puts its stand-in prefix's bin/ on
    PATH, so tests see whether it came and went with the tuned module. ``family``: the stand-in is
    in family("mpi"), as Spack's and EasyBuild's MPI modules are in a hierarchy; ``mpi_level``: it
    prepends that folder to MODULEPATH, as they do."""
    paths = [tree or root / "modulefiles" / site.name]
    if site.base_module:
        prefix = stand_in_prefix(site, tmp_path)
        base = tmp_path / "base" / (site.base_module + ".lua")
        base.parent.mkdir(parents=True, exist_ok=True)
        base.write_text(
            'whatis("stand-in for the site\'s own MPI module")\n'
            'setenv("TUNEDMPI_TEST_BASE_PREFIX", "%s")\nprepend_path("PATH", "%s/bin")\n'
            % (prefix, prefix)
            + ('family("mpi")\n' if family else "")
            + ('prepend_path("MODULEPATH", "%s")\n' % mpi_level if mpi_level else "")
        )
        paths.append(tmp_path / "base")
    return paths


def shell(modulepaths, script, **env):
    """Run a bash script with Lmod initialised and the modulepaths in use; a CompletedProcess."""
    head = ["set -u", "source %s" % LMOD_INIT]
    head += ["module use %s" % shlex.quote(str(p)) for p in modulepaths]
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(head + [script])],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def load_many(modulepaths, module, envs, extra="", init="source %s" % LMOD_INIT, timeout=600):
    """For each env (dict), `module load` in a fresh subshell; returns [(watched env, stderr text)].
    ``init``: the line that defines `module` (tests/envmodules.py passes Environment Modules').
    After ``timeout`` seconds the whole process group is killed and the test fails: a load that
    blocks (on a FIFO, say) must fail the test, not hang it."""
    if not isinstance(modulepaths, (list, tuple)):
        modulepaths = [modulepaths]
    script = [init] + ["module use %s" % shlex.quote(str(p)) for p in modulepaths]
    for i, env in enumerate(envs):
        exports = " ".join("export %s=%s;" % (k, shlex.quote(v)) for k, v in env.items())
        script.append(
            "( %s module load %s 2>/tmp/.lmod_err_$$ >/dev/null; %s echo '@@CASE %d'; "
            "env; echo '@@ERR'; cat /tmp/.lmod_err_$$; echo '@@END' )" % (exports, module, extra, i)
        )
    proc = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(script)],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",  # env values that are not UTF-8 come back as they went
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("module load took over %s s: %s" % (timeout, module)) from None
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    results = []
    for block in proc.stdout.split("@@CASE ")[1:]:
        head, _, rest = block.partition("\n")
        envtext, _, err = rest.partition("@@ERR\n")
        err = err.split("@@END")[0]
        got = {}
        for line in envtext.splitlines():
            name, eq, value = line.partition("=")
            if eq and name.startswith(WATCHED):
                got[name] = value
        results.append((got, err))
    assert len(results) == len(envs), proc.stderr[-2000:]
    return results
