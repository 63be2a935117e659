"""One error type for bad input: it names the file, the line, the key and the fix."""

import errno
import sys
import traceback
import unicodedata


class InputError(Exception):
    """A problem in a file a person wrote (a table, a site config, a knob space).

    Printed as ``file:line: key: problem (fix: ...)`` so that an editor can jump to it.
    """

    def __init__(self, path, line, key, problem, fix):
        self.path = str(path)
        self.line = line
        self.key = key
        self.problem = problem
        self.fix = fix
        super().__init__(self.format())

    def format(self):
        where = self.path if self.line is None else "%s:%d" % (self.path, self.line)
        key = self.key or "(file)"
        return "%s: %s: %s (fix: %s)" % (where, key, self.problem, self.fix)


class InputErrors(Exception):
    """Several InputError at once: a check reports every problem of a file, not only the first."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("\n".join(e.format() for e in self.errors))


class OutputError(OSError):
    """A file could not be written (disk full, read-only, no permission, a size limit): the command
    could not run (exit 2), printed as one line naming the file and the fix. An OSError, so code
    that handles OSError still does."""

    FIXES = {
        errno.ENOSPC: "free space on that file system, or write elsewhere (--out, --store)",
        errno.EDQUOT: "free space in your quota, or write elsewhere (--out, --store)",
        errno.EFBIG: "raise the file size limit (ulimit -f), or write elsewhere (--out, --store)",
        errno.EROFS: "write elsewhere (--out, --store): that file system is read-only",
    }

    def __init__(self, path, exc):
        code = getattr(exc, "errno", None)
        super().__init__(code, getattr(exc, "strerror", None) or str(exc), str(path))
        self.fix = self.FIXES.get(
            code,
            "make it writable (permissions, the folder exists), or write elsewhere (--out, --store)",
        )

    def format(self):
        return "%s: cannot write: %s (fix: %s)" % (self.filename, self.strerror, self.fix)


WRITE_ERRNOS = (*OutputError.FIXES, errno.EACCES, errno.EPERM)


def one_line(exc):
    """The one line an error of the outside world is reported as, or None for a bug. An OSError
    (a file missing, a link loop, a folder where a file belongs, a full disk) or a UnicodeError (a
    file or argument that is not UTF-8) is no verdict and no traceback: it names the file and the
    fix."""
    if isinstance(exc, InputError):
        return exc.format()
    if isinstance(exc, OSError):
        name = exc.filename or "(a file)"
        # a permission error is reported as a write's, as it mostly is (read-only outputs)
        if isinstance(exc, OutputError) or exc.errno in WRITE_ERRNOS:
            return OutputError(name, exc).format()
        fix = "check that path: a folder or a regular file as the option says, that you may use"
        return "%s: cannot use it: %s (fix: %s)" % (name, exc.strerror or exc, fix)
    if isinstance(exc, UnicodeError):
        return "not UTF-8 text: %s (fix: give paths, arguments and files in UTF-8)" % exc
    return None


def boundary(work):
    """The one exception boundary of a command (cli.main): run work() and return its exit
    code; bad input and errors of the outside world are one line on stderr and exit 2 (could not
    run), never a traceback with exit 1 (which is validate's FAIL). A bug still prints its traceback,
    also with exit 2: a crash is no verdict either."""
    try:
        return work()
    except InputErrors as exc:
        for e in exc.errors:
            print("error: " + e.format(), file=sys.stderr)
        print("%d problem(s) found" % len(exc.errors), file=sys.stderr)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        line = one_line(exc)
        if line is None:
            traceback.print_exc()
            print(
                "tunedmpi: internal error (a bug: please report the traceback above)",
                file=sys.stderr,
            )
        else:
            print("error: " + line, file=sys.stderr)
    return 2


def printable(text):
    """text with every control, format (bidi: U+202E) and line-separator character as '?', for
    echoing what a file or a user wrote to a terminal: C1 controls such as U+009B start escape
    sequences, U+202E turns the rest of the line around."""
    return "".join(
        "?" if unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029" else ch
        for ch in str(text)
    )
