"""tuned-mpi-modules: EasyBuild easyblock that installs the tuned MPI module of one site.

Its module is the module `tunedmpi render` writes, not one EasyBuild composes: the selection rule
exists once, in the project's renderer (src/tunedmpi/modules/render/). Used by the easyconfigs in
easybuild/<site>/ (`easyblock = 'TunedMPIModule'`, `eb --include-easyblocks=...`); docs/easybuild.md
says how, tests/test_easybuild.py checks it with a real `eb` run and real Lmod.

install_step runs the project's one install routine, `python -m tunedmpi install-module`
(src/tunedmpi/modules/install.py, which the Spack package runs too), with EasyBuild's view of the
site: the easyconfig's one runtime dependency (the site's Open MPI easyconfig, or an external
module) as `mpi.base_module`, so the tuned module depends_on() it; with no dependency the site's
own MPI stays (a relative `mpi.prefix` made absolute against the checkout, since the module no
longer lives in it). Lua only (Lmod), the format EasyBuild writes here. It checks the easyconfig's
name and version against the site, checks the table, renders into
<installdir>/share/tunedmpi/modulefiles, copies the derived config and the table to
share/tunedmpi/, and writes share/tunedmpi/easybuild-module.lua: the rendered tuned module with its
rules folder pinned to the installed one (tunedmpi.modules.render.pin_rules_dir), since
EasyBuild's module tree is not beside it.
make_module_step then writes that text as the module, with EasyBuild's $EBROOT/$EBVERSION lines.
"""

import os

from easybuild.framework.easyblock import EasyBlock
from easybuild.framework.easyconfig import CUSTOM, MANDATORY
from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.filetools import convert_name
from easybuild.tools.run import run_shell_cmd

#: The checkout this file is in: <checkout>/easybuild/easyblocks/tunedmpimodule.py. EasyBuild
#: symlinks included easyblocks, so realpath finds the checkout (as the Spack package does).
CHECKOUT = os.path.realpath(
    os.path.join(os.path.dirname(os.path.realpath(__file__)), os.pardir, os.pardir)
)


def run(cmd, **kwargs):
    """Run an argument list without a shell: paths go through as they are."""
    return run_shell_cmd(cmd, use_bash=False, **kwargs)


class TunedMPIModule(EasyBlock):
    """The tuned MPI module of one tuned-mpi-modules site, as `tunedmpi render` writes it."""

    @staticmethod
    def extra_options(extra_vars=None):
        extra = EasyBlock.extra_options(extra_vars)
        extra.update(
            {
                "tunedmpi_site": [
                    None,
                    "Site whose table and site config to install (a folder of "
                    "site-configs/ in the tuned-mpi-modules checkout)",
                    MANDATORY,
                ],
                "tunedmpi_checkout": [
                    None,
                    "The tuned-mpi-modules checkout (default: the one holding this easyblock)",
                    CUSTOM,
                ],
                "tunedmpi_python": [
                    None,
                    "Python that runs the renderer, with PyYAML and Jinja2 (default: "
                    "the checkout's .venv/bin/python made by `make`, else python3)",
                    CUSTOM,
                ],
            }
        )
        return extra

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.share = os.path.join(self.installdir, "share", "tunedmpi")
        self.module_text_path = os.path.join(self.share, "easybuild-module.lua")

    # --- where things are -------------------------------------------------------------------
    def checkout(self):
        root = self.cfg["tunedmpi_checkout"] or CHECKOUT
        for part in ("tuning-tables", "site-configs", os.path.join("src", "tunedmpi")):
            if not os.path.isdir(os.path.join(root, part)):
                raise EasyBuildError(
                    "openmpi-tuned renders from a tuned-mpi-modules checkout, but %s has no "
                    "%s/ (fix: set tunedmpi_checkout in the easyconfig, or include the "
                    "easyblock from a full clone)",
                    root,
                    part,
                )
        return os.path.realpath(root)

    def python(self, root):
        python = self.cfg["tunedmpi_python"]
        if not python:
            venv = os.path.join(root, ".venv", "bin", "python")
            python = venv if os.path.isfile(venv) else "python3"
        res = run([python, "-c", "import yaml, jinja2"], fail_on_error=False, hidden=True)
        if res.exit_code:
            raise EasyBuildError(
                "%s cannot import PyYAML and Jinja2, which tunedmpi render needs "
                "(fix: run `make` in %s, or set tunedmpi_python, or add Python, PyYAML "
                "and Jinja2 as builddependencies): %s",
                python,
                root,
                res.output,
            )
        return python

    def mpi_module(self):
        """The module that provides the MPI: the easyconfig's one runtime dependency, or ''."""
        deps = self.cfg.dependencies(runtime_only=True)
        if len(deps) > 1:
            raise EasyBuildError(
                "openmpi-tuned takes one dependency, the site's MPI; got %s (fix: drop "
                "the others: the MPI's module loads what it needs)",
                ", ".join(d["short_mod_name"] for d in deps),
            )
        return deps[0]["short_mod_name"] if deps else ""

    def mpi_level(self):
        """In a hierarchical naming scheme (HierarchicalMNS): the folder the MPI dependency's
        module adds to $MODULEPATH (MPI/<compiler>/<v>/OpenMPI/<v>), which the tuned module then
        adds too, so what was built with that MPI stays available; flat schemes: ''."""
        deps = self.cfg.dependencies(runtime_only=True)
        if not deps:
            return ""
        full = deps[0]["full_mod_name"]  # an external module's too: its own name
        found = self.modules_tool.modpath_extensions_for([full]).get(full) or []
        return found[0] if found else ""

    # --- steps ------------------------------------------------------------------------------
    def check_lua(self):
        if self.module_generator.SYNTAX != "Lua":
            raise EasyBuildError(
                "openmpi-tuned writes the Lua module tunedmpi render makes (fix: eb "
                "--modules-tool=Lmod --module-syntax=Lua)"
            )

    def configure_step(self):
        """Nothing to configure (no sources); refuse a module syntax other than Lua before installing."""
        self.check_lua()

    def build_step(self):
        """Nothing to build: the renderer writes text."""

    def install_step(self):
        root = self.checkout()
        python = self.python(root)
        site = self.cfg["tunedmpi_site"]
        src = os.path.join(root, "site-configs", site, "site.yaml")
        if not os.path.isfile(src):
            raise EasyBuildError(
                "no site %s: %s is missing (fix: tunedmpi_site = one of %s)",
                site,
                src,
                ", ".join(sorted(os.listdir(os.path.join(root, "site-configs")))),
            )

        # The project's one install routine (the Spack package runs it too): EasyBuild's MPI,
        # Lua only; it refuses a name or version that is not the site's before writing anything.
        args = [
            python,
            "-m",
            "tunedmpi",
            "install-module",
            "--installer",
            "easybuild",
            "--checkout",
            root,
            "--site",
            site,
            "--share",
            self.share,
            "--formats",
            "lua",
            "--mpi-version",
            self.version,
            "--name",
            self.name,
            "--pinned-copy",
            self.module_text_path,
        ]
        mpi = self.mpi_module()
        if mpi:
            args += ["--base-module", mpi]
        level = self.mpi_level()
        if level:
            args += ["--mpi-level", level]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                p for p in (os.path.join(root, "src"), os.environ.get("PYTHONPATH")) if p
            ),
        )
        res = run(args, env=env, fail_on_error=False)
        if res.exit_code:
            errors = [
                line[len("error: ") :]
                for line in res.output.splitlines()
                if line.startswith("error: ")
            ]
            raise EasyBuildError(
                "tunedmpi install-module failed: %s", "; ".join(errors) or res.output[-2000:]
            )

    def sanity_check_step(self):
        custom_paths = {
            "files": ["share/tunedmpi/easybuild-module.lua", "share/tunedmpi/SOURCE.json"],
            "dirs": ["share/tunedmpi/modulefiles", "share/tunedmpi/site-configs"],
        }
        return super().sanity_check_step(custom_paths=custom_paths)

    # --- the module: render's text ----------------------------------------------------------
    def make_module_description(self):
        """The rendered tuned module (whatis, help, family, MPI, selector), pinned to its rules."""
        self.check_lua()
        if not os.path.isfile(self.module_text_path):
            # Dry run, or --module-only without an install: say so instead of a module that lies.
            return "-- %s: written at install time by tunedmpi render\n" % self.module_text_path
        with open(self.module_text_path, encoding="utf-8") as fh:
            return fh.read()

    def make_module_dep(self, *args, **kwargs):
        """None of EasyBuild's own: the rendered module depends_on() the MPI's module."""
        return ""

    def make_module_extend_modpath(self):
        """None of EasyBuild's own: the rendered module adds its MPI's level (mpi_level), which is
        what a hierarchical scheme would give an MPI module; not one for this module's name."""
        return ""

    def make_module_req(self, *args, **kwargs):
        """None: the installation has no bin/ or lib/; the rendered module sets the MPI's paths."""
        return ""

    def make_module_extra(self, *args, **kwargs):
        """Only EasyBuild's bookkeeping ($EBROOT*, $EBVERSION*), as plain values."""
        name = convert_name(self.name, upper=True)
        gen = self.module_generator
        return (
            "\n"
            + gen.set_environment("EBROOT" + name, self.installdir)
            + gen.set_environment("EBVERSION" + name, self.version)
        )
