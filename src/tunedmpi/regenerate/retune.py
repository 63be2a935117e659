"""`tunedmpi retune`: from a validate campaign that lost (or could not decide) to a candidate module.

1. Read the campaign (the newest under validate-results/ of the site's tuned module, or --from):
   it must have judged this site's table revision on this MPI build, else it is refused.
2. Plan only the stages of the site's space that can change what lost: the job-wide stages that
   judge a losing benchmark, and the per-collective stages of the losing collectives. The stages
   left out keep the row's current values (the narrowed space's `job:`).
3. Sweep them (resumable: the same command resumes the campaign), tune the row from that campaign
   (the table's other rows from their own campaigns), write the candidate table and render the
   hidden candidate module beside the current one (modules/revisions.py).
4. Validate the candidate against the untuned baseline (what promote requires) and against the
   current tuned module.
"""

import contextlib
import dataclasses
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tunedmpi import paths
from tunedmpi.acceptance import results
from tunedmpi.bench import build, machine
from tunedmpi.bench.runner import CannotRun
from tunedmpi.errors import InputError
from tunedmpi.files import read_bytes, read_text, write_all_or_none
from tunedmpi.modules import render, revisions, sites
from tunedmpi.regenerate import choice, plan, sweep, tune
from tunedmpi.regenerate import space as spacemod
from tunedmpi.tables import schema


def newest_campaign(site, results_root):
    """The newest validate campaign under ``results_root`` of the site's default tuned module."""
    tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
    found = None
    for path in sorted(Path(results_root).glob("%s-*/results.json" % site.name)):
        try:
            doc = json.loads(read_text(path))
        except (OSError, ValueError):
            continue
        if (doc.get("modules") or {}).get("tuned") == tuned:
            found = path.parent
    if found is None:
        raise InputError(
            str(results_root),
            None,
            None,
            "no validate campaign of %s for site %s" % (tuned, site.name),
            "run validate/run.sh --site %s --full first, or give --from DIR" % site.name,
        )
    return found


def load_campaign(site, where):
    """results.json of ``where``, refused (InputError naming both) when it judged another site,
    another module or table revision."""
    doc = results.load_doc(where, "give validate-results/<run>")
    tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
    now = revisions.revision(revisions.table_path(site))
    checks = [
        ("site", doc.get("site"), site.name),
        ("modules.tuned", (doc.get("modules") or {}).get("tuned"), tuned),
        ("table_revision", doc.get("table_revision"), now),
    ]
    _refuse_other(where, site, checks)
    return doc


def check_build(site, doc, where, runner):
    """Refuse a campaign measured on another build of the MPI (bench/build.identity: its version
    and configure lines; not mpirun's path, which under the tuned module is its launch check)."""
    built = build.identity(runner, sweep.baseline_module(site))
    theirs = doc.get("build") or {}
    checks = [
        ("build." + k, theirs.get(k, "no build recorded"), built.get(k))
        for k in ("mpi", "configure")
    ]
    _refuse_other(where, site, checks)


def _refuse_other(where, site, checks):
    """InputError on the first (key, the campaign's value, the site's value) that differ."""
    for key, theirs, ours in checks:
        if theirs != ours:
            raise InputError(
                str(Path(where) / "results.json"),
                None,
                key,
                "the campaign has %s, the site now has %s: its verdict is not about what would be retuned"
                % (theirs, ours),
                "validate the site as it is now (validate/run.sh --site %s --full), then retune"
                % site.name,
            )


def what_lost(doc):
    """{benchmark: [bands]} that lost or stayed undecided in the campaign."""
    out = {}
    for b in doc.get("bands", []):
        if b.get("verdict") == "lose" or b.get("undecided"):
            out.setdefault(b["benchmark"], []).append(b["band"])
    return out


def retune_space(sp, site, nodes, ppn, lost, repetitions=None):
    """The space narrowed to the stages that can change the ``lost`` benchmarks, starting from the
    row's current job-wide values for the knobs of the stages left out."""
    case = next((c for c in site.table.cases if (c.nodes, c.ppn) == (nodes, ppn)), None)
    if case is None:
        raise InputError(
            site.table.path,
            None,
            "cases",
            "no row %dx%d in the table" % (nodes, ppn),
            "retune a row the table has, or sweep and tune the new one (docs/regenerate.md)",
        )
    kept = []
    for st in sp.stages:
        per = [k for k in st.knobs if choice.per_collective(k)]
        if per:
            if any(choice.collective_of(k) in lost for k in per):
                kept.append(st)
        elif set(st.only or sp.benchmarks) & set(lost):
            kept.append(st)
    if not kept:
        raise InputError(
            sp.path,
            None,
            "stages",
            "no stage of the space judges %s" % ", ".join(sorted(lost)),
            "add a stage for it to the space",
        )
    varied = {k for st in kept for k in st.knobs}
    job = dict(sorted((k, v) for k, v in case.settings.get("none", {}).items() if k not in varied))
    what = {"space": sp.digest, "stages": [s.name for s in kept], "job": job, "retune": repetitions}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return dataclasses.replace(
        sp,
        stages=kept,
        job=job,
        repetitions=repetitions or sp.repetitions,
        digest="retune-" + digest,
    )


ARCHIVE_BYTES = 256 * 1024 * 1024  # a campaign's .tar.xz; the largest archived is 2 MB


def _other_rows(site, store_root, nodes, ppn):
    """The table's campaigns of its other rows, in the store (unpacked from results-archive/
    where only the archive is here): tune decides those rows from them as before."""
    names = [n.strip() for n in str(site.table.provenance.get("campaign", "")).split(",")]
    out = []
    for name in filter(None, names):
        cdir = Path(store_root) / name
        if (cdir / "campaign.json").is_file():
            meta = json.loads(read_text(cdir / "campaign.json"))
            if (meta.get("nodes"), meta.get("ppn")) != (nodes, ppn):
                out.append(name)
            continue
        archive = paths.project_root() / "results-archive" / (name + ".tar.xz")
        if not archive.is_file():
            raise InputError(
                str(site.table.path),
                None,
                "provenance.campaign",
                "campaign %s is neither in %s nor in results-archive/" % (name, store_root),
                "put it into the store, or retune every row",
            )
        # through the file layer: the archive read whole, its campaign written atomically
        with tarfile.open(fileobj=io.BytesIO(read_bytes(archive, ARCHIVE_BYTES))) as tar:
            top = "results-store/%s/" % name  # archives hold results-store/<campaign>/...
            meta = json.load(tar.extractfile(top + "campaign.json"))
            if (meta.get("nodes"), meta.get("ppn")) == (nodes, ppn):
                continue  # the retuned row's old campaign: measured before, not used
            write_all_or_none(
                {
                    Path(store_root) / m.name[len("results-store/") :]: tar.extractfile(m).read()
                    for m in tar.getmembers()
                    if m.isfile() and m.name.startswith(top) and ".." not in m.name.split("/")
                }
            )
        out.append(name)
    return out


def validate_candidate(site, doc, against, results_root):
    """validate/run.sh of the candidate against ``against`` at the campaign's geometry and set;
    its exit code and its results directory (None if it made none)."""
    cand = "%s/%s" % (site.tuned_module, site.mpi_version + sites.CANDIDATE_SUFFIX)
    geo = doc["geometry"]
    cmd = [str(paths.project_root() / "validate" / "run.sh"), "--site", site.name]
    cmd += ["--module", cand, "--baseline", against, "--nodes", str(geo["nodes"])]
    cmd += ["--ppn", str(geo["ppn"]), "--%s" % doc.get("set", "quick")]
    # the design of the campaign that lost: its pairs, its extension or not
    cmd += ["--repetitions", str(doc.get("repetitions") or 5)]
    design = doc.get("design") or {}
    if design.get("final") == design.get("first"):
        cmd.append("--no-extend")
    cmd += ["--out", str(results_root)]
    sys.stderr.write("retune: %s\n" % " ".join(cmd))
    before = set(Path(results_root).glob("%s-*" % site.name))
    code = subprocess.run(cmd).returncode
    made = sorted(set(Path(results_root).glob("%s-*" % site.name)) - before)
    return code, (made[-1] if made else None)


def candidate(site, store_root, names, checks=()):
    """Tune the candidate table from the campaigns ``names`` (and the row checks), print its diff
    against the current table, render it; its path."""
    target, new, _, _ = tune.tune(
        site.name, store_root, sites.candidate_path(site), names, row_checks=checks
    )
    print(
        "candidate %s (revision %s); changes against the current table:"
        % (target, revisions.revision(target))
    )
    for line in tune.diff(site.table, new):
        print("  " + line)
    loaded = sites.load_named(site.name)
    for line in render.write([loaded], render.render_all([loaded])):
        if sites.CANDIDATE_SUFFIX in line or ".modulerc" in line:
            print(line)
    return target


def retune(site, args, store_root):
    """The whole loop but promote; returns the exit code (0: candidate rendered and it lost no
    band to the baseline, 1: it lost one, 2: could not run)."""
    if site.node_types or not site.table:
        raise CannotRun("retune: site %s has no single table to retune" % site.name)
    where = Path(args.from_dir) if args.from_dir else newest_campaign(site, args.results)
    doc = load_campaign(site, where)
    lost = what_lost(doc)
    if args.benchmarks:  # the admin's choice (e.g. what history says drifted), whatever the verdict
        lost = {b.strip(): ["all"] for b in args.benchmarks.split(",") if b.strip()}
    if not lost:
        print("retune: %s lost no band and left none undecided: nothing to retune" % where)
        return 0
    geo = doc["geometry"]
    nodes, ppn = geo["nodes"], geo["ppn"]
    base_sp = spacemod.load_space(
        args.space or str(sites.site_dir() / site.name / "space.yaml"), site
    )
    sp = retune_space(base_sp, site, nodes, ppn, lost, args.repetitions)
    print(
        "retune: %s: %s"
        % (where, "; ".join("%s %s" % (b, ", ".join(bands)) for b, bands in sorted(lost.items())))
    )
    laid = plan.sweep_plan(site, sp, nodes, ppn, store_root, args.results)
    whole = dataclasses.replace(base_sp, repetitions=sp.repetitions)
    full = plan.sweep_plan(site, whole, nodes, ppn, store_root, args.results)
    print("\n".join(plan.describe(laid, site, nodes, ppn)))
    print(
        "  a full sweep of the space: %d runs, %s" % (full["runs"], plan.minutes(full["seconds"]))
    )
    if args.plan:
        return 0
    check_build(site, doc, where, sweep.make_runner(site, sp, nodes, ppn))
    if args.budget and laid["seconds"] and laid["seconds"] > args.budget:
        raise CannotRun(
            "the plan needs %s, more than --budget %d min; give --repetitions fewer or a larger budget"
            % (plan.minutes(laid["seconds"]), args.budget // 60)
        )
    with contextlib.nullcontext() if args.slurm_array else machine.measuring(args.wait):
        cdir, _ = sweep.run_sweep(
            site,
            sp,
            nodes,
            ppn,
            store_root,
            array=args.slurm_array,
            sbatch_args=args.sbatch_args or "",
        )
    names = [cdir.name] + _other_rows(site, store_root, nodes, ppn)
    target = candidate(site, store_root, names)
    if args.no_validate:
        return 0
    checks = []
    while True:
        code, out = validate_candidate(site, doc, sweep.baseline_module(site), args.results)
        if code != 1 or out is None:
            break
        # The candidate lost as users load it. Where it routes a losing collective to UCC, the
        # routing's cost to the sizes UCC declines is the likely cause: tune again without it
        # (tune --row-check), and validate that candidate; at most one round per collective.
        lost_here = tune.row_losses(site, [out])[0].get((nodes, ppn), {})
        routed = {
            c.collective
            for c in schema.load_table(str(target)).cases
            if (c.nodes, c.ppn) == (nodes, ppn)
            and any(ch.component != "none" for ch in c.choice or ())
        }
        if not routed & set(lost_here):
            break  # nothing routed where it lost: the loss is the job configuration's
        print(
            "retune: %s lost %s, which the candidate routes to UCC; a candidate without"
            % (out, ", ".join(sorted(routed & set(lost_here))))
        )
        checks.append(str(out))
        target = candidate(site, store_root, names, checks)
    validate_candidate(site, doc, "%s/%s" % (site.tuned_module, site.mpi_version), args.results)
    print("next: tunedmpi promote --site %s (it refuses a candidate that lost a band)" % site.name)
    return 1 if code == 1 else 0 if code in (0, 3, 4) else 2
