import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # tests run from a clean checkout without installing too
sys.path.insert(0, str(ROOT / "tools"))  # slurmcluster: the test (and `make cluster-up`) Slurm

FIXTURES = ROOT / "tests" / "fixtures"

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
