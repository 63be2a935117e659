"""A second, independent reading of seed 000: its markdown tables read with nothing but regular
expressions, compared value by value with `tunedmpi tables --format csv`. The importer
(tunedmpi.importers.seed000) is not used here, so a mistake in it cannot hide."""

import csv
import io
import re

import conftest
from conftest import ROOT

SEED_NAME = "000_6452ddfe42026a33.txt"
SEED = conftest.seed_path(SEED_NAME)  # None without $TUNEDMPI_SEEDS: the test skips
NODES, PPN, COLL = (
    {1: 1, 2: 2, 3: 4, 4: 8},
    {1: 8, 2: 16, 3: 32, 4: 36},
    {1: "alltoall", 2: "allgather", 3: "allreduce"},
)
PLACEMENT = {"ブロック分割": "block", "サイクリック分割": "cyclic"}
COMPONENTS = ("none", "ucc", "hcoll")


def read_document():
    """{((nodes, ppn, collective), component): {knob: value}} as the document's tables say."""
    expected, summary, sec = {}, {}, None
    for line in SEED.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^###? (\d)-(\d)-(\d)\. ", line)
        if m:
            sec = tuple(int(x) for x in m.groups())
        if not sec:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if sec[2] == 0 and sec[0] >= 2:  # N-M-0: UCX_TLS / RNDV / ZCOPY per collective
            m = re.match(r"^\|\s*\*\*(\w+)\*\*\s*\|", line)
            if m:
                summary[(NODES[sec[0]], PPN[sec[1]], m.group(1).lower())] = cells[1:4]
            continue
        if sec[2] == 0:
            continue
        key = (NODES[sec[0]], PPN[sec[1]], COLL[sec[2]])
        for label, knob, convert in (
            ("**UCX_RNDV_THRESH**", "ucx_rndv_thresh", str.lower),
            ("**NPS**", "nps", str),
            ("MPIプロセス分割方法", "mapping", PLACEMENT.get),
        ):
            if cells[0] == label:
                for comp, value in zip(COMPONENTS, cells[1:]):
                    expected.setdefault((key, comp), {})[knob] = convert(value)
    for (key, comp), values in expected.items():
        if key[0] >= 2:
            values.update(zip(("ucx_tls", "ucx_rndv_thresh", "ucx_zcopy_thresh"), summary[key]))
    return expected


@conftest.needs_seed(SEED_NAME)
def test_every_value_of_the_seed000_table_equals_the_document(run_cli):
    expected = read_document()
    code, out, err = run_cli(
        "tables", ROOT / "tuning-tables", "--platform", "oci-bm-optimized3.36", "--format", "csv"
    )
    assert code == 0, err
    rows = {
        ((int(r["nodes"]), int(r["ppn"]), r["collective"]), r["component"]): r
        for r in csv.DictReader(io.StringIO(out))
    }
    assert len(expected) == len(rows) == 144
    compared = 0
    for key, values in expected.items():
        for knob in ("ucx_tls", "ucx_rndv_thresh", "ucx_zcopy_thresh", "nps", "mapping"):
            assert rows[key][knob] == values.get(knob, ""), (key, knob)
            compared += knob in values
    assert compared == 36 * 3 + 108 * 5  # 1 node: rndv, nps, placement; 2+ nodes: and tls, zcopy
