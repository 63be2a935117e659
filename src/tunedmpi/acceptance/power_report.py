"""`tunedmpi power`'s report: the Study (power.py) as Markdown, one section per study: the run-to-run
noise, order and time effects, the campaign's verdict, each benchmark judged alone, and history's
drift rule."""

import math
import statistics
import sys
from collections import OrderedDict

from tunedmpi import stats
from tunedmpi.acceptance import power
from tunedmpi.policy import POLICY


def run(paths, out=None, **kw):
    """`tunedmpi power`: compute the Study, then write it as Markdown to `out` (stdout)."""
    (out or sys.stdout).write(render(power.compute(paths, **kw)))
    return 0


def _pct(x, digits=1):
    return "-" if x is None else "%+.*f%%" % (digits, (math.exp(x) - 1) * 100)


def _mc(rate, draws):
    """95 % Monte Carlo half-width of a rate over `draws` (floored: a rate of 0 is uncertain too)."""
    return 1.96 * math.sqrt(max(rate * (1 - rate), 0.25 / draws) / draws)


def describe_design(design, alpha):
    """The procedure a design is judged by, as the report names it."""
    looks = (
        " (+ one extension to %d for undecided benchmarks; Pocock level %.4f per look)"
        % (design.final, design.level(alpha, 1))
        if design.final > design.first
        else " (one look)"
    )
    if design.schedule:  # validate --budget/--max-pairs
        looks = " (budget: looks at %s while undecided; Bonferroni level %.4f per look)" % (
            "/".join(map(str, design.schedule)),
            design.level(alpha, 1),
        )
    if stats.paired(design):
        return "crossover test, %d pairs%s" % (design.first, looks)
    return "unpaired test, %d runs per module%s" % (design.first, looks)


def render(st):
    """The Study as Markdown."""
    out = [
        "# tunedmpi power: gain %.2fx, alpha %.2f, tolerance %.0f%%, %d draws, seed %d\n\n"
        % (st.gain, st.alpha, st.tolerance * 100, st.draws, st.seed),
        "Simulated as validate judges %s:\n\n"
        % ("every campaign (--repetitions)" if st.every else "each campaign (its results.json)"),
    ]
    out += ["- %s: %s\n" % (name, describe_design(d, st.alpha)) for name, d in st.designs]
    out.append("\n")
    out += _render_noise(st) + _render_order(st)
    if st.campaigns:
        out += _render_campaigns(st)
    out += _render_pools(st) + _render_drift(st)
    return "".join(out)


def _render_drift(st):
    rows = [(name, r) for name, r in st.drift if r is not None]
    if not rows:
        return []
    out = [
        "## history's drift rule, A/A\n\n",
        "Each validate campaign cut into two back-to-back campaigns of the same modules (its first "
        "and second halves of pairs; %d random halvings) and judged by `tunedmpi history`'s drift "
        "rule (a significant fall of a gain, Holm over the campaign's bands): every drift is false "
        "(should be <= alpha in the halvings).\n\n" % st.draws,
        "| campaign | bands | pairs | drifts, first vs second half | halvings with a drift |\n"
        "|---|---:|---:|---:|---:|\n",
    ]
    out += ["| %s | %d | %d | %d | %.3f |\n" % ((name,) + r) for name, r in rows]
    return out + ["\n"]


def _render_noise(st):
    out = [
        "## Run-to-run noise (SD of per-run log band scores within a configuration; ~ coefficient "
        "of variation)\n\n",
        "| campaign | benchmark | band | runs | SD | robust SD | ICC of sizes "
        "| power at %.2fx, first look / both (normal model of the unpaired test, optimistic under "
        "heavy tails) | runs/module for 80%% (one look) |\n|---|---|---|---:|---:|---:|---:|---|---:|\n"
        % st.gain,
    ]
    for name, bench, band, n, need, one, two in st.noise:
        icc = "-" if n["icc"] is None else "%.2f" % n["icc"]
        both = "-" if two is None else "%.2f" % two
        out.append(
            f"| {name} | {bench} | {band} | {n['runs']:d} | {n['sd']:.3f} | {n['mad']:.3f} | {icc} "
            f"| {one:.2f} / {both} | {need or '>200'} |\n"
        )
    out.append(
        "\nICC near 1: the sizes of a run move together (the run, not the size, is the replicate); "
        "a robust SD far below the SD: heavy tails (a few very slow runs).\n\n"
    )
    return out


def _second_text(o):
    sec = o.get("second")
    if sec is None:
        return "no pairs (store campaign)"
    if all(v is None for v in sec.values()):
        return (
            "not measurable: the tuned module always ran second (run an A/A campaign or "
            "counterbalance)"
        )
    return "; ".join(
        "%s %s ±%.1f%% (%d)" % (k, _pct(v[0]), 196 * v[1], v[2]) for k, v in sec.items() if v
    )


def _render_order(st):
    out = [
        "## Order and time effects\n\n",
        "| campaign | drift per run, round or minute | repetition 1 vs the rest "
        "| lag-1 correlation | within-pair correlation "
        "| second run of a pair (mean, 95% interval, pairs) |\n|---|---:|---:|---:|---:|---|\n",
    ]
    for src, o in st.order:
        b, se, unit = o["drift"]
        drift = "-" if b is None else "%s ± %.1f%% per %s" % (_pct(b, 2), 196 * se, unit)
        across = o.get("drift_across")
        if across and across[0] is not None:
            drift += f" (same configuration across stages: {_pct(across[0], 2)} ± {196 * across[1]:.1f}%)"
        reps = o["rep_effect"]
        warm = None
        if 1 in reps and len(reps) > 1:
            warm = reps[1] - statistics.mean(v for k, v in reps.items() if k != 1)
        lag1 = "-" if o["lag1"] is None else "%.2f" % o["lag1"]
        corr = "-" if o.get("pair_corr") is None else "%.2f" % o["pair_corr"]
        out.append(
            f"| {src.name}{' (A/A)' if src.aa else ''} | {drift} | {_pct(warm)} | {lag1} | {corr} "
            f"| {_second_text(o)} |\n"
        )
    out.append(
        "\nDrift: pooled slope of band scores over the campaign (within configurations). Lag-1: "
        "correlation of consecutive runs' residuals in run order. Repetition 1 vs the rest: a "
        "warm-up effect. A positive second-run effect: the second run of a pair is slower.\n\n"
    )
    return out


def _render_campaigns(st):
    gain, alpha, draws = st.gain, st.alpha, st.draws
    out = [
        "## The campaign's verdict (what validate controls)\n\n",
        "Whole repetitions of each validate campaign (every benchmark's pair; A/B campaigns as "
        "residuals, so both sides are the same module) drawn in random order and judged as "
        "validate judges a campaign: one Holm family over every benchmark x band, the undecided "
        "benchmarks extended at the design's looks (once; with --max-pairs look after look while "
        "undecided). A/A: a **false FAIL** is a band judged lose, a **false PASS** a "
        "band judged win and none lose (should be <= alpha together); NO-GAIN and INCONCLUSIVE "
        "are right there, INCONCLUSIVE (some band undecided) is the A/A share too noisy to show "
        "the modules equal. Power: every band %.2fx (P(PASS); NO-GAIN or INCONCLUSIVE is a miss); "
        "and **one band truly %.0f%% slower, every other band %.2fx**: P(FAIL by a loss), min over "
        "the bands.\n\n" % (gain, (1 - power.LOSS) * 100, gain),
        "| campaign | procedure | tests | pairs drawn (of) | A/A false FAIL | A/A false PASS "
        "| A/A any false | 95%% MC | A/A INCONCLUSIVE | all %.2fx: PASS "
        "| one band %.2fx, rest %.2fx: FAIL by a loss, min (band) / median "
        "| extended (A/A) |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|\n"
        % (gain, power.LOSS, gain),
    ]
    for camp, r in st.campaigns:
        worst = min(r["caught"], key=r["caught"].get)
        out.append(
            f"| {camp.name}{' (A/A)' if camp.aa else ''} | {describe_design(camp.design, alpha)} "
            f"| {r['tests']:d} | {r['n']:d} ({len(camp.reps):d}) | {r['fail']:.3f} "
            f"| {r['pass_']:.3f} | {r['any']:.3f} | ±{_mc(r['any'], draws):.3f} "
            f"| {r['inconclusive']:.2f} | {r['win_all']:.2f} | {r['caught'][worst]:.2f} "
            f"({worst[0]} {worst[1]}) / {statistics.median(r['caught'].values()):.2f} "
            f"| {r['extended']:.2f} |\n"
        )
    level = stats.Design(*POLICY.looks(1)).level(alpha, 1)
    out += [
        "\nPer benchmark and band: the A/A rate of a false win or loss in this benchmark, the "
        "power to win at %.2fx (every band %.2fx), the chance the module FAILs by a loss when this "
        "band is %.2fx and every other %.2fx, how often this band itself is judged lose then and "
        "the median level its p had to reach, and the pairs a paired test would need to catch the "
        "loss 80 %% of the time at Pocock's %.4f (the last Holm step, every other band rejected; "
        "its SE: the SD of a pair's difference over sqrt(pairs), normal model, optimistic under "
        "heavy tails).\n\n" % (gain, gain, power.LOSS, gain, level),
        "| campaign | benchmark | band | A/A false (benchmark) | win at %.2fx | FAIL by a loss when "
        "%.2fx | judged lose | level | robust SD of a pair's difference | pairs for 80 %% |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n" % (gain, power.LOSS),
    ]
    for camp, r in st.campaigns:
        for k in r["power"]:
            sd = camp.sd_pair.get(k)
            need = power.pairs_needed(sd, power.LOSS, level)
            pair = ("-", "-") if sd is None else ("%.3f" % sd, need or ">400")
            out.append(
                f"| {camp.name} | {k[0]} | {k[1]} | {r['bench_false'][k[0]]:.3f} "
                f"| {r['power'][k]:.2f} | {r['caught'][k]:.2f} | {r['lost'][k]:.2f} "
                f"| {r['level'][k]:.2g} | {pair[0]} | {pair[1]} |\n"
            )
    out.append("\n")
    return out


def _simulated(pool, r):
    """The pool's test and the runs per side it was simulated with, as the report names them."""
    test = (
        "crossover test"
        if pool.by_crossover
        else "within host states"
        if pool.states
        else "unpaired"
    )
    unit, d = " pairs" if pool.by_crossover else "", pool.design
    if r["two_looks"] and d.final > d.first:
        looks = "%d+%d%s" % (d.first, d.final - d.first, unit)
    else:
        looks = "%d%s" % (d.first if r["two_looks"] else r["per_side"], unit)
    if pool.by_crossover and r["per_side"] == len(pool.units):
        looks += " (all, in random order)"
    return test, looks


def _render_pools(st):
    out = [
        "## Per benchmark judged alone (resampling pools)\n\n",
        "Each benchmark's bands as a family of their own (the per-benchmark rule tune uses; "
        "validate's family is the campaign, above), on pools of runs that may span campaigns.\n\n",
    ]
    if not st.pools:
        out.append(
            "No pool has the runs of one configuration (or the pairs) a campaign of its design "
            "needs: nothing to resample.\n"
        )
        return out
    out.append(
        "| pool | kind | benchmark | runs | test simulated | runs/side | false win-or-lose | 95%% MC "
        "| power at %.2fx per band | extended (A/A) | identical configs differ by (p95) "
        "|\n|---|---|---|---:|---|---:|---:|---:|---|---:|---:|\n" % st.gain
    )
    summary = OrderedDict()
    for pool, r in st.pools:
        test, looks = _simulated(pool, r)
        runs = "%d pairs" % len(pool.units) if pool.paired else len(pool.units)
        bands = " ".join("%s %.2f" % (b, p) for b, p in r["power"].items())
        ext = "%.2f" % r["extended"] if r["two_looks"] else "-"
        p95 = "-" if r["p95"] is None else "%.0f%%" % (r["p95"] * 100)
        out.append(
            f"| {pool.label} | {pool.family} | {pool.bench} | {runs} | {test} | {looks} "
            f"| {r['false']:.3f} | ±{_mc(r['false'], st.draws):.3f} | {bands} | {ext} | {p95} |\n"
        )
        key = ("real suites" if pool.suite in ("imb", "osu") else "probes", pool.bench)
        summary.setdefault(key, []).append((r["false"], min(r["power"].values()), pool.label))
    out.append(
        "\n### Per benchmark (all pools)\n\n| benchmarks | benchmark | pools | worst false rate "
        "| power at %.2fx (weakest band): median / min |\n|---|---|---:|---:|---|\n" % st.gain
    )
    for (fam, bench), rows in sorted(summary.items()):
        worst = max(rows, key=lambda x: x[0])
        pw = sorted(x[1] for x in rows)
        out.append(
            f"| {fam} | {bench} | {len(rows)} | {worst[0]:.3f} ({worst[2]}) "
            f"| {statistics.median(pw):.2f} / {pw[0]:.2f} |\n"
        )
    return out
