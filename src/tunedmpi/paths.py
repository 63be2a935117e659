"""Where the project's data lives: the checkout (or $TUNEDMPI_ROOT), found once."""

import os
import re
from pathlib import Path

from tunedmpi.errors import InputError


def project_root():
    """$TUNEDMPI_ROOT, else the nearest directory above the cwd holding tuning-tables/,
    else the checkout this package was installed from (editable install)."""
    env = os.environ.get("TUNEDMPI_ROOT")
    if env:
        return Path(env)
    here = Path.cwd().resolve()
    for d in (here,) + tuple(here.parents):
        if (d / "tuning-tables").is_dir():
            return d
    return Path(__file__).resolve().parents[2]


def tables_dir():
    return project_root() / "tuning-tables"


# A name that becomes one path component (a site, a campaign, a stage): letters, digits, '.', '_',
# '-', not starting with '.' or '-', so it can never be '..', an absolute path, a hidden file or an
# option.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
SAFE_NAME_HELP = "letters, digits, '.', '_' and '-', not starting with '.' or '-', at most 128"


def safe_name(name, where, key):
    """``name`` when it is a SAFE_NAME, else an InputError naming ``where`` (a file or an option)."""
    if isinstance(name, str) and SAFE_NAME.match(name):
        return name
    raise InputError(
        where,
        None,
        key,
        "%r cannot be a file name: it would write outside its folder or hide there" % (name,),
        "use a plain name (%s)" % SAFE_NAME_HELP,
    )


def inside(root, path, where, key):
    """``path`` when it stays under ``root`` (after '..' is resolved; symbolic links are the admin's
    choice and are followed as they are); else an InputError naming ``where``."""
    if Path(os.path.abspath(path)).is_relative_to(Path(os.path.abspath(root))):
        return Path(path)
    raise InputError(
        where,
        None,
        key,
        "%s is outside %s" % (path, root),
        "use a plain name (%s)" % SAFE_NAME_HELP,
    )
