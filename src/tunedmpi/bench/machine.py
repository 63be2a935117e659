"""One measurement per machine: validate and a local sweep time runs on this machine's cores, so
two at once slow each other down and both record it as the modules' doing. Each holds the
machine's measurement lock (files.locked on $TUNEDMPI_MEASURE_LOCK, else MEASURE_LOCK) while it
measures: a second refuses at once naming the first, or with --wait SECONDS waits that long. The
kernel drops the lock when its holder ends, even by SIGKILL. It is the lock of the machine that
runs the command (a Slurm job's first node); a sweep's array tasks run in allocations of their own."""

import contextlib
import os

from tunedmpi.files import locked

MEASURE_LOCK = "/tmp/tunedmpi-measure.lock"  # every user's measurements meet there
ENV = "TUNEDMPI_MEASURE_LOCK"


def lock_path():
    return os.environ.get(ENV) or MEASURE_LOCK


@contextlib.contextmanager
def measuring(wait=0.0):
    """Hold this machine's measurement lock while the block measures."""
    path = lock_path()
    with locked(path, "measuring on this machine (validate, sweep; --wait SECONDS waits)", wait):
        yield path
