"""`tunedmpi regret`: a validated module against the per-size oracle of a separate campaign, on the
shared real-IMB validate campaign and the archived local sweep."""
import subprocess
import tarfile

from conftest import ROOT
from tunedmpi.acceptance import stats
from tunedmpi.bench import store
from tunedmpi.regenerate import regret
from tunedmpi.tables import schema

FULL = ROOT.parent / "shared" / "fixtures" / "campaigns" / "local-full-imb-osu"
ARCHIVE = ROOT / "results-archive" / "local-1x2-4e73d17310.tar.xz"


def _campaign(tmp_path):
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path, **safe)
    (cdir,) = store.campaigns(tmp_path / "results-store")
    return cdir


def test_regret_is_the_module_relative_time_over_the_oracle_size_by_size(tmp_path):
    cdir = _campaign(tmp_path)
    rows = {r[0]: r for r in regret.regret(FULL, [cdir])}
    assert {"alltoall", "allgather", "allreduce", "put_latency"} <= set(rows)
    rel, _ = regret.module_relative(FULL)
    orc = regret.oracle([cdir], 1, 2)
    bench, n, module_gain, oracle_gain, mean, worst, wsize = rows["allreduce"]
    sizes = [s for s in rel["allreduce"] if s in orc["allreduce"]]
    assert n == len(sizes) and n >= 10
    ratios = [rel["allreduce"][s] / orc["allreduce"][s] for s in sizes]
    assert abs(mean - (stats.geomean(ratios) - 1) * 100) < 1e-9
    assert abs(worst - (max(ratios) - 1) * 100) < 1e-9 and wsize in sizes
    assert abs(module_gain - 1 / stats.geomean([rel["allreduce"][s] for s in sizes])) < 1e-9
    # the oracle includes the untuned baseline itself (relative time 1) at every size
    assert all(orc["allreduce"][s] <= 1.0 for s in sizes) and oracle_gain >= 1.0


def test_the_command_prints_the_table_and_refuses_a_non_campaign(tmp_path):
    cdir = _campaign(tmp_path)
    exe = str(ROOT / ".venv/bin/tunedmpi")
    ok = subprocess.run([exe, "regret", str(FULL), "--campaign", str(cdir)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("| benchmark | sizes | module gain") and "| allgather |" in ok.stdout
    bad = subprocess.run([exe, "regret", str(FULL), "--campaign", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a results-store campaign" in bad.stderr


SEPARATE = ROOT / "results-archive" / "local-1x2-a174daa01c-separate.tar.xz"
TABLE = ROOT / "tuning-tables" / "local" / "openmpi-5.0.8.yaml"


def test_a_tables_choice_measured_inside_a_separate_campaign(tmp_path):
    # the committed local table against the separate run of its per-size stages (not pooled by tune)
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(SEPARATE) as tar:
        tar.extractall(tmp_path, **safe)
    (cdir,) = store.campaigns(tmp_path / "results-store")
    # the committed table has no bands at 1 x 2 (none was confirmed): give a copy of it two, so the
    # band lookup is checked too
    import yaml
    doc = yaml.safe_load(TABLE.read_text())
    (case,) = [c for c in doc["cases"] if (c["nodes"], c["ppn"], c["collective"]) == (1, 2, "alltoall")]
    case["bands"] = [{"from": 0, "to": "32kb", "algorithm": "ignore"}, {"from": "32kb", "to": "256kb", "algorithm": "pairwise"},
                     {"from": "256kb", "to": None, "algorithm": "two_proc"}]
    table = tmp_path / "banded.yaml"
    table.write_text(yaml.safe_dump(doc, sort_keys=False))
    rows = {r[0]: r for r in regret.table_regret(schema.load_table(str(table)), [cdir], 1, 2)}
    assert set(rows) == {"alltoall", "allgather", "allreduce", "bcast"}
    geo = regret._geometry_data([cdir], 1, 2)
    rel = regret._relative(geo)
    orc = regret.oracle([cdir], 1, 2)
    cases = {c.collective: c for c in schema.load_table(str(table)).cases if (c.nodes, c.ppn) == (1, 2)}

    def measured(coll, alg):
        want = dict(cases[coll].settings["none"], **({"coll_tuned_%s_algorithm" % coll: alg} if alg else {}))
        (key,) = [k for k in rel if k[0] == coll + "-algorithm" and regret._same(geo[k]["config"], want)]
        return {s: v for s, v in rel[key][coll].items() if s >= 1}

    def algorithm_at(coll, size):   # the band holding the size, read off the table by hand
        return next((b.algorithm for b in cases[coll].bands or [] if b.lo <= size and (b.hi is None or size < b.hi)), 0)
    assert [b.algorithm for b in cases["alltoall"].bands] == [0, 2, 5]
    for coll in rows:
        default = measured(coll, 0)
        chosen = {s: measured(coll, algorithm_at(coll, s))[s] for s in default}
        bench, n, gain, oracle_gain, mean, worst, wsize = rows[coll]
        ratios = [chosen[s] / orc[coll][s] for s in chosen]
        assert n == len(chosen) and abs(mean - (stats.geomean(ratios) - 1) * 100) < 1e-9
        assert abs(gain - 1 / stats.geomean(chosen.values())) < 1e-9 and oracle_gain >= gain
    exe = str(ROOT / ".venv/bin/tunedmpi")
    ok = subprocess.run([exe, "regret", "--table", str(table), "--campaign", str(cdir)], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("| benchmark | sizes | table's choice gain"), ok.stderr
    both = subprocess.run([exe, "regret", str(FULL), "--table", str(TABLE), "--campaign", str(cdir)],
                          capture_output=True, text=True)
    assert both.returncode == 2 and "one of them" in both.stderr
