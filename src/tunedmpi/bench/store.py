"""The results store: plain files, one JSON record (plus its raw log) per measured run.

    <store>/<campaign>/campaign.json                       what, where, which MPI, when
    <store>/<campaign>/<stage>/<config-id>/<run>-rep<k>.json   one repetition of one benchmark run
    <store>/<campaign>/<stage>/<config-id>/<run>-rep<k>.log    its raw output, command and variables

Why plain files and not SQLite: Slurm array tasks on many nodes write into the store at once over
a shared filesystem, where SQLite's locking is unreliable (NFS); one file per run, written
atomically, needs no locking at all, and "the file exists" is exactly "this run finished", which
makes sweeps resumable. The files are also what an admin reads, copies and archives.
"""

import hashlib
import json
import math
import os
from pathlib import Path

from tunedmpi.bench.parse import MAX_VALUE, zero_value
from tunedmpi.errors import InputError
from tunedmpi.files import read_text, write_atomic

# What to do about a record that cannot be read: sweep remeasures a run whose record is missing.
RECORD_FIX = (
    "delete the file (a resumed tunedmpi sweep measures that run again; an ingested one: ingest "
    "its log again)"
)


def config_id(config):
    """A stable, readable name for a configuration: 'baseline' or knob=value parts plus a hash."""
    if not config:
        return "baseline"
    text = json.dumps(config, sort_keys=True)
    slug = "_".join(
        "%s=%s" % (k.replace("coll_tuned_", "").replace("_algorithm", "_alg"), v)
        for k, v in sorted(config.items())
    )
    slug = "".join(c if c.isalnum() or c in "=_.-" else "-" for c in slug)[:80]
    return "%s.%s" % (slug, hashlib.sha256(text.encode()).hexdigest()[:8])


def record_path(campaign_dir, stage, config, run, rep):
    return Path(campaign_dir) / stage / config_id(config) / ("%s-rep%d.json" % (run, rep))


def exists(path):
    return Path(path).is_file()


def save(path, record, log_text=None):
    """Log first, record last: a record on disk always has its log (the record marks 'done')."""
    path = Path(path)
    if log_text is not None:
        write_atomic(path.with_suffix(".log"), log_text)
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def save_campaign(campaign_dir, meta):
    save(Path(campaign_dir) / "campaign.json", meta)


def read_json(path, fix=RECORD_FIX):
    """A JSON object from `path`, or an InputError naming the file (and the line where it breaks:
    a record cut short by a full disk or a killed copy) and `fix`."""
    try:
        doc = json.loads(read_text(path))
    except InputError:
        raise
    except OSError as exc:
        raise InputError(path, None, None, "cannot read: %s" % (exc.strerror or exc), fix)
    except UnicodeDecodeError:
        raise InputError(path, None, None, "not UTF-8 text: not a record of ours", fix)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise InputError(path, line, None, "not complete JSON (%s): cut short?" % exc.msg, fix)
    if not isinstance(doc, dict):
        raise InputError(path, None, None, "not a JSON object: not a record of ours", fix)
    return doc


def checked_points(points, path, key, fix=RECORD_FIX):
    """{size: value} of a stored series: sizes whole numbers >= 0, values finite, >= 0 and below
    parse.MAX_VALUE (parse refuses others at the door; a record edited or damaged since is refused
    here). A stored 0 (records from before parse floored zeros) becomes parse.zero_value("0.00"),
    as IMB and OSU print two decimals."""
    if not isinstance(points, dict):
        raise InputError(path, None, key, "points must be {size: value}", fix)
    out = {}
    for k, v in points.items():
        try:
            size = int(k)
        except (TypeError, ValueError):
            size = -1
        if size < 0 or str(size) != str(k).strip():
            raise InputError(path, None, "%s.%s" % (key, k), "size must be a whole number", fix)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(path, None, "%s.%s" % (key, k), "%r is not a number" % (v,), fix)
        if not (math.isfinite(v) and 0 <= v < MAX_VALUE):
            raise InputError(
                path,
                None,
                "%s.%s" % (key, k),
                "%r is not a possible time or bandwidth (finite, >= 0, below %g)" % (v, MAX_VALUE),
                fix,
            )
        out[size] = float(v) if v else zero_value("0.00")
    return out


def checked_series(series, path, key, fix=RECORD_FIX):
    """A record's or a validate run's {benchmark: {metric, suite, points}} with checked points."""
    if not isinstance(series, dict):
        raise InputError(path, None, key, "series must be {benchmark: {...}}", fix)
    for bench, s in series.items():
        if not isinstance(s, dict) or not isinstance(s.get("metric"), str):
            raise InputError(path, None, "%s.%s" % (key, bench), "not a result series", fix)
        s["points"] = checked_points(s.get("points"), path, "%s.%s.points" % (key, bench), fix)
    return series


def load_campaign(campaign_dir):
    """(campaign meta, [records]) of one campaign directory; an InputError naming the file when a
    record is cut short or holds impossible values."""
    campaign_dir = Path(campaign_dir)
    meta = read_json(campaign_dir / "campaign.json")
    records = []
    for root, _, files in os.walk(campaign_dir):
        for name in sorted(files):
            # plan.json: the sweep's plan of a stage (a list in older campaigns), not a record
            if not name.endswith(".json") or name.startswith("."):
                continue
            if name in ("campaign.json", "plan.json"):
                continue
            path = Path(root) / name
            rec = read_json(path)
            if "series" in rec:
                checked_series(rec["series"], path, "series")  # sizes become ints
                records.append(rec)
    return meta, records


def campaigns(store_root, site=None):
    """Campaign directories under the store, optionally only one site's."""
    root = Path(store_root)
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        meta_path = d / "campaign.json"
        if meta_path.is_file():
            if site is None or read_json(meta_path).get("site") == site:
                out.append(d)
    return out
