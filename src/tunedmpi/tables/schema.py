"""Tuning-table schema: load a table, check every rule, return normalised Python objects.

The schema is documented in tuning-tables/README.md. ``load_table`` raises InputErrors listing
every problem (file, line, key, fix); a table that loads is safe to render into modulefiles.
"""

import datetime
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from tunedmpi import yamlsrc
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.tables import knobs, rulesfile
from tunedmpi.tables.operations import COLLECTIVES, ONE_SIDED, OPERATIONS
from tunedmpi.tables.units import SizeError, format_size, parse_size

SCHEMA_VERSION = 1
FINDING_ABOUT = tuple(
    "ucc_vs_none hcoll_vs_none ucc_vs_hcoll untuned_vs_tuned ucx_vs_default rndv nps mapping other".split()
)
EFFECTS = ("better", "worse", "neutral")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")
# Knobs that carry inter-node behaviour: a 2+-node collective case must state them.
INTER_NODE_KNOBS = ("ucx_tls", "ucx_rndv_thresh")

TOP_KEYS = {"schema", "platform", "title", "mpi", "ucx_version", "provenance", "baseline", "cases"}
PROVENANCE_REQUIRED = ("document", "platform", "benchmark", "command", "method", "date")
PROVENANCE_OPTIONAL = ("source", "url", "mpi", "ucx", "msglog_max", "notes", "campaign")
CASE_KEYS = set(
    "nodes ppn collective section settings unstated findings choice bands notes".split()
)
ALGORITHM_BAND_KEYS = {"from", "to", "algorithm", "segsize", "faninout", "max_requests"}


@dataclass
class Band:
    lo: int  # bytes, inclusive
    hi: Optional[int]  # bytes, exclusive; None = no upper end


@dataclass
class Finding:
    text: str
    about: str
    en: str = ""
    bands: List[dict] = field(default_factory=list)  # {"band": Band, "effect": str}


@dataclass
class Choice:
    band: Band
    component: str
    basis: List[int]


@dataclass
class Case:
    nodes: int
    ppn: int
    collective: str
    section: str
    settings: Dict[str, Dict[str, object]]  # component -> knob -> normal value
    unstated: Dict[str, str] = field(default_factory=dict)
    findings: List[Finding] = field(default_factory=list)
    choice: List[Choice] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    line: int = 0
    bands: List[rulesfile.Band] = field(default_factory=list)  # coll_tuned algorithm per size

    @property
    def key(self):
        return (self.nodes, self.ppn, self.collective)


@dataclass
class Table:
    path: str
    platform: str
    title: str
    mpi_flavour: str
    mpi_version: str
    ucx_version: Optional[tuple]
    provenance: dict
    baseline: Dict[str, object]
    baseline_text: str
    cases: List[Case]

    def case(self, nodes, ppn, collective):
        return next((c for c in self.cases if c.key == (nodes, ppn, collective)), None)

    @property
    def name(self):
        return "%s-%s" % (self.mpi_flavour, self.mpi_version)

    def algorithm_bands(self):
        """{(nodes, ppn): {collective: case}} of the cases with ``bands``, geometries and
        collectives sorted: one coll_tuned rules file per geometry (render)."""
        out = {}
        for c in sorted(self.cases, key=lambda c: (c.nodes, c.ppn, c.collective)):
            if c.bands:
                out.setdefault((c.nodes, c.ppn), {})[c.collective] = c
        return out


class Checker:
    """Walks one Source, collecting every error instead of stopping at the first."""

    def __init__(self, src):
        self.src = src
        self.errors = []

    def err(self, keypath, problem, fix):
        self.errors.append(self.src.error(keypath, problem, fix))

    def unknown_keys(self, mapping, allowed, keypath, what):
        for key in mapping:
            if key not in allowed:
                self.err(
                    keypath + (key,),
                    "unknown key in %s" % what,
                    "remove it or use one of: %s" % ", ".join(sorted(allowed)),
                )

    def missing(self, container, key, keypath, fix):
        """True, the error noted, when ``key`` is not in ``container``."""
        if key not in container:
            self.err(keypath + (key,), "missing key '%s'" % key, fix)
        return key not in container

    def schema_version(self, doc, want, fix):
        """The document's `schema:` must be `want`; fix: where to write it (the doc's README)."""
        if doc.get("schema") != want:
            self.err(("schema",), "schema must be %d, not %r" % (want, doc.get("schema")), fix)

    def mapping(self, value, keypath, what):
        if not isinstance(value, dict):
            self.err(
                keypath,
                "%s must be a mapping (key: value lines)" % what,
                "indent its entries under the key",
            )
            return None
        return value

    def text(self, container, key, keypath, required=True, nullable=False):
        value = container.get(key)
        if not required and key not in container:
            return None
        if self.missing(container, key, keypath, "add %s: <text>" % key):
            return None
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value.strip():
            self.err(
                keypath + (key,),
                "'%s' must be non-empty text" % key,
                "write it as a quoted string" + (" or null when not stated" if nullable else ""),
            )
            return None
        return value

    def positive_int(self, container, key, keypath):
        value = container.get(key)
        if self.missing(container, key, keypath, "add %s: <whole number>" % key):
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.err(
                keypath + (key,),
                "'%s' must be a whole number >= 1, not %r" % (key, value),
                "write e.g. %s: 2" % key,
            )
            return None
        return value

    def size(self, value, keypath, allow_none=False):
        if value is None and allow_none:
            return None
        try:
            result = parse_size(value)
        except SizeError as exc:
            self.err(
                keypath,
                str(exc),
                "write a size such as 0, 512, 4kb or 32KB"
                + (", or null for no upper end" if allow_none else ""),
            )
            return False
        return result

    def knob(self, name, value, keypath, ucx_version):
        try:
            return knobs.normalise(name, value, ucx_version)
        except knobs.KnobError as exc:
            self.err(keypath, exc.problem, exc.fix)
            return None


def load_table(path, text=None):
    """Load and check one table. Raises InputErrors (every problem) or InputError (unreadable)."""
    src = yamlsrc.load(path, text)
    ck = Checker(src)
    table = _check_table(ck, src.data)
    if ck.errors:
        raise InputErrors(ck.errors)
    return table


def _check_table(ck, doc):
    root = ()
    if not ck.mapping(doc, root, "a tuning table"):
        return None
    ck.unknown_keys(doc, TOP_KEYS, root, "the table")
    ck.schema_version(
        doc,
        SCHEMA_VERSION,
        "write schema: %d as the first line (tuning-tables/README.md)" % SCHEMA_VERSION,
    )
    platform = ck.text(doc, "platform", root)
    if platform and not NAME.match(platform):
        ck.err(
            ("platform",),
            "platform '%s' is not a plain name" % platform,
            "use lower-case letters, digits, '.', '-' and '_'",
        )
    # Inside a tuning-tables/ tree the directory names the platform; elsewhere (tests) it is free.
    dirs = os.path.abspath(ck.src.path).split(os.sep)[:-1]
    parent = dirs[-1] if dirs else ""
    if platform and "tuning-tables" in dirs[:-1] and parent != platform:
        ck.err(
            ("platform",),
            "platform '%s' differs from the directory '%s'" % (platform, parent),
            "keep each table in tuning-tables/<platform>/ with the same platform name",
        )
    ck.text(doc, "title", root, required=False)

    mpi = None
    if not ck.missing(doc, "mpi", root, "add mpi: {flavour: openmpi, version: 5.0.6}"):
        mpi = ck.mapping(doc["mpi"], ("mpi",), "mpi")
    flavour = version = None
    if mpi:
        ck.unknown_keys(mpi, {"flavour", "version"}, ("mpi",), "mpi")
        flavour = ck.text(mpi, "flavour", ("mpi",))
        if flavour and flavour not in ("openmpi", "hpcx"):
            ck.err(
                ("mpi", "flavour"), "unsupported MPI flavour '%s'" % flavour, "use openmpi or hpcx"
            )
        version = mpi.get("version")
        if version is None:
            ck.err(("mpi", "version"), "missing key 'version'", "add version: 5.0.6")
        else:
            try:
                knobs.version_tuple(version)
            except knobs.KnobError as exc:
                ck.err(("mpi", "version"), exc.problem, exc.fix)
                version = None  # nothing further is checked against it

    ucx_version = None
    fix = 'add ucx_version: "1.18" (or null when the source does not say); it decides threshold syntax'
    if not ck.missing(doc, "ucx_version", root, fix) and doc["ucx_version"] is not None:
        try:
            ucx_version = knobs.version_tuple(doc["ucx_version"])
        except knobs.KnobError as exc:
            ck.err(("ucx_version",), exc.problem, exc.fix + ' (quote it: "1.18")')

    provenance = _check_provenance(ck, doc)
    baseline, baseline_text = _check_baseline(ck, doc, ucx_version)

    cases = _check_cases(ck, doc, ucx_version, (flavour, version))
    if ck.errors:
        return None
    return Table(
        path=ck.src.path,
        platform=platform,
        title=doc.get("title") or "",
        mpi_flavour=flavour,
        mpi_version=str(version),
        ucx_version=ucx_version,
        provenance=provenance,
        baseline=baseline,
        baseline_text=baseline_text,
        cases=cases,
    )


def _check_cases(ck, doc, ucx_version, mpi):
    if ck.missing(doc, "cases", (), "add cases: with one entry per (nodes, ppn, collective)"):
        return []
    if not isinstance(doc["cases"], list) or not doc["cases"]:
        ck.err(("cases",), "cases must be a non-empty list", "write each case as '- nodes: ...'")
        return []
    seen, indexed = {}, []
    for i, raw in enumerate(doc["cases"]):
        case = _check_case(ck, raw, ("cases", i), ucx_version, mpi)
        if case is None:
            continue
        if case.key in seen:
            ck.err(
                ("cases", i),
                "duplicate case nodes=%d ppn=%d %s (first at line %d)"
                % (case.key + (seen[case.key],)),
                "merge the two cases into one",
            )
        else:
            seen[case.key] = case.line
        indexed.append((i, case))
    _check_forced_beside_bands(ck, indexed)
    return [case for _, case in indexed]


def _check_provenance(ck, doc):
    kp = ("provenance",)
    fix = "add provenance: with %s (tuning-tables/README.md)" % ", ".join(PROVENANCE_REQUIRED)
    if ck.missing(doc, "provenance", (), fix):
        return {}
    prov = ck.mapping(doc["provenance"], kp, "provenance")
    if not prov:
        return {}
    ck.unknown_keys(prov, set(PROVENANCE_REQUIRED) | set(PROVENANCE_OPTIONAL), kp, "provenance")
    for key in PROVENANCE_REQUIRED:
        ck.text(prov, key, kp, nullable=(key == "date"))
    date = prov.get("date")
    if isinstance(date, str) and date.strip() and not _is_date(date):
        ck.err(
            kp + ("date",),
            "date %r is not a calendar date" % date,
            "write YYYY-MM-DD, YYYY-MM or YYYY (e.g. '2026-11-26'), or null when not stated",
        )
    return prov


def _is_date(text):
    """YYYY, YYYY-MM or YYYY-MM-DD (ASCII digits) naming a real day, month or year."""
    if not re.fullmatch(r"[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?", text):
        return False
    parts = [int(p) for p in text.split("-")] + [1, 1]
    try:
        datetime.date(*parts[:3])
    except ValueError:
        return False
    return True


def _check_baseline(ck, doc, ucx_version):
    kp = ("baseline",)
    fix = "add baseline: {text: <the study's untuned settings>, knobs: {...}}"
    if ck.missing(doc, "baseline", (), fix):
        return {}, ""
    base = ck.mapping(doc["baseline"], kp, "baseline")
    if not base:
        return {}, ""
    ck.unknown_keys(base, {"text", "knobs"}, kp, "baseline")
    text = ck.text(base, "text", kp)
    out = {}
    raw = base.get("knobs")
    if not isinstance(raw, dict) or not raw:
        ck.err(
            kp + ("knobs",),
            "baseline.knobs must list the untuned values",
            "write e.g. knobs: {ucx_rndv_thresh: auto, component: hcoll}",
        )
    else:
        for name, value in raw.items():
            out[name] = ck.knob(name, value, kp + ("knobs", name), ucx_version)
    return out, text or ""


def _check_case(ck, raw, kp, ucx_version, mpi=(None, None)):
    if not ck.mapping(raw, kp, "a case"):
        return None
    ck.unknown_keys(raw, CASE_KEYS, kp, "a case")
    nodes = ck.positive_int(raw, "nodes", kp)
    ppn = ck.positive_int(raw, "ppn", kp)
    coll = raw.get("collective")
    if coll not in OPERATIONS:
        ck.err(
            kp + ("collective",),
            "collective must be one of %s, not %r" % (", ".join(OPERATIONS), coll),
            "use a lower-case operation name, e.g. alltoall",
        )
        coll = None
    section = ck.text(raw, "section", kp)

    unstated = {}
    if "unstated" in raw:
        un = ck.mapping(raw["unstated"], kp + ("unstated",), "unstated")
        for name, why in (un or {}).items():
            if name not in knobs.KNOBS:
                ck.err(
                    kp + ("unstated", name),
                    "unknown knob '%s'" % name,
                    "list only knobs from tunedmpi/tables/knobs.py",
                )
            elif not isinstance(why, str) or not why.strip():
                ck.err(
                    kp + ("unstated", name),
                    "say why the source gives no value",
                    'write e.g. %s: "the study compares only NPS here"' % name,
                )
            else:
                unstated[name] = why

    settings = {}
    fix = "add settings: {none: {...}, ucc: {...}, hcoll: {...}}"
    if not ck.missing(raw, "settings", kp, fix):
        sets = ck.mapping(raw["settings"], kp + ("settings",), "settings")
        if sets is not None and not sets:
            ck.err(
                kp + ("settings",), "settings is empty", "give the knobs of at least one component"
            )
        for comp, values in (sets or {}).items():
            skp = kp + ("settings", comp)
            if comp not in knobs.components_of(coll):
                fix = "use one of: %s" % ", ".join(knobs.components_of(coll))
                ck.err(skp, "unknown component '%s'" % comp, fix)
                continue
            if coll in ONE_SIDED and comp != "none":
                ck.err(
                    skp,
                    "one-sided operations use no collective component",
                    "put their knobs under settings.none",
                )
                continue
            if ck.mapping(values, skp, "a component's settings") is None:
                continue  # {} is allowed: measured, and the MPI's defaults were best
            out = {}
            for name, value in values.items():
                if name == "component":
                    ck.err(
                        skp + (name,),
                        "the component is the settings key, not a knob",
                        "remove component: here",
                    )
                    continue
                out[name] = ck.knob(name, value, skp + (name,), ucx_version)
            if nodes and nodes >= 2 and coll in COLLECTIVES:
                _check_inter_node(ck, out, unstated, skp)
            settings[comp] = out

    # `unstated` covers the components that leave a knob out; given by all, it says nothing.
    for name in unstated:
        if settings and all(name in values for values in settings.values()):
            ck.err(
                kp + ("unstated", name),
                "'%s' is listed as unstated but every component gives it" % name,
                "remove the unstated entry, or the values the source does not give",
            )

    findings = []
    if "findings" in raw:
        if not isinstance(raw["findings"], list):
            ck.err(
                kp + ("findings",), "findings must be a list", "write each finding as '- text: ...'"
            )
        else:
            for j, f in enumerate(raw["findings"]):
                findings.append(_check_finding(ck, f, kp + ("findings", j)))
    choice = []
    if "choice" in raw:
        choice = _check_choice(ck, raw["choice"], kp + ("choice",), settings, len(findings))
    bands = []
    if "bands" in raw and None not in (nodes, ppn, coll):
        bands = _check_algorithm_bands(ck, raw["bands"], kp + ("bands",), coll, nodes, ppn, mpi)
    notes = raw.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        ck.err(kp + ("notes",), "notes must be a list of strings", "write each note as '- \"...\"'")
        notes = []
    if None in (nodes, ppn, coll, section):
        return None
    return Case(
        nodes=nodes,
        ppn=ppn,
        collective=coll,
        section=section,
        settings=settings,
        unstated=unstated,
        findings=findings,
        choice=choice,
        notes=notes,
        line=ck.src.line(kp),
        bands=bands,
    )


def _check_inter_node(ck, values, unstated, skp):
    for name in INTER_NODE_KNOBS:
        if name not in values and name not in unstated:
            ck.err(
                skp,
                "a 2+-node case needs inter-node values: '%s' is missing" % name,
                "give %s, or list it under unstated with the reason" % name,
            )
    thresh = values.get("ucx_rndv_thresh")
    if thresh and "intra:" in thresh and "inter:" not in thresh:
        ck.err(
            skp + ("ucx_rndv_thresh",),
            "a 2+-node case gives only an intra-node threshold",
            "add the inter: value the study measured, e.g. intra:32kb,inter:128kb",
        )


def _check_band(ck, raw, kp):
    lo = ck.size(raw["from"], kp + ("from",)) if "from" in raw else 0
    hi = ck.size(raw.get("to"), kp + ("to",), allow_none=True)
    if lo is False or hi is False:
        return None
    if hi is not None and hi <= lo:
        ck.err(
            kp,
            "band from %s to %s is empty" % (format_size(lo), format_size(hi)),
            "'to' is exclusive and must be larger than 'from'",
        )
        return None
    return Band(lo, hi)


def _check_finding(ck, raw, kp):
    if not ck.mapping(raw, kp, "a finding"):
        return Finding(text="", about="other")
    ck.unknown_keys(raw, {"text", "about", "en", "bands"}, kp, "a finding")
    text = ck.text(raw, "text", kp) or ""
    about = raw.get("about")
    if about not in FINDING_ABOUT:
        ck.err(
            kp + ("about",),
            "about must be one of %s, not %r" % (", ".join(FINDING_ABOUT), about),
            "say which comparison the finding makes",
        )
    bands = []
    for b, rb in enumerate(raw.get("bands") or []):
        bkp = kp + ("bands", b)
        if not ck.mapping(rb, bkp, "a band"):
            continue
        ck.unknown_keys(rb, {"from", "to", "effect"}, bkp, "a band")
        band = _check_band(ck, rb, bkp)
        if rb.get("effect") not in EFFECTS:
            ck.err(
                bkp + ("effect",),
                "effect must be better, worse or neutral, not %r" % rb.get("effect"),
                "write effect: better|worse|neutral",
            )
        elif band:
            bands.append({"band": band, "effect": rb["effect"]})
    return Finding(text=text, about=about or "other", en=raw.get("en") or "", bands=bands)


def _check_choice(ck, raw, kp, settings, nfindings):
    if not isinstance(raw, list):
        ck.err(
            kp,
            "choice must be a list of bands",
            "write each band as '- {from: 0, to: 32kb, component: ucc}'",
        )
        return []
    out = []
    for i, rc in enumerate(raw):
        ckp = kp + (i,)
        if not ck.mapping(rc, ckp, "a choice"):
            continue
        ck.unknown_keys(rc, {"from", "to", "component", "basis"}, ckp, "a choice")
        band = _check_band(ck, rc, ckp)
        comp = rc.get("component")
        if comp not in settings:
            ck.err(
                ckp + ("component",),
                "component %r has no settings in this case" % (comp,),
                "choose one of: %s" % ", ".join(settings) if settings else "add its settings first",
            )
        basis = rc.get("basis") or []
        if not isinstance(basis, list) or not all(_whole(b, 0, nfindings - 1) for b in basis):
            ck.err(
                ckp + ("basis",),
                "basis must list indexes of this case's findings (0..%d)" % (nfindings - 1),
                "name the findings the choice comes from, e.g. basis: [0, 2]",
            )
            basis = []
        if band and out and (out[-1].band.hi is None or band.lo < out[-1].band.hi):
            ck.err(
                ckp,
                "choice bands overlap or are out of order",
                "sort the bands by 'from' and let each start where the previous ends",
            )
        if band:
            out.append(Choice(band=band, component=comp, basis=basis))
    return out


# rulesfile.render's keys ("allreduce band 2 algorithm") back to the table's band keys.
_RULES_KEY = re.compile(
    r"^[a-z_]+ band ([0-9]+)(?: (lo|algorithm|segsize|faninout|max_requests))?\Z"
)


def _band_range(ck, rb, bkp, i, expect):
    """(Band or None, where the next band must start) of an algorithm band, the bands' continuity
    checked; expect: where this band must start, "end" after to: null, None when unknown."""
    fix = "give every band from: and to: (to: null on the last band)"
    missing = [key for key in ("from", "to") if ck.missing(rb, key, bkp, fix)]
    band = None if missing else _check_band(ck, rb, bkp)
    if band is None:
        return None, None
    if expect == "end":
        ck.err(
            bkp + ("from",),
            "a band after the band that reaches to: null",
            "only the last band may have to: null; give the one before an upper end",
        )
    elif i == 0 and band.lo != 0:
        ck.err(
            bkp + ("from",),
            "the first band starts at %s, not 0" % format_size(band.lo),
            "start the first band at from: 0 (algorithm: 0 keeps Open MPI's fixed decision there)",
        )
    elif expect is not None and band.lo > expect:
        ck.err(
            bkp + ("from",),
            "a gap: no band covers %s up to %s" % (format_size(expect), format_size(band.lo)),
            "start this band where the previous one ends (from: %s)" % format_size(expect),
        )
    elif expect is not None and band.lo < expect:
        ck.err(
            bkp + ("from",),
            "overlaps the previous band, which ends at %s" % format_size(expect),
            "start this band where the previous one ends (from: %s)" % format_size(expect),
        )
    return band, "end" if band.hi is None else band.hi


def _band_algorithm(ck, rb, bkp, coll, names, version, geometry):
    """(algorithm, segsize, faninout, max_requests) of an algorithm band, each checked against
    what the algorithm takes in this Open MPI version (segsize and faninout by rulesfile's own
    rule); the algorithm None when anything is wrong (problems go to ck)."""
    listing = ", ".join("%d %s" % kv for kv in sorted(names.items()))
    ranks, before, alg = geometry[0] * geometry[1], len(ck.errors), None
    if not ck.missing(rb, "algorithm", bkp, "give its number or name: %s" % listing):
        alg = rulesfile.algorithm_number(rb["algorithm"], names)
        if alg is None:
            ck.err(
                bkp + ("algorithm",),
                "%s has no algorithm %r in Open MPI %s" % (coll, rb["algorithm"], version),
                "use a number or name of: %s" % listing,
            )
        elif (coll, alg) in rulesfile.TWO_PROC and ranks != 2:
            ck.err(
                bkp + ("algorithm",),
                "%s algorithm %d (%s) runs only on 2 ranks, but this row has "
                "%d x %d = %d (MPI_ERR_UNSUPPORTED_OPERATION at run time)"
                % ((coll, alg, names[alg]) + geometry + (ranks,)),
                "choose another algorithm for this band",
            )
    seg = ck.size(rb["segsize"], bkp + ("segsize",)) if "segsize" in rb else 0
    fan, mr = rb.get("faninout", 0), rb.get("max_requests")
    if not _whole(fan, 0, rulesfile.INT_MAX):
        ck.err(
            bkp + ("faninout",),
            "faninout must be a whole number from 1 to %d, not %r" % (rulesfile.MAX_FANINOUT, fan),
            "write e.g. faninout: 2",
        )
    if mr is not None and not _whole(mr, 0, rulesfile.INT_MAX):
        ck.err(
            bkp + ("max_requests",),
            "max_requests must be a whole number >= 0, not %r" % (mr,),
            "write e.g. max_requests: 8 (0 = no limit)",
        )
    if len(ck.errors) > before:
        return None, seg, fan, mr
    vinfo = rulesfile._version(version)
    bad = rulesfile._rule_problem(coll, alg, seg, fan, mr, vinfo, (ranks, ranks))
    if mr is not None and "max_requests" not in rulesfile.takes(coll, alg, version):
        # before rulesfile's "Open MPI < 5.0.7 reads none": no Open MPI would read it here
        ck.err(
            bkp + ("max_requests",),
            "%s %d (%s) takes no max requests: it would be ignored" % (coll, alg, names[alg]),
            "remove max_requests from this band",
        )
    elif bad:
        ck.err(bkp + (bad[0],), bad[1], bad[2])
    return alg, seg, fan, mr


def _whole(value, lo, hi):
    """A whole number (not a bool) from lo to hi."""
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _check_algorithm_bands(ck, raw, kp, coll, nodes, ppn, mpi):
    """A collective's coll_tuned algorithm per message-size band, checked against the algorithm
    table of the table's Open MPI version (tunedmpi.tables.rulesfile): what render turns into the
    geometry's rules file. Returns [rulesfile.Band] (empty when anything is wrong)."""
    if coll in ONE_SIDED:
        ck.err(
            kp,
            "'%s' is a one-sided operation: coll_tuned has no algorithms for it" % coll,
            "remove bands from this case (they choose collective algorithms)",
        )
        return []
    if not isinstance(raw, list) or not raw:
        ck.err(
            kp,
            "bands must be a non-empty list",
            "write each band as '- {from: 0, to: 4kb, algorithm: recursive_doubling}'",
        )
        return []
    flavour, version = mpi
    if flavour not in ("openmpi", "hpcx") or version is None:
        return []  # the table's mpi: already has its error
    if flavour != "openmpi":
        ck.err(
            kp,
            "bands name Open MPI coll_tuned algorithms, but a %s table gives the %s version, "
            "not its Open MPI's" % (flavour, flavour),
            "put the bands in a table with mpi: {flavour: openmpi, version: <the Open MPI it bundles>}",
        )
        return []
    ranks = nodes * ppn
    if ranks < 2:
        ck.err(
            kp,
            "a row of 1 rank: coll_tuned is not used below 2 ranks",
            "remove bands from this case",
        )
        return []
    version = str(version)
    try:
        names = rulesfile.algorithms(coll, version)
    except InputError as exc:
        ck.err(kp, exc.problem, exc.fix)
        return []
    first_error = len(ck.errors)
    out, expect = [], 0  # expect: where the next band must start; "end"; None = unknown
    for i, rb in enumerate(raw):
        bkp = kp + (i,)
        if not ck.mapping(rb, bkp, "a band"):
            expect = None
            continue
        ck.unknown_keys(rb, ALGORITHM_BAND_KEYS, bkp, "an algorithm band")
        band, expect = _band_range(ck, rb, bkp, i, expect)
        alg, seg, fan, mr = _band_algorithm(ck, rb, bkp, coll, names, version, (nodes, ppn))
        if alg is not None and band:
            out.append(
                rulesfile.Band(
                    lo=band.lo,
                    hi=band.hi,
                    algorithm=alg,
                    name=names[alg],
                    segsize=seg,
                    faninout=fan,
                    max_requests=mr,
                    line=ck.src.line(bkp),
                )
            )
    if isinstance(expect, int):
        last = kp + (len(raw) - 1,)
        ck.err(
            last + ("to",),
            "the last band ends at %s: larger messages have no band" % format_size(expect),
            "end the last band with to: null",
        )
    if len(ck.errors) > first_error:
        return []
    # Whatever else Open MPI would not do as written (rulesfile's own rules), at the band it concerns.
    rules = rulesfile.Rules(ranks, {coll: out})
    try:
        rulesfile.render(rules, version)
    except InputError as exc:
        m = _RULES_KEY.match(exc.key or "")
        where = kp
        if m:
            where = kp + (int(m.group(1)) - 1,)
            if m.group(2):
                where += ("from" if m.group(2) == "lo" else m.group(2),)
        ck.err(where, exc.problem, exc.fix)
        return []
    return out


def _check_forced_beside_bands(ck, indexed):
    """Open MPI checks a forced coll_tuned_<coll>_algorithm before the rules file, so a row of a
    geometry whose <coll> has bands must not force <coll>: the bands would never be used."""
    banded = {}
    for _, c in indexed:
        if c.bands:
            banded.setdefault((c.nodes, c.ppn), set()).add(c.collective)
    for i, c in indexed:
        for coll in sorted(banded.get((c.nodes, c.ppn), ())):
            knob = OPERATIONS[coll].knob
            for comp, values in c.settings.items():
                if knob in values:
                    ck.err(
                        ("cases", i, "settings", comp, knob),
                        "forcing %s beats the rules file this geometry's %s bands become (Open MPI "
                        "checks a forced algorithm first)" % (knob, coll),
                        "give the algorithm as a band of the %s case at %dx%d ({from: 0, to: null, "
                        "algorithm: %s}) and remove this knob"
                        % (coll, c.nodes, c.ppn, values[knob]),
                    )


def find_tables(paths):
    """Expand files and directories into the list of table files (``*.yaml`` except README-like).
    Hidden folders are not walked: a site's `.spack-env/` holds Spack's own YAML (its view); nor
    are `revisions/` folders: tables that promote replaced, checked when they were current."""
    found = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "revisions")
                for name in sorted(files):
                    if name.endswith((".yaml", ".yml")):
                        found.append(os.path.join(root, name))
        else:
            found.append(p)
    return found


def load_all(paths):
    """Load every table; raise InputErrors with all problems of all files."""
    tables, errors = [], []
    for path in find_tables(paths):
        try:
            tables.append(load_table(path))
        except InputErrors as exc:
            errors.extend(exc.errors)
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise InputErrors(errors)
    return tables
