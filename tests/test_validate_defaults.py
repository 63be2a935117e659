"""validate's defaults per set (issue 30): a plain `--full` starts with 15 pairs, so its first look
is judged by the crossover test over the pairs (POLICY.paired_min); the quick sets keep 5 pairs and
the unpaired test. Nothing here runs a benchmark."""

import argparse

import pytest

from tunedmpi import cli, stats
from tunedmpi.acceptance import validate, validate_cli
from tunedmpi.policy import POLICY


def options(monkeypatch, *argv):
    monkeypatch.setattr(
        validate_cli, "require_local_mpi", lambda site: None
    )  # no MPI needed to build options
    for var in (
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
        "PBS_NUM_NODES",
        "PBS_NODEFILE",
        "LSB_MCPU_HOSTS",
        "FLUX_JOB_NNODES",
        "TUNEDMPI_SITE",
    ):
        monkeypatch.delenv(var, raising=False)
    args = cli.build_parser().parse_args(
        ["validate", "--site", "local", "--nodes", "1", "--ppn", "1"] + list(argv)
    )
    return validate_cli.options_from_args(args)


@pytest.mark.parametrize(
    "flag, pairs", [([], 5), (["--quick"], 5), (["--short"], 5), (["--full"], 15)]
)
def test_each_set_starts_with_its_own_number_of_pairs(monkeypatch, flag, pairs):
    opts = options(monkeypatch, *flag)
    assert opts.repetitions == pairs == POLICY.first_look[opts.set_name]


def test_a_plain_full_campaign_is_judged_over_its_pairs_and_a_quick_one_is_not(monkeypatch):
    """The rule validate.analyse applies: the crossover test when the design's first look has at
    least POLICY.paired_min pairs."""
    for flag, paired in (("--full", True), ("--quick", False), ("--short", False)):
        opts = options(monkeypatch, flag)
        design = stats.Design(opts.repetitions, opts.repetitions * POLICY.extension_factor)
        assert (design.first >= POLICY.paired_min) is paired, flag
        assert design.final == 2 * design.first


def test_repetitions_given_win_over_the_sets_default(monkeypatch):
    assert options(monkeypatch, "--full", "--repetitions", "5").repetitions == 5
    assert options(monkeypatch, "--repetitions", "12").repetitions == 12


def test_too_few_repetitions_are_refused_with_the_sets_default(monkeypatch):
    with pytest.raises(validate.CannotRun, match=r"at least 3 runs .* \(default 15 for --full\)"):
        options(monkeypatch, "--full", "--repetitions", "2")


def test_timeouts_per_set(monkeypatch):
    assert options(monkeypatch).timeout == POLICY.timeout_s["quick"] == 120.0
    assert options(monkeypatch, "--full").timeout == POLICY.timeout_s["full"] == 900.0
    assert options(monkeypatch, "--short").timeout == 900.0
    assert options(monkeypatch, "--full", "--timeout", "60").timeout == 60.0


def test_the_cli_leaves_the_default_to_validate_and_takes_the_verdicts_levels_from_stats():
    args = cli.build_parser().parse_args(["validate", "--full"])
    assert isinstance(args, argparse.Namespace) and args.repetitions is None
    assert (args.tolerance, args.alpha) == (POLICY.tolerance, POLICY.alpha)


def test_every_command_takes_its_levels_and_retries_from_the_one_policy():
    parser = cli.build_parser()
    for argv in (["validate"], ["power", "d"], ["history"]):
        args = parser.parse_args(argv)
        assert args.alpha == POLICY.alpha, argv
    assert parser.parse_args(["power", "d"]).tolerance == POLICY.tolerance
    assert parser.parse_args(["validate"]).retries == POLICY.retries
    assert stats.Design() == stats.Design(*POLICY.looks(POLICY.first_look["quick"]))
