"""Site-config schema: which table a site uses, how its MPI is found, what its network can do.

Documented in site-configs/README.md. ``load_site`` raises InputErrors naming file, line, key, fix.
"""

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from tunedmpi import paths, yamlsrc
from tunedmpi.errors import InputError, InputErrors, printable
from tunedmpi.modules import selector
from tunedmpi.modules.writers import WRITERS
from tunedmpi.tables import knobs, schema
from tunedmpi.tables.operations import OPERATIONS

SCHEMA_VERSION = 1
SITE_FILE = "site.yaml"  # site-configs/<site>/site.yaml
MODULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*)?\Z")
PREFIX = re.compile(r"^[A-Za-z0-9._+/-]+\Z")
# users_page: where `module help` sends users (the site's copy of docs/users.md): a web address
# of URL characters without quotes, or an absolute plain path (install-module's installed copy).
USERS_PAGE = re.compile(r"^(https?://[A-Za-z0-9._~:/?#@!&+,;=%-]+|/[A-Za-z0-9._+/-]+)\Z")
# A Spack spec as spack.depends_on lists it: a package name, then variants, flags, dependencies.
SPACK_SPEC = re.compile(r"^([a-z0-9][a-z0-9_-]*)([@+~%^\s].*)?\Z")
TOP_KEYS = set(
    "schema site description table mpi ucx_version interconnect hardware components "
    "default_profile default_geometry modules module_formats hpcx spack peers notes hierarchy "
    "node_types users_page outside other_versions".split()
)
HPCX_KEYS = {"version", "base_module", "prefix", "ucx_version", "modules"}
PEER_KEYS = {"module", "version", "flavour", "prefix", "description", "pypi"}
# MPIs a site may name as peers (render/__init__.py FLAVOUR_ENV says what each module sets).
PEER_FLAVOURS = ("intel-mpi", "mpich", "openmpi")
VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?\Z")
# A pinned PyPI requirement, as `make peers` (tools/peer_mpis.py) hands it to pip: name==version.
PYPI_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*\Z")
# Modulefile formats render can write: Lmod's Lua and Environment Modules' Tcl (modules/writers.py).
MODULE_FORMATS = tuple(WRITERS)


@dataclass
class Peer:
    """Another MPI a user could load instead of the tuned one (site.yaml `peers:`): render writes
    it a module like the baseline's, with no tuning, for validate/run.sh --baseline to compare."""

    module: str
    version: str
    flavour: str  # PEER_FLAVOURS
    prefix: str
    description: str
    pypi: List[str] = field(default_factory=list)  # what `make peers` installs into prefix


@dataclass
class NodeType:
    """One node type of a site (site.yaml node_types.types): the partitions that select it and the
    site as this node type sees it (its table, hardware, default geometry and profile)."""

    name: str
    partitions: List[str]
    site: "Site"


CANDIDATE_SUFFIX = "-candidate"  # openmpi-tuned/5.0.8-candidate: a retuned table on trial


@dataclass
class Site:
    path: str
    name: str
    description: str
    table_ref: Optional[str]  # "<platform>/<mpi>-<version>" or None (nothing measured yet)
    table: Optional[schema.Table]
    mpi_flavour: str
    mpi_version: str
    base_module: Optional[str]  # a module providing the MPI (e.g. Spack's), or None
    prefix: Optional[str]  # an install prefix the modules put on the paths, or None
    ucx_version: tuple
    network_transports: bool  # may UCX_TLS name network transports (rc, ud, dc)?
    sockets: int
    components: List[str]
    default_profile: str
    default_nodes: int
    default_ppn: int
    tuned_module: str
    baseline_module: str
    notes: List[str] = field(default_factory=list)
    # which modulefiles render writes: "lua" (Lmod), "tcl" (Environment Modules)
    module_formats: tuple = ("lua",)
    # HPC-X as this site's alternative tuned MPI (flavour "hpcx"), or None
    hpcx: Optional["Site"] = None
    # Other versions of the same MPI rendered beside it (site.yaml other_versions), each a Site
    # of its own version, table and prefix or base_module; [] for one version.
    other_versions: List["Site"] = field(default_factory=list)
    # What the Spack package openmpi-tuned site=<this> requires of Spack's build at run time
    # (site.yaml spack.depends_on): the MPI's fabrics and variants, UCX transports, ...
    spack_depends_on: List[str] = field(default_factory=list)
    peers: List[Peer] = field(default_factory=list)  # other MPIs, for comparison (not tuned)
    # In an MPI module hierarchy (site.yaml hierarchy.mpi_level): the MODULEPATH folder of the
    # packages built with this MPI, which tuned and baseline add as the site's MPI module does.
    mpi_level: Optional[str] = None
    # Several node types (site.yaml node_types): each a Site of its own table and hardware with
    # node_type set; the module picks one at load (selector.PARTITIONS). [] for one node type.
    node_types: List["NodeType"] = field(default_factory=list)
    default_node_type: Optional[str] = None
    node_type_variable: Optional[str] = None  # the site's own variable, compared as a partition
    node_type: Optional[str] = None  # on a node type's Site: its name
    # A candidate (tunedmpi retune): the tuned module is <version><CANDIDATE_SUFFIX>, from the
    # site's candidate table, beside the default one (regenerate/revisions.py).
    candidate: bool = False
    users_page: Optional[str] = None  # module help's users' guide (site.yaml users_page)
    # Outside the table (selector.OUTSIDE): cores per node (sockets x cores_per_socket; 0: not
    # known), the factor beyond which an extrapolated row is outside (0: none) and what then.
    cores: int = 0
    outside_factor: int = 0
    outside_then: str = "extrapolate"

    def mpis(self):
        """This site's MPIs to render: itself, its other versions, then its HPC-X alternative."""
        return [self] + list(self.other_versions) + ([self.hpcx] if self.hpcx else [])

    @property
    def tuned_version(self):
        """The tuned module's version: the MPI's, with CANDIDATE_SUFFIX on a candidate."""
        return self.mpi_version + (CANDIDATE_SUFFIX if self.candidate else "")

    def node_type_variables(self):
        """(source, variable) the module reads to pick a node type; [] for one node type."""
        return selector.node_type_variables(self.node_type_variable) if self.node_types else []

    def of_type(self, name):
        """The Site of node type ``name``."""
        return next(nt.site for nt in self.node_types if nt.name == name)


def _printable(ck, text, keypath, label):
    """A description reaches terminals (`module help`, `module whatis`): one line of printable
    characters, no C0/C1 control (U+009B starts an escape sequence) nor bidi/format character."""
    if text is not None and printable(text) != text:
        ck.err(
            keypath + ("description",),
            "%s holds a control or bidi character (a newline? U+202E?)" % label,
            "write it on one line of plain text",
        )


def _module_name(value, versioned=False):
    """A module name (MODULE_NAME), with a /version only where ``versioned``."""
    return (
        isinstance(value, str)
        and bool(MODULE_NAME.match(value))
        and (versioned or "/" not in value)
    )


def _plain_path(value):
    """An install prefix: PREFIX characters, never climbing out with '..'."""
    return isinstance(value, str) and bool(PREFIX.match(value)) and ".." not in value


def _mpi_location(ck, block, at, label):
    """(base_module, prefix) of an MPI's block (mpi:, hpcx:, an other_versions entry): exactly
    one of a module that provides the MPI and its install directory; problems go to ck."""
    base, prefix = block.get("base_module"), block.get("prefix")
    if (base is None) == (prefix is None):
        ck.err(
            at,
            "give exactly one of %sbase_module and %sprefix" % (label, label),
            "base_module: a module that provides the MPI (e.g. Spack's), or prefix: its install directory",
        )
    if base is not None and not _module_name(base, versioned=True):
        ck.err(
            at + ("base_module",),
            "base_module %r is not a module name" % (base,),
            "write name/version with letters, digits and . _ + -",
        )
    if prefix is not None and not _plain_path(prefix):
        ck.err(
            at + ("prefix",),
            "prefix %r is not a plain path" % (prefix,),
            "an absolute path, or one relative to the repository, of letters, digits and . _ + - /",
        )
    return base, prefix


def _ucx_version(ck, value, keypath, fix):
    """A UCX version tuple, else None and an error; a missing or null version is no version
    ("None" would pass as None)."""
    try:
        return knobs.version_tuple("" if value is None else value)
    except knobs.KnobError as exc:
        ck.err(keypath, exc.problem, fix)
        return None


def _module_names(ck, mods, at, label, examples):
    """{"tuned", "baseline"} of a modules block at keypath ``at`` (``label``: how errors name
    it): each a module name without version, the two different; problems go to ck."""
    names = {}
    for key, example in zip(("tuned", "baseline"), examples):
        names[key] = mods.get(key)
        if not _module_name(names[key]):
            ck.err(
                at + (key,),
                "%s.%s must be a module name without version" % (label, key),
                "e.g. %s: %s" % (key, example),
            )
    if isinstance(names["tuned"], str) and names["tuned"] == names["baseline"]:
        ck.err(
            at + ("baseline",),
            "%s.baseline is the same name as %s.tuned: one module would overwrite the other"
            % (label, label),
            "give the baseline its own name, e.g. tuned: %s, baseline: %s" % examples,
        )
    return names


def _own_module_names(block):
    """The module names a modules: block of ``block`` (the site config, its hpcx:) gives."""
    mods = block.get("modules") if isinstance(block, dict) else None
    return {v for v in mods.values() if isinstance(v, str)} if isinstance(mods, dict) else set()


def _hardware(ck, value, at):
    """(sockets, cores per node: sockets x cores_per_socket, or 0 when that is not given) of a
    hardware block at keypath ``at``."""
    hw = ck.mapping(value, at, "hardware") or {}
    ck.unknown_keys(hw, {"sockets", "cores_per_socket", "cpu"}, at, "hardware")
    sockets = ck.positive_int(hw, "sockets", at)
    if hw.get("cores_per_socket") is None:
        return sockets, 0
    return sockets, (sockets or 0) * (ck.positive_int(hw, "cores_per_socket", at) or 0)


def _geometry(ck, value, at):
    """(nodes, ppn) of a default_geometry block at keypath ``at``."""
    geo = ck.mapping(value, at, "default_geometry") or {}
    return ck.positive_int(geo, "nodes", at), ck.positive_int(geo, "ppn", at)


def load_site(path):
    src = yamlsrc.load(path)
    ck = schema.Checker(src)
    site = _check(ck, src.data, path)
    if ck.errors:
        raise InputErrors(ck.errors)
    return site


def _table_of(ck, doc, at=(), version=None, label=""):
    """(table reference, the loaded table or None) of a site config (or of a node type or other
    version at keypath ``at``, whose table must be of Open MPI ``version``, named as ``label``);
    problems go to ck."""
    ref, where = doc.get("table"), at + ("table",)
    ck.missing(doc, "table", at, "add table: <platform>/<mpi>-<version>, or null")
    if ref is None:
        return None, None
    if not isinstance(ref, str) or not re.match(r"^[a-z0-9._-]+/[a-z0-9._-]+\Z", ref):
        ck.err(
            where,
            "table must look like <platform>/<mpi>-<version>, not %r" % (ref,),
            "e.g. table: oci-bm-optimized3.36/openmpi-5.0.6",
        )
        return ref, None
    tpath = paths.tables_dir() / (ref + ".yaml")
    if not tpath.is_file():
        ck.err(where, "no table %s" % tpath, "create it or name an existing table")
        return ref, None
    try:
        table = schema.load_table(str(tpath))
    except (InputError, InputErrors) as exc:
        ck.err(
            where,
            "its table does not pass `tunedmpi check`: %s" % str(exc).splitlines()[0],
            "run tunedmpi check %s" % tpath,
        )
        return ref, None
    if version and table.mpi_version != version:
        ck.err(
            where,
            "its table's Open MPI %s is not %s %s" % (table.mpi_version, label, version),
            "name a table measured with Open MPI %s" % version,
        )
    return ref, table


def _other_versions(ck, doc, site):
    """site.yaml other_versions: [{version, table, prefix | base_module}] (issue 50): the same
    site's modules for other versions of its MPI, side by side (render keeps each): Sites."""
    entries = doc.get("other_versions")
    if entries is None:
        return []
    at = ("other_versions",)
    if not isinstance(entries, list) or doc.get("node_types") is not None:
        ck.err(
            at,
            "other_versions must be a list, on a site of one node type",
            'e.g. other_versions: [{version: "5.0.7", table: <platform>/openmpi-5.0.7, prefix: /opt/openmpi-5.0.7}]',
        )
        return []
    out, seen = [], {site.mpi_version}
    for i, one in enumerate(entries):
        where = at + (i,)
        one = ck.mapping(one, where, "other_versions[%d]" % i) or {}
        ck.unknown_keys(one, {"version", "table", "prefix", "base_module"}, where, "other_versions")
        version = _version_text(
            ck, one.get("version"), where + ("version",), "version must look like 5.0.7",
            "write the MPI version, quoted",
        )  # fmt: skip
        if version and version in seen:
            ck.err(where + ("version",), "version %s is given twice" % version, "give each once")
        seen.add(version)
        ref, table = _table_of(ck, one, where, version, "version")
        base, prefix = _mpi_location(ck, one, where, "")
        out.append(
            dataclasses.replace(
                site,
                mpi_version=version,
                table_ref=ref,
                table=table,
                prefix=prefix,
                base_module=base,
                hpcx=None,
                other_versions=[],
            )  # fmt: skip
        )
    return out


def _users_page(ck, doc):
    """site.yaml users_page (USERS_PAGE), or None."""
    page = doc.get("users_page")
    if page is not None and (not isinstance(page, str) or not USERS_PAGE.match(page)):
        ck.err(
            ("users_page",),
            "users_page %r is neither a web address nor an absolute path" % (page,),
            "write the address of the site's users' guide (https://...) or leave it out "
            "(install-module installs docs/users.md and names its copy)",
        )
    return page


def _outside(ck, doc):
    """site.yaml `outside: {factor: F, then: extrapolate|nearest|untuned}` (selector.OUTSIDE):
    (factor or 0, what the module does outside the table)."""
    block = doc.get("outside")
    if block is None:
        return 0, selector.OUTSIDE_CHOICES[0]
    block = ck.mapping(block, ("outside",), "outside") or {}
    ck.unknown_keys(block, {"factor", "then"}, ("outside",), "outside")
    factor = block.get("factor", 0)
    if factor != 0 and not schema._whole(factor, 2, 1000):
        ck.err(
            ("outside", "factor"),
            "outside.factor must be a whole number from 2 to 1000, not %r" % (factor,),
            "write e.g. factor: 2 (a row of n nodes serves n/2 to 2n nodes), or leave it out",
        )
        factor = 0
    then = block.get("then", selector.OUTSIDE_CHOICES[0])
    if then not in selector.OUTSIDE_CHOICES:
        ck.err(
            ("outside", "then"),
            "outside.then must be one of %s, not %r" % (", ".join(selector.OUTSIDE_CHOICES), then),
            "extrapolate: the edge row, said at load; nearest: the edge row, quietly; "
            "untuned: nothing set",
        )
        then = selector.OUTSIDE_CHOICES[0]
    return factor, then


def _version_text(ck, value, keypath, problem, fix):
    """A version key's text, else "" and one error: a YAML number (5.10 read as 5.1) gets the fix
    "quote it", anything else not MAJOR.MINOR[.PATCH] ``problem`` and ``fix``."""
    try:
        knobs.not_text(value)
    except knobs.KnobError as exc:
        ck.err(keypath, exc.problem, exc.fix)
        return ""
    if not VERSION.match(str(value or "")):
        ck.err(keypath, problem, fix)
        return ""
    return value


def _mpi_of(ck, doc, table):
    """(flavour, version, base_module, prefix) of a site config's mpi block (its version that of
    ``table``, the site's loaded table or None); problems go to ck."""
    mpi = ck.mapping(doc.get("mpi"), ("mpi",), "mpi") or {}
    ck.unknown_keys(mpi, {"flavour", "version", "base_module", "prefix"}, ("mpi",), "mpi")
    flavour = ck.text(mpi, "flavour", ("mpi",))
    if flavour and flavour != "openmpi":  # HPC-X comes as a site's `hpcx:` block, not a flavour
        ck.err(
            ("mpi", "flavour"),
            "flavour %r is not one the project tunes" % (flavour,),
            "write flavour: openmpi (HPC-X: an hpcx: block beside it, site-configs/README.md)",
        )
    version = _version_text(
        ck,
        mpi.get("version"),
        ("mpi", "version"),
        "mpi.version must look like 5.0.6",
        "write the MPI version",
    )
    if version and table and version != table.mpi_version:
        # The rows were measured with the table's MPI (its parameters, its algorithm numbers).
        ck.err(
            ("mpi", "version"),
            "mpi.version %s is not the table's Open MPI %s (%s)"
            % (version, table.mpi_version, table.path),
            "write version: %s, or measure a table with %s (docs/regenerate.md) and name it"
            % (table.mpi_version, version),
        )
    base, prefix = _mpi_location(ck, mpi, ("mpi",), "mpi.")
    return flavour, version, base, prefix


def _modules_of(ck, doc):
    """({"tuned", "baseline"} module names, module formats) of a site config; problems go to ck."""
    mods = ck.mapping(doc.get("modules"), ("modules",), "modules") or {}
    names = _module_names(ck, mods, ("modules",), "modules", ("openmpi-tuned", "openmpi"))
    formats = doc.get("module_formats", ["lua"])
    if (
        not isinstance(formats, list)
        or not formats
        or any(f not in MODULE_FORMATS for f in formats)
        or len(set(formats)) != len(formats)
    ):
        ck.err(
            ("module_formats",),
            "module_formats must be a list of %s, each at most once, not %r"
            % (" and ".join(MODULE_FORMATS), formats),
            "write module_formats: [lua] (Lmod), [tcl] (Environment Modules) or [lua, tcl]; "
            "leave it out for [lua]",
        )
        formats = ["lua"]
    return names, formats


def _check(ck, doc, path):
    if not ck.mapping(doc, (), "a site config"):
        return None
    ck.unknown_keys(doc, TOP_KEYS, (), "the site config")
    ck.schema_version(
        doc, SCHEMA_VERSION, "write schema: %d (site-configs/README.md)" % SCHEMA_VERSION
    )
    name = ck.text(doc, "site", ())
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if name and (not schema.NAME.match(name) or name != folder):
        ck.err(
            ("site",),
            "site '%s' must be a plain name equal to its folder '%s'" % (name, folder),
            "rename the folder or the site so they match",
        )
    description = ck.text(doc, "description", ()) or ""
    _printable(ck, description, (), "description")

    ref, table = _table_of(ck, doc)

    flavour, version, base, prefix = _mpi_of(ck, doc, table)

    ucx = _ucx_version(
        ck,
        doc.get("ucx_version"),
        ("ucx_version",),
        'quote the UCX version the MPI uses, e.g. "1.18"',
    )

    net = ck.mapping(doc.get("interconnect"), ("interconnect",), "interconnect") or {}
    ck.unknown_keys(net, {"name", "network_transports"}, ("interconnect",), "interconnect")
    if not isinstance(net.get("network_transports"), bool):
        ck.err(
            ("interconnect", "network_transports"),
            "network_transports must be true or false",
            "true where UCX may be told to use rc/ud/dc (InfiniBand, RoCE)",
        )

    sockets, cores = _hardware(ck, doc.get("hardware"), ("hardware",))
    factor, then = _outside(ck, doc)

    comps = doc.get("components")
    if (
        not isinstance(comps, list)
        or "none" not in comps
        or any(c not in knobs.COMPONENTS for c in comps)
    ):
        ck.err(
            ("components",),
            "components must list what this MPI build has, always with none",
            "e.g. components: [none, ucc, hcoll]",
        )
        comps = ["none"]

    profile = doc.get("default_profile")
    if profile not in OPERATIONS:
        ck.err(
            ("default_profile",),
            "default_profile must be one of %s" % ", ".join(OPERATIONS),
            "name the operation whose optimum sets the global UCX knobs",
        )
    dn, dp = _geometry(ck, doc.get("default_geometry"), ("default_geometry",))

    names, formats = _modules_of(ck, doc)
    mpi_level = _hierarchy(ck, doc)
    hpcx = _hpcx(ck, doc)
    spack_deps = _spack(ck, doc, flavour)
    peers = _peers(ck, doc)
    users_page = _users_page(ck, doc)
    if ck.errors:
        return None
    site = Site(
        path=str(path),
        name=name,
        description=description,
        table_ref=ref,
        table=table,
        mpi_flavour=flavour,
        mpi_version=version,
        base_module=base,
        prefix=prefix,
        ucx_version=ucx,
        network_transports=net["network_transports"],
        sockets=sockets,
        components=list(comps),
        default_profile=profile,
        default_nodes=dn,
        default_ppn=dp,
        tuned_module=names["tuned"],
        baseline_module=names["baseline"],
        notes=list(doc.get("notes") or []),
        module_formats=tuple(formats),
        spack_depends_on=spack_deps,
        peers=peers,
        mpi_level=mpi_level,
        users_page=users_page,
        cores=cores,
        outside_factor=factor,
        outside_then=then,
    )
    _node_types(ck, doc, site)
    site.other_versions = _other_versions(ck, doc, site)
    if ck.errors:
        return None
    if hpcx:
        # The same site, table, geometry rule and module formats; HPC-X's own MPI, UCX and names
        # (flat: the MPI level is the site's Open MPI's).
        site.hpcx = dataclasses.replace(
            site, mpi_flavour="hpcx", hpcx=None, peers=[], mpi_level=None, **hpcx
        )
    return site


NODE_TYPES_KEYS = {"default", "variable", "types"}
NODE_TYPE_KEYS = {"name", "table", "partitions", "hardware", "default_geometry", "default_profile"}
NODE_TYPE_NAME = re.compile(r"^[A-Za-z0-9_]{1,40}\Z")  # a word: TUNEDMPI_ROW, the load's messages
PARTITION = re.compile(r"^[%s]{1,%d}\Z" % (selector.PLAIN_CHARS, selector.PLAIN_MAX))
ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _node_types(ck, doc, site):
    """The `node_types:` block (several node types, one table each, picked at load by partition):
    sets site.node_types, default_node_type and node_type_variable; problems go to ck."""
    if doc.get("node_types") is None:
        return
    at = ("node_types",)
    block = ck.mapping(doc["node_types"], at, "node_types") or {}
    ck.unknown_keys(block, NODE_TYPES_KEYS, at, "node_types")
    if doc.get("hpcx") is not None:
        ck.err(at, "a site of several node types has no hpcx: block", "give HPC-X its own site")
    variable = block.get("variable")
    if variable is not None and (not isinstance(variable, str) or not ENV_VAR.match(variable)):
        ck.err(
            at + ("variable",),
            "variable %r is not an environment variable name" % (variable,),
            "name the variable your site sets to a partition name (e.g. SITE_PARTITION), or leave it out",
        )
        variable = None
    items = block.get("types")
    if not isinstance(items, list) or not items:
        ck.err(
            at + ("types",),
            "node_types.types must be a list of node types",
            "e.g. types: [{name: cpu, partitions: [cpu]}, "
            "{name: gpu, table: <platform>/<mpi>-<version>, partitions: [gpu]}]",
        )
        return
    owner, out = {}, []
    for i, item in enumerate(items):
        where = at + ("types", i)
        one = ck.mapping(item, where, "node_types.types[%d]" % i)
        if one is None:
            continue
        ck.unknown_keys(one, NODE_TYPE_KEYS, where, "a node type")
        name = one.get("name")
        if not isinstance(name, str) or not NODE_TYPE_NAME.match(name):
            ck.err(where + ("name",), "node type name %r is not a word" % (name,), "e.g. name: gpu")
            continue
        if name in [nt.name for nt in out]:
            ck.err(where + ("name",), "node type %s is named twice" % name, "name each once")
        parts = one.get("partitions", [])
        if not isinstance(parts, list):
            ck.err(where + ("partitions",), "partitions must be a list", "e.g. partitions: [gpu]")
            parts = []
        for j, part in enumerate(parts):
            if not isinstance(part, str) or not PARTITION.match(part):
                ck.err(
                    where + ("partitions", j),
                    "partition %r is not a plain name" % (part,),
                    "letters, digits and _ . -, at most %d" % selector.PLAIN_MAX,
                )
            elif part in owner:
                ck.err(
                    where + ("partitions", j),
                    "duplicate partition %s: node types %s and %s list it"
                    % (part, owner[part], name),
                    "list each partition under one node type",
                )
            else:
                owner[part] = name
        sub = _node_type_site(ck, one, where, site, name)
        out.append(NodeType(name, [p for p in parts if owner.get(p) == name], sub))
    default = block.get("default")
    if default not in [nt.name for nt in out]:
        ck.err(
            at + ("default",),
            "missing or unknown default node type %r" % (default,),
            "write default: <the node type of login nodes and unlisted partitions>, one of: %s"
            % ", ".join(nt.name for nt in out),
        )
    site.node_types, site.default_node_type, site.node_type_variable = out, default, variable


def _node_type_site(ck, one, where, site, name):
    """The Site as node type ``name`` sees it: its own table, hardware, default_geometry and
    default_profile where it gives them, else the site's."""
    ref, table, before = site.table_ref, site.table, len(ck.errors)
    if "table" in one:
        ref, table = _table_of(ck, one, where, site.mpi_version, "mpi.version")
    if table is None and len(ck.errors) == before:
        ck.err(where + ("table",), "node type %s has no table" % name, "name its table")
    dn, dp = site.default_nodes, site.default_ppn
    sockets, cores = site.sockets, site.cores
    if "hardware" in one:
        sockets, cores = _hardware(ck, one["hardware"], where + ("hardware",))
    if "default_geometry" in one:
        dn, dp = _geometry(ck, one["default_geometry"], where + ("default_geometry",))
    profile = one.get("default_profile", site.default_profile)
    if profile not in OPERATIONS:
        ck.err(
            where + ("default_profile",),
            "default_profile must be one of %s" % ", ".join(OPERATIONS),
            "name an operation, or leave it out for the site's",
        )
    return dataclasses.replace(
        site,
        table_ref=ref,
        table=table,
        sockets=sockets,
        cores=cores,
        default_nodes=dn,
        default_ppn=dp,
        default_profile=profile,
        node_type=name,
    )


def _hierarchy(ck, doc):
    """The `hierarchy:` key: "flat" (or left out), or {mpi_level: <folder>} for a module tree with
    an MPI level (Spack's hierarchy [mpi], EasyBuild's HierarchicalMNS): the folder the site's MPI
    module prepends to MODULEPATH. That folder, or None."""
    value = doc.get("hierarchy", "flat")
    if value == "flat":
        return None
    if not isinstance(value, dict) or set(value) != {"mpi_level"}:
        ck.err(
            ("hierarchy",),
            "hierarchy must be flat or {mpi_level: <folder>}, not %r" % (value,),
            "write hierarchy: flat, or hierarchy: {mpi_level: <the folder the site's MPI module adds "
            "to MODULEPATH>} (site-configs/README.md)",
        )
        return None
    level = value["mpi_level"]
    if not isinstance(level, str) or not PREFIX.match(level) or ".." in level.split("/"):
        ck.err(
            ("hierarchy", "mpi_level"),
            "mpi_level %r is not a plain path" % (level,),
            "an absolute path, or one relative to the repository, of letters, digits and . _ + - /",
        )
        return None
    return level


def _spack(ck, doc, flavour):
    """The `spack:` block: what openmpi-tuned site=<site> depends on at run time, as Spack specs
    (the Spack package reads them from this file; docs/spack.md). A list of strings, or []."""
    if doc.get("spack") is None:
        return []
    block = ck.mapping(doc.get("spack"), ("spack",), "spack") or {}
    ck.unknown_keys(block, {"depends_on"}, ("spack",), "spack")
    deps = block.get("depends_on", [])
    example = 'e.g. depends_on: ["openmpi fabrics=ucx,ucc", "ucx +verbs +rc"]'
    if not isinstance(deps, list):
        ck.err(("spack", "depends_on"), "spack.depends_on must be a list of Spack specs", example)
        return []
    out = []
    for i, spec in enumerate(deps):
        if not isinstance(spec, str) or not SPACK_SPEC.match(spec.strip()):
            ck.err(
                ("spack", "depends_on", i),
                "%r is not a Spack spec that starts with a package name" % (spec,),
                example,
            )
            continue
        name, rest = SPACK_SPEC.match(spec.strip()).groups()
        if name == flavour and (rest or "").startswith("@"):
            ck.err(
                ("spack", "depends_on", i),
                "%r names a version of the MPI" % spec,
                "leave the version out: openmpi-tuned depends on %s@<mpi.version> already"
                % flavour,
            )
            continue
        out.append(" ".join(spec.split()))
    return out


def _peers(ck, doc):
    """The `peers:` list: other MPIs a user could load instead (Intel MPI, MPICH, another Open MPI),
    each rendered as an untuned module for validate/run.sh --baseline. A list of Peers, or []."""
    if doc.get("peers") is None:
        return []
    items = doc.get("peers")
    example = (
        "e.g. peers: [{module: mpich, version: 5.0.2, flavour: mpich, "
        "prefix: .peers/mpich/5.0.2, description: MPICH 5.0.2 from PyPI}]"
    )
    if not isinstance(items, list):
        ck.err(("peers",), "peers must be a list of MPIs, one mapping each", example)
        return []
    taken = _own_module_names(doc) | _own_module_names(doc.get("hpcx"))
    out, seen = [], set()
    for i, item in enumerate(items):
        where = ("peers", i)
        peer = ck.mapping(item, where, "peers[%d]" % i)
        if peer is None:
            continue
        n = len(ck.errors)
        ck.unknown_keys(peer, PEER_KEYS, where, "a peer")
        module = peer.get("module")
        if not _module_name(module):
            ck.err(
                where + ("module",),
                "peers[%d].module must be a module name without version, not %r" % (i, module),
                "e.g. module: intel-mpi (letters, digits and . _ + -)",
            )
        elif module in taken:
            ck.err(
                where + ("module",),
                "peer module %r has the name of one of the site's own modules" % module,
                "give the peer its own name, e.g. intel-mpi or mpich",
            )
        version = peer.get("version")
        if not isinstance(version, str) or not VERSION.match(version):
            ck.err(
                where + ("version",),
                "peers[%d].version must look like 2021.18.1, not %r" % (i, version),
                'write the MPI\'s version, quoted: version: "5.0.2"',
            )
        elif isinstance(module, str) and (module, version) in seen:
            ck.err(
                where + ("version",),
                "%s/%s is named twice in peers: one module would overwrite the other"
                % (module, version),
                "remove one, or give each its own module name or version",
            )
        seen.add((module, version))
        flavour = peer.get("flavour")
        if flavour not in PEER_FLAVOURS:
            ck.err(
                where + ("flavour",),
                "peers[%d].flavour %r is not one render knows the environment of" % (i, flavour),
                "write one of: %s" % ", ".join(PEER_FLAVOURS),
            )
        prefix = peer.get("prefix")
        if not _plain_path(prefix):
            ck.err(
                where + ("prefix",),
                "peers[%d].prefix %r is not a plain path" % (i, prefix),
                "an absolute path, or one relative to the repository (e.g. .peers/mpich/5.0.2), "
                "of letters, digits and . _ + - /",
            )
        description = ck.text(peer, "description", where)
        _printable(ck, description, where, "peers[%d].description" % i)
        pypi = peer.get("pypi", [])
        if not isinstance(pypi, list) or any(
            not isinstance(p, str) or not PYPI_PIN.match(p) for p in pypi
        ):
            ck.err(
                where + ("pypi",),
                "peers[%d].pypi must be a list of pinned PyPI requirements, not %r" % (i, pypi),
                "e.g. pypi: [mpich==5.0.2] (what `make peers` installs into prefix); "
                "leave it out where the site installs the MPI itself",
            )
        if len(ck.errors) == n:
            out.append(Peer(module, version, flavour, prefix, description, list(pypi)))
    return out


def _hpcx(ck, doc):
    """The `hpcx:` block (HPC-X as the alternative tuned MPI): Site fields, or None."""
    if doc.get("hpcx") is None:
        return None
    block = ck.mapping(doc.get("hpcx"), ("hpcx",), "hpcx") or {}
    ck.unknown_keys(block, HPCX_KEYS, ("hpcx",), "hpcx")
    version = _version_text(
        ck,
        block.get("version"),
        ("hpcx", "version"),
        "hpcx.version must look like 2.20",
        "write the HPC-X version (hpcx-tuned/<it>)",
    )
    base, prefix = _mpi_location(ck, block, ("hpcx",), "hpcx.")
    ucx = _ucx_version(
        ck,
        block.get("ucx_version"),
        ("hpcx", "ucx_version"),
        'quote the UCX version HPC-X bundles (ucx_info -v), e.g. "1.17"',
    )
    at = ("hpcx", "modules")
    mods = ck.mapping(block.get("modules"), at, "hpcx.modules") or {}
    names = _module_names(ck, mods, at, "hpcx.modules", ("hpcx-tuned", "hpcx-untuned"))
    taken = _own_module_names(doc)
    clash = [key for key, name in names.items() if isinstance(name, str) and name in taken]
    if clash:  # one error, also when both names are the site's own
        ck.err(
            at + (clash[0],),
            "the HPC-X modules need names of their own",
            "e.g. tuned: hpcx-tuned, baseline: hpcx-untuned",
        )
    return dict(
        mpi_version=version,
        base_module=base,
        prefix=prefix,
        ucx_version=ucx,
        tuned_module=names.get("tuned"),
        baseline_module=names.get("baseline"),
    )


def site_dir():
    return paths.project_root() / "site-configs"


def site_names(folder=None):
    """The sites of site-configs/ (or of ``folder``): its folders that hold a site.yaml."""
    d = Path(folder or site_dir())
    return sorted(p.name for p in d.iterdir() if (p / SITE_FILE).is_file()) if d.is_dir() else []


def load_named(name):
    paths.safe_name(name, "--site", "site")  # never a site.yaml outside site-configs/
    path = site_dir() / name / SITE_FILE
    if not path.is_file():
        raise InputError(
            str(path),
            None,
            "site",
            "no site '%s'" % name,
            "use one of: %s" % (", ".join(site_names()) or "(none yet)"),
        )
    return load_site(str(path))


CANDIDATE_EXT = ".candidate.yaml"  # beside the table: tunedmpi retune writes it


def candidate_path(site):
    return paths.tables_dir() / (site.table_ref + CANDIDATE_EXT)


def candidate_site(site):
    """The Site whose tuned module is the candidate (Site.candidate), or None without a candidate
    table. A site of several node types or HPC-X has none: retune refuses them."""
    if site.candidate or site.node_types or not site.table_ref or site.mpi_flavour == "hpcx":
        return None
    path = candidate_path(site)
    if not path.is_file():
        return None
    return dataclasses.replace(
        site,
        table=schema.load_table(str(path)),
        table_ref=site.table_ref + CANDIDATE_EXT[: -len(".yaml")],
        candidate=True,
        hpcx=None,
    )
