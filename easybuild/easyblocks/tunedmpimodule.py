"""tuned-mpi-modules: EasyBuild easyblock that installs the tuned MPI module of one site.

Its module is the module `tunedmpi render` writes, not one EasyBuild composes: the selection rule
exists once, in the project's renderer (src/tunedmpi/modules/render/). Used by the easyconfigs in
easybuild/<site>/ (`easyblock = 'TunedMPIModule'`, `eb --include-easyblocks=...`); docs/easybuild.md
says how, tests/test_easybuild.py checks it with a real `eb` run and real Lmod.

install_step:
  1. writes the site config as EasyBuild builds it: the site's site.yaml, but with the MPI named
     as EasyBuild has it: the easyconfig's one runtime dependency (the site's Open MPI easyconfig,
     or an external module) becomes `mpi.base_module`, so the tuned module depends_on() it; with
     no dependency the site's own `mpi.prefix` stays, made absolute against the checkout (the
     module no longer lives in it). Lua only (Lmod), the format EasyBuild writes here.
  2. runs `tunedmpi check <table>` and `tunedmpi render --site <site> --out
     <installdir>/share/tunedmpi/modulefiles` with TUNEDMPI_ROOT at that derived config, and copies
     the config and the table to share/tunedmpi/;
  3. writes share/tunedmpi/easybuild-module.lua: the rendered tuned module with its rules folder
     pinned to the installed one (tunedmpi.modules.render.pin_rules_dir, as the Spack package
     does), since EasyBuild's module tree is not beside it.
make_module_step then writes that text as the module, with EasyBuild's $EBROOT/$EBVERSION lines.
"""
import json
import os
import shutil

from easybuild.framework.easyblock import EasyBlock
from easybuild.framework.easyconfig import CUSTOM, MANDATORY
from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.filetools import convert_name, mkdir, write_file
from easybuild.tools.run import run_shell_cmd

#: The checkout this file is in: <checkout>/easybuild/easyblocks/tunedmpimodule.py. EasyBuild
#: symlinks included easyblocks, so realpath finds the checkout (as the Spack package does).
CHECKOUT = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), os.pardir, os.pardir))

#: Run with the Python that renders: the site config as EasyBuild builds it. Arguments: the
#: site's site.yaml, the copy to write, the checkout, the MPI's module ("" = keep the site's MPI).
#: Prints the table reference and the MPI version for install_step's checks.
DERIVE_SITE = r"""
import json, os, sys, yaml
src, dst, checkout, base_module = sys.argv[1:5]
with open(src, encoding="utf-8") as fh:
    doc = yaml.safe_load(fh)
mpi = doc["mpi"]
out = {"flavour": mpi["flavour"], "version": str(mpi["version"])}
if base_module:
    out["base_module"] = base_module
    how = "mpi.base_module is the easyconfig's MPI dependency %s" % base_module
elif mpi.get("prefix"):
    out["prefix"] = os.path.join(checkout, mpi["prefix"])
    how = "mpi.prefix is the site's, absolute"
else:
    out["base_module"] = mpi["base_module"]
    how = "mpi.base_module is the site's"
doc["mpi"] = out
doc["module_formats"] = ["lua"]
doc["notes"] = list(doc.get("notes") or []) + ["Installed by EasyBuild: " + how]
with open(dst, "w", encoding="utf-8") as fh:
    yaml.safe_dump(doc, fh, sort_keys=False, allow_unicode=True)
print(json.dumps({"table": doc.get("table"), "version": out["version"], "tuned": doc["modules"]["tuned"]}))
"""

#: Run with the Python that renders, after render: the rendered module, the copy to write.
PIN_RULES = r"""
import sys
from tunedmpi.atomic import write_atomic
from tunedmpi.modules import render
module, copy = sys.argv[1:3]
with open(module, encoding="utf-8") as fh:
    write_atomic(copy, render.pin_rules_dir(fh.read(), module))
"""


def run(cmd, **kwargs):
    """Run an argument list without a shell: paths and Python code go through as they are."""
    return run_shell_cmd(cmd, use_bash=False, **kwargs)


class TunedMPIModule(EasyBlock):
    """The tuned MPI module of one tuned-mpi-modules site, as `tunedmpi render` writes it."""

    @staticmethod
    def extra_options(extra_vars=None):
        extra = EasyBlock.extra_options(extra_vars)
        extra.update({
            'tunedmpi_site': [None, "Site whose table and site config to install (a folder of "
                              "site-configs/ in the tuned-mpi-modules checkout)", MANDATORY],
            'tunedmpi_checkout': [None, "The tuned-mpi-modules checkout (default: the one holding "
                                  "this easyblock)", CUSTOM],
            'tunedmpi_python': [None, "Python that runs the renderer, with PyYAML and Jinja2 (default: "
                                "the checkout's .venv/bin/python made by `make`, else python3)", CUSTOM],
        })
        return extra

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.share = os.path.join(self.installdir, 'share', 'tunedmpi')
        self.module_text_path = os.path.join(self.share, 'easybuild-module.lua')

    # --- where things are -------------------------------------------------------------------
    def checkout(self):
        root = self.cfg['tunedmpi_checkout'] or CHECKOUT
        for part in ('tuning-tables', 'site-configs', os.path.join('src', 'tunedmpi')):
            if not os.path.isdir(os.path.join(root, part)):
                raise EasyBuildError("openmpi-tuned renders from a tuned-mpi-modules checkout, but %s has no "
                                     "%s/ (fix: set tunedmpi_checkout in the easyconfig, or include the "
                                     "easyblock from a full clone)", root, part)
        return os.path.realpath(root)

    def python(self, root):
        python = self.cfg['tunedmpi_python']
        if not python:
            venv = os.path.join(root, '.venv', 'bin', 'python')
            python = venv if os.path.isfile(venv) else 'python3'
        res = run([python, '-c', 'import yaml, jinja2'], fail_on_error=False, hidden=True)
        if res.exit_code:
            raise EasyBuildError("%s cannot import PyYAML and Jinja2, which tunedmpi render needs "
                                 "(fix: run `make` in %s, or set tunedmpi_python, or add Python, PyYAML "
                                 "and Jinja2 as builddependencies): %s", python, root, res.output)
        return python

    def mpi_module(self):
        """The module that provides the MPI: the easyconfig's one runtime dependency, or ''."""
        deps = self.cfg.dependencies(runtime_only=True)
        if len(deps) > 1:
            raise EasyBuildError("openmpi-tuned takes one dependency, the site's MPI; got %s (fix: drop "
                                 "the others: the MPI's module loads what it needs)",
                                 ", ".join(d['short_mod_name'] for d in deps))
        return deps[0]['short_mod_name'] if deps else ''

    # --- steps ------------------------------------------------------------------------------
    def check_lua(self):
        if self.module_generator.SYNTAX != 'Lua':
            raise EasyBuildError("openmpi-tuned writes the Lua module tunedmpi render makes (fix: eb "
                                 "--modules-tool=Lmod --module-syntax=Lua)")

    def configure_step(self):
        """Nothing to configure (no sources); refuse a module syntax other than Lua before installing."""
        self.check_lua()

    def build_step(self):
        """Nothing to build: the renderer writes text."""

    def install_step(self):
        root = self.checkout()
        python = self.python(root)
        site = self.cfg['tunedmpi_site']
        src = os.path.join(root, 'site-configs', site, 'site.yaml')
        if not os.path.isfile(src):
            raise EasyBuildError("no site %s: %s is missing (fix: tunedmpi_site = one of %s)", site, src,
                                 ", ".join(sorted(os.listdir(os.path.join(root, 'site-configs')))))

        # A project root holding this site's config as built here and the table it names.
        work = os.path.join(self.builddir, 'tunedmpi-root')
        site_dir = os.path.join(work, 'site-configs', site)
        mkdir(site_dir, parents=True)
        res = run([python, '-c', DERIVE_SITE, src, os.path.join(site_dir, 'site.yaml'), root,
                             self.mpi_module()], hidden=True)
        facts = json.loads(res.output.strip().splitlines()[-1])
        if facts['version'] != self.version:
            raise EasyBuildError("site %s tunes %s %s, but this easyconfig is version %s (fix: version = '%s')",
                                 site, self.name, facts['version'], self.version, facts['version'])
        if facts['tuned'] != self.name:
            raise EasyBuildError("site %s names its tuned module %s, but this easyconfig is %s (fix: name = '%s')",
                                 site, facts['tuned'], self.name, facts['tuned'])

        env = dict(os.environ, TUNEDMPI_ROOT=work,
                   PYTHONPATH=os.pathsep.join(p for p in (os.path.join(root, 'src'), os.environ.get('PYTHONPATH'))
                                              if p))
        if facts['table']:
            table = os.path.join(work, 'tuning-tables', facts['table'] + '.yaml')
            mkdir(os.path.dirname(table), parents=True)
            shutil.copy2(os.path.join(root, 'tuning-tables', facts['table'] + '.yaml'), table)
            run([python, '-m', 'tunedmpi', 'check', table], env=env)
            shutil.copytree(os.path.join(work, 'tuning-tables'), os.path.join(self.share, 'tuning-tables'),
                            dirs_exist_ok=True)

        # The project's renderer, as `make render` runs it (tuned and untuned modules, rules files).
        out = os.path.join(self.share, 'modulefiles')
        run([python, '-m', 'tunedmpi', 'render', '--site', site, '--out', out], env=env)
        shutil.copytree(os.path.join(work, 'site-configs'), os.path.join(self.share, 'site-configs'),
                        dirs_exist_ok=True)
        rendered = os.path.join(out, site, self.name, self.version + '.lua')
        if not os.path.isfile(rendered):
            raise EasyBuildError("tunedmpi render wrote no %s", rendered)
        run([python, '-c', PIN_RULES, rendered, self.module_text_path], env=env)

        # Which checkout the tables came from (rebuild with --rebuild after changing them).
        source = {'checkout': root, 'site': site, 'table': facts['table']}
        if os.path.exists(os.path.join(root, '.git')):
            git = run(['git', '-C', root, 'rev-parse', 'HEAD'], fail_on_error=False, hidden=True)
            if git.exit_code == 0:
                source['commit'] = git.output.strip()
        write_file(os.path.join(self.share, 'SOURCE.json'), json.dumps(source, indent=1, sort_keys=True) + '\n')

    def sanity_check_step(self):
        custom_paths = {'files': ['share/tunedmpi/easybuild-module.lua', 'share/tunedmpi/SOURCE.json'],
                        'dirs': ['share/tunedmpi/modulefiles', 'share/tunedmpi/site-configs']}
        return super().sanity_check_step(custom_paths=custom_paths)

    # --- the module: render's text ----------------------------------------------------------
    def make_module_description(self):
        """The rendered tuned module (whatis, help, family, MPI, selector), pinned to its rules."""
        self.check_lua()
        if not os.path.isfile(self.module_text_path):
            # Dry run, or --module-only without an install: say so instead of a module that lies.
            return '-- %s: written at install time by tunedmpi render\n' % self.module_text_path
        with open(self.module_text_path, encoding='utf-8') as fh:
            return fh.read()

    def make_module_dep(self, *args, **kwargs):
        """None of EasyBuild's own: the rendered module depends_on() the MPI's module."""
        return ''

    def make_module_req(self, *args, **kwargs):
        """None: the installation has no bin/ or lib/; the rendered module sets the MPI's paths."""
        return ''

    def make_module_extra(self, *args, **kwargs):
        """Only EasyBuild's bookkeeping ($EBROOT*, $EBVERSION*), as plain values."""
        name = convert_name(self.name, upper=True)
        gen = self.module_generator
        return '\n' + gen.set_environment('EBROOT' + name, self.installdir) + \
            gen.set_environment('EBVERSION' + name, self.version)
