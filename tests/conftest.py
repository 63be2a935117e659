import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # tests run from a clean checkout without installing too
sys.path.insert(0, str(ROOT / "tools"))  # slurmcluster: the test (and `make cluster-up`) Slurm

FIXTURES = ROOT / "tests" / "fixtures"


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
