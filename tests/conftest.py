import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # tests run from a clean checkout without installing too
sys.path.insert(0, str(ROOT / "tools"))  # slurmcluster: the test (and `make cluster-up`) Slurm

FIXTURES = ROOT / "tests" / "fixtures"


def _verdict_exits():
    from tunedmpi.acceptance.validate import EXIT_CODES

    return frozenset(EXIT_CODES.values())


# validate's exit codes that carry a verdict, whichever (2 is could not run)
VERDICT_EXITS = _verdict_exits()


def assert_verdict(code, results, context=""):
    """A real campaign ended with a verdict, whichever the host's noise gave, and its exit code is
    that verdict's (validate.EXIT_CODES) in the process and in its results.json."""
    from tunedmpi.acceptance.validate import EXIT_CODES

    verdict = results.get("verdict")
    assert verdict in EXIT_CODES and code == results["exit_code"] == EXIT_CODES[verdict], (
        "exit %s, verdict %s\n%s" % (code, verdict, context)
    )


# The seed documents (the team's studies, shared/seeds/ on its machines) are not in this repository:
# a test that reads one finds it in the folder this variable names, and skips without it. Nothing
# outside the checkout is read unless a variable names it.
SEEDS_VAR = "TUNEDMPI_SEEDS"


def seed_path(name):
    """The seed document `name` (e.g. 000_6452ddfe42026a33.txt) in the folder $TUNEDMPI_SEEDS names,
    or None when the variable is unset or empty or that folder does not hold it."""
    folder = os.environ.get(SEEDS_VAR)
    path = Path(folder).resolve() / name if folder else None
    return path if path and path.is_file() else None


def needs_seed(name):
    """A skipif mark for tests that read seed `name`, its reason one line saying where to put it."""
    folder = os.environ.get(SEEDS_VAR)
    where = (
        "%s=%s does not hold it; point it at" % (SEEDS_VAR, folder)
        if folder
        else "set %s to" % SEEDS_VAR
    )
    return pytest.mark.skipif(
        seed_path(name) is None,
        reason="needs seed %s: %s the folder that holds it "
        "(the team's shared/seeds)" % (name, where),
    )


def unpack_archive(name, dest):
    """results-archive/<name>.tar.xz unpacked under dest (its results-store/ or validate-results/
    folder inside), extracting only plain files and folders where Python can say so."""
    import tarfile

    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(ROOT / "results-archive" / ("%s.tar.xz" % name)) as tar:
        tar.extractall(dest, **safe)


@pytest.fixture
def run_cli(capsys):
    """Run `tunedmpi ARGS...` in-process; returns (exit code, stdout, stderr)."""
    from tunedmpi.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


# `make test` runs the files on pytest-xdist workers (`-n 3 --dist loadscope`), each file on one
# worker so its module fixtures run once. Files that must not run side by side share a lane, which
# runs them one after another, the longest lanes first: the namespace-host clusters (their hosts
# share a subnet and names), the one-node clusters, and the files that read the session's probe
# campaign (so it is measured once). Each worker has its own measurement lock (measure_lock), which
# reaches its cluster jobs: the suite's validates and sweeps run beside other tests as beside any
# load, and every test of a real run takes whatever verdict the host's noise gives (assert_verdict)
# and asserts the wiring. Numbers that are judged (tables, validations, notes) are measured alone,
# under the machine's lock, never by the test suite.
LANES = {  # longest lane first
    "test_multihost.py": "hosts",
    "test_coverage_slurm.py": "hosts",
    "test_slurm.py": "one-node",
    "test_reframe.py": "one-node",
    "test_validate.py": "probe campaign",
    "test_loop.py": "probe campaign",
    "test_probe_noise.py": "probe campaign",
}
FIRST = tuple(dict.fromkeys(LANES.values()))  # the order xdist hands the lanes out in


def lane(path):
    """The lane of the test file at `path` (a file not in LANES is a lane of its own)."""
    name = Path(path).name
    return LANES.get(name, name)


def pytest_collection_modifyitems(items):
    rank = {name: n for n, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(lane(item.path), len(FIRST)))  # stable: files keep theirs


def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope with the lanes as scopes (xdist's loadgroup marks no longer reach the
    scheduler under pytest 9: it writes them into a test id pytest no longer reads)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return lane(nodeid.split("::", 1)[0])

    return LaneScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def measure_lock(tmp_path_factory):
    """This session's machine-wide measurement lock (bench/machine.py) under its tmp folder: the
    suites of several checkouts on one machine do not refuse each other's validates, and no test
    writes /tmp/tunedmpi-measure.lock."""
    path = tmp_path_factory.mktemp("machine") / "measure.lock"
    old = os.environ.get("TUNEDMPI_MEASURE_LOCK")
    os.environ["TUNEDMPI_MEASURE_LOCK"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TUNEDMPI_MEASURE_LOCK", None)
    else:
        os.environ["TUNEDMPI_MEASURE_LOCK"] = old


# One real quick probe campaign (validate/run.sh on this machine: the local site's tuned module
# against its baseline, 2 ranks, 5 counterbalanced pairs, no extension), run once per session for
# the tests that read one: test_validate.py (its structure and parsed numbers) and
# test_probe_noise.py (its noise, against the real suites' quick campaign of 5 repetitions).
PROBE_REPETITIONS = 5
PROBE_BENCHMARKS = (
    "alltoall",
    "allgather",
    "allreduce",
    "bcast",
    "put_latency",
    "get_latency",
    "put_bw",
)


def probe_campaign_run(out):
    """validate/run.sh with the shared campaign's options into folder `out`: (proc, directories)."""
    import subprocess

    import lmod

    args = ["--probes", "--site", "local", "--quick", "--no-extend"]
    args += ["--repetitions", str(PROBE_REPETITIONS), "--benchmarks", ",".join(PROBE_BENCHMARKS)]
    proc = subprocess.run(
        [str(ROOT / "validate" / "run.sh"), *args, "--out", str(out)],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    dirs = sorted(d for d in Path(out).iterdir() if d.is_dir()) if Path(out).is_dir() else []
    return proc, dirs


@pytest.fixture(scope="session")
def probe_campaign(tmp_path_factory):
    """The shared campaign: (proc, its results directory, its results.json)."""
    import json

    proc, dirs = probe_campaign_run(tmp_path_factory.mktemp("probe-campaign") / "out")
    assert len(dirs) == 1, "validate/run.sh exited %d\n%s" % (proc.returncode, proc.stderr[-3000:])
    return proc, dirs[0], json.loads((dirs[0] / "results.json").read_text())
