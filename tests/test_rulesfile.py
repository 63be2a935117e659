"""tunedmpi.tables.rulesfile without an MPI: render/check round trips, every refusal with its message,
the look-up model. The proof that Open MPI obeys what we write is in
tests/test_rulesfile_real_mpi.py."""

import re

import pytest

from ompi_lookup import select
from tunedmpi.errors import InputError
from tunedmpi.tables import rulesfile
from tunedmpi.tables.rulesfile import Band, Rules, check, render

V = "5.0.8"


def sample(comm_size=4):
    return Rules(
        comm_size,
        {
            "allreduce": [
                Band(0, "recursive_doubling"),
                Band("64KB", "segmented_ring", segsize=4096),
            ],
            "alltoall": [Band(0, 3), Band(1024, "pairwise")],
            "bcast": [Band(0, 6), Band("1MB", "chain", segsize=8192, faninout=2)],
            "barrier": [Band(0, "tree")],
        },
        comment="table oci/openmpi-5.0.6.yaml row 1x4",
    )


# --- an emulation of how Open MPI's reader tokenises (coll_base_util.c:378-401, file.c:127-246),
# written from the description in rulesfile's docstring: used to confirm that what check()
# accepts is read by Open MPI as the same numbers.


def ompi_numbers(text):
    """[(number, line)] the way fscanf('%li') + '#'-skipping reads the file; version first."""
    version, i = 1, 0
    m = re.match(r"rule-file-version-(\d+)", text)
    if m:
        version, i = int(m.group(1)), m.end()
    out, line = [], 1 + text[:i].count("\n")
    while i < len(text):
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        if ch == "\n":
            line += 1
        if ch.isspace():
            i += 1
            continue
        m = re.match(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text[i:])
        if not m:
            i += 1  # garbage: skipped one character at a time
            continue
        out.append((int(m.group(0), 0), line))
        i += m.end()
    return version, out


def ompi_read(text):
    """The structure Open MPI builds (v1 files): {colid: [(comsize, [(msg, alg, fan, seg)])]}."""
    version, nums = ompi_numbers(text)
    assert version == 1
    vals = [n for n, _ in nums]
    pos = [0]

    def nxt():
        pos[0] += 1
        return vals[pos[0] - 1]

    out = {}
    for _ in range(nxt()):
        cid = nxt()
        out[cid] = [
            (nxt(), [tuple(nxt() for _ in range(4)) for _ in range(nxt())]) for _ in range(nxt())
        ]
    return out


def test_render_check_round_trip():
    text = render(sample(), V)
    parsed = check(text, V)
    assert parsed.version == 1 and not text.startswith("rule-file-version")
    assert list(parsed.collectives) == [
        "allreduce",
        "alltoall",
        "barrier",
        "bcast",
    ]  # COLLTYPE order
    ar = parsed.collectives["allreduce"]
    assert [c.comm_size for c in ar] == [0, 4, 5]
    assert [(r.msgsize, r.algorithm, r.faninout, r.segsize) for r in ar[1].rules] == [
        (0, 3, 0, 0),
        (65536, 5, 0, 4096),
    ]
    assert (
        [(r.msgsize, r.algorithm) for r in ar[0].rules]
        == [(0, 0)]
        == [(r.msgsize, r.algorithm) for r in ar[2].rules]
    )
    # alltoall's band starts are IMB bytes per peer; Open MPI compares the whole send buffer.
    assert [(r.msgsize, r.algorithm) for r in parsed.collectives["alltoall"][1].rules] == [
        (0, 3),
        (4096, 2),
    ]
    assert [
        (r.msgsize, r.algorithm, r.faninout, r.segsize)
        for r in parsed.collectives["bcast"][1].rules
    ] == [(0, 6, 0, 0), (1 << 20, 2, 2, 8192)]
    # Open MPI's own tokenising reads the same structure (comments and all).
    ompi = ompi_read(text)
    assert sorted(ompi) == [2, 3, 6, 7]
    for name, entries in parsed.collectives.items():
        assert ompi[rulesfile.COLLTYPE[name]] == [
            (e.comm_size, [(r.msgsize, r.algorithm, r.faninout, r.segsize) for r in e.rules])
            for e in entries
        ]
    assert "# table oci/openmpi-5.0.6.yaml row 1x4" in text
    assert "\n#\n" not in render(Rules(4, {"bcast": [Band(0, 1)]}), V)
    assert render(sample(), V) == text  # deterministic


def test_layout_for_two_ranks():
    two = check(render(sample(2), V), V)
    assert [c.comm_size for c in two.collectives["bcast"]] == [2, 3]  # no unreachable 0 entry


def test_select_models_open_mpis_look_up():
    parsed = check(render(sample(), V), V)
    assert select(parsed, "allreduce", 4, 0).algorithm == 3
    assert select(parsed, "allreduce", 4, 65535).algorithm == 3
    assert select(parsed, "allreduce", 4, 65536).algorithm == 5  # a band starts inclusively
    assert select(parsed, "alltoall", 4, 1023).algorithm == 3
    assert select(parsed, "alltoall", 4, 1024).algorithm == 2
    assert select(parsed, "allreduce", 3, 65536) is None  # other sizes: fixed decision
    assert select(parsed, "allreduce", 5, 65536) is None
    assert select(parsed, "allreduce", 512, 65536) is None
    assert select(parsed, "gather", 4, 64) is None  # no rules at all
    assert select(parsed, "barrier", 4, 1 << 30).algorithm == 6
    # Open MPI uses the FIRST entry for a communicator smaller than every entry.
    small = check("1\n2\n1\n8\n1\n0 4 0 0\n", V)
    assert select(small, "allreduce", 2, 0).algorithm == 4


def test_max_requests_needs_rule_file_version_2_and_open_mpi_5_0_7():
    rules = Rules(4, {"alltoall": [Band(0, 1), Band(8192, "linear_sync", max_requests=8)]})
    text = render(rules, "5.0.7")
    assert text.startswith("rule-file-version-2\n")
    parsed = check(text, "5.0.7")
    assert parsed.version == 2
    assert [(r.algorithm, r.max_requests) for r in parsed.collectives["alltoall"][1].rules] == [
        (1, None),
        (4, 8),
    ]
    with pytest.raises(InputError) as err:
        render(rules, "5.0.6")
    assert err.value.key == "alltoall band 2 max_requests" and "came in 5.0.7" in err.value.problem
    # Without max requests the classic format: the same file for every 5.0.x.
    assert render(sample(), "5.0.0") == render(sample(), "5.0.10").replace("5.0.10", "5.0.0")


def test_algorithm_tables():
    assert rulesfile.algorithms("allreduce", V) == {
        0: "ignore",
        1: "basic_linear",
        2: "nonoverlapping",
        3: "recursive_doubling",
        4: "ring",
        5: "segmented_ring",
        6: "rabenseifner",
    }
    assert rulesfile.collectives(V) == sorted(
        set(rulesfile.COLLTYPE)
        - set(rulesfile.NOT_TUNED)
        - {c for c in rulesfile.COLLTYPE if c.startswith("neighbor")}
    )
    for (coll, alg), fields in rulesfile._TAKES_5_0.items():
        assert alg in rulesfile.algorithms(coll, V) and set(fields) <= {
            "segsize",
            "faninout",
            "max_requests",
        }
    for coll, alg in rulesfile.TWO_PROC:
        assert rulesfile.algorithms(coll, V)[alg] == "two_proc"
    assert set(rulesfile.MESSAGE_SIZE) == set(rulesfile.collectives(V))
    assert rulesfile.message_size("allgather", 1024, 8) == 8192
    assert rulesfile.message_size("allreduce", 1024, 8) == 1024
    assert rulesfile.message_size("barrier", 1024, 8) == 0
    assert len(rulesfile.COLLTYPE) == rulesfile.COLLCOUNT == 22


# --- check(): every refusal names the file, the line, the key and the fix.

GOOD = """# allreduce for 4 ranks
1
2
1
4
2
0 3 0 0
65536 6 0 0
"""


def refused(text, version=V, name="rules.txt"):
    with pytest.raises(InputError) as err:
        check(text, version, name=name)
    e = err.value
    assert (
        e.path == name
        and e.fix
        and str(e).startswith("%s%s: " % (name, "" if e.line is None else ":%d" % e.line))
    )
    return e


def test_the_good_text_is_accepted():
    parsed = check(GOOD, V, name="rules.txt")
    assert parsed.path == "rules.txt"
    assert [(c.comm_size, c.line) for c in parsed.collectives["allreduce"]] == [(4, 5)]
    assert [r.line for r in parsed.collectives["allreduce"][0].rules] == [7, 8]


@pytest.mark.parametrize(
    "text,line,key,problem",
    [
        (GOOD.replace("65536 6", "0x10000 6"), 8, None, "'0x10000' is not a plain decimal number"),
        (GOOD.replace("65536 6", "065536 6"), 8, None, "'065536' is not a plain decimal"),
        (GOOD.replace("65536 6", "64k 6"), 8, None, "'64k' is not a plain decimal"),
        (GOOD.replace("\n4\n", "\n-4\n"), 5, None, "'-4' is not a plain decimal"),
        (GOOD.replace("\n", "\r\n"), 1, None, "carriage return"),
        ("", 1, "collectives count", "the file ends where the number of collectives should follow"),
        (GOOD.replace("\n1\n2\n", "\n0\n2\n", 1), 2, "collectives count", "0 collectives"),
        (GOOD.replace("\n1\n2\n", "\n23\n2\n", 1), 2, "collectives count", "23 collectives"),
        (
            GOOD.replace("\n1\n2\n", "\n2\n2\n", 1),
            8,
            "collective id",
            "the file ends where a collective id",
        ),
        (
            GOOD + "7\n1\n4\n1\n0 6 0 0\n",
            9,
            "collectives count",
            "numbers after the last of the 1 collectives",
        ),
        (
            GOOD.replace("\n2\n1\n4\n", "\n22\n1\n4\n", 1),
            3,
            "collective id",
            "22 is no collective id",
        ),
        (
            GOOD.replace("\n2\n1\n4\n", "\n5\n1\n4\n", 1),
            3,
            "collective id",
            "tuned has no alltoallw",
        ),
        (GOOD.replace("\n2\n1\n4\n", "\n17\n1\n4\n", 1), 3, "collective id", "neighbor_allgather"),
        (
            "2\n" + GOOD.split("\n", 2)[2] + GOOD.split("\n", 2)[2],
            8,
            "collective id",
            "appears twice",
        ),
        (
            GOOD.replace("\n2\n1\n4\n", "\n2 1\n4\n", 1),
            3,
            "collective id",
            "expected 1 number (a collective id)",
        ),
        (
            GOOD.replace("\n2\n1\n4\n", "\n2\n0\n4\n", 1),
            4,
            "allreduce comm sizes count",
            "no communicator sizes",
        ),
        (
            GOOD.replace("\n2\n1\n4\n2\n", "\n2\n2\n4\n1\n0 3 0 0\n4\n2\n", 1),
            8,
            "allreduce comm size",
            "communicator sizes must ascend: 4 after 4",
        ),
        (
            GOOD.replace("\n2\n1\n4\n2\n", "\n2\n2\n8\n1\n0 3 0 0\n4\n2\n", 1),
            8,
            "allreduce comm size",
            "must ascend: 4 after 8",
        ),
        (
            GOOD.replace("\n2\n1\n4\n2\n", "\n2\n2\n0\n1\n0 3 0 0\n2\n2\n", 1),
            5,
            "allreduce comm 0",
            "this entry serves no communicator",
        ),
        (
            GOOD.replace("\n4\n2\n", "\n4\n0\n", 1),
            6,
            "allreduce comm 4 message sizes count",
            "no message sizes",
        ),
        (
            GOOD.replace("0 3 0 0", "1 3 0 0"),
            7,
            "allreduce comm 4 msg 1",
            "first message size is 1, not 0: Open MPI drops",
        ),
        (
            GOOD.replace("65536 6", "0 6"),
            8,
            "allreduce comm 4 msg 0",
            "message sizes must ascend: 0 after 0",
        ),
        (GOOD.replace("0 3 0 0", "0 3 0"), 7, "allreduce comm 4 rule", "expected 4 numbers"),
        (
            GOOD.replace("65536 6 0 0", "65536 6 0 0 8"),
            8,
            "allreduce comm 4 rule",
            "expected 4 numbers",
        ),
        (
            GOOD.replace("\n4\n2\n0 3 0 0\n65536 6 0 0", "\n4\n2\n0 3 0 0"),
            7,
            "allreduce comm 4 rule",
            "the file ends where msgsize algorithm faninout segsize should follow",
        ),
        (
            GOOD.replace("65536 6", "65536 7"),
            8,
            "allreduce comm 4 msg 65536 algorithm",
            "allreduce has no algorithm 7",
        ),
        (
            GOOD.replace("65536 6 0 0", "65536 6 0 4096"),
            8,
            "allreduce comm 4 msg 65536 segsize",
            "does not segment",
        ),
        (
            GOOD.replace("65536 6 0 0", "65536 5 2 4096"),
            8,
            "allreduce comm 4 msg 65536 faninout",
            "takes no fan-out",
        ),
        (
            GOOD.replace("65536 6 0 0", "65536 5 0 2147483648"),
            8,
            "allreduce comm 4 msg 65536 segsize",
            "out of range",
        ),
        (
            GOOD.replace("\n2\n1\n", "\n7\n1\n", 1).replace("65536 6 0 0", "65536 2 0 4096"),
            8,
            "bcast comm 4 msg 65536 faninout",
            "needs a chain fan-out from 1 to 32, not 0",
        ),
        (
            GOOD.replace("\n2\n1\n", "\n7\n1\n", 1).replace("65536 6 0 0", "65536 2 33 4096"),
            8,
            "bcast comm 4 msg 65536 faninout",
            "not 33",
        ),
        (
            GOOD.replace("\n2\n1\n", "\n3\n1\n", 1).replace("65536 6", "65536 5"),
            8,
            "alltoall comm 4 msg 65536 algorithm",
            "runs only on 2 ranks, but this entry serves communicators of 2 and more",
        ),
        (
            GOOD.replace("\n2\n1\n", "\n6\n1\n", 1),
            8,
            "barrier comm 4 msg 65536",
            "a second rule is never used",
        ),
        (
            GOOD.replace("\n2\n1\n", "\n14\n1\n", 1).replace("65536 6", "65536 2"),
            8,
            "scan comm 4 msg 65536",
            "chosen by the datatype, not the message length",
        ),
        (
            "rule-file-version-2\n" + GOOD,
            1,
            "version line",
            "Open MPI 5.0.6 reads no version line",
        ),
        ("rule-file-version-3\n" + GOOD, 1, "version line", "rule file version 3 is unknown"),
        (
            " rule-file-version-2\n" + GOOD,
            1,
            "version line",
            "is not a version line Open MPI reads",
        ),
        (
            "# first\nrule-file-version-2\n" + GOOD,
            2,
            "version line",
            "only as the very first bytes",
        ),
        (
            "rule-file-version-2\n" + GOOD.replace("65536 6 0 0", "65536 6 0 0 8"),
            9,
            "allreduce comm 4 msg 65536 max_requests",
            "takes no max requests",
        ),
        (
            "rule-file-version-2\n" + GOOD.replace("65536 6 0 0", "65536 6 0 0 8 9"),
            9,
            "allreduce comm 4 rule",
            "expected 4 or 5 numbers",
        ),
    ],
)
def test_every_refusal_names_line_key_problem_and_fix(text, line, key, problem):
    version = "5.0.6" if "5.0.6" in problem else V
    e = refused(text, version)
    assert (e.line, e.key) == (line, key), str(e)
    assert problem in e.problem, str(e)


def test_refusals_of_versions_and_the_files_name():
    for bad, problem in (
        ("4.1.6", "no coll_tuned algorithm table for Open MPI 4.1.6"),
        ("6.0.0", "no coll_tuned algorithm table"),
        ("five", "is not a version"),
        (None, "no Open MPI version given"),
    ):
        with pytest.raises(InputError) as err:
            check(GOOD, bad)
        assert problem in err.value.problem and err.value.key == "mpi_version" and err.value.fix
    assert check(GOOD, V, name="good.txt").path == "good.txt"


def test_comments_may_say_anything_after_a_hash():
    text = GOOD.replace("0 3 0 0", "0 3 0 0   # 0x10 rule-file-version-9 -1 4k")
    assert check(text, V).collectives["allreduce"][0].rules[0].algorithm == 3
    assert ompi_read(text)[2][0][1][0] == (0, 3, 0, 0)


def test_two_proc_only_where_the_entry_serves_exactly_two_ranks():
    two = Rules(2, {"alltoall": [Band(0, "two_proc")], "barrier": [Band(0, 5)]})
    parsed = check(render(two, V), V)
    assert (
        select(parsed, "alltoall", 2, 64).algorithm == 5
        and select(parsed, "alltoall", 3, 64) is None
    )
    with pytest.raises(InputError):
        render(Rules(4, {"barrier": [Band(0, "two_proc")]}), V)


# --- render(): refusals of the data, with the collective and band as the key.


@pytest.mark.parametrize(
    "rules,key,problem",
    [
        (Rules(1, {"bcast": [Band(0, 1)]}), "comm_size", "whole number >= 2"),
        (Rules(True, {"bcast": [Band(0, 1)]}), "comm_size", "whole number >= 2"),
        (Rules(4, {}), "collectives", "no collective has rules"),
        (Rules(4, {"gatherv": [Band(0, 1)]}), "gatherv", "tuned has no gatherv"),
        (
            Rules(4, {"allgatherw": [Band(0, 1)]}),
            "allgatherw",
            "not a collective coll_tuned reads rules for",
        ),
        (Rules(4, {"bcast": []}), "bcast", "bcast has no bands"),
        (
            Rules(4, {"bcast": [Band(64, 1)]}),
            "bcast band 1 lo",
            "the first band starts at 64, not 0",
        ),
        (
            Rules(4, {"bcast": [Band(0, 1), Band("8kb", 2, 0, 2), Band(8192, 3)]}),
            "bcast band 3 lo",
            "must ascend: 8192 after 8192",
        ),
        (Rules(4, {"bcast": [Band(0, 1), Band("4XB", 2)]}), "bcast band 2 lo", "is not a size"),
        (
            Rules(4, {"barrier": [Band(0, 1), Band(64, 2)]}),
            "barrier band 2",
            "one rule per communicator size",
        ),
        (
            Rules(4, {"bcast": [Band(0, "fastest")]}),
            "bcast band 1 algorithm",
            "bcast has no algorithm 'fastest'",
        ),
        (Rules(4, {"bcast": [Band(0, 10)]}), "bcast band 1 algorithm", "bcast has no algorithm 10"),
        (
            Rules(4, {"bcast": [Band(0, True)]}),
            "bcast band 1 algorithm",
            "bcast has no algorithm True",
        ),
        (
            Rules(4, {"allreduce": [Band(0, "ring", segsize=4096)]}),
            "allreduce band 1 segsize",
            "does not segment",
        ),
        (Rules(4, {"bcast": [Band(0, "chain", segsize=4096)]}), "bcast band 1 faninout", "not 0"),
        (
            Rules(4, {"bcast": [Band(0, "binomial", faninout=2)]}),
            "bcast band 1 faninout",
            "takes no fan-out",
        ),
        (
            Rules(4, {"bcast": [Band(0, "binomial", max_requests=4)]}),
            "bcast band 1 max_requests",
            "takes no max requests",
        ),
        (
            Rules(4, {"reduce": [Band(0, "pipeline", segsize=-1)]}),
            "reduce band 1 segsize",
            "out of range",
        ),
        (Rules(4, {"alltoall": [Band(0, 1), Band(1 << 62, 2)]}), "alltoall band 2 lo", "overflows"),
    ],
)
def test_render_refuses_rules_open_mpi_would_not_follow(rules, key, problem):
    with pytest.raises(InputError) as err:
        render(rules, V)
    e = err.value
    assert (e.key, e.line) == (key, None), str(e)
    assert problem in e.problem and e.fix, str(e)
    assert e.path.startswith("rules for ")


def test_render_accepts_names_and_sizes():
    rules = Rules(
        8,
        {
            "allgather": [Band(0, "ring"), Band("16KB", "bruck")],
            "reduce": [Band(0, "chain", segsize=0, faninout=4, max_requests=0)],
        },
    )
    parsed = check(render(rules, V), V)
    assert [(r.msgsize, r.algorithm) for r in parsed.collectives["allgather"][1].rules] == [
        (0, 4),
        (16384 * 8, 2),
    ]
    assert parsed.collectives["reduce"][1].rules[0].max_requests == 0


def test_render_never_returns_text_check_refuses(monkeypatch):
    monkeypatch.setattr(
        rulesfile, "_line", lambda nums, comment: " ".join("0x%x" % n for n in nums)
    )
    with pytest.raises(RuntimeError, match="its own check refuses"):
        render(sample(), V)


# --- environment(): what makes Open MPI read the file.


def test_environment_names_the_file():
    assert rulesfile.environment("/x/r.txt") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_dynamic_rules_filename": "/x/r.txt",
    }
