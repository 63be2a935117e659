"""validate's command line: one validation (a campaign, --reanalyse or --submit) from its options,
with the verdict table and the verdict line it prints; `--rows` (rows.py) calls it for each row."""

from tunedmpi.acceptance import report, validate
from tunedmpi.bench import machine


def one(args):
    """One validation as the options say; its exit code (CannotRun and Interrupted are raised)."""
    if args.submit:
        return validate.submit(args)
    if args.reanalyse:
        results, outdir = validate.reanalyse(args.reanalyse, args.out)
    else:
        with machine.measuring(args.wait):  # one measurement per machine
            results, outdir = validate.campaign(validate.options_from_args(args))
    print(report.verdict_table(results))
    print(
        "\nverdict: %s  (%s vs %s; report: %s)"
        % (
            results["verdict"],
            results["modules"]["tuned"],
            results["modules"]["baseline"],
            outdir / "report.md",
        )
    )
    return results["exit_code"]
