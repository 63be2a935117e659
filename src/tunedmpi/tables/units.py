"""Message and threshold sizes: parse the ways people write them, write them back as UCX does.

``32KB`` = ``32kb`` = ``32k`` = ``32768`` = 32768 bytes, written back as ``32kb``. Units are binary
(UCX's memunits: k = 1024), at most ``MAX_SIZE`` (2^63 - 1). ``auto`` and ``inf`` are UCX's special values
and stay words.
"""

import re

# k, kb and kib are all 1024 (m, g likewise); a bare number or b is bytes
_UNITS = {"": 1, "b": 1}
_UNITS.update({p + s: 1 << (10 * n) for n, p in enumerate("kmg", 1) for s in ("", "b", "ib")})
_SIZE = re.compile(r"^\s*([0-9]{1,40})\s*([a-z]*)\s*\Z")
# The largest size a table may give: what a signed 64-bit size holds (UCX and Open MPI read sizes
# into 64-bit integers; anything above wraps or is refused there at run time).
MAX_SIZE = (1 << 63) - 1
SPECIAL = ("auto", "inf")


class SizeError(ValueError):
    pass


def parse_size(value, allow_special=False):
    """Bytes as an int, or ``'auto'``/``'inf'`` when ``allow_special``. Raises SizeError."""
    if isinstance(value, bool):
        raise SizeError("%r is not a size" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise SizeError("a size cannot be negative")
        if value > MAX_SIZE:
            raise SizeError("%d is above the largest size, %d bytes (2^63 - 1)" % (value, MAX_SIZE))
        return value
    if not isinstance(value, str):
        raise SizeError("%r is not a size" % (value,))
    text = value.strip().lower()
    if text in SPECIAL:
        if allow_special:
            return text
        raise SizeError("'%s' is not allowed here, give a number of bytes" % value)
    m = _SIZE.match(text)
    if not m or m.group(2) not in _UNITS:
        raise SizeError("'%s' is not a size (write e.g. 512, 4kb, 32KB, 1mb)" % value)
    size = int(m.group(1)) * _UNITS[m.group(2)]
    if size > MAX_SIZE:
        raise SizeError("'%s' is above the largest size, 2^63 - 1 bytes (8 EiB)" % value)
    return size


def format_size(value):
    """UCX syntax: ``auto``/``inf`` as is, else the largest exact unit in lower case (32kb, 1mb)."""
    if isinstance(value, str):
        return value
    for unit, factor in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if value and value % factor == 0:
            return "%d%s" % (value // factor, unit)
    return str(value)


def format_human(value):
    """Message sizes in prose and reports: 512B, 32KB, 1MB (as the studies write them)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    text = format_size(value)
    return text.upper() if text[-1] == "b" else text + "B"
