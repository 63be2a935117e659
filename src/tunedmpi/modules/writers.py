"""One writer per module format, as EasyBuild's ModuleGenerator subclasses are: each holds its
format's escaping, file names, path expressions, the selector code it emits from selector.py's
rule, its help wording and its reader of a rendered module. render writes every format through
them; adding a format is a Writer subclass here, its templates (render/templates/tuned.<name>.j2,
baseline.<name>.j2) and its tests."""

import re

from tunedmpi.modules import selector

# A rendered module's quoted word (both formats quote with "...").
_STR = r'"((?:[^"\\]|\\.)*)"'


class Writer:
    """A format. Its subclass gives string (the escaping) and unquote, relative (a path from the
    module file), swap (help's wording), modulerc, WORDS (of the code chain, threads and node_type
    emit from selector's rule) and read (the module's data as written)."""

    name = ""  # as site.yaml's module_formats names it; the templates' suffix
    suffix = ""  # of the module file after its version
    comment = ""  # what starts a comment line
    FIRST = ("", "")  # selector.first(...): (format of the joined expressions, their separator)
    PRIMITIVES = {}  # selector's primitives (count, tasks, per_node, per_rank): a format of the variable

    def file_name(self, version):
        return version + self.suffix

    def prefix(self, prefix):
        """The expression of an MPI prefix (absolute, or relative to the checkout), or None."""
        if not prefix:
            return None
        return self.string(prefix) if prefix.startswith("/") else self.relative(prefix)

    def expr(self, expr):
        """One of selector's expressions in this format."""
        if expr[0] == "first":
            return self.FIRST[0] % self.FIRST[1].join(self.expr(e) for e in expr[1:])
        return self.PRIMITIVES[expr[0]] % expr[1]

    def chain(self):
        """The scheduler chain: (nodes, ppn, source) of the first of selector.SOURCES that applies."""
        w = self.WORDS
        lines = [w["chain"]]
        for name, ways in selector.SOURCES:
            for way in ways:
                if way[0] == "pair":
                    lines.append(w["pair"] % (self.expr(way[1]), self.expr(way[2])))
                else:
                    lines.append(w["hosts"] % (self.HOSTS[way[1]], way[2]))
                lines.append(w["found"] % name)
        return "\n".join(lines + [w["chain_end"]])

    def threads(self):
        """The threads per rank at ppn p (selector.THREADS_EXPLICIT, else the largest of THREADS)."""
        w = self.WORDS
        lines = [w["threads"] % selector.THREADS_EXPLICIT]
        lines += [w["thread"] % self.expr(e) for e in selector.THREADS]
        return "\n".join(lines + [w["threads_end"]])

    def node_type(self, site_variable):
        """(node type, source) by selector's rule; the module's own plain, TYPES, PARTITION and
        DEFAULT_TYPE hold the names."""
        w = self.WORDS
        lines = [w["node_type"] % selector.NODE_TYPE_EXPLICIT]
        lines += [w["partition"] % (v, s) for s, v in selector.node_type_variables(site_variable)]
        return "\n".join(lines + [w["node_type_end"]])

    def variables(self, text):
        """[(name, value or None)] a rendered module can set: every row's pairs, the NAMES list,
        the rules variables and the literal names of its path and environment commands."""
        return [
            (self.unquote(n), None if v is None else self.unquote(v)) for n, v in self.read(text)
        ]


class LuaWriter(Writer):
    """Lmod: <version>.lua."""

    name, suffix, comment = "lua", ".lua", "--"
    FIRST = ("(%s)", " or ")
    PRIMITIVES = {
        "count": 'count(getenv("%s"))',
        "tasks": 'max_tasks_per_node(getenv("%s"))',
        "per_node": 'per_node(getenv("%s"), n)',
        "per_rank": 'per_node(getenv("%s"), p)',
    }
    HOSTS = {"nodefile": "read_nodefile", "slots": "lsf_hosts"}
    # The code chain, threads and node_type emit: each function's head and end, and a line per
    # way, source, thread count and partition variable.
    WORDS = {
        "chain": "local function from_scheduler()\n  local getenv, n, p = os.getenv, nil, nil",
        "pair": "  n = %s\n  p = n and %s",
        "hosts": '  n, p = %s(getenv("%s"))',
        "found": '  if n and p then return n, p, "%s" end',
        "chain_end": "  return nil\nend",
        "threads": "local function threads(p)\n  local getenv = os.getenv\n"
        '  local t = count(getenv("%s"))\n  if t then return t end\n  t = 1',
        "thread": "  t = math.max(t, %s or 1)",
        "threads_end": "  return t\nend",
        "node_type": "local function node_type()\n  local getenv = os.getenv\n"
        '  local v = plain(getenv("%s"))\n  if v and TYPES[v] then return v, "explicit" end',
        "partition": '  v = plain(getenv("%s"))\n'
        '  if v and PARTITION[v] then return PARTITION[v], "%s" end',
        "node_type_end": '  return DEFAULT_TYPE, "default"\nend',
    }
    _SAFE = re.compile(r"[A-Za-z0-9 _.,:;=/+()\-\[\]<>@#%*!?]")
    # The tuned module's line that finds its rules folder from where the module is (tuned.lua.j2).
    RULES_DIR_LINE = 'local RULES_DIR = (myFileName():gsub("([^/]+)%.lua$", "__%1.rules"))'

    def string(self, value):
        """A Lua string literal that is inert whatever ``value`` holds: every byte outside a small
        safe set becomes a decimal escape, so quotes, ]], newlines, $(...) and backticks are data."""
        data = str(value).encode("utf-8")
        escaped = "".join(chr(b) if self._SAFE.match(chr(b)) else "\\%03d" % b for b in data)
        return '"' + escaped + '"'

    def unquote(self, s):
        return re.sub(r"\\([0-9]{3})", lambda m: chr(int(m.group(1))), s)

    def relative(self, prefix):
        # Relative to the checkout that holds modulefiles/<site>/<name>/<version>.lua
        checkout = 'pathJoin((myFileName():gsub("/[^/]+/[^/]+/[^/]+/[^/]+$", "")), %s)'
        return checkout % self.string(prefix)

    def swap(self, loaded, other):
        """module help's command from module ``loaded`` to module ``other``."""
        return "load %s" % other

    def modulerc(self, mark, default, hidden):
        """(file name, text) of the tuned folder's rc file: ``default`` the default, ``hidden`` hidden."""
        text = '-- %s\nmodule_version(%s, "default")\nhide_version(%s)\n'
        return ".modulerc.lua", text % (mark, self.string(default), self.string(hidden))

    _PAIR = re.compile(r"\{ %s, %s \}" % (_STR, _STR))
    _LITERAL = re.compile(
        r'^\s*(?:setenv|pushenv|prepend_path|append_path)\("([A-Za-z_][A-Za-z0-9_]*)"', re.M
    )

    def read(self, text):
        rows = re.search(r"^local ROWS = \{\n(.*?)^\}\n", text, re.M | re.S)
        out = [m.groups() for m in self._PAIR.finditer(rows.group(1) if rows else "")]
        for line in (r"^local NAMES = \{(.*)\}$", r"^local USE_RULES, RULES_FILE = (.*)$"):
            found = re.search(line, text, re.M)
            out += [(n, None) for n in re.findall(_STR, found.group(1))] if found else []
        return out + [(n, None) for n in self._LITERAL.findall(text)]


class TclWriter(Writer):
    """Environment Modules: <version>, which starts with #%Module."""

    name, suffix, comment = "tcl", "", "#"
    FIRST = ("[tm_first %s]", " ")
    PRIMITIVES = {
        "count": "[tm_count [tm_getenv %s]]",
        "tasks": "[tm_tasks [tm_getenv %s]]",
        "per_node": "[tm_per_node [tm_getenv %s] $n]",
        "per_rank": "[tm_per_node [tm_getenv %s] $p]",
    }
    HOSTS = {"nodefile": "tm_nodefile", "slots": "tm_slots"}
    # Absent values are "" (Tcl has no nil); every name emitted is a plain identifier.
    WORDS = {
        "chain": "proc tm_from_scheduler {} {",
        "pair": '   set n %s\n   set p ""\n   if {$n ne ""} {set p %s}',
        "hosts": "   lassign [%s [tm_getenv %s]] n p",
        "found": '   if {$n ne "" && $p ne ""} {return [list $n $p %s]}',
        "chain_end": "   return {}\n}",
        "threads": "proc tm_threads {p} {\n   set t [tm_count [tm_getenv %s]]\n"
        '   if {$t ne ""} {return $t}\n   set t 1',
        "thread": '   set v %s\n   if {$v ne "" && $v > $t} {set t $v}',
        "threads_end": "   return $t\n}",
        "node_type": "proc tm_node_type {} {\n   set v [tm_plain [tm_getenv %s]]\n"
        '   if {$v ne "" && [dict exists $::TYPES $v]} {return [list $v explicit]}',
        "partition": "   set v [tm_plain [tm_getenv %s]]\n"
        '   if {$v ne "" && [dict exists $::PARTITION $v]} '
        "{return [list [dict get $::PARTITION $v] %s]}",
        "node_type_end": "   return [list $::DEFAULT_TYPE default]\n}",
    }
    # No [ ] (command substitution), $ (variables), \ " { } (quoting), no control characters.
    _SAFE = re.compile(r"[A-Za-z0-9 _.,:;=/+()\-<>@#%*!?'^~|&`]")

    def string(self, value):
        """A Tcl word that is inert whatever ``value`` holds: a double-quoted string in which every
        character outside a small safe set is a \\uXXXX escape, so [exec ...], $var, braces,
        backslashes, quotes and newlines are plain data. Characters beyond U+FFFF (which Tcl 8.6's
        \\u cannot write) become U+FFFD."""
        out = (
            ch if self._SAFE.match(ch) else "\\u%04x" % (ord(ch) if ord(ch) <= 0xFFFF else 0xFFFD)
            for ch in str(value)
        )
        return '"' + "".join(out) + '"'

    def unquote(self, s):
        return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), s)

    def relative(self, prefix):
        # Relative to the checkout that holds modulefiles/<site>/<name>/<version>
        return (
            "[file join [file dirname [file dirname [file dirname [file dirname $ModulesCurrentModulefile]]]] %s]"
            % self.string(prefix)
        )

    def swap(self, loaded, other):
        # Environment Modules refuses a second member of family mpi: switch, do not load.
        return "switch %s %s" % (loaded, other)

    def modulerc(self, mark, default, hidden):
        # Lmod reads this file too (after .modulerc.lua), and its Tcl reader has no module-hide
        return ".modulerc", (
            "#%%Module\n# %s\nmodule-version %s default\n"
            'if {[info commands module-hide] ne ""} {module-hide %s}\n'
            % (mark, self.string(default), self.string(hidden))
        )

    _LIST = re.compile(r'\[list ((?:"(?:[^"\\]|\\.)*"\s*)+)\]')
    _LITERAL = re.compile(
        r"^\s*(?:setenv|pushenv|prepend-path|append-path)\s+([A-Za-z_][A-Za-z0-9_]*)\s", re.M
    )

    def read(self, text):
        out = []
        for line in re.findall(r"^dict set ROWS .*$|^   \[list .*$", text, re.M):
            for m in self._LIST.finditer(line):
                words = re.findall(_STR, m.group(1))
                out += list(zip(words[0::2], words[1::2]))
        names = re.search(r"^set NAMES \[list (.*)\]$", text, re.M)
        out += [(n, None) for n in re.findall(_STR, names.group(1))] if names else []
        rules = re.findall(r"^set (?:USE_RULES|RULES_FILE) %s$" % _STR, text, re.M)
        out += [(n, None) for n in rules]
        return out + [(n, None) for n in self._LITERAL.findall(text)]


LUA, TCL = LuaWriter(), TclWriter()
WRITERS = {w.name: w for w in (LUA, TCL)}


def of_file(name):
    """(writer, version) of a module file name render writes: <version>.lua is Lua's, any other
    name Tcl's (the writer of the longest suffix the name ends with, after a version)."""
    for w in sorted(WRITERS.values(), key=lambda w: -len(w.suffix)):
        if name.endswith(w.suffix) and (len(name) > len(w.suffix) or not w.suffix):
            return w, name[: len(name) - len(w.suffix)]
