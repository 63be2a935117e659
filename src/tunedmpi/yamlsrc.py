"""Load YAML into plain Python values while keeping the line of every key.

PyYAML silently keeps the last of two equal keys and forgets where a value came from; tables
are reviewed by people, so we need both: duplicates are errors, and every error names its line.
Anchors and aliases (``&a``, ``*a``, ``<<: *a``) are refused: no file of ours needs them, and they
let ten lines expand to gigabytes (billion laughs) or refer to themselves (``a: &a [*a]``).
"""

import yaml
from yaml.constructor import SafeConstructor

from tunedmpi.errors import InputError
from tunedmpi.files import read_text


class Source:
    """A parsed YAML document: ``data`` (dicts, lists, scalars) and ``line(path)``."""

    def __init__(self, path, data, lines):
        self.path = str(path)
        self.data = data
        self._lines = lines

    def line(self, keypath):
        """Line (1-based) of the deepest known prefix of ``keypath`` (a tuple of keys/indices)."""
        keypath = tuple(keypath)
        while keypath:
            if keypath in self._lines:
                return self._lines[keypath]
            keypath = keypath[:-1]
        return self._lines.get((), 1)

    def error(self, keypath, problem, fix):
        return InputError(self.path, self.line(keypath), dotted(keypath), problem, fix)


def dotted(keypath):
    out = ""
    for part in keypath:
        if isinstance(part, int):
            out += "[%d]" % part
        else:
            out += ("." if out else "") + str(part)
    return out


_scalars = SafeConstructor()


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses an anchor or an alias the moment the composer meets one."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _AliasFound(problem_mark=event.start_mark)
        return super().compose_node(parent, index)


class _AliasFound(yaml.MarkedYAMLError):
    """An anchor or alias, at its problem_mark."""


def _scalar(node, keypath, path):
    try:
        return _scalars.construct_object(node)
    except (ValueError, OverflowError) as exc:  # e.g. an unquoted date 2026-13-45
        raise InputError(
            path,
            node.start_mark.line + 1,
            dotted(keypath),
            "%r is not a valid value: %s" % (node.value, exc),
            "quote it if it is text, or correct it (dates are YYYY-MM-DD)",
        )


def _convert(node, keypath, lines, path):
    lines[keypath] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                raise InputError(
                    path,
                    knode.start_mark.line + 1,
                    dotted(keypath),
                    "a key must be a plain value",
                    "write the key as text or a number",
                )
            key = _scalar(knode, keypath, path)
            if key in out:
                first = lines[keypath + (key,)]
                raise InputError(
                    path,
                    knode.start_mark.line + 1,
                    dotted(keypath + (key,)),
                    "duplicate key (first given on line %d)" % first,
                    "keep one of the two entries",
                )
            out[key] = _convert(vnode, keypath + (key,), lines, path)
            lines[keypath + (key,)] = knode.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, keypath + (i,), lines, path) for i, item in enumerate(node.value)]
    return _scalar(node, keypath, path)


def load(path, text=None):
    """Parse a YAML file (or ``text`` given for it) into a :class:`Source`."""
    if text is None:
        try:
            text = read_text(path)
        except InputError:  # a FileRefused is an OSError too, and says what is wrong itself
            raise
        except OSError as exc:
            raise InputError(
                path,
                None,
                None,
                "cannot read file: %s" % exc.strerror,
                "check the path and permissions",
            )
    try:
        node = yaml.compose(text, Loader=_NoAliasLoader)
    except _AliasFound as exc:
        raise InputError(
            path,
            exc.problem_mark.line + 1,
            None,
            "YAML anchors and aliases (&name, *name, <<:) are not accepted",
            "write the values out in full where they are used",
        )
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(
            path,
            line,
            None,
            "not valid YAML: %s" % problem,
            "fix the YAML syntax (indentation, quotes, colons)",
        )
    if node is None:
        raise InputError(
            path, 1, None, "file is empty", "write a table (see tuning-tables/README.md)"
        )
    lines = {}
    try:
        data = _convert(node, (), lines, path)
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        raise InputError(
            path,
            mark.line + 1 if mark else None,
            None,
            "unsupported YAML value: %s" % exc.problem,
            "use plain strings, numbers, lists and mappings",
        )
    return Source(path, data, lines)
