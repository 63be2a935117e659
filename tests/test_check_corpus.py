"""A corpus of malformed tables: each is the valid fixture with one defect, and each must be
refused by `tunedmpi check` with exit 2, one precise message naming line, key and fix — never a
traceback."""

import re

import pytest

from conftest import FIXTURES

VALID = (FIXTURES / "tables" / "valid.yaml").read_text(encoding="utf-8")

# (name, text to replace in valid.yaml, replacement, expected line, expected key, message part)
CORPUS = [
    ("schema-version", "schema: 1\n", "schema: 2\n", 1, "schema", "schema must be 1, not 2"),
    ("schema-missing", "schema: 1\n", "", 1, "schema", "schema must be 1, not None"),
    (
        "platform-not-a-name",
        "platform: example",
        "platform: Example Platform",
        2,
        "platform",
        "is not a plain name",
    ),
    (
        "mpi-flavour",
        "flavour: openmpi",
        "flavour: mvapich",
        4,
        "mpi.flavour",
        "unsupported MPI flavour",
    ),
    (
        "mpi-version-missing",
        "mpi: {flavour: openmpi, version: 5.0.6}",
        "mpi: {flavour: openmpi}",
        4,
        "mpi.version",
        "missing key 'version'",
    ),
    (
        "ucx-version-bad",
        'ucx_version: "1.18"',
        'ucx_version: "one.eighteen"',
        5,
        "ucx_version",
        "is not a version",
    ),
    (  # issue 50: read as the number 1.2, it rendered the UCX 1.2 threshold syntax
        "ucx-version-a-number",
        'ucx_version: "1.18"',
        "ucx_version: 1.20",
        5,
        "ucx_version",
        "1.2 is a number, not a version (YAML reads an unquoted 1.20 as 1.2)",
    ),
    (
        "mpi-version-a-number",
        "mpi: {flavour: openmpi, version: 5.0.6}",
        "mpi: {flavour: openmpi, version: 5.10}",
        4,
        "mpi.version",
        "5.1 is a number, not a version",
    ),
    (
        "ucx-version-missing",
        'ucx_version: "1.18"\n',
        "",
        1,
        "ucx_version",
        "missing key 'ucx_version'",
    ),
    (
        "provenance-document-missing",
        '  document: "Test fixture"\n',
        "",
        6,
        "provenance.document",
        "missing key 'document'",
    ),
    (
        "provenance-method-empty",
        'method: "5 runs; drop max and min; mean of 3"',
        'method: ""',
        11,
        "provenance.method",
        "must be non-empty text",
    ),
    (
        "provenance-unknown-key",
        "  date: null\n",
        "  date: null\n  author: someone\n",
        13,
        "provenance.author",
        "unknown key in provenance",
    ),
    ("provenance-date-missing", "  date: null\n", "", 6, "provenance.date", "missing key 'date'"),
    (
        "baseline-missing",
        'baseline:\n  text: "UCX_RNDV_THRESH=auto, coll_hcoll_enable=1, coll_ucc_enable=0"\n'
        "  knobs: {ucx_rndv_thresh: auto, component: hcoll}\n",
        "",
        1,
        "baseline",
        "missing key 'baseline'",
    ),
    (
        "baseline-knobs-empty",
        "knobs: {ucx_rndv_thresh: auto, component: hcoll}",
        "knobs: {}",
        15,
        "baseline.knobs",
        "must list the untuned values",
    ),
    (
        "baseline-bad-component",
        "knobs: {ucx_rndv_thresh: auto, component: hcoll}",
        "knobs: {ucx_rndv_thresh: auto, component: mxm}",
        15,
        "baseline.knobs.component",
        "component must be one of none, ucc, hcoll",
    ),
    (
        "nodes-zero",
        "  - nodes: 1\n",
        "  - nodes: 0\n",
        17,
        "cases[0].nodes",
        "whole number >= 1, not 0",
    ),
    (
        "ppn-not-a-number",
        "    ppn: 8\n    collective: alltoall",
        "    ppn: eight\n    collective: alltoall",
        18,
        "cases[0].ppn",
        "whole number >= 1, not 'eight'",
    ),
    (
        "collective-unknown",
        "collective: alltoall",
        "collective: alltoallv",
        19,
        "cases[0].collective",
        "collective must be one of",
    ),
    (
        "section-missing",
        '    section: "1-1-1"\n',
        "",
        17,
        "cases[0].section",
        "missing key 'section'",
    ),
    (
        "component-unknown",
        "      hcoll: {ucx_rndv_thresh: 32768",
        "      sharp: {ucx_rndv_thresh: 32768",
        24,
        "cases[0].settings.sharp",
        "unknown component 'sharp'",
    ),
    (
        "knob-unknown",
        "none: {ucx_rndv_thresh: 32KB,",
        "none: {ucx_rndv_tresh: 32KB,",
        22,
        "cases[0].settings.none.ucx_rndv_tresh",
        "unknown knob 'ucx_rndv_tresh'",
    ),
    (
        "size-bad-unit",
        "none: {ucx_rndv_thresh: 32KB,",
        "none: {ucx_rndv_thresh: 32XB,",
        22,
        "cases[0].settings.none.ucx_rndv_thresh",
        "'32XB' is not a size",
    ),
    (
        "size-negative",
        "ucc: {ucx_rndv_thresh: 32k,",
        "ucc: {ucx_rndv_thresh: -32k,",
        23,
        "cases[0].settings.ucc.ucx_rndv_thresh",
        "'-32k' is not a size",
    ),
    (
        "size-null",
        "ucc: {ucx_rndv_thresh: 32k,",
        "ucc: {ucx_rndv_thresh: null,",
        23,
        "cases[0].settings.ucc.ucx_rndv_thresh",
        "has no value",
    ),
    (
        "nps-three",
        "none: {ucx_rndv_thresh: 32KB, nps: 2",
        "none: {ucx_rndv_thresh: 32KB, nps: 3",
        22,
        "cases[0].settings.none.nps",
        "must be 1, 2 or 4, not 3",
    ),
    (
        "mapping-unknown",
        "mapping: block}",
        "mapping: scatter}",
        24,
        "cases[0].settings.hcoll.mapping",
        "mapping must be one of block, cyclic",
    ),
    (
        "duplicate-key",
        "nps: 2, mapping: cyclic}",
        "nps: 2, nps: 1, mapping: cyclic}",
        22,
        "cases[0].settings.none.nps",
        "duplicate key (first given on line 22)",
    ),
    (
        "duplicate-case",
        "  - nodes: 2\n    ppn: 8\n    collective: allreduce",
        "  - nodes: 1\n    ppn: 8\n    collective: alltoall",
        33,
        "cases[1]",
        "duplicate case nodes=1 ppn=8 alltoall (first at line 17)",
    ),
    (
        "ppn-missing",
        "  - nodes: 2\n    ppn: 8\n",
        "  - nodes: 2\n",
        33,
        "cases[1].ppn",
        "missing key 'ppn'",
    ),
    (
        "inter-node-tls-missing",
        '        ucx_tls: "self,sm,rc"\n',
        "",
        38,
        "cases[1].settings.none",
        "a 2+-node case needs inter-node values: 'ucx_tls' is missing",
    ),
    (
        "inter-node-only-intra",
        '"intra:128kb,inter:128kb"',
        '"auto,intra:128kb"',
        40,
        "cases[1].settings.none.ucx_rndv_thresh",
        "gives only an intra-node threshold",
    ),
    (
        "lone-intra-key",
        "none: {ucx_rndv_thresh: 32KB,",
        'none: {ucx_rndv_thresh: "intra:32kb",',
        22,
        "cases[0].settings.none.ucx_rndv_thresh",
        "lone 'intra:' key is a fatal error",
    ),
    (
        "keys-before-ucx-1.17",
        'ucx_version: "1.18"',
        'ucx_version: "1.11.2"',
        40,
        "cases[1].settings.none.ucx_rndv_thresh",
        "UCX 1.11.2 accepts no intra:/inter: keys",
    ),
    (
        "threshold-key-unknown",
        '"intra:128kb,inter:128kb"',
        '"intra:128kb,cross:128kb"',
        40,
        "cases[1].settings.none.ucx_rndv_thresh",
        "unknown threshold key 'cross'",
    ),
    (
        "threshold-key-twice",
        '"intra:128kb,inter:128kb"',
        '"intra:128kb,intra:64kb"',
        40,
        "cases[1].settings.none.ucx_rndv_thresh",
        "'intra:' is given twice",
    ),
    (
        "tls-unknown-transport",
        '"self,sm,rc"',
        '"self,sm,infiniband"',
        39,
        "cases[1].settings.none.ucx_tls",
        "unknown UCX transport 'infiniband'",
    ),
    (
        "zcopy-keys",
        "ucx_zcopy_thresh: 128kb",
        "ucx_zcopy_thresh: intra:4kb",
        41,
        "cases[1].settings.none.ucx_zcopy_thresh",
        "'intra:4kb' is not a size",
    ),
    (
        "finding-about",
        "about: ucc_vs_none",
        "about: ucc_vs_mpich",
        27,
        "cases[0].findings[0].about",
        "about must be one of",
    ),
    (
        "band-effect",
        "effect: worse}",
        "effect: faster}",
        29,
        "cases[0].findings[0].bands[0].effect",
        "effect must be better, worse or neutral",
    ),
    (
        "band-empty",
        "{from: 32kb, to: null, effect: worse}",
        "{from: 32kb, to: 4kb, effect: worse}",
        29,
        "cases[0].findings[0].bands[0]",
        "band from 32kb to 4kb is empty",
    ),
    (
        "choice-component",
        "component: none, basis: [0]}",
        "component: sharp, basis: [0]}",
        32,
        "cases[0].choice[0].component",
        "component 'sharp' has no settings",
    ),
    (
        "choice-basis",
        "basis: [0]}",
        "basis: [5]}",
        32,
        "cases[0].choice[0].basis",
        "basis must list indexes of this case's findings",
    ),
    (
        "choice-overlap",
        "      - {from: 0, to: null, component: none, basis: [0]}\n",
        "      - {from: 0, to: 64kb, component: none, basis: [0]}\n"
        "      - {from: 32kb, to: null, component: ucc, basis: [0]}\n",
        33,
        "cases[0].choice[1]",
        "choice bands overlap or are out of order",
    ),
    (
        "one-sided-component",
        "  - nodes: 2\n    ppn: 8\n    collective: allreduce",
        "  - nodes: 1\n    ppn: 2\n    collective: put\n    section: x\n    settings: {ucc: {osc: ucx}}\n"
        "  - nodes: 2\n    ppn: 8\n    collective: allreduce",
        37,
        "cases[1].settings.ucc",
        "one-sided operations use no collective component",
    ),
    (
        "given-and-unstated",
        '    section: "1-1-1"\n',
        '    section: "1-1-1"\n    unstated: {nps: "not compared"}\n',
        21,
        "cases[0].unstated.nps",
        "listed as unstated but every component gives it",
    ),
    (
        "unstated-no-reason",
        '    section: "2-1-3"\n',
        '    section: "2-1-3"\n    unstated: {pml: ""}\n',
        37,
        "cases[1].unstated.pml",
        "say why the source gives no value",
    ),
    (
        "pml-yes",
        "        mapping: block\n",
        "        mapping: block\n        pml: yes\n",
        44,
        "cases[1].settings.none.pml",
        "pml must be one of default, ob1, ucx, cm, not True",
    ),
    (
        "case-unknown-key",
        '    section: "2-1-3"\n',
        '    section: "2-1-3"\n    np: 16\n',
        37,
        "cases[1].np",
        "unknown key in a case",
    ),
    # algorithm bands (coll_tuned, checked against the table's Open MPI: tunedmpi/tables/rulesfile.py)
    (
        "band-algorithm-unknown",
        "algorithm: 2}",
        "algorithm: butterfly}",
        47,
        "cases[1].bands[2].algorithm",
        "allreduce has no algorithm 'butterfly' in Open MPI 5.0.6",
    ),
    (
        "band-algorithm-number",
        "algorithm: 2}",
        "algorithm: 7}",
        47,
        "cases[1].bands[2].algorithm",
        "allreduce has no algorithm 7",
    ),
    (
        "band-two-proc",
        "      - {from: 0, to: null, component: none, basis: [0]}\n",
        "      - {from: 0, to: null, component: none, basis: [0]}\n    bands:\n"
        "      - {from: 0, to: null, algorithm: two_proc}\n",
        34,
        "cases[0].bands[0].algorithm",
        "alltoall algorithm 5 (two_proc) runs only on 2 ranks, but this row has 1 x 8 = 8",
    ),
    (
        "band-gap",
        "{from: 1mb, to: null",
        "{from: 2mb, to: null",
        47,
        "cases[1].bands[2].from",
        "a gap: no band covers 1mb up to 2mb",
    ),
    (
        "band-overlap",
        "{from: 8kb, to: 1mb",
        "{from: 4kb, to: 1mb",
        46,
        "cases[1].bands[1].from",
        "overlaps the previous band, which ends at 8kb",
    ),
    (
        "band-first-not-zero",
        "{from: 0, to: 8kb",
        "{from: 1kb, to: 8kb",
        45,
        "cases[1].bands[0].from",
        "the first band starts at 1kb, not 0",
    ),
    (
        "band-last-bounded",
        "{from: 1mb, to: null",
        "{from: 1mb, to: 4mb",
        47,
        "cases[1].bands[2].to",
        "the last band ends at 4mb: larger messages have no band",
    ),
    (
        "band-after-open-end",
        "{from: 8kb, to: 1mb,",
        "{from: 8kb, to: null,",
        47,
        "cases[1].bands[2].from",
        "a band after the band that reaches to: null",
    ),
    (
        "band-empty-range",
        "{from: 8kb, to: 1mb",
        "{from: 8kb, to: 8kb",
        46,
        "cases[1].bands[1]",
        "band from 8kb to 8kb is empty",
    ),
    (
        "band-to-missing",
        "{from: 8kb, to: 1mb,",
        "{from: 8kb,",
        46,
        "cases[1].bands[1].to",
        "missing key 'to'",
    ),
    (
        "band-segsize-ignored",
        "algorithm: 3}",
        "algorithm: recursive_doubling, segsize: 4kb}",
        45,
        "cases[1].bands[0].segsize",
        "allreduce 3 (recursive_doubling) does not segment",
    ),
    (
        "band-faninout-ignored",
        "algorithm: 2}",
        "algorithm: 2, faninout: 2}",
        47,
        "cases[1].bands[2].faninout",
        "allreduce 2 (nonoverlapping) takes no fan-out",
    ),
    (
        "band-max-requests-ignored",
        "algorithm: 2}",
        "algorithm: 2, max_requests: 4}",
        47,
        "cases[1].bands[2].max_requests",
        "allreduce 2 (nonoverlapping) takes no max requests",
    ),
    (
        "band-unknown-key",
        "algorithm: 3}",
        "algorithm: 3, radix: 4}",
        45,
        "cases[1].bands[0].radix",
        "unknown key in an algorithm band",
    ),
    (
        "bands-not-a-list",
        "    bands:\n      - {from: 0, to: 8kb, algorithm: 3}\n      - {from: 8kb, to: 1mb, algorithm: 4}\n"
        "      - {from: 1mb, to: null, algorithm: 2}\n",
        "    bands: ring\n",
        44,
        "cases[1].bands",
        "bands must be a non-empty list",
    ),
    (
        "band-one-sided",
        "    collective: allreduce",
        "    collective: put",
        44,
        "cases[1].bands",
        "'put' is a one-sided operation: coll_tuned has no algorithms for it",
    ),
    (
        "band-mpi-version",
        "mpi: {flavour: openmpi, version: 5.0.6}",
        "mpi: {flavour: openmpi, version: 4.1.2}",
        44,
        "cases[1].bands",
        "no coll_tuned algorithm table for Open MPI 4.1.2",
    ),
    (
        "band-hpcx",
        "mpi: {flavour: openmpi, version: 5.0.6}",
        "mpi: {flavour: hpcx, version: 2.18.0}",
        44,
        "cases[1].bands",
        "bands name Open MPI coll_tuned algorithms, but a hpcx table",
    ),
    (
        "band-beside-forced-algorithm",
        "        mapping: block\n    bands:",
        "        mapping: block\n        coll_tuned_allreduce_algorithm: 4\n    bands:",
        44,
        "cases[1].settings.none.coll_tuned_allreduce_algorithm",
        "forcing coll_tuned_allreduce_algorithm beats the rules file this geometry's allreduce bands become",
    ),
    (
        "yaml-syntax",
        "    ppn: 8\n    collective: alltoall",
        "    ppn: 8\n   collective: alltoall",
        19,
        None,
        "not valid YAML",
    ),
    ("not-a-mapping", VALID, "- just\n- a list\n", 1, None, "a tuning table must be a mapping"),
    ("empty-file", VALID, "", 1, None, "file is empty"),
]


def test_corpus_is_large_and_distinct():
    assert len(CORPUS) >= 30
    assert len({c[0] for c in CORPUS}) == len(CORPUS)
    assert len({c[5] for c in CORPUS}) == len(CORPUS), "each defect has its own message"


def test_valid_fixture_passes(run_cli):
    code, out, err = run_cli("check", FIXTURES / "tables" / "valid.yaml")
    assert (code, err) == (0, "")
    assert "2 cases, 4 settings" in out


@pytest.mark.parametrize("name,old,new,line,key,message", CORPUS, ids=[c[0] for c in CORPUS])
def test_malformed_table_is_refused(tmp_path, run_cli, name, old, new, line, key, message):
    assert old in VALID, "the corpus entry no longer matches the fixture"
    bad = tmp_path / ("%s.yaml" % name)
    bad.write_text(VALID.replace(old, new, 1), encoding="utf-8")
    code, out, err = run_cli("check", bad)
    assert code == 2
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    m = re.match(r"error: (.+?):(\d+): (\S+): (.*) \(fix: (.+)\)$", errors[0])
    assert m, errors[0]
    assert m.group(1) == str(bad)
    assert int(m.group(2)) == line
    assert m.group(3) == (key or "(file)")
    assert message in m.group(4)
    assert m.group(5).strip()
