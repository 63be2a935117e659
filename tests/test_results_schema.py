"""results.json carries `schema_version` (issue 32): validate writes the current one, and every
reader (history, validate --reanalyse, power, regret) refuses another with one line naming the
file (exit 2). A file without the field is version 1, the format from before it."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import VERDICT_EXITS
from tunedmpi.acceptance import results
from tunedmpi.errors import InputError
from tunedmpi.regenerate import regret

FIX = Path(__file__).parent / "fixtures"
HISTORY = FIX / "history" / "local-20261123T050113Z"  # current format, no schema_version
FULL = FIX / "campaigns" / "local-full-imb-osu"
STORE = FIX / "power" / "store" / "local-1x2-fixture"  # a results-store campaign


def versioned(src, dst, version):
    """A copy of the result directory `src` whose results.json says schema_version `version`."""
    shutil.copytree(src, dst)
    res = json.loads((dst / "results.json").read_text())
    res["schema_version"] = version
    (dst / "results.json").write_text(json.dumps(res))
    return dst


def test_without_the_field_or_at_1_is_read_and_anything_else_refused(tmp_path):
    results.check_schema({}, "r.json")
    results.check_schema({"schema_version": 1}, "r.json")
    for bad in (2, 0, "1", 1.0, True, None):
        with pytest.raises(InputError) as err:
            results.check_schema({"schema_version": bad}, tmp_path / "results.json")
        assert str(tmp_path / "results.json") in str(err.value) and "version" in str(err.value)


@pytest.mark.parametrize(
    "verb, src",
    [("history", HISTORY), ("power", HISTORY), ("regret", FULL), ("validate", FULL)],
)
def test_every_reader_refuses_an_unknown_version_in_one_line(run_cli, tmp_path, verb, src):
    future = versioned(src, tmp_path / "future", 2)
    args = {
        "history": ["history", "--plots", tmp_path / "plots", future],
        "power": ["power", "--draws", 10, future],
        "regret": ["regret", future, "--campaign", STORE],
        "validate": ["validate", "--reanalyse", future, "--out", tmp_path / "again"],
    }[verb]
    code, out, err = run_cli(*args)
    assert code == 2 and out == "", (verb, out, err)
    # history leaves an unreadable campaign out and goes on (issue 42 item 12); when it was the
    # only one, its refusal is the one line
    assert err.count("\n") == 1 and str(future / "results.json") in err, err
    assert "schema_version: results format version 2" in err
    assert not (tmp_path / "again").exists()


def test_legacy_files_are_read_and_new_ones_carry_the_version(run_cli, tmp_path):
    assert "schema_version" not in json.loads((FULL / "results.json").read_text())
    assert regret._module_runs(FULL)[0]
    code, out, err = run_cli("validate", "--reanalyse", FULL, "--out", tmp_path / "again")
    assert code in VERDICT_EXITS, err
    (again,) = (tmp_path / "again").iterdir()
    res = json.loads((again / "results.json").read_text())
    assert res["schema_version"] == results.SCHEMA == 1
