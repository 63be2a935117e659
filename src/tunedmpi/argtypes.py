"""argparse types shared by the CLI and the commands that own their arguments (validate)."""

import argparse
import math

from tunedmpi.policy import POLICY

MAX_TIMEOUT_S = 7 * 24 * 3600  # --timeout: a run longer than a week is a mistake, not a benchmark


def whole(minimum):
    """argparse type: a whole number >= minimum."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError("%r is not a whole number >= %d" % (text, minimum))
        return value

    return parse


def number(low, high=None, low_ok=False):
    """argparse type: a finite number above low (or equal, with low_ok) and below high."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = None
        if (
            value is None
            or not math.isfinite(value)  # inf and nan: e.g. --timeout inf overflows a timer
            or not (value >= low if low_ok else value > low)
            or (high is not None and not value < high)
        ):
            raise argparse.ArgumentTypeError(
                "%r is not a number %s %g%s"
                % (
                    text,
                    ">=" if low_ok else "above",
                    low,
                    "" if high is None else " and below %g" % high,
                )
            )
        return value

    return parse


def add_levels(p):
    """--tolerance and --alpha, the verdict's levels (validate, power), defaults from POLICY."""
    p.add_argument(
        "--tolerance",
        type=number(0, low_ok=True),
        default=POLICY.tolerance,
        help="smallest gain that counts (default %g)" % POLICY.tolerance,
    )
    p.add_argument(
        "--alpha",
        type=number(0, 1),
        default=POLICY.alpha,
        help="significance level (default %g)" % POLICY.alpha,
    )
