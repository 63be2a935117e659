"""Every variable a module sets is one its library knows, with a value the library lists.

UCX warns about an unknown UCX_* variable, but Open MPI ignores an unknown OMPI_MCA_* and UCC an
unknown UCC_*: a misspelt or version-dependent name in envmap would ship and do nothing. For each
site, against the lists in known-params/ (modules/paramlists.py) of the versions its site.yaml
names (mpi.version, ucx_version; HPC-X's own), this checks
  (a) every variable of every shipped module, Lua and Tcl (modulefiles/<site>/), and its value
      where the library lists legal values (components, transports, algorithms, policies);
  (b) every name envmap can emit for any knob value the schema accepts (tables/knobs.py);
  (c) that the coll_tuned algorithm numbers render writes into rules files (tables/rulesfile.py)
      are the ones the site's Open MPI lists.
A version without a list here is checked against what known-params/STAND-INS.yaml says stands
in for it, and the report names every stand-in a check used and what a site must confirm.
"""

import inspect
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from tunedmpi import paths, yamlsrc
from tunedmpi.errors import InputError
from tunedmpi.files import read_text
from tunedmpi.modules import envmap, paramlists, sites
from tunedmpi.modules.render import RULES_VARS, module_path
from tunedmpi.modules.writers import WRITERS
from tunedmpi.tables import knobs, rulesfile, schema
from tunedmpi.tables.operations import UCC_ALGORITHMS

# Which library reads a variable, by its prefix. "mpi" is the site's MPI: Open MPI 5 reads
# PRTE_MCA_* in its mpirun (PRRTE), so one Open MPI list holds both.
LIBRARY_OF = (
    ("OMPI_MCA_", "mpi"),
    ("PRTE_MCA_", "mpi"),
    ("UCX_", "ucx"),
    ("UCC_", "ucc"),
    ("HCOLL_", "hcoll"),
    ("SLURM_", "slurm"),
)
# Variables of no library: where the MPI is, and the module's own bookkeeping. Any other name is
# an error, so a misspelt prefix (OPMI_MCA_...) cannot slip past as "not a library's".
NOT_A_LIBRARY = re.compile(
    r"^(PATH|LD_LIBRARY_PATH|MANPATH|PKG_CONFIG_PATH|MPI_HOME|TUNEDMPI_[A-Z_]+)\Z"
)
LABEL = dict(openmpi="Open MPI", hpcx="HPC-X", ucx="UCX", ucc="UCC", hcoll="HCOLL", slurm="Slurm")
STAND_INS = "STAND-INS.yaml"


def _matches(spec, library, version):
    """'ucx 1.17' matches UCX 1.17 and 1.17.x; 'hcoll *' any version (also none named)."""
    lib, _, ver = spec.partition(" ")
    return lib == library and (
        ver == "*" or (version is not None and (version == ver or version.startswith(ver + ".")))
    )


@dataclass
class StandIn:
    index: int
    covers: List[str]  # "library version" it stands in for
    list: Optional[str]  # a list file used instead of the version's own
    names: List[str]  # or names the library's tool does not list
    why: str
    confirm: str

    def describe(self):
        what = "known-params/%s" % self.list if self.list else ", ".join(self.names)
        return f"{what} for {', '.join(self.covers)} ({self.why}; confirm: {self.confirm})"


def load_stand_ins(folder=None):
    path = Path(folder or paramlists.known_params_dir()) / STAND_INS
    if not os.path.lexists(path):  # only a missing file is no stand-ins; a FIFO is refused
        return []
    doc = yamlsrc.load(str(path)).data or []
    out = []
    for i, e in enumerate(doc if isinstance(doc, list) else [None]):
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("for"), list)
            or bool(e.get("list")) == bool(e.get("names"))
            or not e.get("why")
            or not e.get("confirm")
        ):
            raise InputError(
                str(path),
                None,
                "[%d]" % i,
                'each entry needs for: ["<library> <version>"], '
                "exactly one of list: or names:, and why: and confirm:",
                "see the entries above it",
            )
        if e.get("list"):  # a list file of this folder, never a path out of it
            paths.safe_name(e["list"], str(path), "[%d].list" % i)
        out.append(
            StandIn(
                i,
                [str(s) for s in e["for"]],
                e.get("list"),
                list(e.get("names") or []),
                str(e["why"]),
                str(e["confirm"]),
            )
        )
    return out


@dataclass
class Known:
    """What is known of one library version: its list (or a stand-in's) and stand-in names."""

    library: str
    version: Optional[str]
    base: Optional[paramlists.ParamList]
    base_stand_in: Optional[StandIn]
    extra: List[StandIn]

    def label(self):
        return f"{LABEL.get(self.library, self.library)} {self.version or '(no version named)'}"

    def source(self, stand_in=None):
        where = ["known-params/%s" % Path(self.base.path).name] if self.base else []
        used = stand_in or self.base_stand_in
        if used:
            where.append("stand-in: known-params/%s entry %d" % (STAND_INS, used.index + 1))
        return ", ".join(where) or "no list"

    def lookup(self, name):
        """(kind, stand-in used or None), or None when unknown."""
        if self.base and name in self.base.names:
            return self.base.names[name], self.base_stand_in
        for s in self.extra:
            if name in s.names:
                return None, s
        return None


def resolve(library, version, folder=None, stand_ins=None):
    """Known for (library, version): its own list file (exact, or the one list of a more exact
    version: "1.18" -> ucx-1.18.1.txt), else a stand-in's list; plus stand-in names."""
    folder = Path(folder or paramlists.known_params_dir())
    stand_ins = load_stand_ins(folder) if stand_ins is None else stand_ins
    base = used = None
    if version is not None:
        head = "%s-%s." % (library, version)  # ucx-1.18.: ucx-1.18.txt, ucx-1.18.1.txt, not 1.180
        found = sorted(
            (p for p in folder.glob("%s-*.txt" % library) if (p.stem + ".").startswith(head)),
            key=lambda p: _natural(p.stem),
        )
        if found:
            base = paramlists.read(found[-1])
    if base is None:
        for s in stand_ins:
            if s.list and any(_matches(c, library, version) for c in s.covers):
                base, used = paramlists.read(folder / s.list), s
                break
    extra = [
        s for s in stand_ins if s.names and any(_matches(c, library, version) for c in s.covers)
    ]
    return Known(library, version, base, used, extra)


def site_versions(mpi):
    """{library key of LIBRARY_OF: (library, version)} for one of a site's MPIs."""
    ucx = ".".join(map(str, mpi.ucx_version)) if mpi.ucx_version else None
    return {
        "mpi": (mpi.mpi_flavour, mpi.mpi_version),
        "ucx": ("ucx", ucx),
        "ucc": ("ucc", None),
        "hcoll": ("hcoll", None),
        "slurm": ("slurm", None),
    }


def check_value(value, kind, known):
    """A problem with ``value`` by what the list says of ``name``, or None. In a '^' exclusion
    Open MPI and UCX skip names the build lacks (tests/test_known_params.py runs both), so only
    what they would select is checked."""
    if kind is None:
        return None
    what, legal = kind
    if what == "deprecated":
        return "deprecated in %s" % known.label()
    if what == "algorithms":
        # a UCC tuning string: tokens joined by '#', an algorithm as a token's '@' field
        used = {
            "%s@%s" % (token.split(":", 1)[0], field[1:])
            for token in value.split("#")
            for field in token.split(":")
            if field.startswith("@")
        }
        bad = sorted(used - legal)
        if bad:
            return (
                "%s has no algorithm %s (it lists: %s; fix: choose one of those in the table, or "
                "import the build's list with tunedmpi import-params)"
                % (known.label(), ", ".join(bad), " ".join(sorted(legal)))
            )
        return None
    if what == "list":
        if value.startswith("^"):
            return None
        bad = [v for v in (w.strip().lstrip("\\") for w in value.split(",")) if v not in legal]
        if bad:
            return f"{known.label()} has no {', '.join(bad)} (it lists: {' '.join(sorted(legal))})"
        return None
    # one-of: the number or the name; PRRTE policies may carry ':modifiers'
    head = value.split(":", 1)[0]
    if value not in legal and head not in legal and head not in legal.values():
        return "%r is not one of %s's values (%s)" % (value, known.label(), _enum(legal))
    return None


@dataclass
class Report:
    problems: List[tuple] = field(default_factory=list)  # (site, text)
    notes: List[str] = field(default_factory=list)  # schema values a library lacks
    stand_ins: Dict[int, set] = field(default_factory=dict)  # StandIn.index -> {site}
    counts: Dict[str, Dict[str, int]] = field(default_factory=OrderedDict)
    stand_in_list: List[StandIn] = field(default_factory=list)

    def ok(self):
        return not self.problems


class Checker:
    def __init__(self, folder=None):
        self.folder = Path(folder or paramlists.known_params_dir())
        self.stand_ins = load_stand_ins(self.folder)
        self.cache = {}
        self.report = Report(stand_in_list=self.stand_ins)
        self.reported = set()

    def known(self, library, version):
        key = (library, version)
        if key not in self.cache:
            self.cache[key] = resolve(library, version, self.folder, self.stand_ins)
        return self.cache[key]

    def problem(self, site, text, key=None):
        """Report once per ``key`` (a name problem once per site, MPI and name, not per knob value)."""
        if key is not None:
            if key in self.reported:
                return
            self.reported.add(key)
        self.report.problems.append((site.name, text))

    def name(self, site, mpi, where, name, value=None):
        """Check one variable's name (a problem goes into the report) and return what is wrong
        with its value as (what the name is of, problem, list source), or None."""
        lib = next((lib for prefix, lib in LIBRARY_OF if name.startswith(prefix)), None)
        source = where if where.startswith("modulefiles/") else "envmap"
        key = (site.name, mpi.tuned_module, source, name)
        if lib is None:
            if not NOT_A_LIBRARY.match(name):
                self.problem(
                    site,
                    "%s: %s: belongs to no library the check knows (%s)"
                    % (where, name, ", ".join(p + "*" for p, _ in LIBRARY_OF)),
                    key,
                )
            return None
        known = self.known(*site_versions(mpi)[lib])
        found = known.lookup(name)
        if found is None and known.base is None:
            self.problem(
                site,
                "%s: %s: no list of %s in known-params/ (run tunedmpi import-params on that "
                "build, or declare a stand-in in known-params/%s)"
                % (where, name, known.label(), STAND_INS),
                key,
            )
            return None
        if found is None:
            self.problem(
                site,
                "%s: %s: not a parameter of %s (%s)" % (where, name, known.label(), known.source()),
                key,
            )
            return None
        kind, stand_in = found
        if stand_in is not None:
            self.report.stand_ins.setdefault(stand_in.index, set()).add(site.name)
        problem = check_value(str(value), kind, known) if value is not None else None
        return problem and (known.label(), problem, known.source(stand_in))

    # (a) the shipped modules
    def modules(self, site, root):
        files = names = 0
        seen = set()
        for mpi in site.mpis():
            for module in (mpi.tuned_module, mpi.baseline_module):
                for fmt in mpi.module_formats:
                    rel = module_path(mpi, module, fmt)
                    path = Path(root) / rel
                    where = "modulefiles/%s" % rel
                    if not path.is_file():
                        self.problem(site, "%s: missing (run tunedmpi render)" % where)
                        continue
                    files += 1
                    for name, value in WRITERS[fmt].variables(read_text(path)):
                        seen.add(name)
                        names += 1
                        bad = self.name(site, mpi, where, name, value)
                        if bad:
                            self.problem(
                                site, "%s: %s=%s: %s (%s)" % (where, name, value, bad[1], bad[2])
                            )
        c = self.report.counts.setdefault(site.name, OrderedDict())
        c.update(module_files=files, module_variables=len(seen), module_settings=names)

    # (b) every name envmap can emit
    def envmap(self, site):
        seen, pairs, lacking = set(), 0, OrderedDict()
        for mpi in [nt.site for nt in site.node_types] or site.mpis():
            where = "envmap (site %s, %s %s)" % (site.name, LABEL[mpi.mpi_flavour], mpi.mpi_version)
            for why, env in emitted(mpi):
                for name, value in env.items():
                    seen.add(name)
                    pairs += 1
                    bad = self.name(site, mpi, "%s, %s" % (where, why), name, value)
                    if bad:
                        lacking.setdefault((name,) + bad[:1] + bad[2:], []).append(str(value))
        # A value the schema accepts but this build lacks is the table's choice, not a wrong name:
        # a note here; the module check (a) refuses it once a table or knob space uses it.
        for (name, label, source), values in lacking.items():
            self.report.notes.append(
                "%s: knobs.py accepts %s, which %s does not list (%s)"
                % (name, " ".join(sorted(set(values), key=_natural)), label, source)
            )
        c = self.report.counts.setdefault(site.name, OrderedDict())
        c.update(envmap_names=len(seen), envmap_settings=pairs)

    # (c) rules files' algorithm numbers
    def algorithms(self, site):
        for mpi in site.mpis():
            if mpi.mpi_flavour != "openmpi":
                continue
            try:
                colls = rulesfile.collectives(mpi.mpi_version)
            except InputError:
                continue  # no rules files for this version: render refuses bands there
            known = self.known("openmpi", mpi.mpi_version)
            for coll in colls:
                name = "OMPI_MCA_coll_tuned_%s_algorithm" % coll
                found = known.lookup(name)
                listed = found[0][1] if found and found[0] and found[0][0] == "one-of" else None
                ours = {str(k): v for k, v in rulesfile.algorithms(coll, mpi.mpi_version).items()}
                if listed is not None and listed != ours:
                    self.problem(
                        site,
                        f"tables/rulesfile.py: {coll} algorithms for Open MPI {mpi.mpi_version} are "
                        f"{_enum(ours)}, but {known.label()} lists {_enum(listed)} ({known.source()})",
                    )


def _natural(text):
    return [int(t) if t.isdigit() else t for t in re.split(r"([0-9]+)", text)]


def _enum(d):
    return paramlists.enum_text(d, lambda kv: _natural(kv[0]))


# --- what envmap can emit ---

# Values tried on every knob; the schema keeps those it accepts (knobs.normalise), so a new knob
# is enumerated without a change here. Choices and ranges come from the knob's own validator.
_POOL = (
    (True, False, 0, 1, 2, 4, 8)  # switches, counts, algorithm numbers
    + ("auto", "inf", "32kb", "intra:32kb,inter:128kb", "auto,intra:32kb")  # thresholds
    + ("self,sm", "self,sm,rc")  # transport lists
    + tuple(sorted(knobs.UCX_TRANSPORTS))
    + tuple("^" + t for t in sorted(knobs.UCX_TRANSPORTS))
)


def knob_values(knob, ucx_version):
    """Every normal value of ``knob`` the schema accepts among the pool, its validator's choices,
    and (for ranges) every number from low to high when that is short, else both ends."""
    spec = inspect.getclosurevars(knobs.KNOBS[knob]).nonlocals
    pool = set(_POOL) | set(spec.get("allowed", ()))
    if "low" in spec and "high" in spec:
        low, high = spec["low"], spec["high"]
        pool |= set(range(low, high + 1)) if high - low <= 64 else {low, high}
    out = set()
    for value in pool:
        try:
            out.add(knobs.normalise(knob, value, ucx_version))
        except knobs.KnobError:
            pass
    return sorted(out, key=str)


def _component_table(mpi, comp, chosen, low_band):
    """A table of one 2x2 geometry where collective ``chosen`` picks ``comp`` (for every size, or
    only below 64 KB) and the others Open MPI's own: what row_env turns into component variables."""

    def choice(*bands):
        return [schema.Choice(schema.Band(lo, hi), c, []) for lo, hi, c in bands]

    routed = (
        choice((0, 65536, comp), (65536, None, "none")) if low_band else choice((0, None, comp))
    )
    cases = [
        schema.Case(
            nodes=2,
            ppn=2,
            collective=coll,
            section="",
            settings={"none": {}, comp: {}},
            choice=routed if coll == chosen else choice((0, None, "none")),
        )
        for coll in UCC_ALGORITHMS
    ]
    return schema.Table(
        path="<knownparams>",
        platform="",
        title="",
        mpi_flavour=mpi.mpi_flavour,
        mpi_version=mpi.mpi_version,
        ucx_version=mpi.ucx_version,
        provenance={},
        baseline={},
        baseline_text="",
        cases=cases,
    )


def emitted(mpi):
    """[(why, {name: value})]: envmap's variables for every knob value the schema accepts (one
    knob at a time, on one node and on several), for each collective component the site has,
    and render's rules-file variables."""
    out = []
    for knob in sorted(knobs.KNOBS):
        for value in knob_values(knob, mpi.ucx_version):
            for multi in (False, True):
                env, notes = envmap.knob_env(mpi, {knob: value}, multi)
                if mpi.mpi_flavour == "hpcx":
                    env, notes = envmap.hpcx_env(env, notes)
                where = "several nodes" if multi else "one node"
                if env:
                    out.append(("knob %s=%s on %s" % (knob, value, where), env))
    for comp in (c for c in mpi.components if c != "none"):
        for coll in UCC_ALGORITHMS:
            for low in (False, True):
                env = envmap.row_env(mpi, _component_table(mpi, comp, coll, low), 2, 2, coll)[0]
                out.append(
                    ("component %s for %s%s" % (comp, coll, " below 64kb" if low else ""), env)
                )
    if mpi.mpi_flavour == "openmpi":
        out.append(("render's rules-file variables", OrderedDict((k, None) for k in RULES_VARS)))
    return out


def check(names=None, root=None, folder=None):
    """The Report for the named sites (default: every site) against known-params/ ``folder``,
    their shipped modules read from ``root`` (default: modulefiles/)."""
    root = Path(root or paths.project_root() / "modulefiles")
    ck = Checker(folder)
    for name in names or sites.site_names():
        site = name if isinstance(name, sites.Site) else sites.load_named(name)
        ck.modules(site, root)
        ck.envmap(site)
        ck.algorithms(site)
    ck.report.notes = sorted(set(ck.report.notes))
    return ck.report


def describe(report):
    """The report as lines for people: counts per site, problems, stand-ins used, notes."""
    lines = []
    for site, c in report.counts.items():
        ok = "FAIL" if any(s == site for s, _ in report.problems) else "ok  "
        lines.append(  # check counts every site's modules and envmap names
            f"{ok} {site}: {c['module_variables']} variables in {c['module_files']} module files "
            f"({c['module_settings']} settings), {c['envmap_names']} envmap names "
            f"({c['envmap_settings']} settings)"
        )
    lines += ["error: " + p for _, p in report.problems]
    for s in report.stand_in_list:
        if s.index in report.stand_ins:
            lines.append(
                f"stand-in used ({', '.join(sorted(report.stand_ins[s.index]))}): {s.describe()}"
            )
    lines += ["note: %s" % n for n in report.notes]
    return "\n".join(lines) + "\n"
