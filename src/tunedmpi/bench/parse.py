"""Parse real IMB 2021.x and OSU 7.x output into result series, and say how the run went.

One line-by-line pass reads both formats (``fmt`` says which table markers it looks for):

- IMB: ``# Benchmarking <Name>`` (a table per process count, per IMB-RMA mode), then a ``#bytes
  #repetitions t_min[usec] ...`` header and rows (Barrier has no ``#bytes`` column: size 0). The
  value kept is a time: ``t_avg[usec]`` (collectives), else ``t_ovrl[usec]`` (IMB-NBC's overall
  time, IMB-RMA Truly_passive_put), else ``t[usec]`` (PingPong, IMB-RMA put/get/accumulate);
  Mbytes/sec is bytes/time, so comparing times ranks runs the same way.
- OSU: ``# OSU MPI_Put Latency Test v7.4`` names the benchmark, ``# Size  Latency (us)`` is the
  header (its columns are separated by two or more spaces). The value is the first column after
  Size.

Other lines never end a table: MPI warnings printed between rows (``osc_ucx_component.c:369 ...
query failed`` before every one-sided window), crash backtraces, mpirun's boxed messages. Lines
that look like errors become ``Parsed.problems``, each once with a count.

Probes (validate/probes/) print either format after a ``# tunedmpi-probe ...`` line; their series
are labelled suite ``"probe"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LATENCY = "latency_us"  # lower is better
BANDWIDTH = "bandwidth_MBps"  # higher is better
STATUSES = ("ok", "failed", "crashed", "timeout", "no-data")
PROBE_MARK = "# tunedmpi-probe"


@dataclass(frozen=True)
class Series:
    """One result table: ``points`` = ((size_bytes, value), ...) in file order."""

    suite: str  # "imb" | "osu" | "probe"
    benchmark: str  # lower case: "allreduce", "unidir_put", "put_latency", ...
    metric: str  # LATENCY or BANDWIDTH
    points: tuple


@dataclass
class Parsed:
    series: list
    problems: list  # human-readable, deduplicated ("... (x34)")
    status: str  # one of STATUSES
    # rows refused for an impossible number: (line, benchmark, column, text as printed)
    bad_values: list = field(default_factory=list)


# A printed number must be finite, >= 0 and below MAX_VALUE (1e12 us is 11 days; 1e12 MB/s is far
# beyond any link): a row with another is refused, and the run fails.
MAX_VALUE = 1e12


def zero_value(token):
    """The value a printed zero stands for. IMB and OSU round to their printed decimals, so "0.00"
    is a time in [0, 0.005): we take the middle of that interval, a quarter of the printing step
    (0.0025). Never 0: the statistics compare log times, and a real time is never exactly 0."""
    mant, _, exp = token.lower().lstrip("+-").partition("e")
    decimals = len(mant.partition(".")[2]) - (int(exp) if exp else 0)
    return 10.0**-decimals / 4


_INT = re.compile(r"^[0-9]{1,18}\Z")  # bounded: int() refuses very long digit strings
# no nan/inf/1_000, unlike float()
_NUM = re.compile(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\Z")

_NONFINITE = re.compile(r"^[-+]?(inf|infinity|nan)\Z", re.I)
_IMB_BENCH = re.compile(r"^#\s*Benchmarking\s+(\S+)")
_IMB_HEADER = re.compile(r"^#(bytes|repetitions)\s")
_IMB_LISTED = re.compile(r"^#\s+(\w+)\Z")
_IMB_END = "All processes entering MPI_Finalize"
_IMB_TEXT = re.compile(
    r"^#\s*Benchmarking\s|Intel\(R\) MPI Benchmarks|\bIMB-(MPI1|NBC|RMA|EXT|IO|MT|P2P)\b", re.M
)
_OSU_TITLE = re.compile(r"^#\s*OSU\s+MPI([\s_])(.*?)\s+Test\b", re.I)
_OSU_HEADER = re.compile(r"^#\s*Size\s{2,}\S")
# Column holding the reported time, best first; otherwise the first column after the size.
_VALUE_COLUMNS = ("t_avg[usec]", "t_ovrl[usec]", "t[usec]")
_NOT_VALUES = ("#bytes", "Size", "#repetitions", "Iterations", "Validation")
# OSU titles -> the names of the binaries (osu_put_bibw, osu_cas_latency, osu_alltoall, ...).
_OSU_WORDS = (
    ("non-blocking ", "i"),
    ("all-to-allv personalized exchange", "alltoallv"),
    ("all-to-all personalized exchange", "alltoall"),
    ("broadcast", "bcast"),
    ("multiple bandwidth / message rate", "mbw_mr"),
    ("bi-directional bandwidth", "bibw"),
    ("bandwidth", "bw"),
    ("compare_and_swap", "cas"),
    ("fetch_and_op", "fop"),
    ("accumulate", "acc"),
)

# "[vm:22941] " differs per rank: drop it to count repeats
_HOST_PREFIX = re.compile(r"^\[[^\]]*\]\s*")
_BOX_RULE = re.compile(r"^-{20,}\Z")  # mpirun/prterun frame their messages with these
_NOTEWORTHY = re.compile(
    r"error|warn|fail|invalid|abort|signal|segmentation|usage:|requires|"
    r"out-of-mem|not supported|unknown|cannot|unable|killed|exited|"
    r"list of benchmarks|illegal instruction|floating point exception",
    re.I,
)
_FATAL = re.compile(
    r"^usage:|^list of benchmarks|invalid (option|argument|benchmark)|parse error|"
    r"data validation error|MPI_ERR_|error occurred in MPI_|requires (at least|exactly)|"
    r"exited with non-zero status|calling \"?abort",
    re.I,
)
_CRASH = re.compile(
    r"segmentation fault|caught signal|\bsignal:? [0-9]+|signal: [a-z]|exited on signal|"
    r"process received signal|bus error|core dumped|illegal instruction|"
    r"floating point exception",
    re.I,
)


class _Problems:
    """Problem messages in first-seen order, each counted once."""

    def __init__(self):
        self.counts = {}
        self.fatal = False
        self.crashed = False

    def add(self, message, fatal=False):
        key = " ".join(message.split())[:300]
        if key:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.fatal = self.fatal or fatal

    def note(self, line):
        """Keep a line of free text if it looks like an error; classify it."""
        text = " ".join(_HOST_PREFIX.sub("", line.strip()).split())
        crashed, fatal = bool(_CRASH.search(text)), bool(_FATAL.search(text))
        if crashed or fatal or _NOTEWORTHY.search(text):
            self.crashed = self.crashed or crashed
            self.add(text, fatal)

    def as_list(self):
        return [key if n == 1 else "%s (x%d)" % (key, n) for key, n in self.counts.items()]


class _Table:
    def __init__(self, benchmark, cols):
        self.benchmark, self.cols = benchmark, cols
        self.size_i = 0 if cols[0] in ("#bytes", "Size") else None  # IMB Barrier: no size column
        self.rows = []
        self.bad = []  # (line, column, token) of rows refused for an impossible number
        vi = next((cols.index(c) for c in _VALUE_COLUMNS if c in cols), None)
        if vi is None:
            vi = next((i for i, c in enumerate(cols) if c not in _NOT_VALUES), None)
        self.value_i = vi

    def add(self, tokens, lineno=None):
        """Take a data row; False if the tokens are not one. A row with an impossible number
        (negative, infinite, nan, MAX_VALUE or more) or a value missing is taken but kept in
        ``bad``, not in ``rows``: refused with its line, never silently one size fewer."""
        if len(tokens) != len(self.cols):
            if self._short(tokens):
                self.bad.append((lineno, self.cols[len(tokens)], "(missing)"))
                return True
            return False
        row, bad = [], None
        for i, tok in enumerate(tokens):
            if i == self.size_i:
                if not _INT.match(tok):
                    return False
                row.append(int(tok))
            elif _NONFINITE.match(tok):  # IMB prints inf or nan for a broken timer
                bad = bad or (lineno, self.cols[i], tok)
                row.append(None)
            elif _NUM.match(tok):
                value = float(tok)
                if not (0 <= value < MAX_VALUE):  # float("1e400") is inf
                    bad = bad or (lineno, self.cols[i], tok)
                elif value == 0 and i == self.value_i:
                    value = zero_value(tok)
                row.append(value)
            elif tok in ("Pass", "Fail"):  # OSU -c
                row.append(tok)
            else:
                return False
        if bad:
            self.bad.append(bad)
        else:
            self.rows.append(row)
        return True

    def _short(self, tokens):
        """A row of this table cut short: its size, then fewer numbers than the header has."""
        return (
            self.size_i == 0
            and 1 <= len(tokens) < len(self.cols)
            and _INT.match(tokens[0]) is not None
            and all(_NUM.match(t) or _NONFINITE.match(t) for t in tokens[1:])
        )

    def size(self, row):
        return 0 if self.size_i is None else row[self.size_i]

    def series(self, suite):
        vi = self.value_i
        rows = [r for r in self.rows if vi is not None and isinstance(r[vi], float)]
        if not rows:
            return None
        metric = BANDWIDTH if re.search(r"MB/s|Mbytes/sec", self.cols[vi], re.I) else LATENCY
        points = tuple((self.size(r), r[vi]) for r in rows)
        return Series(suite, self.benchmark, metric, points)


def _osu_name(separator, title):
    name = title.lower()
    for long, short in _OSU_WORDS:
        name = name.replace(long, short)
    words = name.split()
    # "MPI Allreduce Latency" is osu_allreduce, but "MPI_Put Latency" is osu_put_latency
    if separator != "_" and len(words) > 1 and words[-1] == "latency":
        words.pop()
    return "_".join(words)


def _lines(text):
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", "replace")
    return (text or "").replace("\x00", "").splitlines()


def _scan(lines, fmt):
    """The single pass: tables, IMB's benchmark list, whether IMB finished, problems."""
    tables, listed, problems = [], [], _Problems()
    bench = table = None
    probe = finished = listing = in_backtrace = False
    box = None
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if table is not None and table.add(line.split(), lineno):
            in_backtrace = False  # rows first, so an unterminated block cannot swallow them
            continue
        if in_backtrace:  # UCX's "==== backtrace ... ====" block: stack frames, not messages
            in_backtrace = not re.match(r"^=+\Z", line)
            continue
        if _BOX_RULE.match(line):
            if box is not None:
                problems.note(" ".join(box))
            box = [] if box is None else None
            continue
        if box is not None:
            box.append(line)
            continue
        if line.startswith(PROBE_MARK):
            probe = True
        elif line.startswith("==== backtrace"):
            in_backtrace = True
        elif not line.startswith("#"):
            problems.note(line)
        elif fmt == "imb":
            if listing:  # "# List of Benchmarks to run:" is followed by "# Name" lines
                if m := _IMB_LISTED.match(line):
                    listed.append(m.group(1).lower())
                listing = not line.startswith("#-") and not _IMB_BENCH.match(line)
            if m := _IMB_BENCH.match(line):
                bench, table = m.group(1).lower(), None
            elif _IMB_HEADER.match(line) and bench:
                table = _Table(bench, line.split())
                tables.append(table)
            elif "List of Benchmarks to run" in line:
                listing = True
            elif _IMB_END in line:
                finished, table = True, None
        else:  # osu
            if m := _OSU_TITLE.match(line):
                bench, table = _osu_name(*m.groups()), None
            elif _OSU_HEADER.match(line) and bench:
                table = _Table(bench, re.split(r"\s{2,}", line.lstrip("#").strip()))
                tables.append(table)
    if box:  # output cut inside a framed message
        problems.note(" ".join(box))
    return tables, listed, finished, probe, problems


def _parse(text, fmt, exit_code=None, timed_out=False, requested=None):
    tables, listed, finished, probe, problems = _scan(_lines(text), fmt)
    suite = "probe" if probe else fmt
    series, bad_values = [], []
    for t in tables:
        for line, col, tok in t.bad:
            bad_values.append((line, t.benchmark, col, tok))
            problems.add(
                "%s: line %d: %s %s is not a possible value (finite, >= 0, below %g)"
                % (t.benchmark, line, col, tok, MAX_VALUE),
                fatal=True,
            )
        s = t.series(suite)
        if s is None:
            problems.add("%s: table header but no results" % t.benchmark)
            continue
        series.append(s)
        failed = [t.size(r) for r in t.rows if "Fail" in r]
        if failed:
            problems.add(
                "%s: data validation failed at %s bytes"
                % (t.benchmark, ", ".join(map(str, failed))),
                fatal=True,
            )
    found = {s.benchmark for s in series}
    for name in requested or ():
        name = str(name).lower()
        if name not in found and name.replace("osu_", "", 1) not in found:
            problems.add("requested benchmark %r is not in the output" % name, fatal=True)
    not_run = [b for b in listed if b not in found]
    if not_run:
        problems.add("listed but without results: " + ", ".join(dict.fromkeys(not_run)))
    if exit_code not in (None, 0):
        problems.add("exit code %s" % exit_code)
    if timed_out:
        problems.add("timed out")

    if timed_out:
        status = "timeout"
    elif problems.crashed or (
        isinstance(exit_code, int) and (exit_code < 0 or 128 < exit_code < 160)
    ):
        status = "crashed"  # killed by a signal: 128+N from a shell/mpirun, -N from subprocess
    elif exit_code not in (None, 0) or problems.fatal:
        status = "failed"
    elif not series:
        status = "no-data"
        problems.add("no result rows in the output")
    else:
        status = "ok"

    # Did the last table stop early? IMB says when it finished; for OSU only a failed run tells.
    last = tables[-1] if tables else None
    cut = (not finished) if fmt == "imb" else status in ("failed", "crashed", "timeout")
    if last is not None and last.rows and cut:
        problems.add(
            "%s: table cut short after %d rows (last size %d bytes)"
            % (last.benchmark, len(last.rows), last.size(last.rows[-1]))
        )
    return Parsed(series, problems.as_list(), status, bad_values)


def parse_output(text, *, exit_code=None, timed_out=False, requested=None) -> Parsed:
    """Detect the suite (IMB or OSU, probes included), parse, and classify the run.

    Status: "timeout" if ``timed_out``; "crashed" on a signal (exit 128+N or -N, "Segmentation
    fault", "Caught signal", "exited on signal" ...); "failed" on a non-zero exit or on failures
    that exit 0 (usage or benchmark list printed, invalid option/benchmark, OSU ``-c`` validation,
    MPI_ERR_*, a requested benchmark missing); "no-data" if no table has a row; else "ok".
    Problems that do not stop a run (warnings between rows, IMB out-of-mem sizes) are listed only.
    """
    body = "\n".join(line for line in _lines(text) if not line.startswith(PROBE_MARK))
    fmt = "imb" if _IMB_TEXT.search(body) else "osu"
    return _parse(text, fmt, exit_code, timed_out, requested)
