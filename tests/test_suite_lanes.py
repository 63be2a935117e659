"""`make test`'s lanes (tests/conftest.py LANES) reach pytest-xdist's scheduler: files of one lane run
on one worker, one after another. (xdist's own loadgroup marks stopped reaching it under pytest 9,
silently: the probe campaign ran three times and two namespace-host clusters met on one subnet.)"""

import re
import subprocess
import sys

from conftest import LANES, ROOT

# the probe-campaign lane's files and a file of its own, tests of them that measure nothing
LANE = ["tests/" + name for name, lane in LANES.items() if lane == "probe campaign"]
PICK = LANE + ["tests/test_parse.py"]
ONLY = "impossible or history_names or the_figure_is or manifest_row"


def test_the_files_of_a_lane_run_on_one_worker():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadscope", "-v"]
        + ["-p", "no:cacheprovider", "-k", ONLY, *PICK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] \[ *\d+%\] PASSED (tests/\w+\.py)::", proc.stdout, re.M)
    workers = {}
    for worker, path in ran:
        workers.setdefault(path, set()).add(worker)
    assert sorted(workers) == sorted(PICK), proc.stdout[-3000:]
    assert len(set().union(*(workers[path] for path in LANE))) == 1, workers
