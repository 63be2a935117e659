"""`tunedmpi tune`: from the results store to a tuning table, with provenance, a diff and regret.

The rules that choose are tunedmpi.regenerate.choice's (one job configuration per geometry, by
the per-benchmark rule against each stage's own baseline) and persize's (bands per collective).
Where nothing passes, the case keeps the MPI's defaults (`settings: {none: {}}`): the table records
that the baseline was measured and not beaten, rather than a knob chosen from noise.

Regret: per message size the oracle is the best configuration measured at that size (relative to
its own stage's baseline); the regret of the chosen configuration is how much slower it is than
that oracle, as a geometric mean over sizes and at the worst size.
"""

import sys
from pathlib import Path

import yaml

from tunedmpi import paths, stats
from tunedmpi.acceptance import results
from tunedmpi.bench import store, suites
from tunedmpi.errors import InputError
from tunedmpi.files import write_atomic
from tunedmpi.modules import sites
from tunedmpi.policy import POLICY
from tunedmpi.regenerate import choice, persize
from tunedmpi.tables import rulesfile, schema
from tunedmpi.tables.operations import COLLECTIVES, OPERATIONS
from tunedmpi.tables.units import format_size


def stage_order(metas, geo_data):
    """[(stage name, [knob names])] in the order the sweep ran them. Knobs: as the campaign
    recorded them, else the keys whose value differs among the stage's configurations."""
    names, knobs = [], {}
    for m in metas:
        for h in m.get("stages", []):
            if h["stage"] not in names:
                names.append(h["stage"])
            if h.get("knobs"):
                knobs[h["stage"]] = list(h["knobs"])
    names += sorted({st for st, _ in geo_data} - set(names))
    for name in set(names) - set(knobs):
        configs = [e["config"] for (st, _), e in geo_data.items() if st == name]
        keys = sorted({k for c in configs for k in c})
        knobs[name] = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    return [(name, knobs[name]) for name in names]


def choose(geo_data, op, stages, tolerance=POLICY.tolerance, alpha=POLICY.alpha):
    """The operation's own best job-wide configuration at one geometry (its TUNEDMPI_PROFILE row),
    or None when it was not measured. Per-collective stages are left to per-size bands."""
    benches = [
        b for b in OPERATIONS[op].benchmarks if any(b in e["bench"] for e in geo_data.values())
    ]
    if not benches:
        return None
    job_stages = {
        name: knobs for name, knobs in stages if not any(choice.per_collective(k) for k in knobs)
    }
    best, considered, measured = None, 0, []
    for st, _ in stages:
        base = geo_data.get((st, "baseline"))
        if not base or not all(b in base["bench"] for b in benches):
            continue
        for (s2, cid), cand in sorted(geo_data.items()):
            if s2 != st or not all(b in cand["bench"] for b in benches):
                continue
            verdict, score, rels, _ = choice.judge(base, cand, benches, tolerance, alpha)
            measured.append(rels.get(benches[0], {}))  # for the per-size oracle, all stages
            if cid == "baseline" or st not in job_stages:
                continue
            considered += 1
            if (
                verdict == "PASS"
                and score is not None
                and (best is None or score < best["score"])
                and choice.beats_its_base(
                    geo_data, st, job_stages[st], cid, benches, tolerance, alpha
                )[0]
            ):
                best = dict(stage=st, config_id=cid, config=cand["config"], score=score)
    oracle = stats.per_size_best(measured)
    return dict(op=op, benchmarks=benches, chosen=best, candidates=considered, oracle=oracle)


def _algorithm_runs(geo_data, name, knobs, coll, jobcfg):
    """(reference entry, {key: entry}) of one per-collective stage: the runs on top of the job
    configuration with Open MPI's own choice, and with each candidate: key (algorithm, segsize) for
    an algorithm stage, the component ("ucc") for a component stage."""
    reference, candidates = None, {}
    for (st, cid), e in (geo_data or {}).items():
        cfg = e["config"]
        if st != name or coll not in e["bench"] or choice.without(cfg, knobs) != jobcfg:
            continue
        if not any(k in cfg for k in knobs):
            reference = e
            continue
        alg = cfg.get("coll_tuned_%s_algorithm" % coll, 0)
        seg = cfg.get("coll_tuned_%s_algorithm_segmentsize" % coll, 0)
        candidates[cfg.get("coll_%s_component" % coll) or (alg, seg)] = e
    return reference, candidates


def size_bands(
    geo_data,
    stages,
    coll,
    job,
    tolerance=POLICY.tolerance,
    alpha=POLICY.alpha,
    confirm_geo=None,
    components=False,
):
    """Bands for one collective from its per-collective stage, measured on top of the job
    configuration, or None. Also the per-size relative time of the chosen bands (for regret).
    confirm_geo: a confirmation campaign's data at this geometry, on which the bands are tested.
    components: from its component stage (none or UCC per size) instead of its algorithm stage.
    Where several such stages measured it (a later campaign with more candidates, e.g. UCC's
    algorithms), the one with the most configurations decides; the first of those in stage order."""
    size = {name: len({cid for st, cid in geo_data if st == name}) for name, _ in stages}
    for name, knobs in sorted(stages, key=lambda st: -size[st[0]]):
        per = [k for k in knobs if choice.per_collective(k) and choice.collective_of(k) == coll]
        if not per or len(per) != len(knobs) or any(map(choice.is_component, per)) != components:
            continue
        base = geo_data.get((name, "baseline"))
        if not base or coll not in base["bench"]:
            continue
        jobcfg = choice.without(job, knobs)
        reference, cfgs = _algorithm_runs(geo_data, name, knobs, coll, jobcfg)
        if reference is None or not cfgs:
            return None

        def runs(e):
            return e["bench"][coll][1]

        metric = reference["bench"][coll][0]
        ref_c, cfgs_c = _algorithm_runs(confirm_geo, name, knobs, coll, jobcfg)
        confirm = None if ref_c is None else (runs(ref_c), {k: runs(e) for k, e in cfgs_c.items()})
        got = persize.choose_bands(
            runs(reference),
            {k: runs(e) for k, e in cfgs.items()},
            metric,
            tolerance,
            alpha,
            confirm,
        )
        rel_of = {
            key: stats.relative_times(runs(base), runs(e), metric)
            for key, e in {None: reference, **cfgs}.items()
        }
        effective = {}
        for lo, hi, key in got["bands"] or [(0, None, None)]:
            for size, rel in rel_of[key].items():
                if size >= lo and (hi is None or size < hi):
                    effective[size] = rel
        got.update(
            stage=name,
            effective=effective,
            reference=rel_of[None],
            oracle=stats.per_size_best(rel_of.values()),
            confirmed=confirm is not None,
        )
        return got
    return None


def _job_rel(geo_data, stages, job, bench):
    """{size: time relative to the stage's baseline} of the job configuration itself, from the last
    stage that measured it on this benchmark (the baseline, relative time 1, where job is {})."""
    for name, _ in reversed(stages):
        base = geo_data.get((name, "baseline"))
        if not base or bench not in base["bench"]:
            continue
        metric, breps, _ = base["bench"][bench]
        for (st, _), e in geo_data.items():
            if st == name and e["config"] == job and bench in e["bench"]:
                if len(breps) >= 2 and len(e["bench"][bench][1]) >= 2:
                    return stats.relative_times(breps, e["bench"][bench][1], metric)
    return {}


def decide(
    geo_data,
    stages,
    tolerance=POLICY.tolerance,
    alpha=POLICY.alpha,
    start=None,
    confirm_geo=None,
    row_lost=None,
):
    """{op or "job": decision} at one geometry; ``start``: the job configuration the sweep began from;
    ``confirm_geo``: confirmation runs at this geometry (they test bands and choose nothing);
    ``row_lost``: {collective: [lost bands]} of validate campaigns of this row (row_checks)."""
    chosen, steps = choice.job_configuration(geo_data, stages, tolerance, alpha, start)
    job, rejected = choice.never_worse(geo_data, steps, chosen, start, tolerance, alpha)
    out = {"job": dict(op="job", config=job, steps=steps, rejected=rejected)}
    for op in OPERATIONS:
        d = choose(geo_data, op, stages, tolerance, alpha)
        if not d:
            continue
        for key, components in (("bands", False), ("components", True)):  # one-sided: None
            d[key] = size_bands(
                geo_data, stages, op, job, tolerance, alpha, confirm_geo, components
            )
        comps = d["components"]
        if comps and op in (row_lost or {}) and any(key for _, _, key in comps["bands"] or ()):
            # the routed row lost as users load it: Open MPI's own collectives at every size
            d["components"] = dict(
                comps, bands=None, effective=comps["reference"], dropped=row_lost[op]
            )
        # A banded collective's oracle is its own stage's: runs of that collective alone differ in
        # context (and in their baseline) from the stages that ran every benchmark in one program.
        # The algorithm stage's where there is one, else the component stage's.
        per_size = d["bands"] or d["components"]
        if per_size:
            chosen_rel, oracle = per_size["effective"], per_size["oracle"]
        else:
            chosen_rel, oracle = _job_rel(geo_data, stages, job, d["benchmarks"][0]), d["oracle"]
        ratios = [chosen_rel[s] / oracle[s] for s in oracle if s in chosen_rel and oracle[s] > 0]
        d["regret"] = {
            "mean_pct": round((stats.geomean(ratios) - 1) * 100, 1) if ratios else None,
            "max_pct": round((max(ratios) - 1) * 100, 1) if ratios else None,
            "sizes": len(ratios),
        }
        out[op] = d
    return out


def _knob_text(config, none="the MPI's defaults"):
    return ", ".join("%s=%s" % kv for kv in sorted(config.items())) or none


def _settings(config):
    return {
        "none": dict(sorted((k, str(v) if isinstance(v, bool) else v) for k, v in config.items()))
    }


def _less(score):
    return "%.1f%% less time than the baseline" % ((1 - score) * 100)


def _job_notes(d):
    notes = [
        "job configuration %s, by the job-wide rule (docs/regenerate.md): stage by stage, the lowest geometric "
        "mean over operations and sizes of the time relative to the stage's baseline among the configurations "
        "that pass the per-benchmark rule on every benchmark of the stage" % _knob_text(d["config"])
    ]
    for step in d["steps"]:
        ch, un, n = step["chosen"], step.get("unproven"), step["candidates"]
        if not step["benchmarks"] or (n == 0 and not ch):
            continue
        if ch:
            what = "chosen over %d candidate(s): %s, %s" % (n, ch["config_id"], _less(ch["score"]))
        elif un:
            what = (
                "best of %d candidate(s) %s (%s) did not pass the per-benchmark rule against the job "
                "configuration measured in the stage (alpha / %d), which stays"
                % (n, un["config_id"], _less(un["score"]), max(1, un["others"]))
            )
        else:
            what = "none of %d candidate(s) passed and beat the job configuration, which stays" % n
        notes.append("stage %s: %s" % (step["stage"], what))
    for cfg, lost in d.get("rejected", ()):
        where = "; ".join(
            "%s %s x%.2f (stage %s)" % (r.benchmark, r.band, r.gain or 0, st) for st, r in lost
        )
        notes.append(
            "never worse: %s not used: it lost to the MPI's defaults in %s; kept %s, which loses no "
            "band of any benchmark in any stage that measured it"
            % (_knob_text(cfg), where, _knob_text(d["config"]))
        )
    return notes


def _tests_text(tests, name, verb="kept"):
    """persize's band tests as the notes list them: "n of m band(s) kept (kept: lo-hi candidate
    xgain p=...; not kept: ...)", each band once: the second look re-tests, with the same candidate,
    a band the per-size test did not keep, and the later test decides."""
    last = {(max(t.lo, 1), t.hi, t.key): t for t in tests}

    def listed(kept):
        return "; ".join(
            "%s-%s %s x%.2f p=%.2g" % (format_size(lo), format_size(hi), name(key), t.gain, t.p)
            for (lo, hi, key), t in last.items()
            if t.kept == kept
        )

    n = sum(t.kept for t in last.values())
    kept, left = listed(1) or "none", listed(0) or "none"
    return "%d of %d band(s) %s (kept: %s; not kept: %s)" % (n, len(last), verb, kept, left)


def _stage_note(what, got, how, tail):
    """The note of a per-size stage: what it chose, by which test, on which runs."""
    confirmed = " on the confirmation campaign's runs" if got["confirmed"] else ""
    return "%s from stage %s: %s%s%s" % (what, got["stage"], how, confirmed, tail)


def _edges(lo, hi):
    """A band's edges as the table writes them (the first starts at 0, the last has no end)."""
    return {"from": format_size(lo) if lo else 0, "to": format_size(hi) if hi else None}


def _component_choice(case, notes, comps):
    """The case's `choice` (UCC per size) and its note, from persize's component stage result."""
    if comps and comps.get("dropped"):
        notes.append(
            "components from stage %s: none: UCC won sizes there, but the row routing them lost %s "
            "to the MPI's defaults as users load it (every variable of the row set); Open MPI hands "
            "every call of a collective given to UCC to UCC first, so the sizes UCC declines pay for "
            'it (docs/regenerate.md, "Checked as users load it")'
            % (comps["stage"], "; ".join(comps["dropped"]))
        )
        return
    if comps and comps["bands"]:
        # Component per message size: UCC where it beat Open MPI's own collectives with significance
        # (the same test as the algorithm bands), none elsewhere; the module routes UCC per size.
        chosen = [(lo, hi, key or "none") for lo, hi, key in comps["bands"]]
        if any(k != "none" for _, _, k in chosen):
            case["settings"] = {
                c: case["settings"]["none"]
                for c in ["none"] + sorted({k for _, _, k in chosen} - {"none"})
            }
            case["choice"] = [{**_edges(lo, hi), "component": k} for lo, hi, k in chosen]
    if comps:
        how = (
            "per-size winners of UCC against Open MPI's own collectives, then validate's bands "
            "where none was kept, tested as the algorithm bands are"
        )
        tests = _tests_text(comps["tests"], lambda key: key, "go to UCC")
        notes.append(_stage_note("components", comps, how, "; " + tests))


def _algorithm_bands(case, notes, got, algorithms):
    """The case's algorithm `bands` and their note, from persize's algorithm stage result;
    algorithms() names them (asked only where there are bands: one-sided cases have none)."""
    if got and got["bands"]:
        names = algorithms()
        rows = []
        for lo, hi, key in got["bands"]:
            alg, seg = key if key else (0, 0)
            row = {**_edges(lo, hi), "algorithm": names.get(alg, alg)}
            if seg:
                row["segsize"] = format_size(seg)
            rows.append(row)
        case["bands"] = rows
        how = (
            "per-size winners, then validate's bands where none was kept, tested against Open "
            "MPI's own choice"
        )
        tests = _tests_text(got["tests"], lambda key: names.get(key[0], key[0]))
        notes.append(_stage_note("bands", got, how, "; " + tests))
    elif got:
        how = "no forced algorithm beat Open MPI's own choice with significance"
        notes.append(_stage_note("bands", got, how, " (%d tested)" % len(got["tests"])))


def _op_case(site, nodes, ppn, d, job, cids):
    ch = d["chosen"]
    note = (
        "this operation's own best (not used: the job configuration is): %s over %d candidate(s), %s"
        % (ch["config_id"], d["candidates"], _less(ch["score"]))
        if ch
        else "no candidate of %d passed against the baseline for this operation alone"
        % d["candidates"]
    )
    regret = d["regret"]
    notes = ["job-wide knobs: the job configuration (provenance notes)", note]
    case = {
        "nodes": nodes,
        "ppn": ppn,
        "collective": d["op"],
        "section": "campaign %s, job-wide rule%s"
        % (cids, ", per-size bands" if (d.get("bands") or {}).get("bands") else ""),
        "settings": _settings(job),
    }
    if nodes >= 2:  # a multi-node case says why an inter-node knob has no value (tables/schema.py)
        unstated = {
            k: "not chosen: the job configuration leaves it at the MPI's default"
            for k in schema.INTER_NODE_KNOBS
            if k not in job
        }
        if unstated:
            case["unstated"] = unstated
    _component_choice(case, notes, d.get("components"))
    got = d.get("bands")
    _algorithm_bands(case, notes, got, lambda: rulesfile.algorithms(d["op"], site.mpi_version))
    stage = " (its algorithm stage, the runs that chose)" if got else ""
    notes.append(
        f"regret vs the per-size oracle of {d['benchmarks'][0]} over {regret['sizes']:d} sizes"
        f"{stage}: mean {regret['mean_pct']}%, worst {regret['max_pct']}%"
    )
    case["notes"] = notes
    return case


def _method(metas, tolerance, alpha):
    """The provenance's method: how each campaign measured, then the rules that chose."""
    return (
        "%s; figure = drop max and min, mean of the rest; one job configuration for every operation: "
        "stage by stage, the lowest geometric mean over operations of the time relative to the stage's "
        "baseline among the configurations that pass the per-benchmark rule on every benchmark of the "
        "stage (no band loses, one wins: gain >= %s%% and a Welch t test on per-run band scores within "
        "host states, Holm over each benchmark's bands, p < %g), kept only if it loses no band of any "
        "benchmark against the MPI's defaults in any stage that measured it (never worse; else the "
        "latest configuration before it that loses nowhere, else the defaults); per collective, coll_tuned "
        "algorithm bands: the per-size winner, kept where it beats Open MPI's own choice (Welch's t "
        "over the band, p x candidates, Holm, gain >= %s%%)%s"
        % (
            "; ".join(
                "ingested logs (tunedmpi ingest), one repetition per log"
                if m.get("source") == "ingest"
                else "%s (%s), %s interleaved repetitions per configuration"
                % (
                    "confirmation of the bands" if m.get("role") == "confirm" else "staged search",
                    " -> ".join(s["stage"] for s in m.get("stages", [])) or "stages",
                    m["repetitions"],
                )
                for m in metas
            ),
            "%g" % (tolerance * 100),  # the per-benchmark rule as tune judged with it
            alpha,
            "%g" % (tolerance * 100),
            "; where a confirmation campaign measured the collective's stage, the bands picked on the other "
            "campaigns are tested on its runs alone, without the x candidates (the pick was made on other "
            "runs)"
            if any(m.get("role") == "confirm" for m in metas)
            else "",
        )
    )


def build_table(
    site, metas, decisions, runs_count, left_out=(), tolerance=POLICY.tolerance, alpha=POLICY.alpha
):
    cids = ", ".join(sorted(m["campaign"] for m in metas))
    by_suite = {}
    for m in metas:
        by_suite.setdefault(m.get("suite", "probe"), []).append(m["campaign"])
    first = metas[0]
    prov = {
        "document": "tunedmpi sweep campaign(s) %s" % cids,
        "platform": site.description,
        "mpi": first["mpi"],
        "ucx": first["ucx"],
        "benchmark": "; ".join(
            "%s: IMB-MPI1 collectives and OSU one-sided tests%s%s"
            % (
                suite,
                " (validate/probes, IMB/OSU-compatible)" if "probe" in suite else "",
                " (campaign(s) %s)" % ", ".join(sorted(names)) if len(by_suite) > 1 else "",
            )
            for suite, names in sorted(by_suite.items())
        ),
        "command": "module purge; module load %s; <knob variables>; mpirun -np <nodes*ppn> "
        "<benchmark> (%s set; one-sided: -w %s -s %s)"
        % (first["baseline_module"], first["set"], suites.WINDOW, suites.SYNC),
        "method": _method(metas, tolerance, alpha),
        "date": (first.get("finished") or first.get("started") or "")[:10] or None,
        "campaign": cids,
        "notes": ["%d runs measured" % runs_count] + list(left_out),
    }
    cases = []
    for (nodes, ppn), ops in sorted(decisions.items()):
        # One configuration per job geometry: every operation's case carries the job-wide knobs the
        # job rule chose (so whichever row a job loads, its knobs are the same), plus its bands;
        # each operation's own best is in its notes. How the job rule decided: provenance notes.
        prov["notes"] += ["%dx%d %s" % (nodes, ppn, n) for n in _job_notes(ops["job"])]
        for op, d in ops.items():
            if op != "job":
                cases.append(_op_case(site, nodes, ppn, d, ops["job"]["config"], cids))
    return {
        "schema": schema.SCHEMA_VERSION,
        "platform": site.name,
        "title": "Measured on %s by tunedmpi sweep/tune" % site.name,
        "mpi": {"flavour": site.mpi_flavour, "version": site.mpi_version},
        "ucx_version": ".".join(map(str, site.ucx_version)),
        "provenance": prov,
        "baseline": {
            "text": "module load %s with no tuning variable: the MPI's own defaults"
            % first["baseline_module"],
            # no variable set = these defaults (UCX's auto thresholds, Open MPI's own pml/osc)
            "knobs": dict(
                pml="default", osc="default", ucx_rndv_thresh="auto", ucx_zcopy_thresh="auto"
            ),
        },
        "cases": cases,
    }


class _Dumper(yaml.SafeDumper):
    # A value shared by several cases (one algorithm list for every band of a collective) is
    # written out each time: tables refuse anchors and aliases (yamlsrc).
    def ignore_aliases(self, data):
        return True


def _dump(doc):
    return (
        "# GENERATED by `tunedmpi tune`; review the diff it printed before committing.\n"
        + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)
    )


def diff(old, new):
    """Readable changes between two tables, case by case: job-wide settings, algorithm bands and
    components (the case's `choice`)."""

    def cases(t):
        return {
            (c.nodes, c.ppn, c.collective): (c.settings.get("none", {}), _per_size_text(c))
            for c in (t.cases if t else ())
        }

    def text(case):
        return _knob_text(case[0], "MPI defaults") + case[1]

    a, b = cases(old), cases(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        label = "%dx%d %s" % key
        if key not in a:
            lines.append("+ %s: %s" % (label, text(b[key])))
        elif key not in b:
            lines.append("- %s (no longer measured)" % label)
        elif a[key] != b[key]:
            lines.append("~ %s: %s -> %s" % (label, text(a[key]), text(b[key])))
    return lines or ["(no change in chosen settings)"]


def _per_size_text(case):
    """A case's algorithm bands and components (UCC per size), each as "<from>+:<what>"."""

    def listed(label, pairs):
        return "; %s " % label + ", ".join(
            "%s+:%s" % (format_size(lo) if lo else "0", what) for lo, what in pairs
        )

    bands = [
        (b.lo, b.name + ("/%s" % format_size(b.segsize) if b.segsize else "")) for b in case.bands
    ]
    choice = [(c.band.lo, c.component) for c in case.choice or ()]
    return (listed("bands", bands) if bands else "") + (
        listed("components", choice) if choice else ""
    )


def _one_suite_per_benchmark(loaded):
    """Refuse to pool one geometry's benchmark across suites: the probes and the real IMB/OSU are
    different programs, so pooled runs mix two programs' levels into one sample, and a tilt between
    the campaigns (docs/regenerate.md, "Probes or the real suites") would be chosen as if a knob made it."""
    seen = {}
    for d, recs in loaded:
        for r in recs:
            for bench, s in r["series"].items():
                seen.setdefault((r["nodes"], r["ppn"], bench), {}).setdefault(
                    s["suite"], set()
                ).add(d.name)
    for (nodes, ppn, bench), by in sorted(seen.items()):
        if len(by) > 1:
            d = next(d for d, _ in loaded if d.name in min(by.values(), key=len))
            raise InputError(
                str(d.parent),
                None,
                "%dx%d %s" % (nodes, ppn, bench),
                "measured with different benchmark programs: %s"
                % "; ".join(
                    "%s in %s" % (suite, ", ".join(sorted(names)))
                    for suite, names in sorted(by.items())
                ),
                "tune one program's campaigns at a time: name them with --campaign, or move the "
                "others out of the store (results-archive/ keeps them)",
            )


def row_losses(site, dirs):
    """{(nodes, ppn): {collective: ["<band> x<gain> (<campaign>)"]}}: the collective bands that lost
    to the untuned baseline in validate campaigns (results directories) of this site's tuned module
    or candidate: the row measured as users load it, every variable set at once. Why tune needs them:
    a component stage measures UCC against Open MPI's own at every size, and the row routes only some
    sizes to it; what the routing costs the other sizes shows only when the whole row runs.
    Also the provenance notes naming each campaign and the table revision it judged."""
    out, notes = {}, []
    baseline = "%s/%s" % (site.baseline_module, site.mpi_version)
    for where in dirs:
        doc = results.load_doc(where, "give a validate result directory to --row-check")
        mods = doc.get("modules") or {}
        if doc.get("site") != site.name or mods.get("baseline") != baseline:
            raise InputError(
                str(Path(where) / "results.json"),
                None,
                "modules.baseline",
                "a row check must judge site %s's tuned module against %s, not %s against %s"
                % (site.name, baseline, mods.get("tuned"), mods.get("baseline")),
                "give a campaign of validate/run.sh --site %s with its default baseline"
                % site.name,
            )
        geo = doc["geometry"]
        notes.append(
            "row %dx%d checked as users load it: validate campaign %s (table revision %s)"
            % (geo["nodes"], geo["ppn"], Path(where).name, doc.get("table_revision"))
        )
        for b in doc.get("bands", []):
            if b.get("verdict") == "lose" and b["benchmark"] in COLLECTIVES:
                row = out.setdefault((geo["nodes"], geo["ppn"]), {})
                what = "%s %s x%.2f (%s)" % (b["benchmark"], b["band"], b["gain"], Path(where).name)
                row.setdefault(b["benchmark"], []).append(what)
    return out, notes


def tune(
    site_name,
    store_root,
    out=None,
    campaign_names=None,
    tolerance=POLICY.tolerance,
    alpha=POLICY.alpha,
    row_checks=(),
):
    """``row_checks``: validate result directories of modules rendered from this site's tables
    against its untuned baseline; a collective that lost a band there gets no component routing."""
    site = sites.load_named(site_name)
    row_lost, checked = row_losses(site, row_checks)
    dirs = store.campaigns(store_root, site.name)
    if campaign_names:
        unknown = sorted(set(campaign_names) - {d.name for d in dirs})
        if unknown:
            raise InputError(
                "--campaign",
                None,
                ", ".join(unknown),
                "no such campaign of site %s in %s" % (site.name, store_root),
                "use one of: %s"
                % (", ".join(d.name for d in dirs) or "(none: run tunedmpi sweep first)"),
            )
        dirs = [d for d in dirs if d.name in campaign_names]
    if not dirs:
        raise InputError(
            str(store_root),
            None,
            "campaign",
            "no campaign of site %s in the store" % site.name,
            "run tunedmpi sweep --site %s (or ingest logs) first" % site.name,
        )
    metas, loaded = [], []
    for d in dirs:
        meta, recs = store.load_campaign(d)
        meta["campaign"] = d.name
        suites_seen = {s["suite"] for r in recs for s in r["series"].values()}
        meta["suite"] = "+".join(sorted(suites_seen)) or "probe"
        metas.append(meta)
        loaded.append((d, recs))
    _one_suite_per_benchmark(loaded)
    kept, left_out = choice.one_program([r for _, recs in loaded for r in recs])
    kept_ids = {id(r) for r in kept}
    records, confirming = [], []
    for m, (_, recs) in zip(metas, loaded):
        # a confirmation campaign (sweep --confirm) chooses nothing: it only tests the bands
        (confirming if m.get("role") == "confirm" else records).extend(
            r for r in recs if id(r) in kept_ids
        )
    choosers = [m for m in metas if m.get("role") != "confirm"]
    confirm_data = choice.collect(confirming)
    decisions = {}
    geometries = {d.name: {(r["nodes"], r["ppn"]) for r in recs} for d, recs in loaded}
    for geo, geo_data in choice.collect(records).items():
        # Only this geometry's campaigns say how its stages ran: another geometry's space may
        # name a stage alike with other knobs (2 x 1's transport varies pml alone).
        here = [m for m in choosers if geo in geometries[m["campaign"]]]
        # The job configuration the stages build on: where a campaign chose it (has job-wide
        # stages), its starting point; a campaign of per-collective stages alone (space `job:`)
        # only measures more on top of the job configuration the other one chose.
        choosing = [
            m
            for m in here
            if any(
                not all(choice.per_collective(k) for k in h.get("knobs") or ["?"])
                for h in m.get("stages", [])
            )
        ]
        start = {}
        for m in choosing or here:
            start.update(m.get("job_start") or {})
        stages = stage_order(here, geo_data)
        decisions[geo] = decide(
            geo_data, stages, tolerance, alpha, start, confirm_data.get(geo), row_lost.get(geo)
        )
    doc = build_table(site, metas, decisions, len(kept), list(left_out) + checked, tolerance, alpha)
    name = "%s-%s.yaml" % (site.mpi_flavour, site.mpi_version)
    target = Path(out) if out else paths.tables_dir() / site.name / name
    text = _dump(doc)
    new = schema.load_table(str(target), text)  # the checks of any table, before it replaces one
    old = schema.load_table(str(target)) if target.is_file() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, text)
    return target, new, old, decisions


def report(target, new, old, decisions, stream=sys.stdout):
    stream.write(
        "wrote %s (%d cases)\n\nchanges against the previous table:\n" % (target, len(new.cases))
    )
    for line in diff(old, new):
        stream.write("  %s\n" % line)
    for (nodes, ppn), ops in sorted(decisions.items()):
        for note in _job_notes(ops["job"]):
            if note.startswith("never worse"):  # a job-wide knob that won some bands, lost others
                stream.write("\n%dx%d %s\n" % (nodes, ppn, note))
    stream.write(
        "\n| case | chosen | candidates | less time than baseline | per size kept | regret mean / worst (%) |\n"
        "|---|---|---|---|---|---|\n"
    )
    cases = {(c.nodes, c.ppn, c.collective): c for c in new.cases}
    for (nodes, ppn), ops in sorted(decisions.items()):
        job = ops["job"]
        stages = sum(1 for s in job["steps"] if s["candidates"])
        stream.write(
            "| %dx%d (every operation) | job: %s | %d stage(s) | - | - | - |\n"
            % (nodes, ppn, _knob_text(job["config"]), stages)
        )
        for op, d in ops.items():
            if op == "job":
                continue
            ch, case = d["chosen"], cases.get((nodes, ppn, op))
            unchosen = "own best: none passed" if d["candidates"] else "no job-wide stage"
            cells = [
                "own best: %s" % ch["config_id"] if ch else unchosen,
                d["candidates"],
                "%.1f%%" % ((1 - ch["score"]) * 100) if ch else "-",
                (_per_size_text(case) if case else "").lstrip("; ") or "-",
                "%(mean_pct)s / %(max_pct)s" % d["regret"],
            ]
            stream.write("| %dx%d %s | %s |\n" % (nodes, ppn, op, " | ".join(map(str, cells))))
