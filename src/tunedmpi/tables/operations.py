"""The operations a tuning table names, one row each: every list of them is derived from here.

Adding one (e.g. reduce_scatter) is a row here, plus what runs it (validate/probes/), the tables'
README and tests; Open MPI's facts about each coll_tuned collective are tables/rulesfile.py's.
"""

from typing import NamedTuple, Tuple


class Operation(NamedTuple):
    name: str  # a case's `collective`, a TUNEDMPI_PROFILE
    # What measures it, the first carrying regret's figures: IMB-MPI1's benchmark of its name for a
    # collective (validate measures them all in one IMB-MPI1 run, in this order), else osu_<name>s.
    benchmarks: Tuple[str, ...]
    collective: bool  # else one-sided: no collective component, no coll_tuned algorithm
    # UCC TL/UCP's algorithms (UCC 1.3.0, `ucc_info -A`; component ucc@<algorithm>); (): Open MPI's
    # coll_ucc does not take it (coll_ucc_cts). Not alltoall's onesided: it needs a global work
    # buffer Open MPI's coll/ucc does not pass ("TL_UCP ERROR global work buffer not provided").
    ucc: Tuple[str, ...] = ()
    # UCC sizes it by the whole receive buffer (ucc_coll_args_msgsize): a table's size x ranks
    ucc_per_rank: bool = False

    @property
    def knob(self):
        """The coll_tuned knob a sweep forces its algorithm with (a table gives bands)."""
        return "coll_tuned_%s_algorithm" % self.name if self.collective else None


OPERATIONS = {
    op.name: op
    for op in (
        # name, benchmarks, collective, UCC algorithms, UCC per rank
        Operation("alltoall", ("alltoall",), True, ("pairwise", "bruck"), True),
        Operation("allgather", ("allgather",), True, ("knomial", "ring", "neighbor"), True),
        Operation("allreduce", ("allreduce",), True, ("knomial", "sra_knomial")),
        Operation("bcast", ("bcast",), True, ("knomial", "sag_knomial", "dbt")),
        Operation("put", ("put_latency", "put_bw"), False),
        Operation("get", ("get_latency", "get_bw"), False),
        Operation("acc", ("acc_latency",), False),
        Operation("get_acc", ("get_acc_latency",), False),
        Operation("fop", ("fop_latency",), False),
        Operation("cas", ("cas_latency",), False),
    )
}
COLLECTIVES = tuple(name for name, op in OPERATIONS.items() if op.collective)
ONE_SIDED = tuple(name for name, op in OPERATIONS.items() if not op.collective)
# OSU's one-sided benchmarks, one program each, in the order validate runs them: latencies first
OSU_BENCHMARKS = tuple(
    sorted((b for name in ONE_SIDED for b in OPERATIONS[name].benchmarks), key=lambda b: "_bw" in b)
)
BENCHMARKS = COLLECTIVES + OSU_BENCHMARKS  # all that validate and a sweep can run
OPERATION_OF = {b: name for name, op in OPERATIONS.items() for b in op.benchmarks}
UCC_ALGORITHMS = {name: op.ucc for name, op in OPERATIONS.items() if op.ucc}
