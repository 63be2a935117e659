"""Knob-space files for `tunedmpi sweep` (format: docs/regenerate.md), checked like tables are.

A space is split into stages, as in the seed studies' staged search (seed 000: transports x
thresholds, then the zero-copy threshold, then component x placement x NPS): each stage tries the
combinations of its own knobs, with every other knob fixed at the best found so far.
"""

import dataclasses
import hashlib
import itertools
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import List, Optional

from tunedmpi import yamlsrc
from tunedmpi.bench import suites
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.regenerate.choice import collective_of, per_collective
from tunedmpi.tables import schema
from tunedmpi.tables.operations import BENCHMARKS

SCHEMA_VERSION = 1
TOP_KEYS = {"schema", "description", "benchmarks", "set", "repetitions", "stages", "job"}
STAGE_KEYS = {"name", "knobs", "only", "set"}
REPETITIONS = (2, 50)  # runs per configuration a space (or sweep --repetitions) may ask for
DEFAULT = "default"  # a knob value meaning "leave the variable unset": the MPI's own default
# How a sweep runs a stage's benchmarks (sweep.program_benchmarks). Part of every campaign's digest:
# a space swept before the program changed is a campaign of its own, never resumed into the old one.
PROGRAM = "every collective of the space in one IMB run"


@dataclass
class Stage:
    name: str
    knobs: "OrderedDict[str, list]"  # knob -> values (normalised; DEFAULT kept as is)
    only: Optional[List[str]]  # benchmarks this stage is about (None: all)
    # the stage's benchmark set, if not the space's (e.g. full sizes)
    set_name: Optional[str] = None


@dataclass
class Space:
    path: str
    benchmarks: List[str]
    set_name: str
    repetitions: int
    stages: List[Stage]
    digest: str  # identifies the space's content (campaign names use it)
    job: dict = None  # the job configuration the first stage builds on ({}: the MPI's)

    def combinations(self, stage):
        """Every combination of the stage's knob values, DEFAULT values left out of the dict."""
        names = list(stage.knobs)
        out = []
        for values in itertools.product(*(stage.knobs[n] for n in names)):
            out.append(OrderedDict((n, v) for n, v in zip(names, values) if v != DEFAULT))
        return out


def _stage(ck, raw, i, benches, names, site):
    """stages[i] of a knob space as a Stage, or None when it is not a mapping; problems go to ck,
    and its name to `names` (each must be unique)."""
    kp = ("stages", i)
    if not ck.mapping(raw, kp, "a stage"):
        return None
    ck.unknown_keys(raw, STAGE_KEYS, kp, "a stage")
    name = ck.text(raw, "name", kp)
    if name and (not schema.NAME.match(name) or name in names):
        ck.err(
            kp + ("name",),
            "stage name %r must be a plain, unique name" % name,
            "use lower-case letters, digits, - and _",
        )
    names.add(name)
    only = raw.get("only")
    if only is not None and (not isinstance(only, list) or any(b not in benches for b in only)):
        ck.err(
            kp + ("only",),
            "only must list benchmarks of this space",
            "e.g. only: [allreduce]",
        )
        only = None
    knobs = OrderedDict()
    rk = ck.mapping(raw.get("knobs"), kp + ("knobs",), "knobs") or {}
    if not rk:
        ck.err(
            kp + ("knobs",),
            "a stage needs at least one knob",
            "add knobs: {pml: [default, ucx]}",
        )
    for knob, values in rk.items():
        vkp = kp + ("knobs", knob)
        if not isinstance(values, list) or len(values) < 2:
            ck.err(vkp, "give a list of at least 2 values", "e.g. %s: [default, ...]" % knob)
            continue
        norm = []
        for v in values:
            nv = v if v == DEFAULT else ck.knob(knob, v, vkp, site.ucx_version)
            if nv in norm:
                ck.err(vkp, "value %r is listed twice" % (v,), "list each value once")
            norm.append(nv)
        knobs[knob] = norm
    per = [k for k in knobs if per_collective(k)]
    if per and len(per) != len(knobs):
        ck.err(
            kp + ("knobs",),
            "the stage mixes per-collective knobs (%s) with job-wide ones (%s)"
            % (", ".join(per), ", ".join(k for k in knobs if k not in per)),
            "give coll_tuned knobs a stage of their own: tune turns that stage into per-size bands",
        )
    elif len({collective_of(k) for k in per}) > 1:
        ck.err(
            kp + ("knobs",),
            "the stage's coll_tuned knobs are about several collectives",
            "give each collective its own stage (only: [<its benchmark>])",
        )
    stage_set = raw.get("set")
    if stage_set is not None and stage_set not in suites.SETS:
        ck.err(
            kp + ("set",),
            "set must be one of %s, not %r" % (", ".join(suites.SETS), stage_set),
            "leave it out (the space's set) or write set: full",
        )
        stage_set = None
    return Stage(name, knobs, only, stage_set)


def load_space(path, site):
    src = yamlsrc.load(path)
    ck = schema.Checker(src)
    doc = src.data
    space = None
    if ck.mapping(doc, (), "a knob space"):
        ck.unknown_keys(doc, TOP_KEYS, (), "the knob space")
        ck.schema_version(
            doc, SCHEMA_VERSION, "write schema: %d (docs/regenerate.md)" % SCHEMA_VERSION
        )
        benches = doc.get("benchmarks")
        if (
            not isinstance(benches, list)
            or not benches
            or any(b not in BENCHMARKS for b in benches)
        ):
            ck.err(
                ("benchmarks",),
                "benchmarks must be a list drawn from %s" % ", ".join(BENCHMARKS),
                "e.g. benchmarks: [alltoall, allgather, allreduce, put_latency]",
            )
            benches = []
        set_name = doc.get("set", "quick")
        if set_name not in suites.SETS:
            ck.err(
                ("set",),
                "set must be one of %s, not %r" % (", ".join(suites.SETS), set_name),
                "write set: quick (or full)",
            )
        reps = doc.get("repetitions", 5)
        if (
            not isinstance(reps, int)
            or isinstance(reps, bool)
            or not REPETITIONS[0] <= reps <= REPETITIONS[1]
        ):
            ck.err(
                ("repetitions",),
                "repetitions must be a whole number from %d to %d, not %r"
                % (REPETITIONS + (reps,)),
                "write repetitions: 5 (the seed method drops max and min of 5)",
            )
        # A fixed starting job configuration, e.g. to measure only per-collective stages again on
        # top of a table's job row (a separate run for regret): job-wide knobs, one value each.
        job = OrderedDict()
        for knob, value in (ck.mapping(doc.get("job", {}), ("job",), "job") or {}).items():
            if per_collective(knob):
                ck.err(
                    ("job", knob),
                    "%s is a per-collective knob" % knob,
                    "measure it in a stage of its own",
                )
                continue
            nv = ck.knob(knob, value, ("job", knob), site.ucx_version)
            if nv is not None:
                job[knob] = nv
        stages = []
        raw_stages = doc.get("stages")
        if not isinstance(raw_stages, list) or not raw_stages:
            ck.err(
                ("stages",),
                "stages must be a non-empty list",
                "add stages: - {name: ..., knobs: {...}}",
            )
            raw_stages = []
        names = set()
        for i, raw in enumerate(raw_stages):
            stage = _stage(ck, raw, i, benches, names, site)
            if stage is not None:
                stages.append(stage)
        if not ck.errors:
            what = {"space": doc, "program": PROGRAM}
            digest = hashlib.sha256(
                json.dumps(what, sort_keys=True, default=str).encode()
            ).hexdigest()[:10]
            space = Space(str(path), list(benches), set_name, reps, stages, digest, dict(job))
    if ck.errors:
        raise InputErrors(ck.errors)
    return space


def narrowed(space, repetitions=None, stages=None):
    """The space with another repetition count and/or some of its stages only (sweep --repetitions,
    --stage): a separate or confirmation run of a space's stages without a copy of its file. The
    digest changes with what changed, so such a run is a campaign of its own. A kept stage may not
    come after a dropped stage of job-wide knobs: it would be measured on a job configuration that
    stage never chose (write that configuration as the space's `job:` instead)."""
    if repetitions is None and not stages:
        return space
    names = [st.name for st in space.stages]
    unknown = [n for n in stages or [] if n not in names]
    if unknown:
        raise InputError(
            space.path,
            None,
            "stages",
            "no stage named %s in this space" % ", ".join(unknown),
            "give --stage one of: %s" % ", ".join(names),
        )
    if repetitions is not None and not REPETITIONS[0] <= repetitions <= REPETITIONS[1]:
        raise InputError(
            space.path,
            None,
            "repetitions",
            "--repetitions must be from %d to %d, not %r" % (REPETITIONS + (repetitions,)),
            "give --repetitions 20, say (the seed method drops max and min)",
        )
    keep = set(stages or names)
    kept = [st for st in space.stages if st.name in keep]
    dropped_wide = None
    for st in space.stages:
        if st.name not in keep and not all(per_collective(k) for k in st.knobs):
            dropped_wide = dropped_wide or st.name
        elif st.name in keep and dropped_wide:
            raise InputError(
                space.path,
                None,
                "stages",
                "stage %s builds on the job configuration that stage %s chooses, which --stage leaves out"
                % (st.name, dropped_wide),
                "keep %s, or give a space whose `job:` is that configuration "
                "(as site-configs/local/space-per-size.yaml)" % dropped_wide,
            )
    what = {"space": space.digest, "repetitions": repetitions, "stages": [st.name for st in kept]}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]
    return dataclasses.replace(
        space, repetitions=repetitions or space.repetitions, stages=kept, digest=digest
    )
