"""results.json, the one record of a validate campaign: its shape, typed, with read, check and write.

validate builds a `Results` (analyse's verdict plus the campaign's facts) and writes it; validate
--reanalyse reads one back (`read`), power, history and regret check what they read
(`check_schema`, `check_runs`); report.py only renders it. Older files (no schema_version, no
design, no family) are read; archived campaigns (results-archive/) stay readable.
"""

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import List, Optional

from tunedmpi import stats
from tunedmpi.bench import store
from tunedmpi.errors import InputError
from tunedmpi.files import read_text, write_atomic
from tunedmpi.policy import POLICY

# The format of results.json (its top-level "schema_version"). Readers (history, validate
# --reanalyse, power, regret) refuse any other version rather than guess at it; a file without the
# field is version 1, the format from before the field. Raise it when a reader would misread.
SCHEMA = 1


def check_schema(doc, path):
    """Refuse a results.json whose format version this tunedmpi does not read (InputError: exit 2,
    one line naming the file)."""
    version = doc.get("schema_version", 1) if isinstance(doc, dict) else 1
    if type(version) is not int or version != SCHEMA:  # not 1.0, not true
        raise InputError(
            path,
            None,
            "schema_version",
            "results format version %r; this tunedmpi reads version %d" % (version, SCHEMA),
            "read it with the tunedmpi version that wrote it",
        )


FIX = "give a results directory that validate/run.sh wrote (a damaged results.json: run validate again)"
ROLES = ("baseline", "tuned")
RUN_FIELDS = (("run", str), ("role", str), ("rep", int), ("status", str), ("series", dict))
SERIES_FIELDS = (("metric", str), ("suite", str), ("points", dict))


def looks_of(res):
    """A campaign's looks as its results.json records them ({"first", "final", "extended",
    "order"}): results from before the two looks had one look at all their repetitions."""
    if res.get("design"):
        return res["design"]
    n = res["repetitions"]
    return {"first": n, "final": n, "extended": [], "order": "as recorded"}


def design_from(looks, path="results.json"):
    """The stats.Design a campaign's looks (looks_of) were judged by: a budget design's schedule
    (whole numbers rising from first, holding final: the last look made), else its first look and
    its extension."""
    schedule = looks.get("schedule")
    if schedule is None:
        return stats.Design(looks["first"], looks["final"])
    if not (
        isinstance(schedule, list)
        and all(type(n) is int and n > 0 for n in schedule)
        and schedule == sorted(set(schedule))
        and schedule[:1] == [looks["first"]]
        and looks["final"] in schedule
    ):
        raise InputError(
            path, None, "design.schedule", "not rising whole numbers from first, holding final", FIX
        )
    return stats.Design(schedule[0], schedule[-1], tuple(schedule))


def check_runs(doc, path, mappings=()):
    """The format version, then the shape of what power and --reanalyse read from a results.json
    (its runs, their series, the modules, and the top-level `mappings` the caller reads): a damaged
    file is one InputError naming the key, never a KeyError deep inside (the values themselves are
    checked by store.checked_points)."""
    check_schema(doc, path)

    def need(ok, key, problem):
        if not ok:
            raise InputError(path, None, key, problem, FIX)

    def need_fields(obj, table, where):
        for key, kind in table:
            need(
                isinstance(obj.get(key), kind),
                where + "." + key,
                "missing or not a " + kind.__name__,
            )

    need(isinstance(doc, dict), None, "not a JSON object")
    runs, modules = doc.get("runs"), doc.get("modules")
    need(isinstance(runs, list), "runs", "runs must be a list")
    for key in mappings:
        need(isinstance(doc.get(key), dict), key, "%s must be a mapping" % key)
    need(
        isinstance(modules, dict) and all(isinstance(modules.get(r), str) for r in ROLES),
        "modules",
        "modules must name the baseline and tuned module",
    )
    for i, r in enumerate(runs):
        need(isinstance(r, dict), "runs[%d]" % i, "a run must be a mapping")
        need_fields(r, RUN_FIELDS, "runs[%d]" % i)
        need(r["role"] in ROLES, "runs[%d].role" % i, "role must be baseline or tuned")
        for bench, series in r["series"].items():
            where = "runs[%d].series.%s" % (i, bench)
            need(isinstance(series, dict), where, "not a result series")
            need_fields(series, SERIES_FIELDS, where)


@dataclass
class RunRecord:
    run: str  # "collectives" or a one-sided benchmark
    role: str  # baseline | tuned
    module: str
    rep: int
    attempt: int
    status: str  # parse.STATUSES
    exit_code: Optional[int]
    wall_s: float
    log: str
    problems: List[str]
    series: dict  # benchmark -> {"metric": ..., "suite": ..., "points": {size: value}}
    env: dict = field(default_factory=dict)  # tuning variables the module set for this run
    # {"before_ns", "after_ns"}: the host probe around the run (runner.measure)
    host: Optional[dict] = None


def family_of(bands):
    """results.json's "family": what validate's Holm family was, every band test of the campaign."""
    return {
        "scope": "campaign",
        "members": "every benchmark x band tested (wins and losses alike)",
        "tests": sum(1 for r in bands if r.band != "reliability" and r.p_value is not None),
    }


def noise_of(per_size):
    """results.json's "noise": the runs' median per-size CV (stats.median_cv) and whether it is
    above POLICY.noisy_cv, which report.md then says near its top ("host too noisy")."""
    cv = stats.median_cv(data[role] for data in per_size.values() for role in ROLES)
    return {
        "measure": "median over benchmarks, modules and sizes of the runs' CV (SD / mean)",
        "median_cv": cv,
        "threshold": POLICY.noisy_cv,
        "too_noisy": cv is not None and cv > POLICY.noisy_cv,
    }


VERDICT_FIELDS = (
    "bands",
    "per_size",
    "verdict",
    "verdict_means",
    "family",
    "exit_code",
    "host_state",
    "noise",
)


@dataclass
class Results:
    """One results.json. The verdict (analyse): bands, per_size, verdict, family, exit_code,
    host_state; the campaign (validate): everything else. `extra` keeps keys of older files this
    version does not know, so a reanalysed file loses nothing."""

    bands: List[stats.BandResult]
    per_size: dict
    verdict: str
    exit_code: int
    family: Optional[dict] = None
    host_state: Optional[dict] = None
    noise: Optional[dict] = None  # noise_of; absent in files from before it
    # what `verdict` means (PASS, FAIL, NO-GAIN, INCONCLUSIVE: validate/README.md; exit_code is its
    # code); absent in files from before issue 40, whose FAIL also stood for both of the last two
    verdict_means: Optional[str] = None
    tool: str = "tunedmpi validate"
    schema_version: int = SCHEMA
    site: Optional[str] = None
    modules: Optional[dict] = None
    # the revision of the table the tuned module serves (regenerate/revisions.py), None for a
    # module of no table; promote and retune act only on a campaign of the revision they hold
    table_revision: Optional[str] = None
    build: Optional[dict] = None  # the tuned module's MPI build (bench/build.identity)
    tolerance: Optional[float] = None
    alpha: Optional[float] = None
    # {"first", "final", "extended", "order"} (looks_of); a budget design's also "schedule",
    # "rule", "looks" (look, pairs, alpha, runs of each look made), "budget_s", "stopped"
    design: Optional[dict] = None
    runs: List[RunRecord] = field(default_factory=list)
    started: Optional[str] = None
    finished: Optional[str] = None
    elapsed_s: Optional[float] = None
    geometry: Optional[dict] = None
    placement: Optional[dict] = None
    set: Optional[str] = None
    repetitions: Optional[int] = None
    retries: Optional[int] = None
    timeout_s: Optional[float] = None
    suite: Optional[str] = None
    binaries: Optional[dict] = None
    commands: Optional[dict] = None
    sides: Optional[dict] = None
    same_mpi: Optional[bool] = None
    suite_notes: Optional[list] = None
    osu_options: Optional[dict] = None
    plots: Optional[dict] = None
    reanalysed_from: Optional[str] = None
    extra: dict = field(default_factory=dict)

    def to_json(self):
        """The JSON document: every field this version writes (None left out), then `extra`."""
        doc = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None:
                doc[f.name] = value
        doc["bands"] = [asdict(b) for b in self.bands]
        doc["runs"] = [asdict(r) for r in self.runs]
        return doc

    def write(self, path):
        write_atomic(Path(path), json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")


def _known(cls, doc):
    names = {f.name for f in fields(cls)}
    known = {k: v for k, v in doc.items() if k in names}
    return known, {k: v for k, v in doc.items() if k not in names}


def load_doc(directory, fix="give the --out directory of a finished validate/run.sh"):
    """The results.json of a validate result ``directory`` as a checked dict (check_schema); an
    InputError naming the file, with ``fix``, when it cannot be read."""
    path = Path(directory) / "results.json"
    try:
        doc = json.loads(read_text(path))
    except (OSError, ValueError) as exc:
        raise InputError(
            str(path), None, "results.json", "cannot read a validate result: %s" % exc, fix
        ) from None
    check_schema(doc, path)
    return doc


def read(path):
    """The Results of a results.json, checked (check_runs, each run's series): an InputError
    names the file and key. Bands and runs of older files are read with their known fields."""
    path = Path(path)
    doc = json.loads(read_text(path))
    check_runs(doc, path, ("per_size",))
    runs = []
    for i, r in enumerate(doc["runs"]):
        series = store.checked_series(r["series"], path, "runs[%d].series" % i, FIX)
        runs.append(RunRecord(**_known(RunRecord, dict(r, series=series))[0]))
    bands = [stats.BandResult(**_known(stats.BandResult, b)[0]) for b in doc.get("bands", [])]
    known, extra = _known(Results, dict(doc, runs=runs, bands=bands))
    known.setdefault("verdict", None)
    known.setdefault("exit_code", None)
    return Results(**dict(known, extra=extra))
