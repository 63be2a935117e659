"""Seed 000 (OCI tutorial, Open MPI 5.0.6 on BM.Optimized3.36) and its importer.

(a) the committed table is exactly what tunedmpi.importers.seed000 makes of the seed (when $TUNEDMPI_SEEDS
    names the folder that holds it);
(b) spot values read by eye in shared/seeds/000_6452ddfe42026a33.txt, independent of the importer;
(c) counts and the 2+-node rules; (d) the findings phrase parser; (e) the component choice rule.
"""

import pytest

import conftest
from conftest import ROOT
from tunedmpi.importers import seed000
from tunedmpi.importers.seed000 import SeedError, derive_choice, parse_finding
from tunedmpi.tables.schema import load_table

TABLE = ROOT / "tuning-tables" / "oci-bm-optimized3.36" / "openmpi-5.0.6.yaml"
SEED_NAME = "000_6452ddfe42026a33.txt"
SEED = conftest.seed_path(SEED_NAME)  # None without $TUNEDMPI_SEEDS: the tests that read it skip
needs_seed = conftest.needs_seed(SEED_NAME)

COMPONENTS = ("none", "ucc", "hcoll")
KB, MB = 1 << 10, 1 << 20


@pytest.fixture(scope="module")
def table():
    return load_table(str(TABLE))


@pytest.fixture(scope="module")
def seed_text():
    return SEED.read_text(encoding="utf-8")


# ------------------------------------------------------------------ (a) regeneration


@needs_seed
def test_regenerating_from_the_seed_gives_the_committed_yaml():
    _, text = seed000.render_seed_file(str(SEED))
    assert text == TABLE.read_text(encoding="utf-8"), (
        "regenerate with: PYTHONPATH=src python -m tunedmpi.importers.seed000 %s %s" % (SEED, TABLE)
    )


@needs_seed
def test_main_writes_the_file_atomically(tmp_path, capsys):
    out = tmp_path / "t.yaml"
    out.write_text("old\n")
    assert seed000.main([str(SEED), str(out)]) == 0
    assert out.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["t.yaml"]  # no temporary file left
    assert "48 cases, 144 component settings" in capsys.readouterr().out


def test_main_reports_a_bad_seed(tmp_path, capsys):
    seed = tmp_path / "seed.txt"
    seed.write_text("---\ntitle: x\n---\n# 0. 概要\nnothing\n", encoding="utf-8")
    assert seed000.main([str(seed), str(tmp_path / "t.yaml")]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "t.yaml").exists()


# ------------------------------------------------------------------ (b) values read by eye

# (nodes, ppn, collective): {component: (ucx_rndv_thresh, nps, mapping)}, plus for 2+ nodes the
# N-M-0 row (ucx_tls, ucx_zcopy_thresh) common to all components. Read in the seed, not the importer.
T = "self,sm,rc"
U = "self,sm,ud"
SPOT = {
    (1, 8, "alltoall"): (
        {
            "none": ("32kb", 2, "cyclic"),
            "ucc": ("32kb", 1, "cyclic"),
            "hcoll": ("32kb", 1, "cyclic"),
        },
        None,
    ),
    (1, 8, "allgather"): (
        {"none": ("64kb", 1, "cyclic"), "ucc": ("32kb", 1, "block"), "hcoll": ("64kb", 2, "block")},
        None,
    ),
    (1, 8, "allreduce"): (
        {
            "none": ("64kb", 2, "block"),
            "ucc": ("128kb", 2, "cyclic"),
            "hcoll": ("128kb", 2, "cyclic"),
        },
        None,
    ),
    (1, 16, "alltoall"): (
        {
            "none": ("16kb", 1, "cyclic"),
            "ucc": ("32kb", 1, "cyclic"),
            "hcoll": ("32kb", 1, "cyclic"),
        },
        None,
    ),
    (1, 32, "allgather"): (
        {"none": ("16kb", 2, "block"), "ucc": ("16kb", 2, "block"), "hcoll": ("16kb", 2, "block")},
        None,
    ),
    (1, 32, "allreduce"): (
        {
            "none": ("auto", 2, "block"),
            "ucc": ("128kb", 1, "cyclic"),
            "hcoll": ("128kb", 1, "block"),
        },
        None,
    ),
    (1, 36, "allgather"): (
        {"none": ("16kb", 2, "block"), "ucc": ("16kb", 2, "block"), "hcoll": ("16kb", 2, "block")},
        None,
    ),
    (1, 36, "allreduce"): (
        {
            "none": ("auto", 2, "block"),
            "ucc": ("128kb", 1, "block"),
            "hcoll": ("128kb", 1, "block"),
        },
        None,
    ),
    (2, 8, "alltoall"): (
        {
            "none": ("intra:32kb,inter:128kb", 2, "block"),
            "ucc": ("intra:32kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:32kb,inter:128kb", 1, "block"),
        },
        (T, "128kb"),
    ),
    (2, 16, "allreduce"): (
        {
            "none": ("intra:128kb,inter:128kb", 2, "cyclic"),
            "ucc": ("intra:128kb,inter:128kb", 2, "cyclic"),
            "hcoll": ("intra:128kb,inter:128kb", 2, "cyclic"),
        },
        (T, "128kb"),
    ),
    (2, 32, "allgather"): (
        {
            "none": ("intra:16kb,inter:128kb", 2, "block"),
            "ucc": ("intra:16kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:16kb,inter:128kb", 2, "block"),
        },
        (T, "128kb"),
    ),
    (2, 36, "alltoall"): (
        {
            "none": ("intra:16kb,inter:128kb", 2, "cyclic"),
            "ucc": ("intra:16kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:16kb,inter:128kb", 2, "block"),
        },
        (T, "128kb"),
    ),
    (4, 8, "alltoall"): (
        {
            "none": ("intra:32kb,inter:128kb", 2, "block"),
            "ucc": ("intra:32kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:32kb,inter:128kb", 2, "cyclic"),
        },
        (U, "128kb"),
    ),
    (4, 16, "alltoall"): (
        {
            "none": ("intra:32kb,inter:32kb", 2, "block"),
            "ucc": ("intra:32kb,inter:32kb", 2, "block"),
            "hcoll": ("intra:32kb,inter:32kb", 2, "block"),
        },
        (U, "128kb"),
    ),
    (4, 16, "allgather"): (
        {
            "none": ("intra:32kb,inter:128kb", 1, "cyclic"),
            "ucc": ("intra:32kb,inter:128kb", 2, "cyclic"),
            "hcoll": ("intra:32kb,inter:128kb", 2, "block"),
        },
        (T, "128kb"),
    ),
    (4, 32, "alltoall"): (
        {
            "none": ("intra:16kb,inter:128kb", 2, "cyclic"),
            "ucc": ("intra:16kb,inter:128kb", 1, "block"),
            "hcoll": ("intra:16kb,inter:128kb", 1, "cyclic"),
        },
        (U, "128kb"),
    ),
    (4, 36, "allreduce"): (
        {
            "none": ("intra:128kb,inter:128kb", 2, "block"),
            "ucc": ("intra:128kb,inter:128kb", 1, "block"),
            "hcoll": ("intra:128kb,inter:128kb", 1, "block"),
        },
        (T, "128kb"),
    ),
    (8, 8, "allgather"): (
        {
            "none": ("intra:64kb,inter:128kb", 1, "cyclic"),
            "ucc": ("intra:64kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:64kb,inter:128kb", 2, "cyclic"),
        },
        (T, "128kb"),
    ),
    (8, 16, "alltoall"): (
        {
            "none": ("intra:32kb,inter:128kb", 2, "block"),
            "ucc": ("intra:32kb,inter:128kb", 2, "block"),
            "hcoll": ("intra:32kb,inter:128kb", 2, "cyclic"),
        },
        (T, "128kb"),
    ),
    (8, 32, "alltoall"): (
        {
            "none": ("intra:16kb,inter:128kb", 1, "cyclic"),
            "ucc": ("intra:16kb,inter:128kb", 1, "block"),
            "hcoll": ("intra:16kb,inter:128kb", 2, "block"),
        },
        (U, "128kb"),
    ),
    (8, 32, "allreduce"): (
        {
            "none": ("intra:128kb,inter:128kb", 2, "block"),
            "ucc": ("intra:128kb,inter:128kb", 1, "cyclic"),
            "hcoll": ("intra:128kb,inter:128kb", 1, "cyclic"),
        },
        (T, "128kb"),
    ),
    (8, 36, "alltoall"): (
        {
            "none": ("intra:16kb,inter:128kb", 2, "cyclic"),
            "ucc": ("intra:16kb,inter:128kb", 2, "cyclic"),
            "hcoll": ("intra:16kb,inter:128kb", 2, "block"),
        },
        (U, "128kb"),
    ),
    (8, 36, "allreduce"): (
        {
            "none": ("intra:128kb,inter:128kb", 2, "block"),
            "ucc": ("intra:128kb,inter:128kb", 1, "block"),
            "hcoll": ("intra:128kb,inter:128kb", 1, "block"),
        },
        (T, "128kb"),
    ),
}


def test_spot_values_cover_the_whole_grid():
    assert {k[0] for k in SPOT} == {1, 2, 4, 8}
    assert {k[1] for k in SPOT} == {8, 16, 32, 36}
    assert {k[2] for k in SPOT} == {"alltoall", "allgather", "allreduce"}
    assert len(SPOT) >= 20


@pytest.mark.parametrize("key", sorted(SPOT))
def test_spot_values_read_in_the_seed(table, key):
    per_comp, common = SPOT[key]
    case = table.case(*key)
    assert case is not None
    for comp in COMPONENTS:
        rndv, nps, mapping = per_comp[comp]
        got = case.settings[comp]
        assert (got["ucx_rndv_thresh"], got["nps"], got["mapping"]) == (rndv, nps, mapping), comp
        if common is None:
            assert "ucx_tls" not in got and "ucx_zcopy_thresh" not in got
        else:
            assert (got["ucx_tls"], got["ucx_zcopy_thresh"]) == common, comp


def test_table_identity_and_provenance(table):
    assert table.platform == "oci-bm-optimized3.36"
    assert (table.mpi_flavour, table.mpi_version) == ("openmpi", "5.0.6")
    assert table.ucx_version is None
    prov = table.provenance
    assert prov["source"] == "shared/seeds/000_6452ddfe42026a33.txt"
    assert prov["benchmark"] == "Intel MPI Benchmarks 2021.7 (IMB-MPI1)"
    assert prov["command"] == (
        "numactl -l IMB-MPI1 -msglog 0:xx -mem 2.3G -off_cache 39,64 "
        "-npmin num_of_procs alltoall/allgather/allreduce"
    )
    assert prov["msglog_max"] == {
        "alltoall": {1: 25, 2: 24, 4: 23, 8: 22},
        "allgather": {1: 25, 2: 24, 4: 23, 8: 22},
        "allreduce": {1: 30, 2: 30, 4: 30, 8: 30},
    }
    assert prov["date"] is None
    assert any("1.17" in n for n in prov["notes"])
    assert table.baseline == {
        "ucx_rndv_thresh": "auto",
        "ucx_zcopy_thresh": "auto",
        "component": "hcoll",
    }


def test_findings_text_is_verbatim_without_bold(table):
    case = table.case(2, 8, "alltoall")
    assert [f.text for f in case.findings] == [
        "UCC は4KBから256KBの間で性能が低下し256B以下で概ね性能が向上",
        "HCOLL は256B以下で概ね性能が向上",
        "UCC は HCOLL に対して64KB以下で概ね性能が低下",
        "チューニング未適用は2KBから128KBの間で大幅に性能が低下",
    ]
    assert table.case(1, 8, "allgather").findings[3].text == "チューニング適用による性能の変化無し"


# ------------------------------------------------------------------ (c) counts and rules


def test_counts(table):
    assert len(table.cases) == 48
    assert sum(len(c.settings) for c in table.cases) == 144
    assert {c.key for c in table.cases} == {
        (n, p, c)
        for n in (1, 2, 4, 8)
        for p in (8, 16, 32, 36)
        for c in ("alltoall", "allgather", "allreduce")
    }


def test_every_case_has_four_findings_in_order_and_a_full_choice(table):
    for case in table.cases:
        assert [f.about for f in case.findings] == list(seed000.FINDING_ORDER), case.section
        assert set(case.settings) == set(COMPONENTS)
        assert case.choice[0].band.lo == 0 and case.choice[-1].band.hi is None
        for a, b in zip(case.choice, case.choice[1:]):
            assert a.band.hi == b.band.lo and a.component != b.component


def test_multi_node_settings_state_the_inter_node_knobs(table):
    for case in table.cases:
        for comp, knobs in case.settings.items():
            if case.nodes >= 2:
                assert knobs["ucx_tls"] in (T, U)
                assert (
                    knobs["ucx_rndv_thresh"].startswith("intra:")
                    and ",inter:" in knobs["ucx_rndv_thresh"]
                )
                assert knobs["ucx_zcopy_thresh"] == "128kb"
            else:
                assert set(knobs) == {"ucx_rndv_thresh", "nps", "mapping"}
                assert set(case.unstated) == {"ucx_tls", "ucx_zcopy_thresh"}


# ------------------------------------------------------------------ (d) phrase parser


def bands(phrase):
    out = []
    for b in parse_finding(phrase, "t")["bands"]:
        lo, hi = seed000.band_bytes(b)
        out.append((lo, hi, b["effect"]))
    return out


@pytest.mark.parametrize(
    "phrase,expected",
    [
        (
            "UCC は32KB以上で性能が低下しそれ未満で顕著な傾向無し",
            [(32 * KB, None, "worse"), (0, 32 * KB, "neutral")],
        ),
        ("HCOLL は顕著な傾向無し", [(0, None, "neutral")]),
        ("UCC は HCOLL に対して64KB以下で概ね性能が低下", [(0, 128 * KB, "worse")]),
        (
            "UCC は512B未満で性能が向上しそれ以上で顕著な傾向無し",
            [(0, 512, "better"), (512, None, "neutral")],
        ),
        (
            "UCC は4KBから256KBの間で性能が低下し256B以下で概ね性能が向上",
            [(4 * KB, 512 * KB, "worse"), (0, 512, "better")],
        ),
        ("UCC は16KB以上と128B以下で性能が低下", [(16 * KB, None, "worse"), (0, 256, "worse")]),
        (
            "HCOLL は32KB以上で顕著な傾向無くそれ未満のほぼ全域で性能が低下",
            [(32 * KB, None, "neutral"), (0, 32 * KB, "worse")],
        ),
        (
            "UCC は HCOLL に対して4KBから32KBの間で性能が向上しそれ未満で性能が低下",
            [(4 * KB, 64 * KB, "better"), (0, 4 * KB, "worse")],
        ),
        (
            "UCC は HCOLL に対して1MBから16MBまで性能が向上しそれ以上とそれ以下で概ね性能が低下",
            [(MB, 32 * MB, "better"), (32 * MB, None, "worse"), (0, MB, "worse")],
        ),
        (
            "UCC は HCOLL に対して128Bから1KBの間で性能が低下し2KBと8KBの間と64B以下で性能が向上",
            [(128, 2 * KB, "worse"), (2 * KB, 16 * KB, "better"), (0, 128, "better")],
        ),
        (
            "UCC は16Bから256Bの間で性能が低下しそれ以外で性能が向上",
            [(16, 512, "worse"), (0, 16, "better"), (512, None, "better")],
        ),
        (
            "UCC は HCOLL に対して128Bから512KBで性能が低下しそれ以外で顕著な傾向無し",
            [(128, MB, "worse"), (0, 128, "neutral"), (MB, None, "neutral")],
        ),
        ("UCC は概ね全域で性能が向上", [(0, None, "better")]),
        ("チューニング未適用は8KBから128KBの間で大幅に性能が低下", [(8 * KB, 256 * KB, "worse")]),
        ("チューニング未適用は8KB以下で性能が大幅に低下", [(0, 16 * KB, "worse")]),
        ("チューニング未適用は概ね性能が低下", [(0, None, "worse")]),
        ("チューニング適用による性能の変化無し", [(0, None, "neutral")]),
    ],
)
def test_phrase_bands(phrase, expected):
    assert bands(phrase) == expected


def test_phrase_about_and_english():
    f = parse_finding("UCC は HCOLL に対して8KB以上で概ね性能が向上しそれ未満で性能が低下", "t")
    assert f["about"] == "ucc_vs_hcoll"
    assert f["en"] == "UCC vs HCOLL: mostly better at >= 8KB; worse below that"
    f = parse_finding("チューニング未適用は16KBから16MBの間で大幅に性能が低下", "t")
    assert (f["about"], f["en"]) == (
        "untuned_vs_tuned",
        "Untuned vs tuned: untuned much worse from 16KB to 16MB",
    )


@pytest.mark.parametrize(
    "phrase,words",
    [
        ("UCC は大きなメッセージで性能が向上", "大きなメッセージ"),
        ("UCC は32KB以上で性能がやや向上", "32KB以上で性能がやや向上"),
        ("HCOLL はそれ未満で性能が向上", "それ未満"),
        ("MPI は32KB以上で性能が向上", "names no known comparison"),
        ("UCC は32KB以上で性能が向上し", "ends in the middle"),
    ],
)
def test_unreadable_phrases_fail_loudly(phrase, words):
    with pytest.raises(SeedError) as exc:
        parse_finding(phrase, "9-9-9")
    assert "section 9-9-9" in str(exc.value) and words in str(exc.value)


# ------------------------------------------------------------------ (e) component choice


def choice_of(*phrases):
    rows, _ = derive_choice([parse_finding(p, "t") for p in phrases])
    return [
        (seed000.band_bytes(r)[0], seed000.band_bytes(r)[1], r["component"], r["basis"])
        for r in rows
    ]


def test_readme_example_2_1_1():
    assert choice_of(
        "UCC は4KBから256KBの間で性能が低下し256B以下で概ね性能が向上",
        "HCOLL は256B以下で概ね性能が向上",
        "UCC は HCOLL に対して64KB以下で概ね性能が低下",
    ) == [(0, 512, "hcoll", [0, 1, 2]), (512, None, "none", [0, 1])]


def test_choice_single_winner_and_ucc_tie_break():
    # 1-4-3: HCOLL alone below 128B, tie broken for HCOLL to 8KB, UCC alone to 128KB, then a tie
    # that finding 2 calls neutral: HCOLL, which the untuned default already enables.
    assert choice_of(
        "UCC は128B以上で性能が向上",
        "HCOLL は128KB以上と4KB以下で性能が向上",
        "UCC は HCOLL に対して8KB以上で顕著な傾向が無くそれ未満で性能が低下",
    ) == [
        (0, 8 * KB, "hcoll", [0, 1, 2]),
        (8 * KB, 128 * KB, "ucc", [0, 1]),
        (128 * KB, None, "hcoll", [0, 1, 2]),
    ]
    # 2-4-3: both better everywhere; finding 2 decides on both sides of 8KB.
    assert choice_of(
        "UCC は全域で性能が向上",
        "HCOLL は全域で性能が向上",
        "UCC は HCOLL に対して8KB以上で概ね性能が向上しそれ未満で性能が低下",
    ) == [(0, 8 * KB, "hcoll", [0, 1, 2]), (8 * KB, None, "ucc", [0, 1, 2])]


def test_choice_keeps_none_when_nothing_is_better_and_an_unbroken_tie_takes_hcoll():
    assert choice_of(
        "UCC はほぼ全域で性能が低下",
        "HCOLL はほぼ全域で性能が低下",
        "UCC は HCOLL に対して4KBから32KBの間で性能が向上しそれ未満で性能が低下",
    ) == [(0, None, "none", [0, 1])]
    rows, notes = derive_choice(
        [
            parse_finding(p, "t")
            for p in (
                "UCC は全域で性能が向上",
                "HCOLL はほぼ全域で性能が向上",
                "UCC は HCOLL に対して顕著な傾向無し",
            )
        ]
    )
    assert [(r["from"], r["to"], r["component"]) for r in rows] == [(0, None, "hcoll")]
    assert notes and "tie rule takes hcoll" in notes[0]


def test_committed_notes_name_the_studys_own_inconsistencies(table):
    notes = {c.section: "\n".join(c.notes) for c in table.cases}
    assert "finding 1 says worse on both sides" in notes["4-4-1"]
    for section, band in (("1-1-1", "[32kb, inf)"), ("4-3-1", "[256, 1kb)"), ("4-4-1", "[0, 512)")):
        assert "findings disagree %s" % band in notes[section]
    assert sum(n.count("findings disagree") for n in notes.values()) == 3


def test_committed_choice_follows_the_rule(table):
    case = table.case(2, 8, "alltoall")
    assert [(c.band.lo, c.band.hi, c.component, c.basis) for c in case.choice] == [
        (0, 512, "hcoll", [0, 1, 2]),
        (512, None, "none", [0, 1]),
    ]


# ------------------------------------------------------------------ cross-checks inside the seed


@needs_seed
def test_the_seed_agrees_with_itself_on_the_2_plus_node_ucx_values(seed_text):
    table = seed000.import_seed(seed_text)
    for case in table["cases"]:
        for note in case.get("notes", []):  # only notes about findings and choice
            assert note.startswith(
                ("findings disagree ", "choice [", "finding 1 says worse on both")
            ), (case["section"], note)


@needs_seed
def test_a_step_sentence_that_disagrees_with_the_summary_table_becomes_a_note(seed_text):
    head, sep, tail = seed_text.partition("### 2-1-1. Alltoall")
    tail = tail.replace(
        "**UCX_TLS** を **self,sm,rc** とした場合", "**UCX_TLS** を **self,sm,ud** とした場合", 1
    )
    tail = tail.replace(
        "の **HCOLL** の結果から32kbとしています", "の **HCOLL** の結果から64kbとしています", 1
    )
    table = seed000.import_seed(head + sep + tail)
    case = next(c for c in table["cases"] if c["section"] == "2-1-1")
    assert case["settings"]["none"]["ucx_tls"] == "self,sm,rc"  # the N-M-0 table wins
    text = "\n".join(case["notes"])
    assert "step 1 sets UCX_TLS to self,sm,ud, the 2-1-0 table gives self,sm,rc" in text
    assert "intra-node optimum as 64kb (from 1-1-1), the 2-1-0 table gives intra:32kb" in text
    assert "1-1-1's HCOLL table gives 32kb" in text


@needs_seed
def test_a_missing_table_row_stops_the_import(seed_text):
    broken = seed_text.replace("|**NPS**|2|1|1|", "|**NPX**|2|1|1|", 1)
    with pytest.raises(SeedError, match="section 1-1-1: the NPS row"):
        seed000.import_seed(broken)
