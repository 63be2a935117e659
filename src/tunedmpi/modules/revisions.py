"""A site's table revisions: the candidate on trial, promote, rollback (docs/regenerate.md).

- The **current** table, tuning-tables/<platform>/<mpi>-<version>.yaml, is what `module load
  <tuned>/<version>` (the default) serves.
- The **candidate**, <mpi>-<version>.candidate.yaml beside it (written by `tunedmpi retune`), is
  rendered as the hidden module <tuned>/<version>-candidate: users try it by name, nobody else
  gets it.
- **promote** makes the candidate current, only when validate judged exactly that candidate
  (its revision) against the untuned baseline and no band lost. The table and tuned modules it
  replaces are kept, dated, in tuning-tables/<platform>/revisions/<UTC time>-<revision>/.
- **rollback** restores the newest kept revision, table and modules byte for byte.

A table's revision is the digest of its bytes: validate records the revision it judged
(results.json `table_revision`), so a verdict can never be applied to another table.
"""

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from tunedmpi import paths
from tunedmpi.errors import InputError
from tunedmpi.files import read_bytes, read_text, write_all_or_none
from tunedmpi.modules import render, sites
from tunedmpi.modules.writers import WRITERS

REVISIONS = "revisions"  # beside the tables: tables.find_tables does not walk it
KEPT_TABLE = "table.yaml"


def table_path(site):
    return paths.tables_dir() / (site.table_ref + ".yaml")


def revisions_dir(site):
    return table_path(site).parent / REVISIONS


def revision(path):
    """The revision of the table file at ``path`` (12 hex digits of its SHA-256), None if absent."""
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()[:12]
    except FileNotFoundError:
        return None


def module_revision(site, module):
    """(table path, revision) that the tuned ``module`` (name/version) of ``site`` serves: the
    candidate's for <tuned>/<version>-candidate, the current table's for <tuned>/<version>;
    (None, None) for any other module (a baseline, a peer) or a site without a table."""
    if not site.table_ref:
        return None, None
    tuned = "%s/%s" % (site.tuned_module, site.mpi_version)
    tables = {tuned: table_path(site), tuned + sites.CANDIDATE_SUFFIX: sites.candidate_path(site)}
    path = tables.get(module)
    return (path, revision(path)) if path else (None, None)


def _tuned_files(site, root):
    """{path relative to modulefiles/: bytes} of the site's tuned module as it is on disk: its
    module files and its __<version>.rules folder (rules files, launch checks)."""
    modules = [Path(root) / render.module_path(site, site.tuned_module, fmt) for fmt in WRITERS]
    files = [p for p in modules if p.is_file()] + _files(Path(root) / render.side_path(site))
    return {str(p.relative_to(root)): read_bytes(p) for p in files}


def _files(folder):
    """The regular files (no symlinks) under ``folder``, sorted (none if it is no folder)."""
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]


def _validated(site, results):
    """The results.json of the validate campaign that judged the candidate as it is now, against
    the site's untuned baseline: the directory ``results``, else the newest such campaign under
    validate-results/. InputError when there is none."""
    module = "%s/%s%s" % (site.tuned_module, site.mpi_version, sites.CANDIDATE_SUFFIX)
    baseline = "%s/%s" % (site.baseline_module, site.mpi_version)
    want = (module, baseline, revision(sites.candidate_path(site)))
    dirs = [Path(results)] if results else sorted(Path("validate-results").glob(site.name + "-*"))
    found = None
    for d in dirs:
        try:
            doc = json.loads(read_text(d / "results.json"))
        except (OSError, ValueError):
            continue
        mods = doc.get("modules") or {}
        if (mods.get("tuned"), mods.get("baseline"), doc.get("table_revision")) == want:
            found = (d, doc)
    if found is None:
        raise InputError(
            str(results or "validate-results/"),
            None,
            "results.json",
            "no validate campaign judged %s (table revision %s) against %s"
            % (module, want[2], baseline),
            "validate/run.sh --site %s --module %s --full, then promote again"
            % (site.name, module),
        )
    return found


def promote(site, rerender, results=None, root=None):
    """Make the candidate current (see the module doc). Returns (exit code, lines to print):
    1 when a band of the candidate lost to the baseline (naming each), else 0. rerender(site
    name, modulefiles root) writes the site's modules anew and yields what it did (render.write:
    render is the caller's, it renders the candidate from here)."""
    cand = sites.candidate_path(site)
    if not cand.is_file():
        raise InputError(
            str(cand), None, None, "no candidate table", "run tunedmpi retune --site %s" % site.name
        )
    where, doc = _validated(site, results)
    lost = [b for b in doc.get("bands", []) if b.get("verdict") == "lose"]
    if lost:
        bands = "; ".join("%s %s x%.3f" % (b["benchmark"], b["band"], b["gain"] or 0) for b in lost)
        mods = doc["modules"]
        why = "%s lost to %s in %s: %s" % (mods["tuned"], mods["baseline"], where, bands)
        return 1, ["promote: refused: " + why]
    root = Path(root or render.modulefiles_dir())
    current = table_path(site)
    old_rev = revision(current)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    keep = revisions_dir(site) / ("%s-%s" % (stamp, old_rev))
    files = {keep / KEPT_TABLE: read_bytes(current)}
    files.update(
        (keep / "modulefiles" / rel, data) for rel, data in _tuned_files(site, root).items()
    )
    note = dict(
        kept=stamp,
        table=str(current.relative_to(paths.project_root())),
        table_revision=old_rev,
        replaced_by=revision(cand),
        validated_by=str(where),
        verdict=doc.get("verdict"),
    )
    files[keep / "revision.json"] = (json.dumps(note, indent=1, sort_keys=True) + "\n").encode()
    write_all_or_none(files)  # the old revision is kept whole before anything changes
    write_all_or_none({current: read_bytes(cand)})
    os.unlink(cand)
    lines = [
        "kept %s (revision %s) in %s" % (current, old_rev, keep),
        "promoted %s: verdict %s, no band lost (%s)" % (revision(current), doc["verdict"], where),
    ]
    return 0, lines + list(rerender(site.name, root))


def kept(site):
    """The kept revisions of the site's table, oldest first."""
    d = revisions_dir(site)
    return sorted(p for p in d.iterdir() if (p / KEPT_TABLE).is_file()) if d.is_dir() else []


def rollback(site, rerender, root=None):
    """Restore the newest kept revision: its table, then its tuned modules byte for byte
    (rerender, as promote's, first writes the rest of the site and removes what the restored table
    no longer has)."""
    revs = kept(site)
    if not revs:
        raise InputError(
            str(revisions_dir(site)),
            None,
            None,
            "no kept revision to roll back to",
            "promote keeps one each time it replaces the table",
        )
    keep, root = revs[-1], Path(root or render.modulefiles_dir())
    current = table_path(site)
    write_all_or_none({current: read_bytes(keep / KEPT_TABLE)})
    lines = list(rerender(site.name, root))
    mods = keep / "modulefiles"
    restored = {root / p.relative_to(mods): read_bytes(p) for p in _files(mods)}
    write_all_or_none(restored)
    for path in restored:
        render.make_executable(path)  # the launch checks
    shutil.rmtree(keep)
    if not any(keep.parent.iterdir()):
        keep.parent.rmdir()
    return lines + [
        "rolled back to %s (revision %s), %d module file(s) restored byte for byte"
        % (keep.name, revision(current), len(restored))
    ]
