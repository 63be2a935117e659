"""Render Lmod modulefiles (tuned and untuned baseline) for a site, deterministically and atomically."""
import re
from collections import OrderedDict
from pathlib import Path

import jinja2

from .. import envmap, paths, sites
from ..errors import InputError

TEMPLATES = Path(__file__).parent / "templates"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:^+/-]*$")
_SAFE = re.compile(r"[A-Za-z0-9 _.,:;=/+()\-\[\]<>@#%*!?]")


def lua_string(value):
    """A Lua string literal that is inert whatever ``value`` holds: every byte outside a small safe
    set becomes a decimal escape, so quotes, ]], newlines, $(...) and backticks are plain data."""
    data = str(value).encode("utf-8")
    return '"' + "".join(chr(b) if _SAFE.match(chr(b)) else "\\%03d" % b for b in data) + '"'


def _env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["lua"] = lua_string
    return env


def _checked(site, name, value, where):
    """Values are checked before they reach Lua, as well as quoted."""
    if not ENV_NAME.match(name) or not ENV_VALUE.match(str(value)):
        raise InputError(site.table.path if site.table else site.path, where[0], where[1],
                         "refusing to render %s=%r into a modulefile" % (name, value),
                         "values may hold only letters, digits and _ . , : ^ + / -")
    return str(value)


def rows_for(site):
    """{profile: [row dicts sorted by (nodes, ppn)]} and the sorted union of variable names."""
    table = site.table
    data = OrderedDict()
    names = []
    for profile in sorted({c.collective for c in table.cases}):
        rows = []
        for case in sorted((c for c in table.cases if c.collective == profile), key=lambda c: (c.nodes, c.ppn)):
            env, comp, nps, notes = envmap.row_env(site, table, case.nodes, case.ppn, profile)
            where = (case.line, "cases[%d x %d %s]" % (case.nodes, case.ppn, profile))
            env = OrderedDict((k, _checked(site, k, v, where)) for k, v in env.items())
            names += [k for k in env if k not in names]
            rows.append({"nodes": case.nodes, "ppn": case.ppn, "nps": nps, "component": comp, "env": env,
                         "notes": notes})
        data[profile] = rows
    return data, names


def _prefix_lua(site):
    if not site.prefix:
        return None
    if site.prefix.startswith("/"):
        return lua_string(site.prefix)
    # Relative to the checkout that holds modulefiles/<site>/<name>/<version>.lua
    return ('pathJoin((myFileName():gsub("/[^/]+/[^/]+/[^/]+/[^/]+$", "")), %s)' % lua_string(site.prefix))


def _help(site, tuned):
    t = site.table
    lines = ["%s/%s for site %s (%s)." % (site.tuned_module if tuned else site.baseline_module,
                                          site.mpi_version, site.name, site.description), ""]
    if tuned and t:
        prov = t.provenance
        lines += ["Tuning table: tuning-tables/%s.yaml" % site.table_ref,
                  "  source:    %s" % prov.get("document", ""),
                  "  platform:  %s" % prov.get("platform", ""),
                  "  benchmark: %s" % prov.get("benchmark", ""),
                  "  method:    %s" % prov.get("method", ""), ""]
    if tuned:
        lines += [
            "At load the module reads the job geometry: TUNEDMPI_NODES/TUNEDMPI_PPN, else Slurm,",
            "PBS, LSF or Flux variables, else the site default (%d node(s) x %d ppn), and sets the"
            % (site.default_nodes, site.default_ppn),
            "variables of the nearest measured row (node count on a log2 scale, then ppn).",
            "",
            "See the choice:   echo $TUNEDMPI_SELECTION   or   tunedmpi explain --site %s" % site.name,
            "Override:         TUNEDMPI_NODES=N TUNEDMPI_PPN=P TUNEDMPI_PROFILE=<collective>",
            "                  before module load (default profile: %s); TUNEDMPI_VERBOSE=1 explains" % site.default_profile,
            "                  on stderr; set any variable after loading, or use mpirun -x / --mca.",
            "Untuned baseline: module load %s/%s" % (site.baseline_module, site.mpi_version),
        ]
    else:
        lines += ["No tuning variables are set. Tuned: module load %s/%s" % (site.tuned_module, site.mpi_version)]
    return "\n".join(lines)


def render_site(site):
    """{relative path: text} of the site's modulefiles."""
    env = _env()
    version = site.mpi_version
    tuned_path = "%s/%s/%s.lua" % (site.name, site.tuned_module, version)
    base_path = "%s/%s/%s.lua" % (site.name, site.baseline_module, version)
    if site.table:
        data, names = rows_for(site)
        table_desc = "tuning-tables/%s.yaml (%s)" % (site.table_ref, site.table.provenance.get("document", ""))
        sources = "tuning-tables/%s.yaml and site-configs/%s/site.yaml" % (site.table_ref, site.name)
    else:
        data, names = OrderedDict(), []
        table_desc = "none yet: this site's table comes from measurements (nothing is tuned)"
        sources = "site-configs/%s/site.yaml" % site.name
    common = dict(site=site, prefix_lua=_prefix_lua(site), tuned="%s/%s" % (site.tuned_module, version))
    out = OrderedDict()
    out[tuned_path] = env.get_template("tuned.lua.j2").render(
        module="%s/%s" % (site.tuned_module, version), data=data, names=names, sources=sources,
        table_desc=table_desc, help_text=_help(site, True), **common)
    out[base_path] = env.get_template("baseline.lua.j2").render(
        module="%s/%s" % (site.baseline_module, version), help_text=_help(site, False), **common)
    return out


def render_all(names=None):
    """{relative path: text} for the named sites (default: all), rendered before anything is written."""
    out = OrderedDict()
    for name in names or sites.site_names():
        out.update(render_site(sites.load_named(name)))
    return out


def modulefiles_dir():
    return paths.project_root() / "modulefiles"
