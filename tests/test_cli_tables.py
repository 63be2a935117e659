import csv
import io

from conftest import FIXTURES, ROOT

VALID = FIXTURES / "tables" / "valid.yaml"


def test_csv_has_exactly_the_documented_columns(run_cli):
    code, out, err = run_cli("tables", VALID, "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["nodes", "ppn", "collective", "component", "ucx_tls", "ucx_rndv_thresh",
                       "ucx_zcopy_thresh", "nps", "mapping"]
    assert rows[1:] == [
        ["1", "8", "alltoall", "none", "", "32kb", "", "2", "cyclic"],
        ["1", "8", "alltoall", "ucc", "", "32kb", "", "1", "cyclic"],
        ["1", "8", "alltoall", "hcoll", "", "32kb", "", "1", "block"],
        ["2", "8", "allreduce", "none", "self,sm,rc", "intra:128kb,inter:128kb", "128kb", "1", "block"],
    ]


def test_grid_shows_every_collective_and_component(run_cli):
    code, out, err = run_cli("tables", VALID)
    assert code == 0, err
    for title in ("alltoall / none", "alltoall / ucc", "alltoall / hcoll", "allreduce / none"):
        assert title in out
    assert "r32k N2 cyc" in out
    assert "rc ri128k/e128k z128k N1 blk" in out


def test_unknown_platform_is_a_clear_error(run_cli):
    code, out, err = run_cli("tables", VALID, "--platform", "nowhere")
    assert code == 2
    assert "no table for platform 'nowhere'" in err and "example" in err


def test_check_without_tables_is_a_clear_error(run_cli, tmp_path):
    code, out, err = run_cli("check", tmp_path)
    assert code == 2 and "no tables found" in err


def test_shipped_tables_pass_check(run_cli):
    code, out, err = run_cli("check", ROOT / "tuning-tables")
    assert code == 0, err
    assert "Traceback" not in err


def test_import_seed_refuses_a_missing_seed_cleanly(run_cli, tmp_path):
    out = tmp_path / "t.yaml"
    code, _, err = run_cli("import-seed", tmp_path / "no-such-seed.txt", out)
    assert code == 2 and "error:" in err and "Traceback" not in err
    assert not out.exists(), "nothing half-written"
