"""The closed loop (docs/regenerate.md, issue 49): a candidate beside the default module in real Lmod
and Environment Modules, promote's gate, rollback byte for byte, retune's plan, refusals and resume,
and tune's never-worse rule on an archived campaign."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time

import pytest
import yaml

import envmodules
import lmod
from conftest import ROOT, unpack_archive
from tunedmpi.modules import revisions, sites
from tunedmpi.regenerate import choice, tune

CAND = "openmpi-tuned/5.0.8-candidate"
TABLE = "tuning-tables/local/openmpi-5.0.8.yaml"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project's data (tables, site configs, modules, validate/) with the checkout's
    .venv and archive linked, as TUNEDMPI_ROOT: the loop writes there, never into the checkout."""
    root = tmp_path / "project"
    for name in ("tuning-tables", "site-configs", "modulefiles", "validate"):
        shutil.copytree(ROOT / name, root / name, symlinks=True)
    for name in (".venv", "results-archive"):
        (root / name).symlink_to(ROOT / name)
    monkeypatch.setenv("TUNEDMPI_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


def tunedmpi(*args, **env):
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "tunedmpi"), *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=900,
    )


def write_candidate(root, tls="self,sm"):
    """A candidate table: the local table with UCX_TLS=<tls> in its 1x2 row (a retune's output
    differs from the current table in this way: a job-wide knob of one row)."""
    doc = yaml.safe_load((root / TABLE).read_text())
    for case in doc["cases"]:
        if (case["nodes"], case["ppn"]) == (1, 2):
            case["settings"]["none"]["ucx_tls"] = tls
    path = root / TABLE.replace(".yaml", ".candidate.yaml")
    path.write_text(tune._dump(doc))
    return path


def digests(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix != ".lock"  # render's lock holds its last holder's pid
    }


def judged_campaign(root, archive, tuned, revision, tmp_path):
    """An archived real validate campaign's results.json, relabelled as the campaign of ``tuned`` at
    table ``revision``: its bands (real measurements) are what promote judges."""
    unpack_archive(archive, tmp_path / "archive")
    src = next((tmp_path / "archive").rglob("results.json"))
    doc = json.loads(src.read_text())
    doc["modules"]["tuned"], doc["table_revision"] = tuned, revision
    out = root / "validate-results" / ("local-%s" % archive)
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(doc))
    return out, doc


@pytest.mark.skipif(not lmod.available(), reason="needs Lmod (apt-get install lmod)")
def test_a_candidate_loads_by_name_beside_the_default_in_lmod(project):
    before = digests(project / "modulefiles")
    write_candidate(project)
    assert tunedmpi("render", "--site", "local").returncode == 0
    after = digests(project / "modulefiles")
    assert {k: v for k, v in after.items() if k in before} == before  # nothing users load changed
    tree = [project / "modulefiles" / "local"]
    script = (
        "module -t avail openmpi-tuned 2>&1; echo SPLIT; module --show_hidden avail openmpi-tuned 2>&1;"
        ' module load openmpi-tuned; echo "default=$LOADEDMODULES $UCX_TLS";'
        ' module load %s; echo "candidate=$LOADEDMODULES $UCX_TLS"' % CAND
    )
    out = lmod.shell(tree, script).stdout
    listed, hidden = out.split("SPLIT")
    assert "openmpi-tuned/5.0.8" in listed and "5.0.8-candidate" not in listed
    assert "openmpi-tuned/5.0.8-candidate (H)" in hidden and "openmpi-tuned/5.0.8 (D)" in hidden
    assert "default=openmpi-tuned/5.0.8 self,posix" in out
    assert "candidate=%s self,sm" % CAND in out  # the family swaps one for the other


@pytest.mark.skipif(not envmodules.available(), reason=envmodules.WHY_MISSING)
def test_a_candidate_loads_by_name_beside_the_default_in_environment_modules(project):
    write_candidate(project)
    assert tunedmpi("render", "--site", "local").returncode == 0
    script = (
        "module avail openmpi-tuned 2>&1; echo SPLIT; module avail -a openmpi-tuned 2>&1;"
        ' module load openmpi-tuned; echo "default=$LOADEDMODULES $UCX_TLS";'
        ' module switch openmpi-tuned %s; echo "candidate=$LOADEDMODULES $UCX_TLS"' % CAND
    )
    out = envmodules.shell([project / "modulefiles" / "local"], script).stdout
    listed, hidden = out.split("SPLIT")
    assert "openmpi-tuned/5.0.8(default)" in listed and "5.0.8-candidate" not in listed
    assert "openmpi-tuned/5.0.8-candidate <H>" in hidden
    assert "default=openmpi-tuned/5.0.8 self,posix" in out
    assert "candidate=%s self,sm" % CAND in out


def test_promote_refuses_a_candidate_that_lost_a_band(project, tmp_path):
    cand = write_candidate(project)
    assert tunedmpi("render", "--site", "local").returncode == 0
    before = digests(project / "tuning-tables"), digests(project / "modulefiles")
    # A real FAIL: the local module against Intel MPI 2021.18.1, which wins 64 KB - 1 MB
    where, doc = judged_campaign(
        project,
        "validate-local-vs-intel-mpi-20261127T044735Z",
        CAND,
        revisions.revision(cand),
        tmp_path,
    )
    doc["modules"]["baseline"] = "openmpi/5.0.8"  # as if against the site's baseline
    (where / "results.json").write_text(json.dumps(doc))
    proc = tunedmpi("promote", "--site", "local")
    lost = [b for b in doc["bands"] if b["verdict"] == "lose"]
    assert proc.returncode == 1 and lost, proc.stderr
    assert "refused" in proc.stderr and all(
        "%s %s" % (b["benchmark"], b["band"]) in proc.stderr for b in lost
    )
    assert (digests(project / "tuning-tables"), digests(project / "modulefiles")) == before


def test_promote_needs_a_campaign_of_exactly_that_candidate(project, tmp_path):
    write_candidate(project)
    judged_campaign(project, "validate-local-20261124T023513Z", CAND, "0123456789ab", tmp_path)
    proc = tunedmpi("promote", "--site", "local")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "table revision" in proc.stderr and "--module %s" % CAND in proc.stderr


def test_promote_keeps_the_old_revision_and_rollback_restores_it_byte_for_byte(project, tmp_path):
    revs = project / "tuning-tables" / "local" / "revisions"
    shutil.rmtree(revs, ignore_errors=True)  # the checkout's own kept revisions: not this test's
    tables, modules = digests(project / "tuning-tables"), digests(project / "modulefiles")
    cand = write_candidate(project)
    assert tunedmpi("render", "--site", "local").returncode == 0
    new_rev = revisions.revision(cand)
    # a real PASS (the local module's --full campaign of 2026-11-24), judged as this candidate's
    judged_campaign(project, "validate-local-20261124T023513Z", CAND, new_rev, tmp_path)
    proc = tunedmpi("promote", "--site", "local")
    assert proc.returncode == 0, proc.stderr
    assert revisions.revision(project / TABLE) == new_rev and not cand.exists()
    mods = project / "modulefiles" / "local" / "openmpi-tuned"
    assert sorted(p.name for p in mods.iterdir()) == ["5.0.8", "5.0.8.lua", "__5.0.8.rules"]
    assert '"UCX_TLS", "self,sm"' in (mods / "5.0.8.lua").read_text()
    kept = list(revs.iterdir())
    assert (
        len(kept) == 1
        and json.loads((kept[0] / "revision.json").read_text())["replaced_by"] == new_rev
    )
    assert tunedmpi("render", "--check").returncode == 0
    proc = tunedmpi("rollback", "--site", "local")
    assert proc.returncode == 0, proc.stderr
    assert digests(project / "tuning-tables") == tables
    assert digests(project / "modulefiles") == modules
    again = tunedmpi("rollback", "--site", "local")
    assert again.returncode == 2 and "no kept revision" in again.stderr


def test_tune_never_keeps_a_job_configuration_that_lost_a_band(tmp_path):
    """On the archived real-IMB campaign of the local table: osc ucx (a job-wide knob, 2-100x
    slower in one-sided here) on top of the chosen configuration loses one-sided bands in the
    one-sided stage, so the rule falls back to the configuration before it, which lost nowhere."""
    unpack_archive("local-1x2-4e73d17310-imb", tmp_path)
    _, recs = __import__("tunedmpi.bench.store", fromlist=["x"]).load_campaign(
        tmp_path / "results-store" / "local-1x2-4e73d17310-imb"
    )
    geo = choice.collect(recs)[(1, 2)]
    chosen = {"pml": "ucx", "ucx_tls": "self,posix"}
    worse = dict(chosen, osc="ucx")
    lost = choice.losses(geo, worse)
    assert lost and {st for st, _ in lost} == {"one-sided"}
    steps = [{"chosen": {"config": chosen}}, {"chosen": {"config": worse}}]
    kept, rejected = choice.never_worse(geo, steps, worse)
    assert kept == chosen and [cfg for cfg, _ in rejected] == [worse]
    assert choice.losses(geo, chosen) == []


def test_retune_plans_only_the_stages_that_can_change_what_lost(project, tmp_path):
    """A real campaign that lost alltoall 1-64 KB at 1x2 (the namespace cluster's --short rows
    run), as of the table now: the plan holds the stages that judge what lost or stayed undecided
    and its algorithm stage (not the other collectives'), and measures nothing."""
    unpack_archive("validate-local-rows-20261127T213755Z", tmp_path / "a")
    src = next(p for p in (tmp_path / "a").rglob("results.json") if p.parent.parent.name == "1x2")
    doc = json.loads(src.read_text())
    doc["table_revision"] = revisions.revision(project / TABLE)
    where = tmp_path / "campaign"
    where.mkdir()
    (where / "results.json").write_text(json.dumps(doc))
    store = tmp_path / "store"
    # the time comes from past runs of the space's set (full): an archived --full campaign's
    unpack_archive("validate-local-20261124T023513Z", tmp_path / "past")
    past = ("--results", tmp_path / "past" / "validate-results")
    proc = tunedmpi("retune", "--site", "local", "--from", where, "--plan", "--store", store, *past)
    assert proc.returncode == 0, proc.stderr
    minutes = re.search(r"total: \d+ runs, \d+ to measure, ~(\d+) min", proc.stdout)
    assert minutes and 5 < int(minutes.group(1)) < 120, proc.stdout
    stages = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("  stage ")]
    # alltoall lost 1-64 KB; one-sided bands stayed undecided: the one-sided stage is planned too
    assert stages == [
        "transport",
        "ob1-limits",
        "ob1-single-copy",
        "ucx-thresholds",
        "one-sided",
        "alltoall-algorithm",
    ]
    assert "alltoall <=1KB, 1KB-64KB" in proc.stdout
    assert "a full sweep of the space: 1130 runs" in proc.stdout
    total = [ln for ln in proc.stdout.splitlines() if ln.startswith("  total:")][0]
    # 7 runs (IMB + 6 OSU) per job-wide configuration, the 6 OSU ones for osc, 1 IMB per algorithm;
    # after the first stage one more configuration each: the chosen job's knobs at default
    assert total.split()[1] == str(5 * (7 * (6 + 7 + 3 + 9) + 3 * 6 + 7))
    assert not store.exists()  # nothing measured
    other = dict(doc, site="oci-bm-optimized3.36")
    (where / "results.json").write_text(json.dumps(other))
    proc = tunedmpi("retune", "--site", "local", "--from", where, "--plan", "--store", store)
    assert proc.returncode == 2 and "oci-bm-optimized3.36" in proc.stderr and "local" in proc.stderr
    (where / "results.json").write_text(json.dumps(dict(doc, table_revision="0123456789ab")))
    proc = tunedmpi("retune", "--site", "local", "--from", where, "--plan", "--store", store)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "0123456789ab" in proc.stderr and doc["table_revision"] in proc.stderr


TINY_SPACE = """schema: 1
description: "retune test: pml only, allreduce, quick"
benchmarks: [allreduce]
set: quick
repetitions: 3
stages:
  - name: transport
    knobs:
      pml: [default, ucx]
"""


def test_an_interrupted_retune_resumes_and_renders_a_candidate(project, probe_campaign, tmp_path):
    """The session's real probe campaign (this table revision, this build), retuned for allreduce
    on a space of one stage: killed after its first records, the same command measures only the
    rest (the records made before keep their bytes) and renders the candidate; the default module
    does not change."""
    _, where, _ = probe_campaign
    space = tmp_path / "space.yaml"
    space.write_text(TINY_SPACE)
    store = tmp_path / "store"
    before = digests(project / "modulefiles" / "local" / "openmpi-tuned")
    cmd = [
        str(ROOT / ".venv" / "bin" / "tunedmpi"),
        "retune",
        "--site",
        "local",
        "--from",
        str(where),
    ]
    cmd += [
        "--benchmarks",
        "allreduce",
        "--space",
        str(space),
        "--store",
        str(store),
        "--no-validate",
    ]
    env = lmod.clean_env(TUNEDMPI_ROOT=str(project))
    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=project
    )
    deadline = time.monotonic() + 300
    runs = "local-1x2-retune-*/*/*/*-rep*.json"  # the retune's own campaign
    while time.monotonic() < deadline and len(list(store.glob(runs))) < 2:
        time.sleep(0.5)
    first.kill()
    _, err = first.communicate()
    made = {p: p.read_bytes() for p in store.glob(runs)}
    assert 2 <= len(made) < 9, "the first retune ended before it was killed: %s" % err[-2000:]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=project, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # 3 repetitions of the baseline, the row's ucx_tls (its pml left at the default) and both
    assert len(list(store.glob(runs))) == 9
    assert [p.name for p in store.iterdir()].count("local-2x1-8911a96cd4") == 1  # the 2x1 row's
    assert all(p.read_bytes() == data for p, data in made.items())
    cand = project / TABLE.replace(".yaml", ".candidate.yaml")
    assert cand.is_file() and "candidate %s" % cand in proc.stdout
    mods = project / "modulefiles" / "local" / "openmpi-tuned"
    assert (mods / "5.0.8-candidate.lua").is_file() and (mods / ".modulerc.lua").is_file()
    assert {k: v for k, v in digests(mods).items() if k in before} == before
    site = sites.load_named("local")
    assert sites.candidate_site(site).table.path == str(cand)


def test_history_names_the_table_revision_each_campaign_judged(project, tmp_path):
    """Two real --full campaigns of the local module, as if the table changed between them."""
    for archive, rev in (
        ("validate-local-20261124T002110Z", "aaaaaaaaaaaa"),
        ("validate-local-20261124T023513Z", "bbbbbbbbbbbb"),
    ):
        judged_campaign(project, archive, "openmpi-tuned/5.0.8", rev, tmp_path / archive)
    proc = tunedmpi("history", project / "validate-results")
    assert proc.returncode in (0, 1), proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.lstrip().startswith("#")]
    assert "table aaaaaaaaaaaa" in lines[0] and "table bbbbbbbbbbbb" in lines[1], proc.stdout


def test_retune_refuses_a_campaign_of_another_mpi_build(project, probe_campaign, tmp_path):
    """The session's real campaign, as if measured on another build (its configure digest): refused
    in one line naming both builds before anything is measured."""
    _, where, doc = probe_campaign
    other = tmp_path / "other"
    other.mkdir()
    doc = dict(doc, build=dict(doc["build"], configure="0000000000000000"))
    (other / "results.json").write_text(json.dumps(doc))
    store = tmp_path / "store"
    proc = tunedmpi(
        "retune", "--site", "local", "--from", other, "--benchmarks", "allreduce", "--store", store
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "build.configure" in proc.stderr and "0000000000000000" in proc.stderr
    assert probe_campaign[2]["build"]["configure"] in proc.stderr and not store.exists()
