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
import os
from pathlib import Path

from tunedmpi.atomic import write_atomic


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
    write_atomic(
        Path(campaign_dir) / "campaign.json", json.dumps(meta, indent=1, sort_keys=True) + "\n"
    )


def load_campaign(campaign_dir):
    """(campaign meta, [records]) of one campaign directory."""
    campaign_dir = Path(campaign_dir)
    meta = json.loads((campaign_dir / "campaign.json").read_text())
    records = []
    for root, _, files in os.walk(campaign_dir):
        for name in sorted(files):
            if name.endswith(".json") and name != "campaign.json" and not name.startswith("."):
                rec = json.loads((Path(root) / name).read_text())
                if "series" not in rec:  # e.g. a stage's plan.json
                    continue
                for s in rec["series"].values():  # JSON keys are strings; sizes are ints
                    s["points"] = {int(k): v for k, v in s["points"].items()}
                records.append(rec)
    return meta, records


def campaigns(store_root, site=None):
    """Campaign directories under the store, optionally only one site's."""
    root = Path(store_root)
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        meta_path = d / "campaign.json"
        if meta_path.is_file():
            if site is None or json.loads(meta_path.read_text()).get("site") == site:
                out.append(d)
    return out
