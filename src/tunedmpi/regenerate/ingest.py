"""`tunedmpi ingest`: a site's own IMB/OSU logs into the results store, beside sweep's records.

Each log is one repetition of one benchmark run of one configuration; the command line says the
site, geometry, campaign and configuration (knob=value, checked like a table's knobs; none = the
baseline). Records land under stage "ingested" (or --stage), so `tunedmpi tune` compares them
with the baseline logs ingested into the same stage, exactly like a sweep stage.
"""

import time
from collections import OrderedDict
from pathlib import Path

from tunedmpi import paths
from tunedmpi.bench import parse, store
from tunedmpi.errors import InputError
from tunedmpi.files import locked, read_text
from tunedmpi.modules import sites
from tunedmpi.regenerate import sweep
from tunedmpi.tables import knobs
from tunedmpi.tables.operations import BENCHMARKS, COLLECTIVES


def parse_config(pairs, site):
    config = OrderedDict()
    for pair in pairs or ():
        name, eq, value = pair.partition("=")
        if not eq:
            raise InputError(
                "--config", None, pair, "expected knob=value", "e.g. --config ucx_rndv_thresh=32kb"
            )
        if value.isdigit():
            value = int(value)
        try:
            config[name] = knobs.normalise(name, value, site.ucx_version)
        except knobs.KnobError as exc:
            raise InputError("--config", None, name, exc.problem, exc.fix)
    return config


def read_log(log):
    """(text, parsed output, benchmark names, run name) of one log, or an InputError naming it."""
    try:
        text = read_text(log, errors="replace")
    except OSError as exc:
        raise InputError(
            str(log),
            None,
            None,
            "cannot read the log: %s" % (exc.strerror or exc),
            "give the path of an IMB or OSU output file",
        )
    parsed = parse.parse_output(text)
    for line, bench, col, tok in parsed.bad_values[:1]:  # refused at the door: never stored
        raise InputError(
            str(log),
            line,
            "%s %s" % (bench, col),
            "%s is not a possible value (it must be finite, >= 0 and below %g)"
            % (tok, parse.MAX_VALUE),
            "correct or delete that row of the log, or leave the log out",
        )
    names = [s.benchmark for s in parsed.series if s.benchmark in BENCHMARKS]
    if not names:
        raise InputError(
            str(log),
            None,
            None,
            "no IMB collective or OSU one-sided result in this log (status %s)" % parsed.status,
            "give IMB-MPI1 Alltoall/Allgather/Allreduce or osu_*_latency/_bw output",
        )
    return text, parsed, names, "collectives" if set(names) <= set(COLLECTIVES) else names[0]


def ingest(
    site_name, nodes, ppn, logs, store_root, campaign=None, stage="ingested", config_pairs=()
):
    site = sites.load_named(site_name)
    if campaign is not None:
        paths.safe_name(campaign, "--campaign", "campaign")
    paths.safe_name(stage, "--stage", "stage")
    config = parse_config(config_pairs, site)
    # every log is read and checked before anything is written
    read = [(log,) + read_log(log) for log in logs]
    cdir = Path(store_root) / (campaign or "%s-%dx%d-ingested" % (site.name, nodes, ppn))
    paths.inside(store_root, cdir / stage, "--campaign", "campaign")
    cdir.mkdir(parents=True, exist_ok=True)
    with locked(cdir / sweep.LOCK, "campaign %s" % cdir):  # not while a sweep writes there
        if not (cdir / "campaign.json").is_file():
            store.save_campaign(
                cdir,
                dict(
                    site=site.name,
                    nodes=nodes,
                    ppn=ppn,
                    mpi="%s %s" % (site.mpi_flavour, site.mpi_version),
                    ucx=".".join(map(str, site.ucx_version)),
                    set="ingested logs",
                    repetitions=None,
                    baseline_module=sweep.baseline_module(site),
                    started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    source="ingest",
                ),
            )
        written = []
        for log, text, parsed, names, run in read:
            rep = 1
            while store.exists(store.record_path(cdir, stage, config, run, rep)):
                rep += 1
            series = {
                s.benchmark: {
                    "metric": s.metric,
                    "suite": s.suite,
                    "points": {int(k): float(v) for k, v in s.points},
                }
                for s in parsed.series
                if s.benchmark in names
            }
            path = store.record_path(cdir, stage, config, run, rep)
            record = dict(
                campaign=cdir.name,
                stage=stage,
                config=dict(config),
                config_id=store.config_id(config),
                run=run,
                benchmarks=names,
                rep=rep,
                nodes=nodes,
                ppn=ppn,
                attempts=1,
                source="ingest:%s" % Path(log).resolve(),
                status=parsed.status,
                exit_code=None,
                wall_s=None,
                problems=parsed.problems,
                series=series,
                env={},
                exports={},
                command=None,
            )
            store.save(path, record, text)
            written.append((log, path, parsed.status))
        return cdir, written
