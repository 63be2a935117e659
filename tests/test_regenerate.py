"""Regenerate end to end on this machine: sweep a tiny knob space (2 ranks, probes), resume it,
tune a table from the store, and ingest real IMB logs. Checks the table written, not which
configuration wins (that depends on machine noise)."""

import copy
import json
import subprocess

import pytest

import lmod
from conftest import FIXTURES, ROOT, unpack_archive
from tunedmpi.bench import store, suites
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.modules import sites
from tunedmpi.regenerate import space, sweep
from tunedmpi.tables import schema
from tunedmpi.tables.operations import UCC_ALGORITHMS

TINY = """schema: 1
benchmarks: [allreduce, put_latency]
set: quick
repetitions: 2
stages:
  - name: transport
    knobs:
      pml: [default, ucx]
"""


def cli(*args, timeout=600):
    return subprocess.run(
        [str(ROOT / ".venv/bin/tunedmpi")] + [str(a) for a in args],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "text,where",
    [
        (TINY.replace("pml: [default, ucx]", "pml: [default, ucz]"), "stages[0].knobs.pml"),
        (TINY.replace("pml: [default, ucx]", "pml: [ucx]"), "give a list of at least 2 values"),
        (
            TINY.replace("repetitions: 2", "repetitions: 1"),
            "repetitions must be a whole number from 2 to 50",
        ),
        (TINY.replace("allreduce, put_latency", "allreduse"), "benchmarks must be a list"),
        (TINY + "    only: [alltoall]\n", "only must list benchmarks of this space"),
        (TINY + "color: blue\n", "unknown key"),
    ],
)
def test_bad_spaces_name_file_line_and_fix(tmp_path, text, where):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(InputErrors) as exc:
        space.load_space(str(path), sites.load_named("local"))
    msg = str(exc.value)
    assert str(path) + ":" in msg and where in msg and "(fix: " in msg


def test_the_local_space_loads():
    sp = space.load_space(str(ROOT / "site-configs/local/space.yaml"), sites.load_named("local"))
    assert [s.name for s in sp.stages][:2] == ["transport", "ob1-limits"]
    assert len(sp.combinations(sp.stages[0])) == 6 and sp.combinations(sp.stages[0])[0] == {}


def test_the_ucc_space_offers_every_ucc_algorithm_per_collective_from_1kb_to_1mb():
    """site-configs/local-source/space-ucc.yaml (issue 41): per collective, on the table's job row,
    Open MPI's own and each of UCC's algorithms (UCC's default is one of them at each size), 30
    repetitions, IMB from 1 KB."""
    site = sites.load_named("local-source")
    sp = space.load_space(str(ROOT / "site-configs/local-source/space-ucc.yaml"), site)
    assert (sp.set_name, sp.repetitions) == ("mid", 30)
    assert sp.job == site.table.case(1, 2, "allreduce").settings["none"]
    for st, coll in zip(sp.stages, ("alltoall", "allgather", "allreduce", "bcast")):
        assert st.only == [coll] and st.knobs == {
            "coll_%s_component" % coll: ["default"] + ["ucc@" + a for a in UCC_ALGORITHMS[coll]]
        }
    args = suites.imb_args(suites.SETS["mid"], 2, 1.0)
    assert args[:2] == ["-msglog", "10:20"] and suites.imb_args(suites.SETS["full"], 2, 1.0)[1] == (
        "0:20"
    )


def test_local_source_has_the_local_sites_peers():
    """validate --site local-source --baseline intel-mpi/2021.18.1 (or mpich/5.0.2) finds them
    where `make peers` installs them."""
    assert sites.load_named("local-source").peers == sites.load_named("local").peers


def test_a_space_narrowed_to_some_stages_or_other_repetitions_is_a_campaign_of_its_own(tmp_path):
    local = sites.load_named("local")
    per_size = space.load_space(str(ROOT / "site-configs/local/space-per-size.yaml"), local)
    assert space.narrowed(per_size) is per_size  # nothing asked: the space as it is
    confirm = space.narrowed(per_size, repetitions=20)
    alone = space.narrowed(per_size, stages=["alltoall-algorithm"])
    both = space.narrowed(per_size, 30, ["alltoall-algorithm", "bcast-algorithm"])
    assert (confirm.repetitions, [s.name for s in confirm.stages]) == (
        20,
        [s.name for s in per_size.stages],
    )
    assert (alone.repetitions, [s.name for s in alone.stages]) == (
        per_size.repetitions,
        ["alltoall-algorithm"],
    )
    assert (both.repetitions, [s.name for s in both.stages]) == (
        30,
        ["alltoall-algorithm", "bcast-algorithm"],
    )
    assert alone.job == per_size.job and alone.path == per_size.path
    digests = {per_size.digest, confirm.digest, alone.digest, both.digest}
    assert len(digests) == 4 and space.narrowed(per_size, repetitions=20).digest == confirm.digest
    with pytest.raises(InputError) as exc:
        space.narrowed(per_size, stages=["alltoall"])
    assert "no stage named alltoall" in str(
        exc.value
    ) and "alltoall-algorithm, allgather-algorithm" in str(exc.value)
    # a stage measured on a job configuration that a left-out job-wide stage was to choose: refused
    full = space.load_space(str(ROOT / "site-configs/local/space.yaml"), local)
    with pytest.raises(InputError) as exc:
        space.narrowed(full, stages=["alltoall-algorithm"])
    msg = str(exc.value)
    assert (
        "stage alltoall-algorithm builds on the job configuration that stage transport chooses"
        in msg
    )
    assert "space-per-size.yaml" in msg and str(full.path) in msg
    assert [s.name for s in space.narrowed(full, stages=["transport"]).stages] == ["transport"]
    # the command refuses before it measures or writes anything
    proc = cli(
        "sweep",
        "--site",
        "local",
        "--space",
        ROOT / "site-configs/local/space.yaml",
        "--stage",
        "alltoall-algorithm",
        "--store",
        tmp_path / "s",
    )
    assert proc.returncode == 2 and "builds on the job configuration" in proc.stderr, proc.stderr
    proc = cli("sweep", "--site", "local", "--repetitions", "1", "--store", tmp_path / "s")
    assert proc.returncode == 2 and "--repetitions" in proc.stderr, proc.stderr
    assert not (tmp_path / "s").exists()


needs_mpi = pytest.mark.skipif(
    not lmod.available() or not (ROOT / ".venv/bin/mpicc").exists(),
    reason="needs Lmod and the Open MPI wheel (run make)",
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regen")
    (tmp / "space.yaml").write_text(TINY)
    proc = cli("sweep", "--site", "local", "--space", tmp / "space.yaml", "--store", tmp / "store")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cdir,) = store.campaigns(tmp / "store")
    return tmp, cdir, proc


@needs_mpi
def test_sweep_measures_every_configuration_interleaved(swept):
    tmp, cdir, proc = swept
    meta, records = store.load_campaign(cdir)
    assert meta["site"] == "local" and meta["stages"][0]["configurations"] == 2
    # 2 configurations x 2 runs (collectives, put_latency) x 2 repetitions
    assert sorted((r["config_id"].split(".")[0], r["run"], r["rep"]) for r in records) == sorted(
        (c, run, rep)
        for c in ("baseline", "pml=ucx")
        for run in ("collectives", "put_latency")
        for rep in (1, 2)
    )
    assert all(r["status"] == "ok" for r in records)
    ucx = next(r for r in records if r["config"] == {"pml": "ucx"})
    assert ucx["exports"] == {
        "OMPI_MCA_pml": "ucx",
        "OMPI_MCA_pml_ucx_tls": "any",
        "OMPI_MCA_pml_ucx_devices": "any",
    }
    log = (
        store.record_path(cdir, "transport", {"pml": "ucx"}, "put_latency", 1)
        .with_suffix(".log")
        .read_text()
    )
    assert (
        "export OMPI_MCA_pml=ucx;" in log
        and "#   OMPI_MCA_pml=ucx" in log
        and "# OSU MPI_Put Latency Test" in log
    )
    # every repetition measures each configuration once, in the campaign's shuffled order for it
    order = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    plan = ["baseline", "pml=ucx"]
    expected = [
        "rep %d/2 %s" % (rep, plan[i])
        for rep in (1, 2)
        for i in sweep.round_order(2, cdir.name, "transport", rep)
    ]
    assert len(order) == 4 and all(e in line for e, line in zip(expected, order))
    assert meta["order"] == sweep.ORDER


def test_each_repetition_shuffles_the_configurations_the_same_way_every_time():
    orders = [
        sweep.round_order(6, "local-1x2-abc", "alltoall-algorithm", rep) for rep in range(1, 21)
    ]
    assert all(sorted(o) == list(range(6)) for o in orders)
    assert orders == [
        sweep.round_order(6, "local-1x2-abc", "alltoall-algorithm", rep) for rep in range(1, 21)
    ]
    assert len({tuple(o) for o in orders}) > 15  # a new order in (nearly) every repetition
    # no configuration keeps one place or one predecessor through the campaign
    assert all(len({o[k] for o in orders}) > 3 for k in range(6))
    assert len({(o[k], o[k + 1]) for o in orders for k in range(5)}) > 20
    assert (
        sweep.round_order(6, "local-1x2-abc", "bcast-algorithm", 1) != orders[0]
        or sweep.round_order(6, "local-1x2-abd", "alltoall-algorithm", 1) != orders[0]
    )


@needs_mpi
def test_rerun_finishes_only_what_is_missing(swept):
    tmp, cdir, _ = swept
    victim = store.record_path(cdir, "transport", {"pml": "ucx"}, "collectives", 2)
    kept = store.record_path(cdir, "transport", {}, "collectives", 1)
    before = kept.stat().st_mtime_ns
    victim.unlink()  # as if the sweep had been killed before this run
    proc = cli("sweep", "--site", "local", "--space", tmp / "space.yaml", "--store", tmp / "store")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert victim.is_file() and kept.stat().st_mtime_ns == before
    measured = [line for line in proc.stderr.splitlines() if "run(s) measured" in line]
    assert (
        len(measured) == 1
        and "rep 2/2 pml=ucx" in measured[0]
        and "1 run(s) measured" in measured[0]
    )


@needs_mpi
def test_tune_writes_a_checked_table_with_provenance_and_a_diff(swept):
    tmp, cdir, _ = swept
    out = tmp / "table" / "local" / "openmpi-5.0.8.yaml"
    proc = cli("tune", "--site", "local", "--store", tmp / "store", "--out", out)
    assert proc.returncode == 0, proc.stderr
    t = schema.load_table(str(out))  # passes every check a table must pass
    assert t.platform == "local" and t.provenance["campaign"] == cdir.name
    assert {(c.nodes, c.ppn, c.collective) for c in t.cases} == {(1, 2, "allreduce"), (1, 2, "put")}
    for c in t.cases:
        assert c.settings["none"] in ({}, {"pml": "ucx"})
        assert any("regret vs the per-size oracle" in n for n in c.notes)
    assert "+ 1x2 allreduce:" in proc.stdout and "| 1x2 put |" in proc.stdout
    again = cli("tune", "--site", "local", "--store", tmp / "store", "--out", out)
    assert "(no change in chosen settings)" in again.stdout
    check = cli("check", out)
    assert check.returncode == 0, check.stderr


@needs_mpi
def test_tune_refuses_to_pool_probe_and_real_suite_runs_of_one_benchmark(swept, tmp_path):
    """The probes and real IMB give one configuration different figures: a geometry's benchmark
    measured with both is refused (file, key, fix), and tuning one program's campaigns works."""
    import shutil

    tmp, cdir, _ = swept
    shutil.copytree(tmp / "store", tmp_path / "s")
    imb = FIXTURES / "imb" / "imb-mpi1_oci-flags_mem2.3_default-ompi.txt"
    proc = cli(
        "ingest",
        "--site",
        "local",
        "--nodes",
        1,
        "--ppn",
        2,
        "--store",
        tmp_path / "s",
        "--campaign",
        "local-1x2-real",
        imb,
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "t" / "local" / "openmpi-5.0.8.yaml"
    bad = cli("tune", "--site", "local", "--store", tmp_path / "s", "--out", out)
    assert bad.returncode == 2, bad.stderr
    assert (
        "1x2 allreduce: measured with different benchmark programs: imb in local-1x2-real; probe in %s"
        % cdir.name
        in bad.stderr
        and "fix: tune one program's campaigns at a time" in bad.stderr
    )
    assert not out.exists()
    good = cli(
        "tune", "--site", "local", "--store", tmp_path / "s", "--out", out, "--campaign", cdir.name
    )
    assert good.returncode == 0, good.stderr


def test_a_stage_measures_its_collectives_in_validates_program():
    """A stage about one collective runs every collective of the space in that one IMB run, as
    validate does; one-sided tests stay programs of their own, run only where a stage judges them."""
    from tunedmpi.regenerate import sweep

    sp = space.load_space(str(ROOT / "site-configs/local/space.yaml"), sites.load_named("local"))
    colls = ["alltoall", "allgather", "allreduce", "bcast"]
    assert sweep.program_benchmarks(sp, ["allreduce"]) == colls
    assert sweep.program_benchmarks(sp, ["bcast", "put_latency"]) == colls + ["put_latency"]
    assert sweep.program_benchmarks(sp, ["put_latency", "get_bw"]) == ["put_latency", "get_bw"]
    assert sweep.program_benchmarks(sp, sp.benchmarks) == sp.benchmarks


PER_COLLECTIVE = """schema: 1
benchmarks: [alltoall, allreduce, put_latency]
set: quick
repetitions: 2
stages:
  - name: allreduce-algorithm
    only: [allreduce]
    knobs:
      coll_tuned_allreduce_algorithm: [default, 1]
"""


@needs_mpi
def test_a_swept_per_collective_stage_judges_its_collective_on_runs_of_every_collective(tmp_path):
    from tunedmpi.regenerate import choice

    (tmp_path / "space.yaml").write_text(PER_COLLECTIVE)
    proc = cli(
        "sweep", "--site", "local", "--space", tmp_path / "space.yaml", "--store", tmp_path / "s"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cdir,) = store.campaigns(tmp_path / "s")
    meta, records = store.load_campaign(cdir)
    assert meta["program"] == space.PROGRAM and cdir.name.endswith(
        space.load_space(str(tmp_path / "space.yaml"), sites.load_named("local")).digest
    )
    # 2 configurations x 2 repetitions, one IMB run each with both collectives, no one-sided run
    assert sorted((r["config_id"].split(".")[0], r["run"], r["rep"]) for r in records) == sorted(
        (c, "collectives", rep) for c in ("baseline", "allreduce_alg=1") for rep in (1, 2)
    )
    for r in records:
        assert (
            r["status"] == "ok"
            and r["benchmarks"] == ["alltoall", "allreduce"]
            and r["judged"] == ["allreduce"]
        )
        assert sorted(r["series"]) == ["allreduce", "alltoall"] and r["command"].endswith(
            " alltoall allreduce"
        )
    geo = choice.collect(records)[(1, 2)]
    assert {cid.split(".")[0]: sorted(e["bench"]) for (_, cid), e in geo.items()} == {
        "baseline": ["allreduce"],
        "allreduce_alg=1": ["allreduce"],
    }


def test_tune_keeps_validates_program_where_a_stage_ran_in_two(tmp_path):
    """Runs pooled into one stage come from one program: a stage an older sweep ran with its
    collective alone and a newer one in validate's program keeps the newer runs, and the table's
    provenance says which runs were left out."""
    imb = FIXTURES / "imb"
    alone = [imb / "imb-mpi1_mem0.001_msglog0-20_allreduce_default-ompi.txt"] * 2
    every = [
        imb / "imb-mpi1_oci-flags_mem2.3_default-ompi.txt",
        imb / "imb-mpi1_oci-flags-verbatim_mem2.3G_default-ompi.txt",
    ]
    for campaign, logs in (("local-1x2-old", alone), ("local-1x2-new", every)):
        for config in ([], ["--config", "coll_tuned_allreduce_algorithm=1"]):
            proc = cli(
                "ingest",
                "--site",
                "local",
                "--nodes",
                1,
                "--ppn",
                2,
                "--store",
                tmp_path / "s",
                "--campaign",
                campaign,
                "--stage",
                "allreduce-algorithm",
                *config,
                *logs,
            )
            assert proc.returncode == 0, proc.stderr
    out = tmp_path / "t" / "local" / "openmpi-5.0.8.yaml"
    proc = cli("tune", "--site", "local", "--store", tmp_path / "s", "--out", out)
    assert proc.returncode == 0, proc.stderr
    notes = schema.load_table(str(out)).provenance["notes"]
    assert notes[0] == "4 runs measured"
    assert notes[1] == (
        "1x2 stage allreduce-algorithm: 4 run(s) of campaign local-1x2-old left out: they ran "
        "allreduce in one program, where other runs of the stage ran alltoall, allgather, allreduce "
        "(validate's program, which is kept)"
    )
    alone_only = cli(
        "tune",
        "--site",
        "local",
        "--store",
        tmp_path / "s",
        "--out",
        out,
        "--campaign",
        "local-1x2-old",
    )
    assert alone_only.returncode == 0, alone_only.stderr
    notes = schema.load_table(str(out)).provenance["notes"]
    assert notes[0] == "4 runs measured" and not any("left out" in n for n in notes)


def test_each_geometry_is_decided_with_its_own_campaigns_stages(tmp_path):
    """A 2 x 1 campaign whose transport stage varies pml alone must not narrow the 1 x 2 transport
    stage (pml and ucx_tls) to pml: the 1 x 2 posix candidate stays a candidate."""
    import json

    from tunedmpi.regenerate import tune

    imb = FIXTURES / "imb"
    logs = [
        imb / "imb-mpi1_oci-flags_mem2.3_default-ompi.txt",
        imb / "imb-mpi1_oci-flags-verbatim_mem2.3G_default-ompi.txt",
    ]
    runs = [
        (1, 2, "one", []),
        (1, 2, "one", ["pml=ucx"]),
        (1, 2, "one", ["pml=ucx", "ucx_tls=self,posix"]),
        (2, 1, "two", []),
        (2, 1, "two", ["pml=ucx"]),
    ]
    for nodes, ppn, name, config in runs:
        proc = cli(
            "ingest",
            "--site",
            "local",
            "--nodes",
            nodes,
            "--ppn",
            ppn,
            "--store",
            tmp_path / "s",
            "--campaign",
            "local-%s" % name,
            "--stage",
            "transport",
            *[a for c in config for a in ("--config", c)],
            *logs,
        )
        assert proc.returncode == 0, proc.stderr
    for name, knobs in (
        ("one", ["pml", "ucx_tls"]),
        ("two", ["pml"]),
    ):  # as sweep records its stages
        meta = tmp_path / "s" / ("local-%s" % name) / "campaign.json"
        doc = json.loads(meta.read_text())
        doc["stages"] = [{"stage": "transport", "knobs": knobs}]
        meta.write_text(json.dumps(doc))
    _, _, _, decisions = tune.tune("local", tmp_path / "s", tmp_path / "t" / "local.yaml")
    assert decisions[(1, 2)]["job"]["steps"][0]["candidates"] == 2
    assert decisions[(2, 1)]["job"]["steps"][0]["candidates"] == 1


def test_ingest_real_imb_logs_and_tune_from_them(tmp_path):
    imb = FIXTURES / "imb"
    base = [
        imb / "imb-mpi1_oci-flags_mem2.3_default-ompi.txt",
        imb / "imb-mpi1_oci-flags-verbatim_mem2.3G_default-ompi.txt",
    ]
    proc = cli(
        "ingest", "--site", "local", "--nodes", 1, "--ppn", 2, "--store", tmp_path / "s", *base
    )
    assert proc.returncode == 0, proc.stderr
    proc = cli(
        "ingest",
        "--site",
        "local",
        "--nodes",
        1,
        "--ppn",
        2,
        "--store",
        tmp_path / "s",
        "--config",
        "pml=ucx",
        "--config",
        "ucx_rndv_thresh=32kb",
        imb / "imb-mpi1_oci-flags_mem2.3G_ucx_rndv32kb.txt",
    )
    assert proc.returncode == 0, proc.stderr
    (cdir,) = store.campaigns(tmp_path / "s")
    meta, records = store.load_campaign(cdir)
    assert sorted((r["config_id"].split(".")[0], r["rep"]) for r in records) == [
        ("baseline", 1),
        ("baseline", 2),
        ("pml=ucx_ucx_rndv_thresh=32kb", 1),
    ]
    rec = next(r for r in records if r["config_id"] == "baseline" and r["rep"] == 1)
    assert rec["series"]["alltoall"]["points"][1048576] == 501.32  # read by eye from the log
    out = tmp_path / "t" / "local" / "openmpi-5.0.8.yaml"
    proc = cli("tune", "--site", "local", "--store", tmp_path / "s", "--out", out)
    assert proc.returncode == 0, proc.stderr
    t = schema.load_table(str(out))
    # one repetition of the candidate cannot pass a significance test: the defaults stay
    assert [c.settings["none"] for c in t.cases] == [{}, {}, {}]
    bad = cli(
        "ingest",
        "--site",
        "local",
        "--nodes",
        1,
        "--ppn",
        2,
        "--store",
        tmp_path / "s",
        "--config",
        "pml=ucz",
        base[0],
    )
    assert bad.returncode == 2 and "pml" in bad.stderr and "fix:" in bad.stderr


@pytest.mark.parametrize(
    "site, table_name",
    [("local", "local/openmpi-5.0.8"), ("local-source", "local-source/openmpi-5.0.6")],
)
def test_the_committed_measured_table_is_what_tune_makes_of_the_archived_campaign(
    tmp_path, site, table_name
):
    """A measured table's measurements are archived (one archive per campaign the table names): tune
    on them must give the committed file (local-source: its UCC component stages included)."""
    table = ROOT / "tuning-tables" / (table_name + ".yaml")
    names = schema.load_table(str(table)).provenance["campaign"].split(", ")
    for name in names:
        unpack_archive(name, tmp_path)
    assert sorted(d.name for d in store.campaigns(tmp_path / "results-store")) == sorted(names)
    out = tmp_path / (table_name + ".yaml")
    proc = cli("tune", "--site", site, "--store", tmp_path / "results-store", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == table.read_text()


def ucc_routed(tmp_path):
    """The local-source table before issue 49's retune, kept by promote: it routed sizes of
    allgather and allreduce to UCC's algorithms (checked where a table lives: its platform's folder)."""
    kept = next((ROOT / "tuning-tables/local-source/revisions").glob("*-689bae1c84d0/table.yaml"))
    path = tmp_path / "kept" / "local-source" / "openmpi-5.0.6.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(kept.read_bytes())
    return schema.load_table(str(path))


def test_tune_routes_nothing_to_ucc_where_the_row_lost_as_users_load_it(tmp_path):
    """tune --row-check (docs/regenerate.md, "Checked as users load it"): from the archived campaigns
    of the local-source table that routed allgather and allreduce sizes to UCC, a validate campaign
    of that module in which allgather and allreduce lost bands takes their routing away, and the
    notes and provenance say why. The campaign is a real archived one of the local-source module,
    measured against Intel MPI: relabelled as against the site's baseline, since this is about
    tune's rule; as it is, it is refused (a row check judges the site's own baseline)."""
    for name in ucc_routed(tmp_path).provenance["campaign"].split(", "):
        unpack_archive(name, tmp_path)
    unpack_archive("validate-local-source-vs-intel-mpi-20261127T223138Z", tmp_path / "v")
    real = next((tmp_path / "v").rglob("results.json"))
    doc = json.loads(real.read_text())
    lost = {b["benchmark"] for b in doc["bands"] if b["verdict"] == "lose"}
    assert {"allgather", "allreduce", "alltoall", "bcast"} <= lost
    check = tmp_path / "check" / "local-source-relabelled"
    check.mkdir(parents=True)
    doc["modules"]["baseline"] = "openmpi/5.0.6"
    (check / "results.json").write_text(json.dumps(doc))
    store_dir = tmp_path / "results-store"

    def routed(out, *extra):
        proc = cli("tune", "--site", "local-source", "--store", store_dir, "--out", out, *extra)
        assert proc.returncode == 0, proc.stderr
        table = schema.load_table(str(out))
        return table, {c.collective for c in table.cases if c.choice}

    _, before = routed(tmp_path / "plain.yaml")
    assert before == {"allgather", "allreduce"}
    table, after = routed(tmp_path / "checked.yaml", "--row-check", check)
    assert after == set()
    notes = {c.collective: " ".join(c.notes) for c in table.cases}
    for coll in ("allgather", "allreduce"):
        assert "lost %s" % coll in notes[coll] and "local-source-relabelled" in notes[coll]
    assert "UCC won" not in notes["alltoall"] + notes["bcast"]  # nothing routed, nothing taken
    assert any(
        "checked as users load it: validate campaign local-source-relabelled" in n
        for n in table.provenance["notes"]
    )
    refused = cli(
        "tune",
        "--site",
        "local-source",
        "--store",
        store_dir,
        "--out",
        tmp_path / "x.yaml",
        "--row-check",
        real.parent,
    )
    assert refused.returncode == 2, refused.stderr
    assert "results.json" in refused.stderr and "modules.baseline" in refused.stderr
    assert "intel-mpi" in refused.stderr and not (tmp_path / "x.yaml").exists()


def test_a_confirmation_campaign_holds_per_collective_stages_only_and_keeps_its_role(tmp_path):
    """sweep --confirm refuses a space with job-wide stages before it measures or writes anything,
    and a campaign is resumed only in the role it was started in."""
    proc = cli(
        "sweep",
        "--site",
        "local",
        "--space",
        ROOT / "site-configs/local/space.yaml",
        "--confirm",
        "--store",
        tmp_path / "s",
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "stage transport varies job-wide knob(s) pml" in proc.stderr
        and "without --confirm" in proc.stderr
    )
    assert not (tmp_path / "s").exists()
    started = tmp_path / "s" / "local-1x2-x-confirm"
    started.mkdir(parents=True)
    (started / "campaign.json").write_text('{"site": "local", "role": "confirm"}\n')
    again = cli(
        "sweep",
        "--site",
        "local",
        "--space",
        ROOT / "site-configs/local/space-per-size.yaml",
        "--repetitions",
        "20",
        "--store",
        tmp_path / "s",
        "--campaign",
        "local-1x2-x-confirm",
    )
    assert again.returncode == 2 and "was started with --confirm" in again.stderr, again.stderr
    assert sorted(p.name for p in started.iterdir()) == ["campaign.json"]


def test_tune_names_a_component_change_and_writes_no_yaml_aliases(tmp_path):
    """Before: a table whose only change was its UCC choice printed "(no change in chosen
    settings)", and one list object shared by two cases was dumped as a YAML alias, which the
    table's own check refuses (tune exited 2 on the UCC campaign)."""
    from tunedmpi.regenerate import tune

    committed = ucc_routed(tmp_path)
    assert any(c.choice for c in committed.cases)  # the UCC algorithm bands of issue 41
    bare = copy.deepcopy(committed)
    for c in bare.cases:
        c.choice = []
    lines = tune.diff(bare, committed)
    assert any(
        "1x2 allreduce" in ln and "2kb+:ucc@knomial" in ln and "128kb+:ucc@sra_knomial" in ln
        for ln in lines
    ), lines
    shared = ["same", "list"]
    text = tune._dump({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text and text.count("- same") == 2
