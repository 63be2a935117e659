"""The Python twin of the load-time selector: geometry from scheduler variables, row choice."""

import pytest

from tunedmpi.modules import geometry as g

DEFAULT = (1, 36)


def detect(env, tmp_path=None):
    geo = g.detect(env, *DEFAULT)
    return geo.nodes, geo.ppn, geo.source


@pytest.mark.parametrize(
    "text,value",
    [
        ("8", 8),
        ("036", 36),
        ("", None),
        ("0", None),
        ("-2", None),
        ("2.5", None),
        ("x", None),
        (" 4", None),
        (None, None),
        ("99999999", None),
    ],
)
def test_count_accepts_only_positive_whole_numbers(text, value):
    assert g.count(text) == value


@pytest.mark.parametrize(
    "text,value",
    [
        ("36(x2),20", 36),
        ("20,36(x2)", 36),
        ("4", 4),
        ("2(x3)", 2),
        ("", None),
        ("36(x)", None),
        ("a,b", None),
        ("0(x2)", None),
    ],
)
def test_slurm_compressed_task_list(text, value):
    assert g.max_tasks_per_node(text) == value


def test_explicit_beats_scheduler_beats_default():
    slurm = {"SLURM_JOB_NUM_NODES": "4", "SLURM_NTASKS_PER_NODE": "32"}
    assert detect({}) == (1, 36, "default")
    assert detect(slurm) == (4, 32, "slurm")
    assert detect(dict(slurm, TUNEDMPI_NODES="2", TUNEDMPI_PPN="8")) == (2, 8, "explicit")
    assert detect(dict(slurm, TUNEDMPI_PPN="8")) == (4, 8, "explicit+slurm")
    assert detect({"TUNEDMPI_NODES": "2"}) == (2, 36, "explicit")
    assert detect({"TUNEDMPI_NODES": "zero", "TUNEDMPI_PPN": "0"}) == (1, 36, "default")


def test_slurm_ppn_sources_in_order():
    base = {"SLURM_NNODES": "3"}
    assert detect(dict(base, SLURM_TASKS_PER_NODE="36(x2),20")) == (3, 36, "slurm")
    assert detect(dict(base, SLURM_NTASKS="100")) == (3, 34, "slurm")
    assert detect(dict(base, SLURM_NTASKS_PER_NODE="junk", SLURM_NTASKS="6")) == (3, 2, "slurm")
    assert detect(dict(base)) == (1, 36, "default")  # nodes without any task count: not a geometry


def test_pbs_variables_and_nodefile(tmp_path):
    assert detect({"PBS_NUM_NODES": "2", "PBS_NUM_PPN": "16"}) == (2, 16, "pbs")
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn1\nn2\nn2\n\n")
    assert detect({"PBS_NODEFILE": str(nodefile)}) == (2, 3, "pbs")
    assert detect({"PBS_NODEFILE": str(tmp_path / "missing")}) == (1, 36, "default")


def test_lsf_and_flux():
    assert detect({"LSB_MCPU_HOSTS": "a 36 b 36 c 12"}) == (3, 36, "lsf")
    assert detect({"LSB_MCPU_HOSTS": "a 36 b"}) == (1, 36, "default")
    assert detect({"LSB_MCPU_HOSTS": "a 36 a 4"}) == (1, 40, "lsf")
    assert detect({"FLUX_JOB_NNODES": "2", "FLUX_JOB_SIZE": "9"}) == (2, 5, "flux")


def test_first_scheduler_that_makes_sense_wins():
    env = {
        "SLURM_JOB_NUM_NODES": "0",
        "PBS_NUM_NODES": "2",
        "PBS_NUM_PPN": "8",
        "FLUX_JOB_NNODES": "4",
        "FLUX_JOB_SIZE": "16",
    }
    assert detect(env) == (2, 8, "pbs")


GRID = [(n, p) for n in (1, 2, 4, 8) for p in (8, 16, 32, 36)]


@pytest.mark.parametrize(
    "nodes,ppn,row,kind",
    [
        (2, 16, (2, 16), "exact"),
        (3, 16, (4, 16), "nearest"),  # 4/3 = 1.33 < 3/2 = 1.5: 3 is nearer 4 on a log2 scale
        (6, 16, (8, 16), "nearest"),  # 6/4 = 1.5 > 8/6 = 1.33
        (1, 20, (1, 16), "nearest"),
        (1, 24, (1, 16), "nearest"),  # tie 16 vs 32 at distance 8 -> the smaller
        (1, 34, (1, 32), "nearest"),
        (16, 36, (8, 36), "extrapolated"),
        (1, 64, (1, 36), "extrapolated"),
        (1, 2, (1, 8), "extrapolated"),
    ],
)
def test_row_choice(nodes, ppn, row, kind):
    m = g.choose_row(GRID, nodes, ppn)
    assert ((m.nodes, m.ppn), m.kind) == (row, kind)


def test_log2_tie_goes_to_the_smaller():
    # sqrt(2*8) = 4 is equally far from 2 and 8 on a log2 scale
    assert g.nearest_log2({2, 8}, 4) == 2
    assert g.nearest_log2({1, 2, 4, 8}, 3) == 4  # 4/3 < 3/2
