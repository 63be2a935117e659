"""argparse types shared by the CLI and the commands that own their arguments (validate)."""

import argparse
import math

from tunedmpi.policy import POLICY

# The largest count (nodes, ranks per node, repetitions) anything accepts: the CLI's counts and the
# modules' geometry (modules/selector.py emits it into the Lua and Tcl twins).
MAX_COUNT = 1000000
MAX_TIMEOUT_S = 7 * 24 * 3600  # --timeout: a run longer than a week is a mistake, not a benchmark


def whole(minimum, maximum=MAX_COUNT):
    """argparse type: a whole number >= minimum and at most maximum (default the modules' bound on
    a count: more nodes, ranks or repetitions than that is a typo, never stored or tuned)."""

    def parse(text):
        try:
            value = int(text) if len(text) <= 20 else None
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                "%r is not a whole number >= %d and at most %d" % (text, minimum, maximum)
            )
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
            above = ">=" if low_ok else "above"
            below = "" if high is None else " and below %g" % high
            raise argparse.ArgumentTypeError(
                "%r is not a number %s %g%s" % (text, above, low, below)
            )
        return value

    return parse


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text):
    """argparse type: a time such as 45m, 2h, 90s or 600 (seconds), above 0 and at most a week."""
    unit = DURATION_UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            "%r is not a time such as 45m, 2h or 90s (above 0, at most a week)" % text
        )
    return value


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


def add_wait(p):
    """--wait of the commands that measure (bench/machine.py: one measurement per machine)."""
    p.add_argument(
        "--wait",
        type=number(0, MAX_TIMEOUT_S, low_ok=True),
        default=0.0,
        metavar="SECONDS",
        help="when another validate or sweep measures on this machine, wait this long for it "
        "(default: refuse at once, naming it)",
    )


def argv_without(argv, options):
    """argv without these options, each taking a value (`--opt V`, `--opt=V`), also as argparse's
    abbreviations (`--row all`): what a child command (a row's validate, a --submit job) must
    not be given again."""

    def named(word):
        return word.startswith("--") and any(o.startswith(word) for o in options)

    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif named(a):
            skip = True
        elif not ("=" in a and named(a.split("=", 1)[0])):
            out.append(a)
    return out
