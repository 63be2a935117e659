"""IMB/OSU parsers on real output (tests/fixtures/{imb,osu}, copied from the shared samples).

bench-MANIFEST.tsv gives each sample's command line and real exit code; EXPECTED below is the status
each must get, from the fixtures README and the file itself.
"""

import csv
import random

import pytest

from conftest import FIXTURES
from tunedmpi.bench.parse import (
    BANDWIDTH,
    LATENCY,
    STATUSES,
    Series,
    parse_output,
)

MANIFEST = {
    row["file"]: row
    for row in csv.DictReader(
        open(FIXTURES / "bench-MANIFEST.tsv", encoding="utf-8"), delimiter="\t"
    )
}

EXPECTED = {
    # IMB
    "imb-mpi1_error_bad-option-value.txt": "failed",  # -msglog abc: parse error
    "imb-mpi1_error_unknown-benchmark.txt": "failed",  # exit 0, "Invalid benchmark name"
    "imb-mpi1_help.txt": "failed",  # usage instead of data
    "imb-mpi1_mem0.001_msglog0-20_allreduce_default-ompi.txt": "ok",  # 1 MiB row out-of-mem, noted
    "imb-mpi1_np4-oversubscribe_npmin2_msglog0-12_default-ompi.txt": "ok",
    "imb-mpi1_oci-flags_mem2.3_default-ompi.txt": "ok",  # the studies' flags, default MPI
    "imb-mpi1_oci-flags-verbatim_mem2.3G_default-ompi.txt": "ok",  # -mem 2.3G read as 2.3
    "imb-mpi1_oci-flags_mem2.3G_ucx_rndv32kb.txt": "ok",
    "imb-mpi1_pt2pt-bandwidth-variants_pingpong-pingping-sendrecv-exchange_default-ompi.txt": "ok",
    "imb-nbc_iallreduce_ialltoall_iallgather_msglog0-20_default-ompi.txt": "ok",
    "imb-nbc_iallreduce-pure_msglog0-20_default-ompi.txt": "ok",
    "imb-nbc_list.txt": "failed",  # -list: no measurement
    "imb-rma_all-put-all_msglog0-16_default-ompi_try1.txt": "ok",  # osc_ucx warnings between rows
    "imb-rma_all-put-all_msglog0-16_default-pml_osc-excl-ucx_SEGV-sample.txt": "crashed",
    "imb-rma_column-variants_one-put-all_all-put-all_exchange-put_put-local_bidir-get_"
    "msglog0-16_default-ompi.txt": "crashed",
    "imb-rma_unidir-put-get_bidir-put_accumulate_fetch-op_cas_truly-passive_msglog0-20_ucx-pml-osc.txt": "ok",
    # OSU
    "osu-7.4_help_osu_put_latency.txt": "failed",  # -h exits 0
    "osu-7.4_osu_acc_latency_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_allgather_f-fullstats_default-ompi.txt": "ok",
    "osu-7.4_osu_allreduce_bad-msgsize_ERR_default-ompi.txt": "no-data",  # -m abc: header, no rows
    "osu-7.4_osu_allreduce_c-validation_default-ompi.txt": "failed",  # "Fail" at 16 bytes
    "osu-7.4_osu_allreduce_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_allreduce_np1_ERR_default-ompi.txt": "failed",
    "osu-7.4_osu_allreduce_version_default-ompi.txt": "no-data",
    "osu-7.4_osu_alltoall_defaultopts_ucx-pml_rndv32kb.txt": "ok",
    "osu-7.4_osu_bcast_c-validation_default-ompi.txt": "ok",  # every row "Pass"
    "osu-7.4_osu_bw_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_cas_latency_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_fop_latency_defaultopts_ucx-pml-osc.txt": "ok",
    "osu-7.4_osu_get_acc_latency_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_get_bw_defaultopts_ucx-pml-osc.txt": "ok",
    "osu-7.4_osu_get_latency_w-allocate_s-flush_default-ompi.txt": "ok",
    "osu-7.4_osu_iallreduce_c-validation_default-ompi.txt": "failed",
    "osu-7.4_osu_iallreduce_f-fullstats_default-ompi.txt": "ok",
    "osu-7.4_osu_latency_bad-option_ERR_default-ompi.txt": "failed",
    "osu-7.4_osu_latency_defaultopts_default-ompi.txt": "ok",
    # `-c D D` (ReFrame hpctestlib's device args) on a CPU build: OSU ignores the D D and measures
    # host memory. The output is a valid host measurement; only the command line shows the mistake.
    "osu-7.4_osu_latency_hpctestlib-DD-args-on-cpu-build_ERR_default-ompi.txt": "ok",
    "osu-7.4_osu_latency_np4_ERR_default-ompi.txt": "failed",
    "osu-7.4_osu_put_bibw_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_put_bibw_w-allocate_s-flush_default-ompi.txt": "failed",  # put_bibw has no -s flush
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_default_SEGV-sample.txt": "crashed",
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-excl-ucx_SEGV-sample.txt": "crashed",
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-rdma_SEGV-sample.txt": "crashed",
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-sm-only_ERR-WIN.txt": "failed",  # MPI_ERR_WIN
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_pml-ob1_osc-ucx-only_ERR-WIN.txt": "failed",
    "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_pml-ucx_default-osc_OK.txt": "ok",
    "osu-7.4_osu_put_latency_bad-win-option_ERR_default-ompi.txt": "failed",
    "osu-7.4_osu_put_latency_defaultopts_default-ompi.txt": "ok",
    "osu-7.4_osu_put_latency_np3_ERR_default-ompi.txt": "failed",
    "osu-7.4_osu_put_latency_w-allocate_s-flush_ucx-pml-osc.txt": "ok",
}
OSC_UCX_WARNING = (
    "/openmpi-5.0.8/ompi/mca/osc/ucx/osc_ucx_component.c:369 Error: "
    "OSC UCX component priority set inside component query failed"
)


def text_of(name):
    return (FIXTURES / name.split("-")[0].split("_")[0] / name).read_text(encoding="utf-8")


def parse(name, **kw):
    return parse_output(text_of(name), exit_code=int(MANIFEST[name]["exit_code"]), **kw)


def one(parsed, benchmark):
    found = [s for s in parsed.series if s.benchmark == benchmark]
    assert len(found) == 1, [s.benchmark for s in parsed.series]
    return found[0]


def test_every_fixture_has_a_manifest_row_and_an_expected_status():
    files = {p.name for d in ("imb", "osu") for p in (FIXTURES / d).iterdir()}
    assert files == set(EXPECTED) == set(MANIFEST)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_status_with_the_real_exit_code_and_from_the_text_alone(name):
    parsed = parse(name)
    assert parsed.status == EXPECTED[name], parsed.problems
    # Every failure in these samples is visible in the output itself, so the text alone agrees.
    assert parse_output(text_of(name)).status == EXPECTED[name]
    if parsed.status != "ok":
        assert parsed.problems
    for s in parsed.series:
        assert all(type(size) is int and type(value) is float for size, value in s.points)


def test_imb_allreduce_with_out_of_mem_last_size():
    parsed = parse("imb-mpi1_mem0.001_msglog0-20_allreduce_default-ompi.txt")
    s = one(parsed, "allreduce")
    assert (s.suite, s.metric) == ("imb", LATENCY)
    assert s.points[0] == (0, 0.03) and s.points[1] == (4, 0.23)
    assert s.points[-1] == (524288, 121.64)  # 1048576 was not measured
    assert len(s.points) == 19
    assert any("1048576 out-of-mem" in p for p in parsed.problems)


def test_imb_msglog_0_20_gives_22_rows():
    parsed = parse("imb-mpi1_oci-flags_mem2.3G_ucx_rndv32kb.txt")
    assert [s.benchmark for s in parsed.series] == ["alltoall", "allgather", "allreduce"]
    alltoall = one(parsed, "alltoall")
    assert tuple(size for size, _ in alltoall.points) == (0,) + tuple(
        2**i for i in range(21)
    )  # 0, 1, 2, ..., 1048576
    assert alltoall.points[0] == (0, 0.04) and alltoall.points[-1] == (1048576, 2925.67)
    assert one(parsed, "allgather").points[-1] == (1048576, 951.99)
    allreduce = one(parsed, "allreduce")  # MPI_FLOAT reductions start at 4 bytes
    assert tuple(size for size, _ in allreduce.points) == (0,) + tuple(2**i for i in range(2, 21))
    assert allreduce.points[-1] == (1048576, 575.22)
    assert parsed.problems == []  # "[vm:19733] SET UCX_RNDV_THRESH=32kb" is not a problem


def test_imb_npmin_gives_one_series_per_process_count():
    parsed = parse("imb-mpi1_np4-oversubscribe_npmin2_msglog0-12_default-ompi.txt")
    assert [(s.benchmark, len(s.points)) for s in parsed.series] == [
        ("allreduce", 12),
        ("allreduce", 12),  # 4 processes
        ("alltoall", 14),
        ("alltoall", 14),  # 4 processes
    ]
    assert parsed.series[1].points[-1] == (4096, 33.71)
    assert parsed.series[3].points[1] == (1, 5.74)


def test_imb_pt2pt_and_nbc_time_columns():
    pingpong = one(
        parse(
            "imb-mpi1_pt2pt-bandwidth-variants_pingpong-pingping-sendrecv-exchange_default-ompi.txt"
        ),
        "pingpong",
    )
    assert pingpong.points[1] == (1, 0.60)
    assert pingpong.metric == LATENCY
    nbc = parse("imb-nbc_iallreduce_ialltoall_iallgather_msglog0-20_default-ompi.txt")
    iallreduce = one(nbc, "iallreduce")  # IMB-NBC: the overall time, t_ovrl
    assert iallreduce.points[0] == (0, 0.30) and iallreduce.points[-1] == (1048576, 509.53)
    assert len(one(nbc, "ialltoall").points) == 22
    pure = one(parse("imb-nbc_iallreduce-pure_msglog0-20_default-ompi.txt"), "iallreduce_pure")
    assert pure.points[-1] == (1048576, 241.63)  # the _pure variants print t_avg


def test_imb_rma_modes():
    parsed = parse(
        "imb-rma_unidir-put-get_bidir-put_accumulate_fetch-op_cas_truly-passive_msglog0-20_"
        "ucx-pml-osc.txt"
    )
    assert len(parsed.series) == 15  # 7 benchmarks x (non-)aggregate + Truly_passive_put
    by_mode = {}  # each benchmark in non-aggregate mode, then in aggregate mode
    for s in parsed.series:
        by_mode.setdefault(s.benchmark, []).append(s)
    assert by_mode["fetch_and_op"][1].points == ((4, 10.16),)
    assert by_mode["compare_and_swap"][0].points == ((4, 1.43),)
    passive = one(parsed, "truly_passive_put")  # t_ovrl: the target is busy computing
    assert passive.points[-1] == (1048576, 117.53)


def test_imb_rma_rows_between_warning_lines():
    parsed = parse("imb-rma_all-put-all_msglog0-16_default-ompi_try1.txt")
    s = one(parsed, "all_put_all")
    assert len(s.points) == 18 and s.points[:3] == ((0, 0.02), (1, 0.42), (2, 0.43))
    assert s.points[-1] == (65536, 12.83)
    assert parsed.problems == [OSC_UCX_WARNING + " (x36)"]


def test_imb_crash_keeps_rows_and_says_the_table_was_cut():
    parsed = parse("imb-rma_all-put-all_msglog0-16_default-pml_osc-excl-ucx_SEGV-sample.txt")
    assert one(parsed, "all_put_all").points == ((0, 0.02), (1, 0.87), (2, 1.01), (4, 1.07))
    assert "all_put_all: table cut short after 4 rows (last size 4 bytes)" in parsed.problems
    assert any("Caught signal 11" in p for p in parsed.problems)
    assert not any(p.lstrip().startswith("0 /opt") for p in parsed.problems)  # backtrace frames
    variants = parse(
        "imb-rma_column-variants_one-put-all_all-put-all_exchange-put_put-local_"
        "bidir-get_msglog0-16_default-ompi.txt"
    )
    assert one(variants, "one_put_all").points[-1] == (65536, 9.12)  # t[usec] table
    assert one(variants, "all_put_all").points[-1] == (4096, 3.66)  # t_avg table, cut
    assert (
        "listed but without results: exchange_put, put_local, put_all_local, bidir_get"
        in variants.problems
    )


def test_requested_benchmark_missing_fails_the_run():
    text = text_of("imb-mpi1_error_unknown-benchmark.txt")
    parsed = parse_output(text, exit_code=0, requested=["alltoal"])
    assert parsed.status == "failed"
    assert "requested benchmark 'alltoal' is not in the output" in parsed.problems
    assert len(parsed.series) == 19  # IMB ran its default set instead, PingPong to Barrier
    assert one(parsed, "barrier").points == ((0, 0.60),)
    # The request check fails the run by itself, without IMB's own "Invalid benchmark name" line.
    quiet = text.replace("Invalid benchmark name alltoal\n", "")
    assert parse_output(quiet).status == "ok"
    assert parse_output(quiet, requested=["alltoal"]).status == "failed"
    assert parse_output(quiet, requested=["Alltoall", "allreduce"]).status == "ok"


def test_osu_one_sided_warning_between_rows():
    parsed = parse("osu-7.4_osu_put_latency_defaultopts_default-ompi.txt")
    s = one(parsed, "put_latency")
    assert (s.suite, s.metric) == ("osu", LATENCY)
    assert s.points[:2] == ((1, 0.09), (2, 0.09))  # each row follows two warning lines
    assert s.points[-1] == (4194304, 108.24) and len(s.points) == 23
    assert parsed.problems == [OSC_UCX_WARNING + " (x46)"]


@pytest.mark.parametrize(
    "name, benchmark, metric, first, last",
    [
        (
            "osu-7.4_osu_acc_latency_defaultopts_default-ompi.txt",
            "acc_latency",
            LATENCY,
            (1, 0.09),
            (4194304, 270.87),
        ),
        (
            "osu-7.4_osu_get_acc_latency_defaultopts_default-ompi.txt",
            "get_acc_latency",
            LATENCY,
            (1, 1.70),
            (4194304, 9527.60),
        ),
        (
            "osu-7.4_osu_get_latency_w-allocate_s-flush_default-ompi.txt",
            "get_latency",
            LATENCY,
            (1, 0.07),
            (4194304, 116.76),
        ),
        (
            "osu-7.4_osu_cas_latency_defaultopts_default-ompi.txt",
            "cas_latency",
            LATENCY,
            (1, 0.09),
            (1, 0.09),
        ),
        (
            "osu-7.4_osu_fop_latency_defaultopts_ucx-pml-osc.txt",
            "fop_latency",
            LATENCY,
            (1, 7.54),
            (1, 7.54),
        ),
        (
            "osu-7.4_osu_get_bw_defaultopts_ucx-pml-osc.txt",
            "get_bw",
            BANDWIDTH,
            (1, 0.45),
            (4194304, 4889.74),
        ),
        (
            "osu-7.4_osu_put_bibw_defaultopts_default-ompi.txt",
            "put_bibw",
            BANDWIDTH,
            (1, 54.48),
            (4194304, 12975.73),
        ),
        (
            "osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_pml-ucx_default-osc_OK.txt",
            "put_bw",
            BANDWIDTH,
            (1, 0.53),
            (1024, 577.82),
        ),
        (
            "osu-7.4_osu_put_latency_w-allocate_s-flush_ucx-pml-osc.txt",
            "put_latency",
            LATENCY,
            (1, 0.21),
            (4194304, 440.21),
        ),
        (
            "osu-7.4_osu_allreduce_defaultopts_default-ompi.txt",
            "allreduce",
            LATENCY,
            (1, 0.36),
            (1048576, 181.83),
        ),
        (
            "osu-7.4_osu_alltoall_defaultopts_ucx-pml_rndv32kb.txt",
            "alltoall",
            LATENCY,
            (1, 0.21),
            (1048576, 144.94),
        ),
        (
            "osu-7.4_osu_bcast_c-validation_default-ompi.txt",
            "bcast",
            LATENCY,
            (1, 0.23),
            (1048576, 86.22),
        ),
        (
            "osu-7.4_osu_iallreduce_f-fullstats_default-ompi.txt",
            "iallreduce",
            LATENCY,
            (1, 2.36),
            (1048576, 540.18),
        ),
        (
            "osu-7.4_osu_latency_defaultopts_default-ompi.txt",
            "latency",
            LATENCY,
            (1, 0.20),
            (4194304, 439.30),
        ),
        (
            "osu-7.4_osu_bw_defaultopts_default-ompi.txt",
            "bw",
            BANDWIDTH,
            (1, 15.46),
            (4194304, 12281.39),
        ),
    ],
)
def test_osu_names_metrics_and_values(name, benchmark, metric, first, last):
    (s,) = parse(name).series
    assert (s.benchmark, s.metric) == (benchmark, metric)
    assert (s.points[0], s.points[-1]) == (first, last)


def test_osu_extra_columns():
    (full,) = parse("osu-7.4_osu_allgather_f-fullstats_default-ompi.txt").series
    assert full.points[0] == (1, 0.28)


def test_osu_validation_failure_at_16_bytes():
    name = "osu-7.4_osu_allreduce_c-validation_default-ompi.txt"
    parsed = parse(name)
    (s,) = parsed.series
    assert s.points == ((1, 0.41), (2, 0.61), (4, 0.60), (8, 0.40), (16, 0.36))
    assert "allreduce: data validation failed at 16 bytes" in parsed.problems
    # Without the exit code and the error lines, the "Fail" row alone still fails the run.
    rows_only = "\n".join(text_of(name).splitlines()[:9])
    assert rows_only.endswith("Fail")
    assert parse_output(rows_only).status == "failed"


def test_osu_crash_mid_table_keeps_rows():
    parsed = parse("osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-rdma_SEGV-sample.txt")
    (s,) = parsed.series
    assert len(s.points) == 8 and s.points[-1] == (128, 203.27)
    assert "put_bw: table cut short after 8 rows (last size 128 bytes)" in parsed.problems
    assert (
        "prterun noticed that process rank 0 with PID 4895 on node vm exited on signal 11 "
        "(Segmentation fault)."
    ) in parsed.problems
    (first,) = parse("osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_default_SEGV-sample.txt").series
    assert first.points == ((1, 3.80),)


def test_osu_mpi_err_win_before_any_row():
    parsed = parse("osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-sm-only_ERR-WIN.txt")
    assert parsed.series == []
    assert "*** MPI_ERR_WIN: invalid window" in parsed.problems
    assert "exit code 53" in parsed.problems


@pytest.mark.parametrize(
    "line",
    [
        "Segmentation fault",
        "bash: line 1: 4242 Segmentation fault      ./coll_probe",
        "[node1:12345] Signal: Segmentation fault (11)",
        "[node1:12345] *** Process received signal ***",
        "mpirun noticed that process rank 1 with PID 999 on node n1 exited on signal 11 (Segmentation fault).",
        "srun: error: n1: task 1: Bus error",
    ],
)
def test_crash_messages_without_an_exit_code(line):
    text = text_of("osu-7.4_osu_put_latency_w-allocate_s-flush_ucx-pml-osc.txt")
    lines = text.splitlines()
    parsed = parse_output("\n".join(lines[:12] + [line]))
    assert parsed.status == "crashed"
    assert len(parsed.series[0].points) == 7
    assert any("cut short after 7 rows" in p for p in parsed.problems)


def test_interleaved_crash_output_does_not_swallow_rows():
    # One rank's backtrace or an mpirun frame can be cut off by another rank's output.
    lines = text_of("osu-7.4_osu_bw_defaultopts_default-ompi.txt").splitlines()
    assert lines[4:6] == ["1                      15.46", "2                      29.69"]
    text = "\n".join(
        lines[:5]
        + [
            "==== backtrace (tid:   4895) ====",
            " 0  /opt/openmpi/lib/openmpi/libucs.so.0(ucs_handle_error+0x294) [0x7f]",
        ]
        + lines[5:7]
        + ["-" * 74, "prterun noticed that process rank 1 with PID 7 on node vm exited on"]
        + lines[7:]
        + ["signal 11 (Segmentation fault)."]
    )
    parsed = parse_output(text)
    assert parsed.series[0].points[:3] == ((1, 15.46), (2, 29.69), (4, 64.08))
    assert len(parsed.series[0].points) == 23
    assert parsed.status == "crashed"
    assert parsed.problems[0] == (
        "prterun noticed that process rank 1 with PID 7 on node vm exited on "
        "signal 11 (Segmentation fault)."
    )
    assert not any("libucs" in p for p in parsed.problems)


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({"exit_code": 0}, "ok"),
        ({"exit_code": None}, "ok"),
        ({"exit_code": 2}, "failed"),
        ({"exit_code": 139}, "crashed"),
        ({"exit_code": -11}, "crashed"),  # subprocess reports death by signal 11 as -11
        ({"exit_code": 0, "timed_out": True}, "timeout"),
        ({"exit_code": 137, "timed_out": True}, "timeout"),
    ],
)
def test_exit_code_and_timeout(kwargs, status):
    parsed = parse_output(text_of("osu-7.4_osu_bw_defaultopts_default-ompi.txt"), **kwargs)
    assert parsed.status == status
    assert len(parsed.series[0].points) == 23  # the data is kept whatever the status
    if kwargs.get("timed_out"):
        assert "timed out" in parsed.problems


def test_timeout_wins_over_crash_text():
    text = text_of("osu-7.4_osu_put_bw_w-create_s-lock_m1-1024_osc-rdma_SEGV-sample.txt")
    assert parse_output(text, exit_code=139, timed_out=True).status == "timeout"


@pytest.mark.parametrize(
    "name, mark",
    [
        (
            "imb-mpi1_oci-flags_mem2.3G_ucx_rndv32kb.txt",
            "# tunedmpi-probe 1: IMB-compatible output, not Intel MPI Benchmarks",
        ),
        (
            "osu-7.4_osu_put_latency_w-allocate_s-flush_ucx-pml-osc.txt",
            "# tunedmpi-probe 1: OSU-compatible output, not OSU Micro-Benchmarks",
        ),
    ],
)
def test_probe_output_is_labelled_probe(name, mark):
    real = parse_output(text_of(name))
    probe = parse_output(mark + "\n" + text_of(name))
    assert real.series and {s.suite for s in real.series} == {name[:3]}
    assert {s.suite for s in probe.series} == {"probe"}
    assert [(s.benchmark, s.points) for s in probe.series] == [
        (s.benchmark, s.points) for s in real.series
    ]
    assert probe.status == "ok"


def test_series_is_hashable_and_immutable():
    (s,) = parse("osu-7.4_osu_bw_defaultopts_default-ompi.txt").series
    assert isinstance(s, Series) and hash(s) == hash(s)
    with pytest.raises(AttributeError):
        s.benchmark = "x"


def _mutations(rng, text):
    """Random slices, garbled, duplicated, dropped, cut and shuffled lines, flipped characters."""
    junk = "0123456789 .#-[]:eE+\t\x00abcMPIxyz|/()%_\u00e9\u2603\r\x0b\u2028\n"
    kind = rng.randrange(4)
    if kind == 0:
        a = rng.randrange(len(text) + 1)
        return text[a : rng.randrange(a, len(text) + 1)]
    if kind == 1:
        return "".join(c if rng.random() > 0.03 else rng.choice(junk) for c in text)
    lines = text.split("\n")
    for _ in range(rng.randrange(1, 15)):
        i = rng.randrange(len(lines))
        op = rng.randrange(5)
        if op == 0:
            lines[i] = "".join(rng.choice(junk) for _ in range(rng.randrange(60)))
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 2 and len(lines) > 1:
            del lines[i]
        elif op == 3:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        else:
            tokens = lines[i].split()
            rng.shuffle(tokens)
            lines[i] = "  ".join(tokens)
    return "\n".join(lines)


def test_fuzz_never_raises():
    rng = random.Random(20261121)
    texts = [text_of(name) for name in sorted(EXPECTED)]
    statuses = set()
    for _ in range(600):
        text = _mutations(rng, rng.choice(texts))
        for parsed in (
            parse_output(
                text,
                exit_code=rng.choice([None, 0, 1, 139]),
                timed_out=rng.random() < 0.1,
                requested=rng.choice([None, ["alltoal"]]),
            ),
            parse_output(text.encode("utf-8")),
        ):
            statuses.add(parsed.status)
            assert parsed.status in STATUSES and all(isinstance(p, str) for p in parsed.problems)
            for s in parsed.series:
                assert s.points and all(type(a) is int and type(b) is float for a, b in s.points)
    assert statuses == set(STATUSES)  # the mutations reached every classification
