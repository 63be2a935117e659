#!/usr/bin/env bash
# Acceptance test: the site's tuned MPI module against its untuned baseline.
# A thin wrapper over `tunedmpi validate` (options: validate/run.sh --help; method: validate/README.md).
# Exit 0: the tuned module passes; 1: it does not; 2: validation could not run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export TUNEDMPI_ROOT="${TUNEDMPI_ROOT:-$root}"
if [ -x "$root/.venv/bin/tunedmpi" ]; then
  exec "$root/.venv/bin/tunedmpi" validate "$@"
fi
# No venv (e.g. a Spack-installed copy): the package from the checkout, with the system's Python.
if ! python3 -c 'import yaml, jinja2' 2>/dev/null; then
  echo "validate/run.sh: run \`make\` in $root first: it installs the tunedmpi command, its Python packages and the local site's MPI into .venv" >&2
  exit 2
fi
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m tunedmpi.cli validate "$@"
