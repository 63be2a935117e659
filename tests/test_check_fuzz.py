"""Random damage to real tables must give InputError(s), never another exception (no traceback)."""

import random

from conftest import FIXTURES, ROOT
from tunedmpi.errors import InputError, InputErrors
from tunedmpi.tables import schema

SOURCES = [
    FIXTURES / "tables" / "valid.yaml",
    ROOT / "tuning-tables" / "nagoya-flow-type2" / "openmpi-4.1.2.yaml",
]
JUNK = [
    "",
    "]]",
    "{",
    "- ",
    ": ",
    "null",
    "[1, 2]",
    "{a: b}",
    "!!python/object:os.system",
    "\t",
    "'",
    '"',
    "0",
    "-1",
    "1e9",
    "yes",
    "~",
    "&a",
    "*a",
    "? x",
]


def damaged(text, rng):
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        action = rng.randrange(4)
        if action == 0:
            del lines[i]
        elif action == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif action == 2 and ":" in lines[i]:
            key, _, _ = lines[i].partition(":")
            lines[i] = key + ": " + rng.choice(JUNK)
        else:
            j = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:j] + rng.choice(JUNK) + lines[i][j:]
    return "\n".join(lines) + "\n"


def test_damaged_tables_never_raise_anything_but_input_errors():
    rng = random.Random(20261121)
    refused = 0
    for n in range(400):
        text = damaged(SOURCES[n % 2].read_text(encoding="utf-8"), rng)
        try:
            schema.load_table("damaged-%d.yaml" % n, text)
        except (InputError, InputErrors) as exc:
            refused += 1
            assert "fix:" in str(exc)
    assert refused > 200  # most damage is caught; the rest is damage that leaves a valid table
