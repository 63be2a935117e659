"""Where the project's data lives: the checkout (or $TUNEDMPI_ROOT), found once."""

import os
from pathlib import Path


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
