"""Stage 1: tuning tables: their schema, units, abstract knobs, coll_tuned rules files (the seed import is
in tunedmpi.importers)."""
