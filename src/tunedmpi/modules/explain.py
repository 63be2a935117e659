"""`tunedmpi explain`: the Python twin of the tuned module, end to end.

Given a site and an environment it returns exactly what `module load <tuned>` would set; the
conformance tests compare this with real Lmod (Lua) and real Environment Modules (Tcl) for
hundreds of environments.
"""

import os
import re
from collections import OrderedDict

from tunedmpi import paths
from tunedmpi.errors import InputError
from tunedmpi.files import read_text
from tunedmpi.modules import envmap, geometry, selector
from tunedmpi.modules.render import RULES_VARS, module_path, rows_for, rules_dir
from tunedmpi.modules.writers import of_file


def node_nps(sockets, online="/sys/devices/system/node/online"):
    """NUMA nodes per socket of this machine, or None (mirrors node_nps() in the Lua)."""
    try:
        text = read_text(online, 4096).split("\n")[0].strip()
    except (OSError, UnicodeError):
        return None
    numa = 0
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            numa += int(b) - int(a) + 1
        elif part.isdigit():
            numa += 1
    return numa // sockets if numa and not numa % sockets else None


def modulefile(site, root=None, fmt="lua"):
    """Where `tunedmpi render` puts the site's tuned module: <root>/<site>/<tuned>/<version>.lua
    (fmt "lua") or <version> (fmt "tcl"), root = the checkout's modulefiles/ unless given."""
    root = root if root is not None else paths.project_root() / "modulefiles"
    return os.path.join(os.path.abspath(str(root)), module_path(site, site.tuned_module, fmt))


def rules_path(module_file, name):
    """The rules file ``name`` of the tuned module at ``module_file`` (Lua: RULES_DIR from
    myFileName(); Tcl: from $ModulesCurrentModulefile): .../<tuned>/<version>.lua or
    .../<tuned>/<version> -> .../<tuned>/__<version>.rules/<name>."""
    head, base = os.path.split(module_file)
    return os.path.join(head, rules_dir(of_file(base)[1]), name)


def mpi(site, tuned=None):
    """The site's MPI whose tuned module is named ``tuned`` (e.g. "hpcx-tuned" for its HPC-X
    alternative); default: the site's own."""
    for one in site.mpis():
        if tuned in (None, one.tuned_module):
            return one
    raise InputError(
        site.path,
        None,
        "modules.tuned",
        "site %s has no tuned module %r" % (site.name, tuned),
        "use one of: %s" % ", ".join(m.tuned_module for m in site.mpis()),
    )


def shown_profile(profile):
    """An unknown TUNEDMPI_PROFILE as the load's message names it (the Lua and Tcl `shown`): a
    word of letters, digits and "_" cut to selector.PROFILE_SHOWN characters, else "?"."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", profile):
        return "?"
    cut = selector.PROFILE_SHOWN
    return profile[:cut] + "..." if len(profile) > cut else profile


def users_choice(env, values, names, messages):
    """selector.SKIP and values already set: drop those names from ``values``; returns the
    selection's note and TUNEDMPI_ROW's mark, and adds a message on words that name nothing."""
    words = re.findall(r"[^,%s]+" % re.escape(selector.BLANKS), env.get(selector.SKIP) or "")
    unknown = [shown_profile(w) for w in words if w not in names]
    if unknown:
        messages.append(
            "%s: %s not set by this module (ignored)" % (selector.SKIP, ", ".join(unknown))
        )
    skipped = [n for n in names if n in values and n in words]
    yours = [n for n in names if n in values and n not in words and env.get(n)]
    for name in skipped + yours:
        del values[name]
    note = "".join(
        " %s=%s" % (k, ",".join(v)) for k, v in (("skip", skipped), ("yours", yours)) if v
    )
    left = [n for n in names if n in skipped or n in yours]
    return note, (selector.LEFT_MARK + ",".join(left) if left else "")


def node_type_message(site, env):
    """The load's message on a TUNEDMPI_NODE_TYPE that names no node type of ``site``, or None."""
    wanted = env.get(selector.NODE_TYPE_EXPLICIT) or ""
    if not wanted or geometry.node_type(env, site)[1] == "explicit":
        return None
    shown = shown_profile(wanted)
    types = ", ".join(nt.name for nt in site.node_types)
    return "%s=%s is no node type here (%s)" % (selector.NODE_TYPE_EXPLICIT, shown, types)


def _of_node_type(site, env, messages):
    """(the Site of the node type the rule picks, its note in the selection, TUNEDMPI_ROW's
    prefix, the node-type variables of the launch check's record); a site of one node type as is."""
    if not site.node_types:
        return site, "", "", ()
    name, source = geometry.node_type(env, site)
    note = node_type_message(site, env)
    messages += [note] if note else []
    type_note = " node_type=%s:%s" % (name, source)
    return site.of_type(name), type_note, name + selector.NODE_TYPE_MARK, site.node_type_variables()


def _outside(site, geo, match, row):
    """selector's outside rule on the chosen row: (the row, or an empty one when the site says
    untuned; the match's kind; the selection's note; TUNEDMPI_ROW's mark)."""
    over, far = geometry.outside(match, geo.nodes, geo.ppn, site.cores, site.outside_factor)
    note = (selector.OVER_NOTE % site.cores if over else "") + (
        selector.BEYOND_NOTE % site.outside_factor if far else ""
    )
    then = site.outside_then if over or far else None
    if then == "untuned":
        untuned = dict(row, env={}, rules=None, component="none")
        return untuned, "untuned", note, selector.UNTUNED_MARK
    return row, "nearest" if then == "nearest" else match.kind, note, ""


def select(site, env, module_file=None):
    """{'env': OrderedDict of variables the module sets, 'selection': TUNEDMPI_SELECTION, ...}.

    ``module_file``: the tuned module's path as Lmod would load it (its rules files are found
    beside it); default: the one `tunedmpi render` writes in this checkout (modulefile())."""
    messages = []
    site, type_note, row_mark, seen_vars = _of_node_type(site, env, messages)
    geo = geometry.detect(env, site.default_nodes, site.default_ppn)
    data, names = rows_for(site) if site.table else ({}, [])
    asked = env.get("TUNEDMPI_PROFILE")
    profile = asked if asked in data else site.default_profile
    if asked and asked not in data:
        messages.append(
            "TUNEDMPI_PROFILE=%s has no table rows here; using %s"
            % (shown_profile(asked), site.default_profile)
        )
    found = "nodes=%d ppn=%d source=%s" % (geo.nodes, geo.ppn, geo.source)
    head = "site=%s%s %s" % (site.name, type_note, found)
    out = OrderedDict()
    if profile not in data:
        none = " row=none match=none profile=%s (no tuning table: nothing tuned)" % profile
        return dict(env=out, selection=head + none, row=None, messages=messages, geometry=geo)
    rows = data[profile]
    match = geometry.choose_row([(r["nodes"], r["ppn"]) for r in rows], geo.nodes, geo.ppn)
    row = [r for r in rows if (r["nodes"], r["ppn"]) == (match.nodes, match.ppn)][0]
    row, kind, outside_note, untuned_mark = _outside(site, geo, match, row)
    nps_note = ""
    have = node_nps(site.sockets)
    if row["nps"] and have and have != row["nps"]:
        nps_note = " nps=table:%d,node:%d" % (row["nps"], have)
    values = dict(row["env"])
    rules_note = rules_mark = ""
    if row.get("rules"):  # the module sets the rules variables only if the file is there
        path = rules_path(module_file or modulefile(site), row["rules"])
        if os.path.isfile(path):
            values.update(zip(RULES_VARS, ("1", path)))
            rules_note, rules_mark = " rules=" + row["rules"], ":rules"
        else:
            rules_note = " rules=missing"
            messages.append(
                "the coll_tuned rules file %s is missing: Open MPI keeps its own algorithm "
                "choices (re-render with tunedmpi render, or reinstall the module)" % path
            )
    threads = geometry.threads(env, geo.ppn)
    threads_note = threaded_mark = ""
    if threads > 1:
        threads_note = " threads=%d" % threads
        if selector.BINDING[0] in values:  # selector.BINDING: placement is the launcher's
            for name in selector.UNPLACED:
                values.pop(name, None)
            values[selector.BINDING[0]] = selector.BINDING[1]
            threads_note += " placement=launcher"
            threaded_mark = selector.THREADED_MARK
    left_note, left_mark = users_choice(env, values, names, messages)
    notes = rules_note + nps_note + threads_note + left_note
    row_name = "none" if untuned_mark else "%dx%d" % (match.nodes, match.ppn)
    chosen = " row=%s match=%s%s profile=%s" % (row_name, kind, outside_note, profile)
    selection = head + chosen + " component=%s%s" % (row["component"], notes)
    out.update((name, values[name]) for name in names if name in values)
    marks = untuned_mark + rules_mark + threaded_mark + left_mark
    out["TUNEDMPI_ROW"] = "%s%s:%dx%d%s" % (row_mark, profile, match.nodes, match.ppn, marks)
    out[selector.SEEN] = geometry.seen(env, seen_vars)
    why = ["This shell: " + selection, "  evidence: " + row["evidence"]]
    for name, value in out.items():
        if name in names:
            text = selector.BINDING_WHY if threaded_mark and name == selector.BINDING[0] else None
            why.append("  %s=%s: %s" % (name, value, text or envmap.origin(name)))
    messages += row["notes"]
    return dict(
        env=out, selection=selection, row=row, messages=messages, geometry=geo, match=match, why=why
    )


def describe(result):
    lines = ["TUNEDMPI_SELECTION=%s" % result["selection"]]
    lines += ["%s=%s" % kv for kv in result["env"].items()]
    lines += ["# " + w.strip() for w in result.get("why", [])[1:]]  # row, evidence, origin
    lines += ["# " + m for m in result["messages"]]
    return "\n".join(lines) + "\n"
