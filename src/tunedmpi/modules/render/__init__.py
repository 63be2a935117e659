"""Render a site's modulefiles (tuned and untuned baseline), deterministically and atomically: Lmod
Lua (<name>/<version>.lua) and/or Environment Modules Tcl (<name>/<version>), as the site's
module_formats says.

Both formats go in the same tree, modulefiles/<site>/<name>/: Lmod takes <version>.lua where a
<version> file is beside it, and Environment Modules reads only files that start with #%Module, so
each system sees exactly one module per name/version (tests/test_modules_tcl.py checks both with
the real tools), `module use modulefiles/<site>` is the same line for both, and the tuned modules
of both formats share one __<version>.rules/ folder (found from the module's own path)."""

import os
import re
from collections import OrderedDict
from pathlib import Path

import jinja2

from tunedmpi import paths
from tunedmpi.errors import InputError
from tunedmpi.files import locked, read_head, stray_temps, write_all_or_none
from tunedmpi.modules import envmap, selector, sites
from tunedmpi.modules.writers import LUA, WRITERS, of_file
from tunedmpi.tables import rulesfile

TEMPLATES = Path(__file__).parent / "templates"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# '#': UCC's tuning strings separate their tokens with it, '@' names an algorithm in them
# (envmap.ucc_env); both inert in both quotings.
ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:^+/#@-]*\Z")
# The family of tuned and baseline where the site's MPI module (mpi.base_module) holds family "mpi".
TUNING_FAMILY = "mpi_tuning"
MPI_NAMES = {"openmpi": "Open MPI", "hpcx": "HPC-X"}  # how modules name the MPI they tune
# How modules name a site's peers (sites.PEER_FLAVOURS): other MPIs, for comparison.
PEER_NAMES = {"intel-mpi": "Intel MPI", "mpich": "MPICH", "openmpi": "Open MPI"}

# What a module of each MPI flavour puts in the environment, from its prefix: written once here and
# emitted by _mpi.lua.j2 and _mpi.tcl.j2, so the twins set the same. ("set", NAME, sub): NAME is
# <prefix>/<sub> (the prefix itself for ""), given back on unload (keep() / tm_set);
# ("prepend", NAME, sub): <prefix>/<sub> goes in front of the path list NAME; ("append", NAME,
# /dir): a fixed directory goes at its end.
_PATHS = (
    ("prepend", "PATH", "bin"),
    ("prepend", "LD_LIBRARY_PATH", "lib"),
    ("prepend", "MANPATH", "share/man"),
    ("prepend", "PKG_CONFIG_PATH", "lib/pkgconfig"),
)
FLAVOUR_ENV = {
    **dict.fromkeys(("openmpi", "hpcx", "mpich"), (("set", "MPI_HOME", ""),) + _PATHS),
    # Intel's own environment script (the impi-rt wheel's etc/conda/activate.d/mpivars.activate.sh,
    # with its internal libfabric): I_MPI_ROOT, libfabric's tools on PATH, its providers in lib/
    # (FI_PROVIDER_PATH, then the distribution's provider folder, as Intel's script does on
    # Debian/Ubuntu), LIBRARY_PATH for linking, the Java bindings (the wheel has share/java/mpi.jar).
    "intel-mpi": (
        ("set", "MPI_HOME", ""),
        ("set", "I_MPI_ROOT", ""),
        ("prepend", "PATH", "bin"),
        ("prepend", "PATH", "bin/libfabric"),
        ("prepend", "LD_LIBRARY_PATH", "lib"),
        ("prepend", "LIBRARY_PATH", "lib"),
        ("prepend", "FI_PROVIDER_PATH", "lib"),
        ("append", "FI_PROVIDER_PATH", "/usr/lib/x86_64-linux-gnu/libfabric"),
        ("prepend", "CLASSPATH", "share/java/mpi.jar"),
        ("prepend", "MANPATH", "share/man"),
        ("prepend", "PKG_CONFIG_PATH", "lib/pkgconfig"),
    ),
}
# The templates write FLAVOUR_ENV's names and paths as bare words: they must stay plain.
_ENV_PATH = re.compile(r"^[A-Za-z0-9_./-]*\Z")

# The variables that point Open MPI at a row's coll_tuned rules file (rulesfile.environment).
# The module sets them at load, with the file's absolute path found from myFileName().
RULES_VARS = tuple(rulesfile.environment(""))  # (use_dynamic_rules, dynamic_rules_filename)
# Collectives Open MPI 5's coll/han takes on communicators that span nodes (it runs tuned only on
# its per-node and per-leader sub-communicators): see tunedmpi/tables/rulesfile.py.
HAN_TAKES = ("allgather", "allreduce", "barrier", "bcast", "gather", "reduce", "scatter")


def _env():
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters.update((w.name, w.string) for w in WRITERS.values())
    env.globals.update(tuning_family=TUNING_FAMILY, rule=selector, rules_vars=RULES_VARS)
    return env


def _checked(site, name, value, where):
    """Values are checked before they reach Lua, as well as quoted."""
    if not ENV_NAME.match(name) or not ENV_VALUE.match(str(value)):
        raise InputError(
            site.table.path if site.table else site.path,
            where[0],
            where[1],
            "refusing to render %s=%r into a modulefile" % (name, value),
            "values may hold only letters, digits and _ . , : ^ + / # @ -",
        )
    return str(value)


def rules_dir(module_version):
    """The folder of a tuned module's rules files, beside <version>.lua: ``__<version>.rules``.
    Lmod never walks a name that starts with "__" (DirTree.lua l_keepFile), so nothing in it is
    listed, spidered or loadable as a module, whatever it holds, and the module's own directory
    stays a plain name/version layout."""
    return "__%s.rules" % module_version


def rules_name(nodes, ppn, node_type=None):
    """The rules file of the geometry (nodes, ppn) in rules_dir: ``<nodes>x<ppn>.rules``; on a
    site of several node types, ``<node type>.<nodes>x<ppn>.rules`` (a table each: no clash)."""
    return "%s%dx%d.rules" % (node_type + "." if node_type else "", nodes, ppn)


def side_path(site, *names):
    """The tuned module's side folder (rules files, launch checks in LAUNCH_DIR) and ``names`` in
    it, relative to modulefiles/: <site>/<tuned>/__<version>.rules/<names>."""
    return "/".join((site.name, site.tuned_module, rules_dir(site.tuned_version)) + names)


# What render writes under <site>/<tuned>/: the only names it ever removes (stale_rules).
RULES_DIR_NAME = re.compile(r"^__(.+)\.rules\Z")
RULES_FILE_NAME = re.compile(r"^([A-Za-z0-9_]+\.)?[1-9][0-9]*x[1-9][0-9]*\.rules\Z")


def stale_rules(out, site, files):
    """Paths relative to ``out`` of files render no longer produces for ``site``: its modules
    (_stale_modules) and rules files (its table lost bands for a geometry, or all of them):
    <n>x<p>.rules regular files in the __<v>.rules folders of out/<site>/<tuned>/, for v = the
    site's version or a version whose <v>.lua and <v> (Tcl) are gone or stale (nothing points at
    those), and the launch checks of bin/ there that render wrote. Folders of another version
    whose module is still there are that module's; symlinks and any other name are never
    touched. ``files``: what render_site made."""
    base = Path(out) / site.name / site.tuned_module
    found = _stale_modules(out, site, files)
    if not base.is_dir():
        return found
    for folder in sorted(base.iterdir()):
        m = RULES_DIR_NAME.match(folder.name)
        if not m or folder.is_symlink() or not folder.is_dir():
            continue
        version = m.group(1)
        owners = [module_path(site, site.tuned_module, fmt, version) for fmt in WRITERS]
        if version != site.mpi_version and any(
            (Path(out) / rel).is_file() and rel not in found for rel in owners
        ):
            continue
        for f in sorted(folder.iterdir()):
            rel = _left(out, f, files)
            if rel and RULES_FILE_NAME.match(f.name):
                found.append(rel)
        for name in selector.LAUNCHERS:
            path = folder / selector.LAUNCH_DIR / name
            rel = _left(out, path, files)
            if rel and _generated(site, path):
                found.append(rel)
    return found


def _left(out, path, files):
    """``path`` relative to ``out`` when it is a regular file (no symlink) that render did not
    write this time (``files``), else None."""
    rel = str(path.relative_to(out))
    return None if rel in files or path.is_symlink() or not path.is_file() else rel


def _generated(site, path):
    """The head of ``path`` when `tunedmpi render --site <site>` wrote it, else None."""
    head = read_head(path, 600).decode("utf-8", "replace")
    return head if "GENERATED by `tunedmpi render --site %s`" % site.name in head else None


def _stale_modules(out, site, files):
    """Modules render wrote for ``site`` that it no longer writes (an old version's, a format or
    peer the site dropped, a module renamed in site.yaml's modules): out/<site>/<name>/<file>
    regular files whose head says `tunedmpi render --site <site>` wrote them, in the folder of one
    of the site's MPIs (site.mpis()), marked as a peer's (PEER_MARK) or naming itself
    <name>/<version> as every module render writes does (a renamed module stayed loadable under
    its old name: issue 50). Anything else stays."""
    found = []
    top = Path(out) / site.name
    if not top.is_dir():
        return found
    own = {name for m in site.mpis() for name in (m.tuned_module, m.baseline_module)}
    for folder in sorted(p for p in top.iterdir() if p.is_dir() and not p.is_symlink()):
        for path in sorted(folder.iterdir()):
            rel = _left(out, path, files)
            head = _generated(site, path) if rel else None
            writer, version = of_file(path.name)
            itself = "%s %s/%s: " % (writer.comment, folder.name, version)
            if head and (folder.name in own or PEER_MARK in head or itself in head):
                found.append(rel)
    return found


def remove_stale_rules(out, stale):
    """Delete the stale rules files (relative to ``out``) and each folder they leave empty.
    Call it after the module that no longer names them is written. A file already gone (another
    render removed it) is not an error."""
    for rel in stale:
        path = Path(out) / rel
        path.unlink(missing_ok=True)
        launcher = path.parent.name == selector.LAUNCH_DIR  # bin/ and its __<v>.rules folder
        for folder in (path.parent, path.parent.parent)[: 2 if launcher else 1]:
            try:
                folder.rmdir()  # only when empty: anything else in it stays
            except OSError:
                break


def pin_rules_dir(text, module_file):
    """The tuned module ``text`` for a copy loaded from elsewhere (Spack's module tree): its
    rules files stay beside ``module_file``, the module render wrote, so the copy names their
    folder absolutely (explain.rules_path(module_file, ...)'s folder) instead of finding it from
    its own myFileName(). A module without rules files is returned unchanged."""
    if "RULES_DIR" not in text:
        return text
    if text.count(LUA.RULES_DIR_LINE) != 1:
        raise InputError(
            str(module_file),
            None,
            "RULES_DIR",
            "the tuned module does not find its rules folder "
            "with the line writers.LUA.RULES_DIR_LINE, so a copy cannot be pointed at it",
            "keep writers.LUA.RULES_DIR_LINE equal to the RULES_DIR line of render/templates/tuned.lua.j2",
        )
    head, base = os.path.split(os.path.abspath(str(module_file)))
    writer, version = of_file(base)
    if writer is not LUA:
        raise InputError(
            str(module_file), None, None, "not a rendered .lua module", "give <tuned>/<version>.lua"
        )
    folder = os.path.join(head, rules_dir(version))
    return text.replace(LUA.RULES_DIR_LINE, "local RULES_DIR = %s" % LUA.string(folder))


def rows_for(site):
    """{profile: [row dicts sorted by (nodes, ppn)]} and the sorted union of variable names.

    A row of a geometry whose collectives have algorithm bands names its rules file ("rules"),
    whatever its profile: the bands are the collectives', not the profile's. Its two variables
    (RULES_VARS) are not in the row's "env": the module computes the path when it loads."""
    table = site.table
    banded = _bands(site)
    data = OrderedDict()
    names = []
    for profile in sorted({c.collective for c in table.cases}):
        rows = []
        for case in sorted(
            (c for c in table.cases if c.collective == profile), key=lambda c: (c.nodes, c.ppn)
        ):
            env, comp, nps, notes = envmap.row_env(site, table, case.nodes, case.ppn, profile)
            where = (case.line, "cases[%d x %d %s]" % (case.nodes, case.ppn, profile))
            env = OrderedDict((k, _checked(site, k, v, where)) for k, v in env.items())
            names += [k for k in env if k not in names]
            # a row forcing a banded collective's algorithm: tables/schema.py refuses the table
            colls = banded.get((case.nodes, case.ppn), {})
            if site.mpi_flavour == "hpcx" and (case.nodes, case.ppn) in table.algorithm_bands():
                notes = list(notes) + [
                    "coll_tuned algorithm bands not applied: they were measured with Open MPI 5 "
                    "and HPC-X's Open MPI 4.1 numbers its algorithms as its own release does"
                ]
            han = [c for c in colls if c in HAN_TAKES] if case.nodes >= 2 else []
            if han:
                notes = list(notes) + [
                    "%s bands: on communicators that span nodes Open MPI's coll/han takes "
                    "%s and runs tuned only on its sub-communicators, where these rules "
                    "do not apply (they do with OMPI_MCA_coll_han_priority=0)"
                    % (", ".join(han), "it" if len(han) == 1 else "them")
                ]
            rows.append(
                {
                    "nodes": case.nodes,
                    "ppn": case.ppn,
                    "nps": nps,
                    "component": comp,
                    "env": env,
                    "notes": notes,
                    "rules": rules_name(case.nodes, case.ppn, site.node_type) if colls else None,
                    "evidence": envmap.evidence(table, case),
                }
            )
        data[profile] = rows
    if banded:
        names += [k for k in RULES_VARS if k not in names]
    return data, names


def _bands(site):
    """{(nodes, ppn): {collective: case}} of the table's algorithm bands this site's MPI takes: all of
    them for Open MPI; none for HPC-X, whose Open MPI 4.1 numbers coll_tuned's algorithms as its own
    release does (the tables' bands were measured with Open MPI 5): its rows say so in a note."""
    if not site.table or site.mpi_flavour == "hpcx":
        return {}
    return site.table.algorithm_bands()


def rules_files(site):
    """{relative path: text} of the site's coll_tuned rules files: one per geometry (nodes, ppn)
    of its table where any collective has bands, for communicators of exactly nodes x ppn ranks,
    in the format the site's Open MPI reads, checked by rulesfile.check before it is returned."""
    out = OrderedDict()
    for (nodes, ppn), colls in _bands(site).items():  # Open MPI's: sites.py refuses other flavours
        rel = side_path(site, rules_name(nodes, ppn, site.node_type))
        comment = [
            "GENERATED by `tunedmpi render --site %s` from tuning-tables/%s.yaml -- do not edit."
            % (site.name, site.table_ref),
            "Row %dx%d: %d node(s) x %d ppn; the module %s/%s points Open MPI here."
            % (nodes, ppn, nodes, ppn, site.tuned_module, site.tuned_version),
        ]
        comment += ["%s: the table's case at line %d" % (c, case.line) for c, case in colls.items()]
        han = [c for c in colls if c in HAN_TAKES]
        if nodes >= 2 and han:
            comment.append(
                "On communicators that span nodes coll/han takes %s and runs tuned only on its "
                "sub-communicators: those rules apply with OMPI_MCA_coll_han_priority=0."
                % ", ".join(han)
            )
        bands = OrderedDict((c, case.bands) for c, case in colls.items())
        rules = rulesfile.Rules(nodes * ppn, bands, comment="\n".join(comment))
        try:
            text = rulesfile.render(rules, site.mpi_version)
        except InputError as exc:
            m = re.match(r"^([a-z_]+) band ([0-9]+)", exc.key or "")
            case = colls.get(m.group(1)) if m else None
            line = (
                case.bands[int(m.group(2)) - 1] if case else next(iter(colls.values())).bands[0]
            ).line
            raise InputError(
                site.table.path,
                line,
                "cases[%d x %d] bands" % (nodes, ppn),
                "%s (the rules file %s for site %s's Open MPI %s)"
                % (exc.problem, rel, site.name, site.mpi_version),
                exc.fix,
            )
        # as Open MPI will read it, or InputError: never written
        rulesfile.check(text, site.mpi_version, name=rel)
        out[rel] = text
    return out


def mpi_env(flavour):
    """FLAVOUR_ENV[flavour], checked plain, and the names it sets (unload gives them back)."""
    ops = FLAVOUR_ENV[flavour]
    for _op, name, sub in ops:
        assert ENV_NAME.match(name) and _ENV_PATH.match(sub) and ".." not in sub, (name, sub)
    return ops, [name for op, name, _sub in ops if op == "set"]


# module help's users' guide where the site names none (site.yaml users_page; install-module's copy)
USERS_GUIDE = "docs/users.md of tuned-mpi-modules (ask your site for its copy)"


def _help(site, tuned, rules=False, writer=LUA):
    """module help's text of the site's tuned module (``rules``: it has rules files), or of its
    baseline."""
    tuned_module = "%s/%s" % (site.tuned_module, site.tuned_version)
    default = "%s/%s" % (site.tuned_module, site.mpi_version)  # tuned_module but on a candidate
    baseline = "%s/%s" % (site.baseline_module, site.mpi_version)
    this = tuned_module if tuned else baseline
    lines = ["%s for site %s (%s)." % (this, site.name, site.description), ""]
    if not tuned:
        swap = "No tuning variables are set. Tuned: module " + writer.swap(baseline, default)
        return "\n".join(lines + [swap])
    if site.candidate:
        lines += [
            "A CANDIDATE on trial (tunedmpi retune): load it by name to try it; everyone else",
            "gets %s until the site runs tunedmpi promote." % default,
            "",
        ]
    if site.table:
        prov = site.table.provenance
        lines += [
            "Tuning table: tuning-tables/%s.yaml" % site.table_ref,
            "  source:    %s" % prov.get("document", ""),
            "  platform:  %s" % prov.get("platform", ""),
            "  benchmark: %s" % prov.get("benchmark", ""),
            "  method:    %s" % prov.get("method", ""),
            "",
        ]
    if site.mpi_flavour == "hpcx":
        lines += [
            "HPC-X: the table was measured with Open MPI, not HPC-X; this module sets only the",
            "variables documented for what HPC-X ships (UCX, UCC, HCOLL, its Open MPI 4.1), each row's",
            "others are left out (docs/hpcx-sharp.md). Run validate/run.sh on the site before use.",
            "",
        ]
    lines += [
        "At load the module reads the job geometry: TUNEDMPI_NODES/TUNEDMPI_PPN, else Slurm,",
        "PBS, LSF or Flux variables, else the site default (%d node(s) x %d ppn), and sets the"
        % (site.default_nodes, site.default_ppn),
        "variables of the nearest measured row (node count on a log2 scale, then ppn). A rank",
        "of several threads (OMP_NUM_THREADS, cpus-per-task) is not bound to one core.",
        "",
    ]
    lines += _node_types_help(site)
    lines += [
        "See the choice:   echo $TUNEDMPI_SELECTION; TUNEDMPI_VERBOSE=1 says it at load",
        "Override:         TUNEDMPI_NODES=N TUNEDMPI_PPN=P TUNEDMPI_PROFILE=<collective>",
        "                  before module load (default profile: %s)" % site.default_profile,
        "Opt out:          TUNEDMPI_SKIP=UCX_TLS,... before loading leaves those alone; a",
        "                  variable you set before loading is kept (yours= in the selection)",
        "In a batch job:   load it in the job script, or run 'module reload' there: mpirun",
        "                  and srun say when the job differs from where it was loaded.",
        "Users' guide:     %s" % (site.users_page or USERS_GUIDE),
        "Untuned baseline: module " + writer.swap(tuned_module, baseline),
    ]
    if rules:
        lines += [
            "",
            "Rows whose table gives coll_tuned algorithm bands point Open MPI at that row's rules",
            "file (algorithm per collective and message size): %s/<nodes>x<ppn>.rules beside"
            % rules_dir(site.tuned_version),
            "this file, via OMPI_MCA_coll_tuned_use_dynamic_rules and ..._dynamic_rules_filename.",
            "A missing file leaves both alone (yours stay) and says so on stderr.",
        ]
    return "\n".join(lines)


def _node_types_help(site):
    """module help's lines on a site's node types (none for one node type)."""
    if not site.node_types:
        return []
    described = []
    for nt in site.node_types:
        words = ["default"] if nt.name == site.default_node_type else []
        words += ["partitions " + ", ".join(nt.partitions)] if nt.partitions else []
        described.append("%s (%s)" % (nt.name, "; ".join(words)))
    return [
        "Node types, each its own table: %s." % "; ".join(described),
        "Chosen by %s; TUNEDMPI_NODE_TYPE=<name> overrides."
        % ", ".join(var for _, var in site.node_type_variables()),
        "",
    ]


def module_path(site, name, fmt, version=None):
    """Where render puts module ``name`` (the tuned or baseline name, or a peer's with its
    ``version``) of ``site`` in format ``fmt``, relative to modulefiles/: <site>/<name>/<version>.lua
    (Lmod) or <site>/<name>/<version> (Tcl)."""
    return "%s/%s/%s" % (site.name, name, WRITERS[fmt].file_name(version or site.mpi_version))


def _peer_help(site, peer, writer):
    tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
    this = "%s/%s" % (peer.module, peer.version)
    lines = [
        "%s for site %s: %s." % (this, site.name, peer.description),
        "",
        "A peer MPI, for comparison: what a user could load instead of %s." % tuned,
        "No tuning: the MPI's own defaults. Prefix: %s" % peer.prefix,
    ]
    if peer.pypi:
        lines.append("Installed from PyPI (%s) by `make peers`." % " ".join(peer.pypi))
    lines += [
        "Compare: validate/run.sh --baseline %s" % this,
        "Tuned: module " + writer.swap(this, tuned),
    ]
    return "\n".join(lines)


# The line a peer module's head holds (baseline.*.j2 "purpose"): how _stale_modules knows one.
PEER_MARK = "A peer MPI for comparison (validate/run.sh --baseline "


def render_peers(site, env=None):
    """{relative path: text} of the modules of the site's peers (site.yaml `peers:`), in each of
    its formats: the baseline template with the peer's flavour environment and no tuning."""
    env = env or _env()
    out = OrderedDict()
    for peer in site.peers:
        ops, kept = mpi_env(peer.flavour)
        label = "%s %s" % (PEER_NAMES[peer.flavour], peer.version)
        this = "%s/%s" % (peer.module, peer.version)
        for fmt in site.module_formats:
            out[module_path(site, peer.module, fmt, peer.version)] = env.get_template(
                "baseline.%s.j2" % fmt
            ).render(
                writer=WRITERS[fmt],
                site=site,
                module=this,
                base_module=None,
                prefix=peer.prefix,
                mpi_level=None,
                mpi_env=ops,
                kept=kept,
                mpi_label=label,
                purpose="%s%s); not tuned." % (PEER_MARK, this),
                description="%s, a peer for comparison, no tuning (site %s)" % (label, site.name),
                selection="site=%s peer %s for comparison: no variables set" % (site.name, this),
                help_text=_peer_help(site, peer, WRITERS[fmt]),
            )
    return out


def _node_types(site):
    """A site of several node types: (each node type's name, Site and rows for the templates; the
    names any of them sets; every node type's rules files; table_desc; sources)."""
    types, names, rules = [], [], OrderedDict()
    for nt in site.node_types:
        data, own = rows_for(nt.site)
        names += [n for n in own if n not in names]
        rules.update(rules_files(nt.site))
        types.append({"name": nt.name, "site": nt.site, "data": data})
    tables = ", ".join(
        "tuning-tables/%s.yaml (node type %s)" % (nt.site.table_ref, nt.name)
        for nt in site.node_types
    )
    sources = "%s and site-configs/%s/site.yaml" % (tables, site.name)
    return types, names, rules, tables, sources


def render_site(site):
    """{relative path: text} of the site's rules files and its modulefiles in each of its formats."""
    env = _env()
    version = site.mpi_version
    types = None
    if site.node_types:
        types, names, rules, table_desc, sources = _node_types(site)
        data = OrderedDict()  # each node type's rows are in types
    elif site.table:
        rules = rules_files(site)
        data, names = rows_for(site)
        doc = site.table.provenance.get("document", "")
        table_desc = "tuning-tables/%s.yaml (%s)" % (site.table_ref, doc)
        sources = "tuning-tables/%s.yaml and site-configs/%s/site.yaml" % (
            site.table_ref,
            site.name,
        )
    else:
        rules, data, names = OrderedDict(), OrderedDict(), []
        table_desc = "none yet: this site's table comes from measurements (nothing is tuned)"
        sources = "site-configs/%s/site.yaml" % site.name
    ops, kept = mpi_env(site.mpi_flavour)
    tuned = "%s/%s" % (site.tuned_module, site.tuned_version)
    common = dict(
        site=site,
        base_module=site.base_module,
        prefix=site.prefix,
        mpi_level=site.mpi_level,
        mpi_env=ops,
        kept=kept,
        tuned=tuned,
        mpi_name=MPI_NAMES[site.mpi_flavour],
        mpi_label="%s %s" % (MPI_NAMES[site.mpi_flavour], version),
        seen_names=selector.seen_variables(site.node_type_variables()),
    )
    out = OrderedDict(rules)  # first: a new module never points at a file not written yet
    for fmt in site.module_formats:
        writer = WRITERS[fmt]
        out[module_path(site, site.tuned_module, fmt, site.tuned_version)] = env.get_template(
            "tuned.%s.j2" % fmt
        ).render(
            writer=writer,
            module=tuned,
            data=data,
            names=names,
            sources=sources,
            table_desc=table_desc,
            help_text=_help(site, True, bool(rules), writer),
            has_rules=bool(rules),
            origins={name: envmap.origin(name) for name in names},
            node_types=types,
            partitions={p: nt.name for nt in site.node_types for p in nt.partitions},
            **common,
        )
        if site.candidate:  # beside the site's own modules, which render_site(site) writes
            continue
        out[module_path(site, site.baseline_module, fmt)] = env.get_template(
            "baseline.%s.j2" % fmt
        ).render(
            writer=writer,
            module="%s/%s" % (site.baseline_module, version),
            help_text=_help(site, False, writer=writer),
            purpose="The untuned baseline that validate/run.sh compares %s/%s against."
            % (site.tuned_module, version),
            description="%s with its own defaults, no tuning (site %s)"
            % (common["mpi_label"], site.name),
            selection="site=%s untuned baseline: no variables set" % site.name,
            **common,
        )
    if site.table or types:  # the launch check in the side folder (selector.SEEN), for both formats
        for launcher in selector.LAUNCHERS:
            out[side_path(site, selector.LAUNCH_DIR, launcher)] = env.get_template(
                "launch.sh.j2"
            ).render(launcher=launcher, module=tuned, **common)
    if not site.candidate:
        out.update(render_peers(site, env))
    return out


def render_candidate(site):
    """{relative path: text} of the site's candidate (tunedmpi retune): the tuned module
    <version>-candidate from the candidate table, with its rules and launch checks, and the
    tuned folder's .modulerc files that keep <version> the default and hide the candidate
    (`module avail` lists it with --show_hidden in Lmod, -a in Environment Modules); {} without a
    candidate table."""
    cand = sites.candidate_site(site)
    if cand is None:
        return OrderedDict()
    out = render_site(cand)
    default = "%s/%s" % (site.tuned_module, site.mpi_version)
    hidden = "%s/%s" % (site.tuned_module, cand.tuned_version)
    mark = "GENERATED by `tunedmpi render --site %s`" % site.name
    mark += ": %s is the default, %s a hidden candidate" % (default, hidden)
    folder = "%s/%s/" % (site.name, site.tuned_module)
    for fmt in site.module_formats:
        name, text = WRITERS[fmt].modulerc(mark, default, hidden)
        out[folder + name] = text
    return out


# Files render writes that must be executable (the launch checks); every other one is 0644.
EXECUTABLE = re.compile(r"/__[^/]+\.rules/%s/[^/]+\Z" % selector.LAUNCH_DIR)


def make_executable(path):
    """chmod a+x ``path`` when render.EXECUTABLE says it is a launch check."""
    if EXECUTABLE.search(str(path)):
        os.chmod(str(path), os.stat(str(path)).st_mode | 0o111)


def render_all(names=None):
    """{relative path: text} for the named sites (default: all) and their HPC-X alternatives,
    rendered before anything is written. ``names`` may hold loaded Sites instead of names."""
    out = OrderedDict()
    for name in names or sites.site_names():
        site = name if isinstance(name, sites.Site) else sites.load_named(name)
        for mpi in site.mpis():
            out.update(render_site(mpi))
        out.update(render_candidate(site))
    return out


RENDER_WAIT_S = 60.0  # a second render of one folder waits this long for the first


def write(loaded, files, out=None):
    """Write ``files`` (render_all of the ``loaded`` sites) under ``out`` (default: modulefiles/),
    remove what render no longer writes for those sites; yields a line per file written or removed.
    One render at a time per folder: a second waits (renders take seconds), then sees the first's
    files. Every file is written whole before any replaces its old one (atomic.write_all_or_none):
    a full disk or an unwritable folder leaves the old modules, all of them."""
    out = str(out or modulefiles_dir())
    with locked(os.path.join(out, ".tunedmpi-render.lock"), "modulefiles %s" % out, RENDER_WAIT_S):
        strays = [t for site in loaded for t in stray_temps(os.path.join(out, site.name))]
        gone = [rel for site in loaded for rel in stale_rules(out, site, files)]
        # in render_site's order: a site's new rules files before the module that names them ...
        write_all_or_none({"%s/%s" % (out, rel): text for rel, text in files.items()})
        for rel in files:
            make_executable(os.path.join(out, rel))
            yield "wrote %s/%s" % (out, rel)
        # ... and stale ones only once the module that no longer names them is in place.
        remove_stale_rules(out, gone)
        for rel in gone:
            yield "removed %s/%s" % (out, rel)
        for path in strays:
            if os.path.exists(path):
                os.unlink(path)
                yield "removed %s (a killed render's temporary file)" % path


def modulefiles_dir():
    return paths.project_root() / "modulefiles"
