"""One error type for bad input: it names the file, the line, the key and the fix."""


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
