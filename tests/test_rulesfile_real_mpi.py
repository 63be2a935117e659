"""Proof with the real Open MPI 5.0.8 wheel that the rules files tunedmpi writes are obeyed.

Open MPI drops a bad coll_tuned rules file without a word, so "the job ran" proves nothing.
Here every algorithm leaves a traffic fingerprint: Open MPI's pml monitoring component
(--mca pml_monitoring_enable 2 separates the collectives' internal messages, the "I" lines),
cut into one phase per collective call by tests/mpi/coll_traffic.c, gives per rank and peer the
messages, bytes and a log2 size histogram. For every collective coll_tuned reads rules for and
every algorithm testable on 4 ranks:

  forced run   OMPI_MCA_coll_tuned_<coll>_algorithm=<n> (+ use_dynamic_rules=1, Open MPI's
               condition for reading it, and the same segsize/fan-out the file names)
  file run     OMPI_MCA_coll_tuned_use_dynamic_rules=1 + dynamic_rules_filename=<our file>, with
               two bands per collective: one algorithm below BOUNDARY, another from BOUNDARY up

and the file run's fingerprint at each size must equal the forced run of the algorithm the file
names for that size (computed by ompi_lookup.select, our model of Open MPI's look-up). Phases at
BOUNDARY - 4 and exactly BOUNDARY pin down how Open MPI measures the message size (IMB #bytes
times the ranks for alltoall, allgather, gather, scatter, reduce_scatter(_block)) and that a band
starts at its lo inclusively. Phases on a 3-rank sub-communicator show that the file for 4 ranks
leaves other communicator sizes on Open MPI's fixed decision. A broken file (first message size
not 0) runs silently with the fixed decisions, and check() refuses it.

What traffic cannot tell apart (4 ranks, the sizes used here; `pytest -v` prints the classes):
  alltoall   2 pairwise = 4 linear_sync (one message per peer either way)
  scatter    1 basic_linear = 3 linear_nb (the same messages, blocking or not)
  bcast      5 binary_tree = 6 binomial (the same tree on 4 ranks); up to 4 KB also
             3 pipeline = 4 split_binary_tree and 1 basic_linear = 7 knomial (radix 4)
  allreduce  4 ring = 5 segmented_ring while a rank's block fits one segment (up to 4 KB here)
  two_proc   (alltoall 5, allgather 6, allgatherv 5, barrier 5) run only on 2 ranks, where every
             algorithm is one exchange; check() refuses them for any other communicator size.
The equality file == forced is required for all of them; uniqueness where it exists, and in
every band of every collective at least once. Algorithms that call other collectives (COMPOSITE
below) are run with those collectives pinned to the same number, as in their forced reference.
About 25 s: one build, 17 runs of 4 ranks under nice -n 19.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from ompi_lookup import select
from tunedmpi.errors import InputError
from tunedmpi.tables import rulesfile
from tunedmpi.tables.rulesfile import Band, Rules

BIN = ROOT / ".venv" / "bin"
VERSION = "5.0.8"
NP = 4  # ranks of the job the rules are for
SUB = 3  # a smaller communicator: must keep Open MPI's fixed decision
BOUNDARY = 4096  # IMB #bytes where the second band starts
SIZES = (64, BOUNDARY - 4, BOUNDARY, 65536)  # IMB #bytes (multiples of 4: float reductions)
SEG, FAN = 4096, 2  # segment size and chain fan-out for the algorithms that take them

pytestmark = pytest.mark.skipif(
    not (BIN / "mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
)


def base_env():
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "UCX_", "TUNEDMPI_"))
    }
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_pml_monitoring_enable="2",
    )
    return env


def collectives():
    return rulesfile.collectives(VERSION)


def runnable(coll):
    """Algorithm numbers that can run on NP ranks (two_proc needs exactly 2)."""
    return [
        a
        for a in sorted(rulesfile.algorithms(coll, VERSION))
        if a and (coll, a) not in rulesfile.TWO_PROC
    ]


def band(coll, lo, alg):
    used = rulesfile.takes(coll, alg, VERSION)
    return Band(
        lo, alg, segsize=SEG if "segsize" in used else 0, faninout=FAN if "faninout" in used else 0
    )


PHASES = [(c, s, NP) for c in collectives() for s in SIZES] + [
    (c, 65536, SUB) for c in collectives()
]

# Algorithms that call other collectives through the communicator, so that the rules for those
# apply inside them too: {(collective, algorithm): the collectives it calls}. From
# ompi/mca/coll/base (v5.0.8): coll_base_allgather.c:846-858 (basic_linear: gather + bcast),
# coll_base_allgatherv.c:764-794 (default: gatherv + bcast), coll_base_allreduce.c:71-85
# (nonoverlapping: reduce + bcast), coll_base_reduce_scatter.c:70-104 (nonoverlapping: reduce +
# scatterv), coll_base_reduce_scatter_block.c:116-170 (basic_linear: reduce + scatter).
# (allreduce 1 basic_linear calls the base functions directly: coll_base_allreduce.c:898-912.)
COMPOSITE = {
    ("allgather", 1): ("gather", "bcast"),
    ("allgatherv", 1): ("bcast",),
    ("allreduce", 2): ("reduce", "bcast"),
    ("reduce_scatter", 1): ("reduce",),
    ("reduce_scatter_block", 1): ("reduce", "scatter"),
}
INNER = ("bcast", "gather", "reduce", "scatter")
GENERIC = 4  # file runs that name no composite algorithm
# Then one file run per composite number: those algorithms in their first band, and every
# collective they call pinned to the same number, as in the forced run that is its reference.
COMPOSITE_RUNS = sorted({a for (_, a) in COMPOSITE})
NFILES = GENERIC + len(COMPOSITE_RUNS)


def cycle(coll):
    """The order a collective's algorithms take in the file runs: composite ones left out, and
    the numbers the composite runs pin last (those runs cover them too)."""
    algs = [a for a in runnable(coll) if (coll, a) not in COMPOSITE]
    return sorted(algs, key=lambda a: (a in COMPOSITE_RUNS if coll in INNER else False, a))


def file_rules(k):
    """File run k: per collective two bands, below and from BOUNDARY, with algorithms i and i + s
    of its cycle (s chosen so that the generic runs reach every algorithm and most reach both
    bands); collectives whose message size is fixed get one band."""
    pinned = COMPOSITE_RUNS[k - GENERIC] if k >= GENERIC else None
    out = {}
    for c in collectives():
        t = cycle(c)
        n = len(t)
        lo, hi = t[k % n], t[(k + (GENERIC if n > GENERIC else (n + 1) // 2)) % n]
        if pinned and c in INNER:
            out[c] = [band(c, 0, pinned)]
        elif rulesfile.MESSAGE_SIZE[c][0] is None:
            out[c] = [band(c, 0, lo)]
        elif pinned and (c, pinned) in COMPOSITE:
            out[c] = [band(c, 0, pinned), band(c, BOUNDARY, lo)]
        else:
            out[c] = [band(c, 0, lo), band(c, BOUNDARY, hi)]
    return Rules(NP, out, comment="tests/test_rulesfile_real_mpi.py file run %d" % k)


def named(k, coll, size):
    """The algorithm file run k names for an IMB size (bands taken at face value)."""
    return [b.algorithm for b in file_rules(k).collectives[coll] if b.lo <= size][-1]


def forced_env(alg):
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    for c in collectives():
        if alg in runnable(c):
            env["OMPI_MCA_coll_tuned_%s_algorithm" % c] = str(alg)
            used = rulesfile.takes(c, alg, VERSION)
            if "segsize" in used:
                env["OMPI_MCA_coll_tuned_%s_algorithm_segmentsize" % c] = str(SEG)
            if "faninout" in used:  # the file's faninout is the chain fan-out for bcast and reduce
                env["OMPI_MCA_coll_tuned_%s_algorithm_chain_fanout" % c] = str(FAN)
    return env


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("mpi") / "coll_traffic"
    subprocess.run(
        [str(BIN / "mpicc"), "-O1", "-o", str(exe), str(ROOT / "tests/mpi/coll_traffic.c")],
        check=True,
    )
    return exe


def fingerprints(program, tmp_path, env_extra, tag):
    """One mpirun; per phase the sorted (kind, rank, peer, bytes, msgs, histogram) of every rank."""
    out = tmp_path / tag
    out.mkdir()
    env = base_env()
    env.update(env_extra)
    proc = subprocess.run(
        [
            "nice",
            "-n",
            "19",
            str(BIN / "mpirun"),
            "--oversubscribe",
            "-np",
            str(NP),
            str(program),
            str(out / "p"),
        ]
        + ["%s:%d:%d" % ph for ph in PHASES],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (tag, env_extra, proc.stdout[-2000:], proc.stderr[-3000:])
    fps = []
    for i in range(len(PHASES)):
        lines = []
        for f in sorted(out.glob("p.%d.*.prof" % i)):
            for line in f.read_text().splitlines():
                if line[:2] in ("I\t", "E\t"):
                    lines.append(tuple(line.split("\t")))
        fps.append(tuple(sorted(lines)))
    assert len(list(out.glob("p.*.prof"))) == len(PHASES) * NP, tag
    return fps, proc


@pytest.fixture(scope="module")
def runs(program, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traffic")
    res = {"default": fingerprints(program, tmp, {}, "default")[0]}
    for alg in range(1, max(max(runnable(c)) for c in collectives()) + 1):
        res[alg] = fingerprints(program, tmp, forced_env(alg), "forced%d" % alg)[0]
    files = []
    for k in range(NFILES):
        path = tmp / ("rules%d.txt" % k)
        text = rulesfile.render(file_rules(k), VERSION)
        path.write_text(text)
        files.append((rulesfile.check(text, VERSION), text))
        res["file%d" % k] = fingerprints(program, tmp, rulesfile.environment(path), "file%d" % k)[0]
    # The first file with its last collective's first message size made 1: Open MPI drops it all.
    lines = files[0][1].splitlines(keepends=True)
    last_coll = max(i for i, line in enumerate(lines) if "# collective id" in line)
    first_rule = next(
        i for i in range(last_coll, len(lines)) if re.match(r"^0 \d+ \d+ \d+ ", lines[i])
    )
    broken = lines[:first_rule] + ["1" + lines[first_rule][1:]] + lines[first_rule + 1 :]
    bpath = tmp / "broken.txt"
    bpath.write_text("".join(broken))
    res["broken"], bproc = fingerprints(program, tmp, rulesfile.environment(bpath), "broken")
    return {"fp": res, "files": files, "broken": (bpath, first_rule + 1, bproc)}


def classes(fp, phase, coll):
    """Algorithms of coll grouped by equal fingerprints at this phase (0 = the fixed decision)."""
    groups = {}
    for alg in [0] + runnable(coll):
        groups.setdefault(fp["default" if alg == 0 else alg][phase], []).append(alg)
    return sorted(groups.values())


_PARAM = re.compile(r'parameter "coll_tuned_([a-z_]+)_algorithm" ')
_VALID = re.compile(r"Valid values:\s*(.*)\Z")


def ompi_info_algorithms(text):
    """{collective: {number: name}} from `ompi_info --param coll tuned --level 9` output."""
    out, current = {}, None
    for line in text.splitlines():
        m = _PARAM.search(line)
        if m:
            current = m.group(1)
            continue
        m = _VALID.search(line)
        if m and current:
            pairs = [p.strip().split("|", 1) for p in m.group(1).split(",")]
            out[current] = {int(num): name for num, name in pairs}
            current = None
    return out


def test_ompi_info_valid_values_are_parsed():
    out = (
        'MCA coll tuned: parameter "coll_tuned_alltoallv_algorithm" (current value: "ignore", ...)\n'
        "               Which alltoallv algorithm is used.\n"
        "               Valid values: 0|ignore, 1|basic_linear, 2|pairwise\n"
        'MCA coll tuned: parameter "coll_tuned_alltoallv_algorithm_segmentsize" (current value: "0")\n'
    )
    assert ompi_info_algorithms(out) == {
        "alltoallv": {0: "ignore", 1: "basic_linear", 2: "pairwise"}
    }


def test_ompi_info_lists_the_algorithm_numbers_we_have():
    out = subprocess.run(
        [str(BIN / "ompi_info"), "--param", "coll", "tuned", "--level", "9"],
        env=base_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = ompi_info_algorithms(out)
    ours = {c: rulesfile.algorithms(c, VERSION) for c in collectives()}
    assert listed == ours
    version = subprocess.run(
        [str(BIN / "ompi_info"), "--version"], env=base_env(), capture_output=True, text=True
    ).stdout
    assert "v%s" % VERSION in version
    assert (
        "pml: monitoring"
        in subprocess.run(
            [str(BIN / "ompi_info")], env=base_env(), capture_output=True, text=True
        ).stdout
    )


def test_every_band_of_every_file_runs_the_algorithm_it_names(runs):
    fp = runs["fp"]
    unique = {}  # collective -> {band index: set of algorithms proven uniquely}
    seen = set()
    for k, (parsed, _) in enumerate(runs["files"]):
        for i, (coll, size, n) in enumerate(PHASES):
            if n != NP:
                continue
            rule = select(parsed, coll, n, size)
            assert rule is not None, (k, coll, size)
            alg = rule.algorithm
            assert alg == named(k, coll, size), (k, coll, size)  # our model of the look-up
            want_band = 1 if (size >= BOUNDARY and len(file_rules(k).collectives[coll]) > 1) else 0
            got = fp["file%d" % k][i]
            assert got, ("no traffic recorded", k, coll, size)
            assert got == fp[alg][i], (
                "file run %d: %s at %d B ran other than its algorithm %d; classes %s"
                % (k, coll, size, alg, classes(fp, i, coll))
            )
            seen.add((coll, alg))
            group = next(g for g in classes(fp, i, coll) if alg in g)
            assert len(classes(fp, i, coll)) > 1, "%s at %d B: every algorithm looks alike" % (
                coll,
                size,
            )
            if group == [alg]:
                unique.setdefault(coll, {}).setdefault(want_band, set()).add(alg)
    assert seen == {(c, a) for c in collectives() for a in runnable(c)}, sorted(
        {(c, a) for c in collectives() for a in runnable(c)} - seen
    )
    for coll in collectives():
        bands = max(len(file_rules(k).collectives[coll]) for k in range(NFILES))
        # In every band of every collective some file run named an algorithm that no other
        # algorithm (nor the fixed decision) could have imitated: a test that can fail.
        assert set(unique.get(coll, {})) == set(range(bands)), (coll, unique.get(coll))


def test_the_band_boundary_is_where_we_put_it(runs):
    """BOUNDARY - 4 runs the first band and exactly BOUNDARY the second, in the same run, for
    every collective with size bands; in at least one run per collective they differ visibly."""
    fp = runs["fp"]
    for coll in collectives():
        if rulesfile.MESSAGE_SIZE[coll][0] is None:
            continue
        below = PHASES.index((coll, BOUNDARY - 4, NP))
        at = PHASES.index((coll, BOUNDARY, NP))
        visible = False
        for k in range(NFILES):
            lo, hi = named(k, coll, BOUNDARY - 4), named(k, coll, BOUNDARY)
            assert fp["file%d" % k][below] == fp[lo][below], (coll, k)
            assert fp["file%d" % k][at] == fp[hi][at], (coll, k)
            if lo != hi and fp[lo][at] != fp[hi][at] and fp[lo][below] != fp[hi][below]:
                visible = True
        assert visible, coll


def test_other_communicator_sizes_keep_the_fixed_decision(runs):
    fp = runs["fp"]
    differs = []
    for i, (coll, size, n) in enumerate(PHASES):
        if n != SUB:
            continue
        for k, (parsed, _) in enumerate(runs["files"]):
            assert select(parsed, coll, n, size) is None
            assert fp["file%d" % k][i] == fp["default"][i], (coll, k)
        differs += [coll for alg in runnable(coll) if fp[alg][i] != fp["default"][i]]
    assert differs  # forcing does change 3-rank traffic, so the equality above can fail


def test_a_broken_file_is_ignored_silently_and_check_refuses_it(runs):
    fp = runs["fp"]
    path, line, proc = runs["broken"]
    full = [i for i, ph in enumerate(PHASES) if ph[2] == NP]
    assert all(fp["broken"][i] == fp["default"][i] for i in full)
    assert any(fp["file0"][i] != fp["default"][i] for i in full)  # the good twin was obeyed
    assert not re.search(r"rule|tuned|dynamic", proc.stdout + proc.stderr, re.I)  # not a word
    with pytest.raises(InputError) as err:
        rulesfile.check(Path(path).read_text(), VERSION, name=str(path))
    assert err.value.path == str(path) and err.value.line == line
    assert "first message size is 1, not 0" in err.value.problem


def test_print_what_traffic_can_tell_apart(runs, capsys, request):
    fp = runs["fp"]
    if request.config.getoption("verbose") <= 0:
        return
    with capsys.disabled():
        print("\nalgorithm classes by traffic on %d ranks (0 = fixed decision):" % NP)
        for i, (coll, size, n) in enumerate(PHASES):
            if n == NP:
                print("  %-21s %6d B  %s" % (coll, size, classes(fp, i, coll)))
