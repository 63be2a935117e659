import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # tests run from a clean checkout without installing too
sys.path.insert(0, str(ROOT / "tools"))  # slurmcluster: the test (and `make cluster-up`) Slurm

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def run_cli(capsys):
    """Run `tunedmpi ARGS...` in-process; returns (exit code, stdout, stderr)."""
    from tunedmpi.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return run
