"""Known-params lists: which variables one version of a library reads, as data with provenance.

One file per library and version, known-params/<library>-<version>.txt, written by
`tunedmpi import-params` from the library's own tools and read by modules/knownparams.py:

    # library: openmpi               header: what, from which build, by which command, when
    # version: 5.0.8
    # build: ...
    # command: ompi_info --all --parsable
    # date: 2025-11-26
    OMPI_MCA_coll_tuned_alltoall_algorithm one-of: 0=ignore 1=linear 2=pairwise ...
    OMPI_MCA_pml list: cm monitoring ob1 ucx v
    OMPI_MCA_pml_ucx_tls
    UCX_MEM_CUDA_RELOC deprecated
    UCC_TL_UCP_TUNE algorithms: allreduce@knomial allreduce@sra_knomial ...

A variable per line, sorted; after it what the library lists of its values: ``list:`` a comma
list of these names (Open MPI's components of a framework, UCX's transports), ``one-of:`` one of
these enumerator values (the number or the name), ``algorithms:`` the <collective>@<algorithm>
a UCC tuning string may select (`ucc_info -A`), ``deprecated``: still read, with a warning.
Only the values that matter are kept (components, coll_tuned algorithms, UCX_TLS), so the files
stay small and diffs between builds read as what changed.
"""

import datetime
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tunedmpi import paths
from tunedmpi.errors import InputError
from tunedmpi.files import read_lines, write_atomic

NAME = re.compile(r"^[A-Z][A-Z0-9_]*_[A-Za-z0-9_]+\Z")


@dataclass
class ParamList:
    library: str
    version: str
    path: str
    # name -> None, ("list", names), ("one-of", {value: label}), ("algorithms", names) or
    # ("deprecated", None)
    names: Dict[str, Optional[Tuple[str, object]]]
    header: Dict[str, List[str]] = field(default_factory=dict)


def known_params_dir():
    return paths.project_root() / "known-params"


def read(path):
    """A list file -> ParamList; InputError naming the line of anything it cannot read."""
    path = str(path)
    header, names = {}, {}
    for n, line in enumerate(read_lines(path), 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        if line.startswith("#"):
            m = re.match(r"^#\s*([a-z]+):\s?(.*)\Z", line)
            if m:
                header.setdefault(m.group(1), []).append(m.group(2))
            continue
        words = line.split()
        name, rest = words[0], words[1:]
        if not NAME.match(name) or name in names:
            raise InputError(
                path,
                n,
                name,
                "not a variable name, or a name given twice",
                "regenerate the file with tunedmpi import-params",
            )
        if not rest:
            names[name] = None
        elif rest == ["deprecated"]:
            names[name] = ("deprecated", None)
        elif rest[0] in ("list:", "algorithms:"):
            names[name] = (rest[0][:-1], frozenset(rest[1:]))
        elif rest[0] == "one-of:":
            names[name] = (
                "one-of",
                dict(w.split("=", 1) if "=" in w else (w, w) for w in rest[1:]),
            )
        else:
            raise InputError(
                path,
                n,
                name,
                "unknown word %r after the name" % rest[0],
                "write NAME, NAME list: ..., NAME one-of: N=name ..., NAME algorithms: ... "
                "or NAME deprecated",
            )
    for key in ("library", "version"):
        if not header.get(key):
            raise InputError(
                path,
                1,
                key,
                "the header has no '# %s:' line" % key,
                "regenerate the file with tunedmpi import-params",
            )
    return ParamList(header["library"][0], header["version"][0], path, names, header)


def render(library, version, names, header):
    """The text of a list file: the header (ordered pairs), then one sorted line per variable."""
    out = [
        "# Variables %s %s reads, from its own tools: the check of tunedmpi known-params"
        % (library, version),
        '# (site-configs/README.md, "Known parameters"). Regenerate with tunedmpi import-params.',
        "# library: %s" % library,
        "# version: %s" % version,
    ]
    out += ["# %s: %s" % kv for kv in header]
    for name in sorted(names):
        kind = names[name]
        if kind is None:
            out.append(name)
        elif kind[0] == "deprecated":
            out.append("%s deprecated" % name)
        elif kind[0] in ("list", "algorithms"):
            # "list:" alone: none
            out.append(("%s %s: %s" % (name, kind[0], " ".join(sorted(kind[1])))).rstrip())
        else:
            out.append("%s one-of: %s" % (name, enum_text(kind[1], _number_first)))
    return "\n".join(out) + "\n"


def enum_text(values, key):
    """An enumeration {value: label} as words 'value' (a label equal to it) or 'value=label'."""
    return " ".join(k if k == v else "%s=%s" % (k, v) for k, v in sorted(values.items(), key=key))


def _number_first(item):
    return (0, int(item[0]), "") if item[0].lstrip("-").isdigit() else (1, 0, item[0])


# --- Open MPI: ompi_info --all --parsable (and PRRTE's prte_info --all, Open MPI 5's mpirun) ---

# The Open MPI enumerations the lists keep: coll_tuned's forced algorithms, and Open MPI 4's
# single-copy mechanism (what envmap sets for smsc there).
KEPT_ENUMS = re.compile(r"^(coll_tuned_[a-z_]+_algorithm|btl_vader_single_copy_mechanism)\Z")


def ompi_info(text):
    """(version, {variable: kind}) from `ompi_info --all --parsable`: every MCA parameter as
    OMPI_MCA_<name>, each framework's selection variable with its components, the coll_tuned
    algorithm enumerations, and the parameters marked deprecated."""
    version, names, comps, enums, deprecated = None, set(), {}, {}, set()
    for line in text.splitlines():
        f = line.split(":")
        if f[:3] == ["ompi", "version", "full"]:
            version = f[3]
        if f[0] != "mca" or len(f) < 5:
            continue
        fw, comp, kind = f[1], f[2], f[3]
        if kind == "version" and comp != "base":
            comps.setdefault(fw, set()).add(comp)
        elif kind == "param":
            name = f[4]
            names.add(name)
            if comp == "base" and name == fw:  # the framework's selection: even with no component
                comps.setdefault(fw, set())
            if f[5:7] == ["enumerator", "value"] and KEPT_ENUMS.match(name):
                enums.setdefault(name, {})[f[7]] = ":".join(f[8:])
            elif f[5:7] == ["deprecated", "yes"]:
                deprecated.add(name)
    if not version:
        raise InputError(
            "ompi_info",
            None,
            "ompi:version:full",
            "no version line in the output",
            "give the output of ompi_info --all --parsable",
        )
    out = {}
    for name in names:
        out["OMPI_MCA_" + name] = (
            ("list", frozenset(comps.get(name, ())))
            if name in comps
            else ("one-of", enums[name])
            if name in enums
            else ("deprecated", None)
            if name in deprecated
            else None
        )
    return version, out


_PRTE_PARAM = re.compile(r'^\s*MCA ([a-z0-9_]+): "([A-Za-z0-9_]+)" \(current value')
_PRTE_COMP = re.compile(r"^\s*MCA ([a-z0-9_]+): ([a-z0-9_]+) \(MCA v")
_PRTE_VERSION = re.compile(
    r"^\s*PRTE: ([0-9][0-9A-Za-z.]*?)(?:[0-9]{4}-[0-9][0-9]-[0-9][0-9])?\s*\Z"
)


def prte_info(text):
    """(PRRTE version, {variable: kind}) from `prte_info --all` (PRRTE 3 has no --parsable): every
    parameter as PRTE_MCA_<name>, each framework's selection variable with its components, and
    the policies a *_policy parameter's help lists in brackets ([slot | node | span | fill])."""
    version, names, comps, helps, current = None, set(), {}, {}, None
    for line in text.splitlines():
        m = _PRTE_VERSION.match(line)
        if m and version is None:
            version = m.group(1)
        m = _PRTE_PARAM.match(line)
        if m:
            current = m.group(2)
            names.add(current)
            helps[current] = []
            if m.group(1) == current:  # the framework's selection: even with no component
                comps.setdefault(current, set())
            continue
        m = _PRTE_COMP.match(line)
        if m:
            comps.setdefault(m.group(1), set()).add(m.group(2))
        if re.match(r"^\s*MCA ", line) or not line.startswith(" " * 20):
            current = None
        elif current:
            helps[current].append(line.strip())
    out = {}
    for n in names:
        policies = re.search(r"\[([^]]*)\]", " ".join(helps[n])) if n.endswith("_policy") else None
        words = [w.strip() for w in policies.group(1).split("|")] if policies else []
        words = [w for w in words if re.match(r"^[a-z0-9]+\Z", w)]
        out["PRTE_MCA_" + n] = (
            ("list", frozenset(comps[n]))
            if n in comps
            else ("one-of", {w: w for w in words})
            if words
            else None
        )
    return version, out


# --- UCX: ucx_info -c -a -f; UCC: ucc_info -c -a -f ---

_ASSIGN = re.compile(r"^(UC[XC]_[A-Z0-9_]+)=")
_DEPRECATED = re.compile(r"^(UC[XC]_[A-Z0-9_]+) \(deprecated\)\s*\Z")
_TL_TITLE = re.compile(r"^# ([a-z0-9_]+) transport configuration\Z")
_TLS_ALIAS = re.compile(r"^#\s+- ([a-z0-9_/]+)\s+:")


def config_names(text):
    """{variable: None or ('deprecated', None)} from `ucx_info -c -a -f` or `ucc_info -c -a -f`."""
    out = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m:
            out[m.group(1)] = None
        m = _DEPRECATED.match(line)
        if m:
            out.setdefault(m.group(1), ("deprecated", None))
    return out


def ucx_transports(text):
    """The names UCX_TLS takes in this build: its transports (one "<tl> transport configuration"
    block each in `ucx_info -c -a -f`) and the aliases UCX_TLS's own help lists (all, sm/shm, rc, ...)."""
    tls, in_tls_help = set(), False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _TL_TITLE.match(line)
        if m:
            tls.add(m.group(1))
        if line.startswith("# Comma-separated list of transports to use"):
            in_tls_help = True
        elif in_tls_help and line.startswith("UCX_TLS="):
            in_tls_help = False
        elif in_tls_help:
            m = _TLS_ALIAS.match(line)
            if m:
                tls.update(m.group(1).split("/"))
    return frozenset(tls)


_ALG_SECTION = re.compile(r"^([a-z]+)/([a-z0-9_]+) algorithms:\s*\Z")
_ALG_COLL = re.compile(r"^  ([A-Za-z_]+)\s*\Z")
_ALG_LINE = re.compile(r"^    [0-9]+ :\s+([a-z0-9_]+) :")


def ucc_algorithms(text):
    """{UCC_<CL|TL>_<NAME>_TUNE: ("algorithms", {"allreduce@knomial", ...})} from `ucc_info -A`:
    what each component's tuning string may select with "@<algorithm>"."""
    out, var, coll = {}, None, None
    for line in text.splitlines():
        m = _ALG_SECTION.match(line)
        if m:
            var = "UCC_%s_%s_TUNE" % (m.group(1).upper(), m.group(2).upper())
            out[var] = ("algorithms", set())
            continue
        m = _ALG_COLL.match(line)
        if m:
            coll = m.group(1).lower()
            continue
        m = _ALG_LINE.match(line)
        if m and var and coll:
            out[var][1].add("%s@%s" % (coll, m.group(1)))
    return {k: (kind, frozenset(v)) for k, (kind, v) in out.items()}


# The version line of `ucx_info -v` ('# Library version: 1.18.1', or '# Version 1.13.1' before
# 1.16) and of `ucc_info -v` ('# UCC version=1.3.0 revision ...')
VERSION_LINE = {
    "ucx": re.compile(r"^# (?:Library version:|Version) ([0-9][0-9.]*)", re.M),
    "ucc": re.compile(r"^# UCC version=([0-9][0-9.]*)", re.M),
}


# --- running the tools of one install ---


def _run(argv, env=None):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(
            argv[0],
            None,
            None,
            "cannot run %s: %s" % (" ".join(argv), exc),
            "give the bin directory (or prefix) of a working install",
        )
    if done.returncode != 0:
        raise InputError(
            argv[0],
            None,
            None,
            "%s exited %d: %s" % (" ".join(argv), done.returncode, done.stderr.strip()[-500:]),
            "run it by hand to see why (a relocated install may need OPAL_PREFIX or PRTE_PREFIX)",
        )
    return done.stdout


def _tool(where, name):
    for d in (Path(where) / "bin", Path(where)):
        if (d / name).is_file() and os.access(str(d / name), os.X_OK):
            return d / name
    return None


def import_install(where, out=None, build=None, date=None):
    """Run the tools found in ``where`` (a prefix or its bin/) and write one list per library:
    ompi_info (with prte_info beside it, Open MPI 5's launcher), ucx_info, ucc_info.
    Returns the paths written; InputError when none of the tools is there."""
    out = Path(out or known_params_dir())
    date = date or datetime.date.today().isoformat()
    build = build or str(Path(where).resolve())
    written = []
    ompi = _tool(where, "ompi_info")
    if ompi:
        cmd = [str(ompi), "--all", "--parsable"]
        version, names = ompi_info(_run(cmd))
        header = [("build", build), ("command", " ".join(cmd))]
        prte = _tool(where, "prte_info")
        if prte:
            cmd = [str(prte), "--all"]
            # A relocated install (the PyPI wheel) finds its help files only with PRTE_PREFIX.
            env = dict(
                os.environ,
                PRTE_PREFIX=os.environ.get("PRTE_PREFIX") or str(Path(str(prte)).parents[1]),
            )
            pversion, pnames = prte_info(_run(cmd, env))
            names.update(pnames)
            said = "PRRTE %s: mpirun's runtime; PRTE_MCA_ variables" % pversion
            header.append(("command", "%s   (%s)" % (" ".join(cmd), said)))
        written.append(_write("openmpi", version, names, header + [("date", date)], out))
    # UCX and UCC: each tool's version, its variables, and what a value may name (UCX_TLS's
    # transports; the algorithms a UCC tuning string may select)
    for library, version_line in VERSION_LINE.items():
        tool = _tool(where, library + "_info")
        if not tool:
            continue
        found = version_line.search(_run([str(tool), "-v"]))
        version = found.group(1) if found else None
        cmd = [str(tool), "-c", "-a", "-f"]
        text = _run(cmd)
        names = config_names(text)
        header = [("build", build), ("command", "%s -v" % tool), ("command", " ".join(cmd))]
        if library == "ucx":
            names["UCX_TLS"] = ("list", ucx_transports(text))
        else:
            names.update(ucc_algorithms(_run([str(tool), "-A"])))
            header.append(("command", "%s -A" % tool))
        written.append(_write(library, version, names, header + [("date", date)], out))
    if not written:
        raise InputError(
            str(where),
            None,
            None,
            "no ompi_info, ucx_info or ucc_info in %s or its bin/" % where,
            "give the prefix of an Open MPI, UCX or UCC install",
        )
    return written


def _write(library, version, names, header, out):
    if not version:
        raise InputError(
            library,
            None,
            "version",
            "the tool did not print its version",
            "run it by hand: is it the library's own tool?",
        )
    path = out / ("%s-%s.txt" % (library, version))
    write_atomic(path, render(library, version, names, header))
    return path
