"""Issue 42's fuzz: every file input of the command line (site.yaml, tables, spaces, logs, store
records, STATUS, results.json, known-params lists and STAND-INS.yaml, sources.yaml, lock files,
a saved sacct file)
given as a FIFO, /dev/zero, a folder, a symbolic-link loop, a link to a victim file, random bytes
and a huge file. Each case runs the real command under a timeout and must end in a refusal (exit
2, no traceback) or a result (exit 0/1, e.g. history skipping what it cannot read): no traceback,
no hang, nothing written outside the case's folder, the victim unchanged."""

import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import lmod
from conftest import FIXTURES, ROOT

CLI = [str(ROOT / ".venv" / "bin" / "tunedmpi")]
IMB_LOG = FIXTURES / "imb" / "imb-mpi1_mem0.001_msglog0-20_allreduce_default-ompi.txt"
RESULTS = FIXTURES / "history" / "local-20261123T050113Z" / "results.json"
TIMEOUT_S = 30
VICTIM = b"precious: no command may write here\n"
HUGE = 300 * 1024 * 1024  # above files.MAX_BYTES, sparse: no disk is used


def plant(kind, path, victim):
    """Put the hostile `kind` at `path` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "victim":
        path.symlink_to(victim)
    elif kind == "random":
        path.write_bytes(random.Random(str(path)).randbytes(4096))
    elif kind == "huge":
        with open(path, "wb") as fh:
            fh.truncate(HUGE)
    else:
        raise ValueError(kind)


def ingest(campaign, case, log):
    """`tunedmpi ingest` of one log into campaign of the case's store."""
    return ["ingest", "--site", "local", "--nodes", "1", "--ppn", "2", "--campaign", campaign,
            "--store", case / "store", log]  # fmt: skip


def ingested_store(case):
    """A results store with one ingested record (campaign c1), made by the real command."""
    argv = CLI + [str(a) for a in ingest("c1", case, IMB_LOG)]
    proc = subprocess.run(argv, capture_output=True, env=lmod.clean_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return case / "store"


def record(case):
    return next((ingested_store(case) / "c1").rglob("*.json"))


def results_dir(case, name="local-20261123T050113Z"):
    d = case / "res" / name
    d.mkdir(parents=True)
    return d


def site_root(case):
    """A project root of its own (TUNEDMPI_ROOT) whose site `fz` is the hostile site.yaml."""
    root = case / "root"
    (root / "site-configs" / "fz").mkdir(parents=True)
    (root / "tuning-tables").symlink_to(ROOT / "tuning-tables")
    return root / "site-configs" / "fz" / "site.yaml"


def known_params(case):
    kp = case / "kp"
    shutil.copytree(ROOT / "known-params", kp)
    return kp


# input -> (where the hostile file goes, given the case folder; the command, given that path)
INPUTS = {
    "site.yaml": (site_root, lambda c, p: ["render", "--site", "fz", "--out", c / "out"]),
    "table": (lambda c: c / "t.yaml", lambda c, p: ["check", p]),
    "space": (
        lambda c: c / "space.yaml",
        lambda c, p: ["sweep", "--site", "local", "--space", p, "--store", c / "store"],
    ),
    "log": (lambda c: c / "imb.txt", lambda c, p: ingest("c2", c, p)),
    "store record": (
        record,
        lambda c, p: ["tune", "--site", "local", "--store", c / "store", "--out", c / "t.yaml"],
    ),
    "lock": (lambda c: c / "store" / "c3" / ".sweep.lock", lambda c, p: ingest("c3", c, IMB_LOG)),
    "STATUS (history)": (
        lambda c: results_dir(c) / "STATUS",
        lambda c, p: ["history", "--plots", c / "plots", p.parent],
    ),
    "STATUS (reanalyse)": (
        lambda c: results_dir(c) / "STATUS",
        lambda c, p: ["validate", "--reanalyse", p.parent, "--out", c / "out"],
    ),
    "results.json": (
        lambda c: results_dir(c) / "results.json",
        lambda c, p: ["history", "--plots", c / "plots", p.parent],
    ),
    "known-params list": (
        lambda c: known_params(c) / "openmpi-5.0.8.txt",
        lambda c, p: ["known-params", "--site", "local", "--lists", p.parent],
    ),
    "STAND-INS.yaml": (
        lambda c: known_params(c) / "STAND-INS.yaml",
        lambda c, p: ["known-params", "--lists", p.parent],
    ),
    "sacct file": (
        lambda c: c / "jobs.txt",
        lambda c, p: ["coverage", "--site", "local", "--sacct-file", p, "--out", c / "out"],
    ),
    "sources.yaml": (
        lambda c: c / "sources.yaml",
        lambda c, p: [sys.executable, ROOT / "tools" / "spack_source_mirror.py", p, c / "m"],
    ),
}
KINDS = ["fifo", "devzero", "dir", "loop", "victim", "random", "huge"]


def git_status():
    return subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True,
    ).stdout  # fmt: skip


def run_case(tmp_path, name, kind):
    """'refused', 'ran', 'traceback', 'hang' or 'escape' (with the output) for one case."""
    case = tmp_path / ("%s-%s" % (name.replace(" ", "_").replace("(", "").replace(")", ""), kind))
    outside = case / "outside"
    outside.mkdir(parents=True)
    victim = outside / "victim"
    victim.write_bytes(VICTIM)
    where, command = INPUTS[name]
    path = where(case)
    plant(kind, path, victim)
    env = lmod.clean_env()
    if name == "site.yaml":
        env["TUNEDMPI_ROOT"] = str(case / "root")
    args = [str(a) for a in command(case, path)]
    argv = args if args[0] == sys.executable else CLI + args
    try:
        proc = subprocess.run(
            argv, cwd=case, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return "hang", " ".join(args)
    if victim.read_bytes() != VICTIM or os.listdir(outside) != ["victim"]:
        return "escape", proc.stderr
    if "Traceback" in proc.stderr or proc.returncode not in (0, 1, 2):
        return "traceback", proc.stderr
    return ("refused" if proc.returncode == 2 else "ran"), proc.stderr


def test_every_file_input_is_refused_or_read_never_a_traceback_hang_or_escape(tmp_path):
    cases = [(name, kind) for name in INPUTS for kind in KINDS]
    checkout = git_status()
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda c: (c, run_case(tmp_path, *c)), cases))
    # nothing written beside the cases' folders, nor into the checkout
    assert len(os.listdir(tmp_path)) == len(cases) and git_status() == checkout
    counts = {}
    for _, (what, _) in outcomes:
        counts[what] = counts.get(what, 0) + 1
    print(
        "\nfuzz: %d cases, %d refused, %d ran, %d tracebacks, %d hangs, %d escapes"
        % (
            len(cases),
            counts.get("refused", 0),
            counts.get("ran", 0),
            counts.get("traceback", 0),
            counts.get("hang", 0),
            counts.get("escape", 0),
        )
    )
    bad = [
        "%s as %s: %s: %s" % (c[0], c[1], w, out[-600:])
        for c, (w, out) in outcomes
        if w not in ("refused", "ran")
    ]
    assert not bad, "\n".join(bad)
    # a refusal names the file it refused
    for kind in ("fifo", "dir", "random"):
        what, err = dict(outcomes)[("table", kind)]
        assert what == "refused" and "t.yaml" in err, err
