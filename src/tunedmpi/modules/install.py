"""`tunedmpi install-module`: install one site's modules into a package manager's prefix.

The one install routine of the Spack package (spack-repo/.../openmpi_tuned/package.py) and the
EasyBuild easyblock (easybuild/easyblocks/tunedmpimodule.py): both run
`python -m tunedmpi install-module ...` with the build's Python and the checkout's src/, and differ
only in what they pass (docs/spack.md, docs/easybuild.md):

  1. the site config as the build has it: the checkout's site-configs/<site>/site.yaml with the MPI
     named as the build has it (``mpi_prefix``: where the build installed it; ``base_module``: the
     module that provides it; neither: the site's own, a relative prefix made absolute against the
     checkout), the UCX the build's MPI uses, the build's module names and formats; table,
     hardware, defaults and components stay the site's;
  2. written with its table to <share>/site-configs/<site>/site.yaml and <share>/tuning-tables/,
     so <share> is a project root of its own (TUNEDMPI_ROOT=<share> renders it again);
  3. the table checked (as `tunedmpi check`) and the derived config loaded (as `tunedmpi render`);
  4. rendered into <share>/modulefiles (rules files beside the tuned module);
  5. optionally the pinned copy of the tuned Lua module (render.pin_rules_dir) for a module tree
     away from <share>/modulefiles: Spack's and EasyBuild's own module;
  6. <share>/SOURCE.json: the checkout, its commit and uncommitted changes to tables, site configs, src/.

Nothing is written before every input is checked (the site a plain name; the derived config and
its table checked and rendered in a temporary project root), then everything is written or nothing
(files.write_all_or_none): a failed install leaves <share> as it was.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

from tunedmpi import paths, yamlsrc
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.files import read_text, write_all_or_none, write_atomic
from tunedmpi.modules import render, sites
from tunedmpi.tables import knobs, schema

#: Who installs: the name in the derived config's notes, and the fix of each mismatch in its terms.
INSTALLERS = {
    "spack": {
        "label": "Spack",
        "version": (
            "site {site} tunes Open MPI {want}, but this build has {got}",
            "install openmpi-tuned@{want} site={site}",
        ),
        "name": (
            "site {site} names its tuned module {want}, but this package is {got}",
            "pass --modules {got} <baseline> to tunedmpi install-module",
        ),
    },
    "easybuild": {
        "label": "EasyBuild",
        "version": (
            "site {site} tunes {name} {want}, but this easyconfig is version {got}",
            "version = '{want}'",
        ),
        "name": (
            "site {site} names its tuned module {want}, but this easyconfig is {got}",
            "name = '{want}'",
        ),
    },
}


def derive(
    doc,
    checkout,
    installer,
    mpi_prefix=None,
    base_module=None,
    ucx_version=None,
    modules=None,
    formats=None,
    mpi_level=None,
):
    """The site config ``doc`` (site.yaml as read) as the build has it: a new dict."""
    doc = dict(doc)
    # The build installs the tuned MPI's modules; the site's peers (other MPIs, relative prefixes
    # in a checkout) are not its to install.
    doc.pop("peers", None)
    doc.pop("other_versions", None)  # nor the site's other MPI versions (each has its own build)
    mpi = doc.get("mpi") or {}
    out = {"flavour": mpi.get("flavour"), "version": mpi.get("version")}  # a number: refused
    how = []
    if mpi_prefix:
        out["prefix"] = str(mpi_prefix)
        how.append("mpi.prefix is the build's MPI")
    elif base_module:
        out["base_module"] = base_module
        how.append("mpi.base_module is the build's MPI module %s" % base_module)
    elif mpi.get("prefix"):
        out["prefix"] = os.path.join(str(checkout), str(mpi["prefix"]))
        how.append("mpi.prefix is the site's, absolute")
    else:
        out["base_module"] = mpi.get("base_module")
        how.append("mpi.base_module is the site's")
    doc["mpi"] = out
    if ucx_version:
        doc["ucx_version"] = str(ucx_version)
        how.append("ucx_version is the build's UCX")
    if modules:
        doc["modules"] = {"tuned": modules[0], "baseline": modules[1]}
        how.append("modules are the build's")
    if formats:
        doc["module_formats"] = list(formats)
        how.append("module_formats are the build's")
    level = doc["hierarchy"] if isinstance(doc.get("hierarchy"), dict) else {}
    if mpi_level:
        doc["hierarchy"] = {"mpi_level": str(mpi_level)}
        how.append("hierarchy.mpi_level is the MPI level of the build's module tree")
    elif isinstance(level.get("mpi_level"), str) and not level["mpi_level"].startswith("/"):
        doc["hierarchy"] = {"mpi_level": os.path.join(str(checkout), level["mpi_level"])}
        how.append("hierarchy.mpi_level is the site's, absolute")
    doc["notes"] = list(doc.get("notes") or []) + [
        "Installed by %s: %s" % (INSTALLERS[installer]["label"], "; ".join(how))
    ]
    return doc


@contextlib.contextmanager
def project_root(root):
    """TUNEDMPI_ROOT=root for the renderer (paths.project_root), restored afterwards."""
    old = os.environ.get("TUNEDMPI_ROOT")
    os.environ["TUNEDMPI_ROOT"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TUNEDMPI_ROOT", None)
        else:
            os.environ["TUNEDMPI_ROOT"] = old


def _checked_render(files, share):
    """The derived config and its table ({path under share: text}) written to a temporary project
    root, checked as `tunedmpi check` and loaded and rendered as `tunedmpi render` does: (the
    loaded site, {path relative to modulefiles/: text}). Errors name the files under share."""
    stage = tempfile.mkdtemp(prefix="tunedmpi-install-")
    try:
        for path, text in files.items():
            write_atomic(os.path.join(stage, os.path.relpath(path, share)), text)
        with project_root(stage):
            for path in files:
                if path.endswith(".yaml") and "tuning-tables" in os.path.relpath(path, share):
                    schema.load_table(os.path.join(stage, os.path.relpath(path, share)))
            conf = next(p for p in files if p.endswith("site.yaml"))
            loaded = sites.load_site(os.path.join(stage, os.path.relpath(conf, share)))
            return loaded, render.render_all([loaded])
    except InputError as exc:
        raise _in_share(exc, stage, share) from None
    except InputErrors as exc:
        raise InputErrors(_in_share(e, stage, share) for e in exc.errors) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _in_share(exc, stage, share):
    """exc naming the file under share that the staged file will become."""
    return InputError(exc.path.replace(stage, share), exc.line, exc.key, exc.problem, exc.fix)


def _git(checkout, *args):
    git = shutil.which("git")
    if not git or not os.path.exists(os.path.join(str(checkout), ".git")):
        return None
    proc = subprocess.run(
        [git, "-C", str(checkout)] + list(args), capture_output=True, text=True, timeout=60
    )
    return proc.stdout if proc.returncode == 0 else None


def source(checkout, site, table, installer):
    """SOURCE.json: which checkout (and commit, and uncommitted changes) the modules came from."""
    out = {"checkout": str(checkout), "site": site, "table": table, "installer": installer}
    commit = _git(checkout, "rev-parse", "HEAD")
    if commit is not None:
        out["commit"] = commit.strip()
        status = _git(
            checkout, "status", "--porcelain", "--", "tuning-tables", "site-configs", "src"
        )
        out["uncommitted"] = (status or "").splitlines()
    return out


def _site_doc(checkout, site, installer, build, mpi_version, name, pinned_copy):
    """(the site's site.yaml, its config derived for the build), refused (InputError) when the
    site is missing or the build asks for another version, module name or format. build: derive's
    keyword options (mpi_prefix, base_module, ucx_version, modules, formats, mpi_level)."""
    words = INSTALLERS[installer]
    folder = os.path.join(checkout, "site-configs")
    src = os.path.join(folder, site, "site.yaml")
    if not os.path.isfile(src):
        raise InputError(
            src,
            None,
            "site",
            "no site '%s' in %s" % (site, checkout),
            "use one of: %s"
            % (", ".join(sites.site_names(folder)) or "(none: not a tuned-mpi-modules checkout)"),
        )
    # read as every project file is (yamlsrc: anchors refused, errors name file and line)
    doc = derive(yamlsrc.load(src).data or {}, checkout, installer, **build)
    want = doc["mpi"]["version"]
    try:
        knobs.not_text(want)  # str() would make YAML's 5.1 (of 5.10) a version
    except knobs.KnobError as exc:
        raise InputError(src, None, "mpi.version", exc.problem, exc.fix) from None
    want = str(want)
    tuned = (doc.get("modules") or {}).get("tuned")
    if mpi_version and str(mpi_version) != want:
        problem, fix = words["version"]
        kw = dict(site=site, want=want, got=mpi_version, name=tuned)
        raise InputError(src, None, "mpi.version", problem.format(**kw), fix.format(**kw))
    if name and name != tuned:
        problem, fix = words["name"]
        kw = dict(site=site, want=tuned, got=name)
        raise InputError(src, None, "modules.tuned", problem.format(**kw), fix.format(**kw))
    if pinned_copy and "lua" not in (doc.get("module_formats") or ["lua"]):
        raise InputError(
            src,
            None,
            "module_formats",
            "%s's module is the rendered Lua module, but the site "
            "renders %s" % (words["label"], ", ".join(doc["module_formats"])),
            "add lua to module_formats",
        )
    return src, doc


def _tables_of(src, doc):
    """The tables a site config (``src``) names: its own and its node types'
    (node_types.types[].table), each <platform>/<name> of plain words."""
    refs = [doc.get("table")]
    block = doc.get("node_types")
    for one in (block.get("types") if isinstance(block, dict) else None) or []:
        refs.append(one.get("table") if isinstance(one, dict) else None)
    out = []
    for ref in refs:
        if ref is None or ref in out:
            continue
        if not isinstance(ref, str) or not re.match(
            r"^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*\Z", ref
        ):
            raise InputError(
                src,
                None,
                "table",
                "table %r is not <platform>/<mpi>-<version>" % (ref,),
                "e.g. table: oci-bm-optimized3.36/openmpi-5.0.6",
            )
        out.append(ref)
    return out


def install(
    checkout,
    site,
    share,
    installer,
    mpi_version=None,
    name=None,
    pinned_copy=None,
    log=print,
    **build,
):
    """Install ``site`` of ``checkout`` into ``share`` (<prefix>/share/tunedmpi), as described
    above; ``build``: derive's keyword options (the build's MPI prefix or module, UCX, ...).
    Returns {"site", "table", "version", "rendered": the tuned Lua module, "copy"}.
    Raises InputError (file, key, problem, fix) before writing anything when the build and the
    site do not match."""
    paths.safe_name(site, "--site", "site")
    checkout = os.path.realpath(str(checkout))
    share = os.path.abspath(str(share))
    src, doc = _site_doc(checkout, site, installer, build, mpi_version, name, pinned_copy)
    want = doc["mpi"]["version"]

    # 2-4. every input checked, in a staged project root, before anything is written to <share>
    conf = os.path.join(share, "site-configs", site, "site.yaml")
    table = doc.get("table")
    # the users' guide `module help` names: the site's own page, else the copy installed here
    guide = os.path.join(share, "doc", "users.md")
    page = os.path.join(checkout, "docs", "users.md")
    files = {}
    if os.path.isfile(page):  # (a test's minimal checkout may have none)
        files[guide] = read_text(page)
        if not doc.get("users_page") and sites.USERS_PAGE.match(guide):
            doc["users_page"] = guide
    files[conf] = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    for ref in _tables_of(src, doc):
        tsrc = os.path.join(checkout, "tuning-tables", ref + ".yaml")
        if not os.path.isfile(tsrc):
            raise InputError(
                src, None, "table", "no table %s" % tsrc, "create it or name an existing table"
            )
        tdst = os.path.join(share, "tuning-tables", ref + ".yaml")
        files[tdst] = read_text(tsrc)
    loaded, rendered_files = _checked_render(files, share)
    out = os.path.join(share, "modulefiles")
    rel = render.module_path(loaded, loaded.tuned_module, "lua")
    rendered = os.path.join(out, rel)
    files.update((os.path.join(out, r), text) for r, text in rendered_files.items())
    # 5. the pinned copy: a module loaded from elsewhere names the installed rules folder
    if pinned_copy:
        files[str(pinned_copy)] = render.pin_rules_dir(rendered_files[rel], rendered)
    # 6. where it came from (reinstall after changing tables: the package's recipe did not change)
    files[os.path.join(share, "SOURCE.json")] = (
        json.dumps(source(checkout, site, table, installer), indent=1, sort_keys=True) + "\n"
    )
    gone = render.stale_rules(out, loaded, rendered_files)
    write_all_or_none(files)  # everything or nothing: a failed install leaves <share> as it was
    for path in files:
        render.make_executable(path)  # the launch checks
        log("wrote %s" % path)
    render.remove_stale_rules(out, gone)
    return {
        "site": site,
        "table": table,
        "version": want,
        "rendered": rendered,
        "copy": str(pinned_copy) if pinned_copy else None,
    }
