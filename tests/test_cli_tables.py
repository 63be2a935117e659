import csv
import io

from conftest import FIXTURES, ROOT

VALID = FIXTURES / "tables" / "valid.yaml"


def test_csv_has_exactly_the_documented_columns(run_cli):
    code, out, err = run_cli("tables", VALID, "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [
        "nodes",
        "ppn",
        "collective",
        "component",
        "ucx_tls",
        "ucx_rndv_thresh",
        "ucx_zcopy_thresh",
        "nps",
        "mapping",
    ]
    assert rows[1:] == [
        ["1", "8", "alltoall", "none", "", "32kb", "", "2", "cyclic"],
        ["1", "8", "alltoall", "ucc", "", "32kb", "", "1", "cyclic"],
        ["1", "8", "alltoall", "hcoll", "", "32kb", "", "1", "block"],
        [
            "2",
            "8",
            "allreduce",
            "none",
            "self,sm,rc",
            "intra:128kb,inter:128kb",
            "128kb",
            "1",
            "block",
        ],
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
    assert code == 2 and "no tables or site configs found" in err


def test_check_checks_site_configs_as_site_configs(run_cli, tmp_path):
    """`check` with no paths checks the site configs too; a site.yaml given is checked as one (not
    as a table); a wrong `site:` and an mpi.version that is not the table's fail, naming both."""
    code, out, err = run_cli("check")
    assert code == 0, err
    assert (
        "ok  %s: site local, openmpi 5.0.8" % (ROOT / "site-configs" / "local" / "site.yaml") in out
    )
    code, out, err = run_cli("check", ROOT / "site-configs" / "local-source")
    assert code == 0 and out.count("ok  ") == 1 and "site local-source" in out, out + err
    text = (ROOT / "site-configs" / "local" / "site.yaml").read_text()
    for folder, old, new, want in (
        ("elsewhere", "site: local\n", "site: lokal\n", "site 'lokal' must be a plain name equal"),
        (
            "local",
            "  version: 5.0.8\n",
            "  version: 5.0.6\n",
            "mpi.version 5.0.6 is not the table's",
        ),
    ):
        conf = tmp_path / folder / "site.yaml"
        conf.parent.mkdir()
        conf.write_text(text.replace(old, new))
        code, _, err = run_cli("check", conf)
        assert code == 2 and want in err and err.count("error: ") == 1, err
    assert "Open MPI 5.0.8" in err and "version: 5.0.8" in err  # both versions, and the fix


def test_check_skips_hidden_folders_such_as_a_spack_environment(run_cli, tmp_path):
    """A site folder's `.spack-env/` (Spack's view, its own repo.yaml files) is not a table."""
    site = tmp_path / "local-source"
    (site / ".spack-env" / "view").mkdir(parents=True)
    (site / ".spack-env" / "view" / "repo.yaml").write_text("repo:\n  namespace: builtin\n")
    (site / "site.yaml").write_text(
        (ROOT / "site-configs" / "local-source" / "site.yaml").read_text()
    )
    code, out, err = run_cli("check", site)
    assert code == 0 and "repo.yaml" not in out + err and "site local-source" in out, out + err


def test_shipped_tables_pass_check(run_cli):
    code, out, err = run_cli("check", ROOT / "tuning-tables")
    assert code == 0, err
    assert "Traceback" not in err


def test_import_seed_refuses_a_missing_seed_cleanly(run_cli, tmp_path):
    out = tmp_path / "t.yaml"
    code, _, err = run_cli("import-seed", tmp_path / "no-such-seed.txt", out)
    assert code == 2 and "error:" in err and "Traceback" not in err
    assert not out.exists(), "nothing half-written"


def test_grid_lists_each_cases_algorithm_bands(run_cli):
    """Every band of the bands fixture, by geometry and collective: sizes, name (number), segsize
    and fan-out where given, algorithm 0 as Open MPI's own decision; cells with bands say so."""
    code, out, err = run_cli("tables", FIXTURES / "tables" / "bands.yaml")
    assert code == 0, err
    head, listing = out.split("\ncoll_tuned algorithm bands ", 1)
    rows = [line.split() for line in listing.splitlines()[2:]]
    assert [" ".join(r) for r in rows] == [
        "1x2 alltoall 0 - end two_proc (5)",
        "1x4 allgather 0 - 1kb bruck (2)",
        "1kb - end ring (4)",
        "1x4 allreduce 0 - 4kb basic_linear (1)",
        "4kb - end segmented_ring (5) segsize 4kb",
        "1x4 alltoall 0 - 1kb modified_bruck (3)",
        "1kb - end linear (1)",
        "1x4 bcast 0 - 1kb chain (2) faninout 2",
        "1kb - end scatter_allgather (8)",
        "2x4 allreduce 0 - 64kb recursive_doubling (3)",
        "64kb - end rabenseifner (6)",
        "2x4 alltoall 0 - 256 Open MPI's fixed decision (0)",
        "256 - end pairwise (2)",
    ]
    # continuation lines keep the size column under the first line's
    lines = listing.splitlines()
    first, cont = lines[3], lines[4]
    assert first.index("0 - 1kb") == cont.index("1kb - end")
    assert "- +bands" in head and "- ? +bands" in head  # 1x4 and 2x4 (unstated) cells


def test_tables_without_bands_print_no_band_listing(run_cli):
    code, out, err = run_cli(
        "tables", ROOT / "tuning-tables" / "oci-bm-optimized3.36"
    )  # a seed table: none
    assert code == 0, err
    assert "coll_tuned algorithm bands (" not in out and "+bands" not in out.split("\n", 2)[2]


def test_help_lists_the_verbs_and_hides_the_internal_one():
    """`tunedmpi --help` names each verb with its help; sweep's internal sweep-task is not listed
    (argparse printed it as `sweep-task ==SUPPRESS==`) and still runs for sweep's job script."""
    from tunedmpi.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "SUPPRESS" not in text and "sweep-task" not in text
    assert "check" in text and "install-module" in text
    assert parser.parse_args(["sweep-task", "c", "s", "1"]).rep == 1
