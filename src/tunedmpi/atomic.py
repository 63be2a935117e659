"""Kept only for the two modules that still import it (modules/render, regenerate/sweep): the
writes and locks live in files.py, the one file layer. Remove once they import tunedmpi.files."""

from tunedmpi.files import locked, stray_temps, write_all_or_none, write_atomic  # noqa: F401
