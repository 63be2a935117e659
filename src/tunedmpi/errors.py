"""One error type for bad input: it names the file, the line, the key and the fix."""

import errno


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
