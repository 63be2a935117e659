"""Run real Environment Modules 5 (Debian's `environment-modules`, Tcl modulefiles) from tests.

Debian's package Conflicts with lmod, so tools/system-packages.sh unpacks it (dpkg-deb -x) into
/opt/environment-modules instead of installing it; its modulecmd.tcl runs from there with tclsh8.6.
An installed one (/usr/share/modules, /usr/lib/modulecmd.tcl) is used where that is all there is.
Same calling conventions as tests/lmod.py: fresh subshells, many cases per bash process."""

import os
import shlex
import subprocess

import lmod

CANDIDATES = (
    "/opt/environment-modules/usr/lib/modulecmd.tcl",
    "/usr/lib/modulecmd.tcl",
    "/usr/share/modules/libexec/modulecmd.tcl",
)
TCLSH = "/usr/bin/tclsh8.6"
WATCHED = lmod.WATCHED
# What Environment Modules keeps in the environment for itself (compared away by hygiene tests).
BOOKKEEPING = (
    "__MODULES_",
    "_LMFILES_",
    "LOADEDMODULES",
    "MODULES_",
    "MODULEPATH",
    "MODULESHOME",
    "LMOD_FAMILY_",
    "MODULES_FAMILY_",
)


def modulecmd():
    return next((c for c in CANDIDATES if os.path.isfile(c)), None)


def available():
    return modulecmd() is not None and os.access(TCLSH, os.X_OK)


WHY_MISSING = (
    "Environment Modules 5 is not unpacked (sh tools/system-packages.sh test: Debian's "
    "environment-modules into /opt/environment-modules) or tclsh8.6 is missing"
)


def init():
    """Bash lines that define `module` (modulecmd's own autoinit), without any site init files."""
    return 'eval "$(%s %s bash autoinit)"' % (TCLSH, shlex.quote(modulecmd()))


def site_modulepaths(site, tmp_path, root, family=False, mpi_level=None, tree=None):
    """The site's modulefiles (or ``tree``), plus a Tcl stand-in for the site's own MPI module where
    it names one (as lmod.site_modulepaths: a stand-in prefix's bin/ on PATH; ``family`` mpi,
    ``mpi_level`` prepended to MODULEPATH)."""
    paths = [tree or root / "modulefiles" / site.name]
    if site.base_module:
        prefix = lmod.stand_in_prefix(site, tmp_path)
        base = tmp_path / "base-tcl" / site.base_module
        base.parent.mkdir(parents=True, exist_ok=True)
        base.write_text(
            "#%%Module1.0\nmodule-whatis {stand-in for the site's own MPI module}\n"
            "setenv TUNEDMPI_TEST_BASE_PREFIX {%s}\nprepend-path PATH {%s/bin}\n"
            % (prefix, prefix)
            + ("family mpi\n" if family else "")
            + ("prepend-path MODULEPATH {%s}\n" % mpi_level if mpi_level else "")
        )
        paths.append(tmp_path / "base-tcl")
    return paths


def shell(modulepaths, script, **env):
    """Run a bash script with Environment Modules initialised and the modulepaths in use."""
    head = ["set -u", init()]
    head += ["module use %s" % shlex.quote(str(p)) for p in modulepaths]
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(head + [script])],
        env=lmod.clean_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def load_many(modulepaths, module, envs, extra="", timeout=600):
    """For each env (dict), `module load` in a fresh subshell; returns [(watched env, stderr text)]."""
    return lmod.load_many(modulepaths, module, envs, extra, init=init(), timeout=timeout)
