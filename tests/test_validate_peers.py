"""validate against another MPI (issue 31): `--baseline intel-mpi/2021.18.1` or `mpich/5.0.2`.

Each side runs programs built against its own MPI with its own launcher, and results.json and
report.md say which. The end-to-end tests use the real peers that `make peers` installs into
.peers/ with their modules rendered in modulefiles/local/; until then (or elsewhere)
TUNEDMPI_PEER_MODULEPATH may name a folder of their modules. The verdict is not asserted.
"""

import json
import os
import shlex
import subprocess

import pytest

import lmod
from conftest import ROOT, VERDICT_EXITS, assert_verdict
from tunedmpi.bench import suites
from tunedmpi.bench.runner import LAUNCHERS, Runner, launcher_args, recognise
from tunedmpi.tables.operations import OSU_BENCHMARKS

RUN = ROOT / "validate" / "run.sh"
PEERS = {  # module -> (flavour, what report.md calls it)
    "intel-mpi/2021.18.1": ("intel", "Intel MPI 2021.18.1"),
    "mpich/5.0.2": ("mpich", "MPICH 5.0.2"),
}
PEER_MODULEPATH = "TUNEDMPI_PEER_MODULEPATH"
# What each end-to-end comparison judges: a collective and a one-sided test (both programs, each
# side's own build and launcher), other ones for each peer. The whole quick set against Intel MPI
# took 48 s of `make test`'s budget and asserted nothing these do not.
SCOPE = {
    "intel-mpi/2021.18.1": ["alltoall", "get_latency"],
    "mpich/5.0.2": ["allreduce", "put_latency"],
}

# what `mpirun --version` prints, verbatim from the three MPIs on this machine kind
VERSIONS = {
    "openmpi": "mpirun (Open MPI) 5.0.8\n\nReport bugs to https://www.open-mpi.org/community/help/\n",
    "intel": "Intel(R) MPI Library for Linux* OS, Version 2021.18.1 Build 20260626 (id: b44796a)\n"
    "Copyright 2003-2026, Intel Corporation.\n",
    "mpich": "HYDRA build details:\n    Version:                                 5.0.2\n"
    "    Release Date:                            Fri Sep 25 20:45:26 UTC 2026\n"
    "    CC:                              cc\n",
}


def peer_modulepath(module):
    """[] when `make peers` installed the peer (its module is in modulefiles/local), else
    ["--modulepath", $TUNEDMPI_PEER_MODULEPATH] when that folder has its module; else skip."""
    if (ROOT / ".peers" / module).is_dir():
        return []
    folder = os.environ.get(PEER_MODULEPATH)
    if folder and (
        (ROOT / folder / (module + ".lua")).is_file() or (ROOT / folder / module).is_file()
    ):
        return ["--modulepath", folder]
    pytest.skip(
        "%s is not installed here: run `make peers` (it installs .peers/%s and its module), or "
        "set %s to a folder holding its module" % (module, module, PEER_MODULEPATH)
    )


def needs_mpi(test):
    """Lmod and the local site's Open MPI (as test_validate.py needs them)."""
    test = pytest.mark.skipif(
        not (ROOT / ".venv/bin/mpicc").exists(), reason="no Open MPI wheel in .venv (run make)"
    )(test)
    return pytest.mark.skipif(
        not lmod.available(), reason="Lmod is not installed (apt-get install lmod)"
    )(test)


def this_checkout():
    """A clean environment whose tunedmpi is this checkout's (a git worktree shares .venv, whose
    tunedmpi command may be installed from another checkout)."""
    env = lmod.clean_env()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    return env


def validate(tmp_path, *args, timeout=1200):
    proc = subprocess.run(
        [str(RUN), "--out", str(tmp_path / "out")] + [str(a) for a in args],
        env=this_checkout(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = tmp_path / "out"
    dirs = sorted(d for d in out.iterdir() if d.is_dir()) if out.is_dir() else []
    return proc, dirs


def under(module, extra, command):
    """`command`'s output in a shell with `module` loaded (from modulefiles/local and `extra`)."""
    paths = [str(ROOT / "modulefiles" / "local")] + extra[1:]
    proc = subprocess.run(
        [
            "bash",
            "-c",
            "source %s; %smodule load %s; %s"
            % (
                lmod.LMOD_INIT,
                "".join("module use %s; " % shlex.quote(p) for p in paths),
                shlex.quote(module),
                command,
            ),
        ],
        env=lmod.clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout + proc.stderr


# ---- the launcher table and the same-program rule (no MPI needed) ----


def test_each_mpi_is_recognised_by_what_its_mpirun_prints():
    assert recognise(VERSIONS["openmpi"]) == ("openmpi", "5.0.8", "mpirun (Open MPI) 5.0.8")
    assert recognise(VERSIONS["intel"]) == (
        "intel",
        "2021.18.1",
        "Intel(R) MPI Library for Linux* OS, Version 2021.18.1 Build 20260626 (id: b44796a)",
    )
    assert recognise(VERSIONS["mpich"]) == ("mpich", "5.0.2", "HYDRA build details: Version: 5.0.2")
    for other in ("", "invalid mpiexec argument --version\nUsage: mpiexec -usize", "mpirun 1.0"):
        assert recognise(other) is None


def test_the_launcher_table():
    # one node: Open MPI's line as before; Intel's hydra pins by default; MPICH's binds when told
    assert launcher_args("openmpi", 4) == ["mpirun", "-np", "4"]
    assert launcher_args("intel", 4) == ["mpirun", "-np", "4"]
    assert launcher_args("mpich", 4) == ["mpirun", "-np", "4", "-bind-to", "core"]
    # the 2-rank one-sided runs across nodes: one rank per node
    assert launcher_args("openmpi", 2, True) == ["mpirun", "-np", "2", "--map-by", "node"]
    assert launcher_args("intel", 2, True) == ["mpirun", "-np", "2", "-ppn", "1"]
    assert launcher_args("mpich", 2, True) == [
        *("mpirun", "-np", "2", "-bind-to", "core", "-ppn", "1")
    ]
    assert set(LAUNCHERS) == {"openmpi", "intel", "mpich"}
    coll = suites.Run("collectives", "imb", ("bcast",), ("IMB-MPI1", "Bcast"), None)
    pair = suites.Run("put_latency", "osu", ("put_latency",), ("osu_put_latency",), 2)
    two = Runner([], nodes=2, ppn=3, timeout=1)
    assert two.mpirun_line(coll) == ["mpirun", "-np", "6", "IMB-MPI1", "Bcast"]  # as before
    assert two.mpirun_line(pair) == [*"mpirun -np 2 --map-by node osu_put_latency".split()]
    assert two.mpirun_line(pair, "intel") == [*"mpirun -np 2 -ppn 1 osu_put_latency".split()]
    assert two.mpirun_line(coll, "mpich") == [*"mpirun -np 6 -bind-to core IMB-MPI1 Bcast".split()]
    one = Runner([], nodes=1, ppn=2, timeout=1)
    assert one.mpirun_line(pair, "mpich") == [*"mpirun -np 2 -bind-to core osu_put_latency".split()]


def binaries(imb=None, osu=()):
    return suites.Binaries(suite="", imb=imb, osu={n: "/osu/osu_" + n for n in osu}, modules=[])


def test_both_sides_of_a_family_run_the_same_kind_of_program():
    every = OSU_BENCHMARKS
    # Intel MPI brings its own IMB-MPI1, the site's Open MPI has none: probes for both
    base, tuned = binaries("/impi/bin/IMB-MPI1"), binaries()
    notes = suites.same_kind(base, tuned)
    assert base.imb is None and tuned.imb is None
    assert notes == [
        "collectives: probes for both modules: only the baseline module has IMB-MPI1 "
        "(/impi/bin/IMB-MPI1)"
    ]
    # OSU for one side only, or not the same programs: probes for both; IMB on both stays
    base, tuned = binaries("/a/IMB-MPI1", every), binaries("/b/IMB-MPI1", every[:2])
    (note,) = suites.same_kind(base, tuned)
    assert note.startswith("one-sided: probes for both modules: OSU's one-sided programs found")
    assert "for the tuned module: put_latency, get_latency" in note
    assert base.osu == tuned.osu == {} and (base.imb, tuned.imb) == ("/a/IMB-MPI1", "/b/IMB-MPI1")
    # the same kind on both sides: nothing changes
    base, tuned = binaries("/a/IMB-MPI1", every), binaries("/b/IMB-MPI1", every)
    assert suites.same_kind(base, tuned) == [] and len(base.osu) == len(tuned.osu) == len(every)
    assert suites.same_kind(binaries(), binaries()) == []
    # only what is judged counts: put_latency found on both sides is the same kind
    base, tuned = binaries("/a/IMB-MPI1", ["put_latency"]), binaries(None, every)
    assert suites.same_kind(base, tuned, ["put_latency"]) == [] and base.osu and tuned.osu
    assert base.imb == "/a/IMB-MPI1"  # no collective judged: IMB is not used either way


# ---- end to end with the real peers ----


@needs_mpi
@pytest.mark.parametrize("peer", sorted(PEERS))
def test_validate_against_another_mpi(tmp_path, peer):
    """The CI comparison: the tuned Open MPI module against a peer MPI, with the probes."""
    extra = peer_modulepath(peer)
    flavour, name = PEERS[peer]
    only = SCOPE[peer]
    proc, dirs = validate(
        tmp_path,
        "--baseline",
        peer,
        "--quick",
        "--repetitions",
        3,
        "--no-extend",
        "--probes",
        "--benchmarks",
        ",".join(only),
        *extra,
    )
    assert proc.returncode in VERDICT_EXITS, proc.stderr[-3000:]  # a verdict either way
    (outdir,) = dirs
    r = json.loads((outdir / "results.json").read_text())
    assert_verdict(proc.returncode, r, proc.stderr[-3000:])
    base, tuned = r["sides"]["baseline"], r["sides"]["tuned"]
    assert r["same_mpi"] is False and r["suite"] == base["suite"] == tuned["suite"] == "probe"
    assert (base["module"], tuned["module"]) == (peer, "openmpi-tuned/5.0.8")
    assert (base["mpi"]["flavour"], base["mpi"]["name"]) == (flavour, name)
    assert (tuned["mpi"]["flavour"], tuned["mpi"]["name"]) == ("openmpi", "Open MPI 5.0.8")
    assert tuned["mpi"]["version"] == "mpirun (Open MPI) 5.0.8"
    assert base["mpi"]["mpicc"] != tuned["mpi"]["mpicc"]
    # two probe builds, one per mpicc
    for probe in ("probe_coll", "probe_osc"):
        paths = [base["binaries"][probe], tuned["binaries"][probe]]
        assert paths[0] != paths[1] and all(os.access(p, os.X_OK) for p in paths)
    # each side's own launcher, and its own binaries in every command and log
    assert base["launcher"]["collectives"] == " ".join(launcher_args(flavour, 2))
    assert tuned["launcher"] == {"collectives": "mpirun -np 2", "one_sided": "mpirun -np 2"}
    assert r["commands"] == tuned["commands"]  # the top level keeps the site's MPI's
    for role, side in (("baseline", base), ("tuned", tuned)):
        assert side["binaries"]["flavour"] == side["mpi"]["flavour"]
        assert set(side["commands"]) == {run for run, _ in suites.programs(only)}
        for run, command in side["commands"].items():
            assert command.startswith(side["launcher"]["collectives"] + " ")
            probe = side["binaries"]["probe_coll" if run == "collectives" else "probe_osc"]
            assert shlex.split(command)[len(side["launcher"]["collectives"].split())] == probe
        logs = [x for x in r["runs"] if x["role"] == role]
        assert len(logs) >= 3 * len(side["commands"])
        for x in logs:
            assert "; %s" % side["commands"][x["run"]] in (outdir / x["log"]).read_text()
    # the baseline's probes are linked against its own MPI
    ldd = under(peer, extra, "ldd %s" % shlex.quote(base["binaries"]["probe_coll"]))
    assert os.path.dirname(os.path.dirname(base["mpi"]["mpirun"])) + "/" in ldd, ldd
    report = (outdir / "report.md").read_text()
    assert report.startswith(
        "# Validation: openmpi-tuned/5.0.8 (Open MPI 5.0.8) vs %s (%s)" % (peer, name)
    )
    assert "| MPI, baseline | %s (" % name in report and "| MPI, tuned | Open MPI 5.0.8 (" in report
    assert "| launcher, baseline | `%s` (collectives)" % base["launcher"]["collectives"] in report
    assert (
        "| binaries, baseline | probe: probe_coll `%s`" % base["binaries"]["probe_coll"] in report
    )
    # --reanalyse reads it back and reports the sides again
    again = subprocess.run(
        [str(RUN), "--reanalyse", str(outdir), "--out", str(tmp_path / "again")],
        env=this_checkout(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode in VERDICT_EXITS, again.stderr
    (redone,) = (tmp_path / "again").iterdir()
    judged = json.loads((redone / "results.json").read_text())
    assert_verdict(again.returncode, judged, again.stderr)
    assert judged["sides"] == r["sides"]
    assert "| MPI, baseline | %s (" % name in (redone / "report.md").read_text()


@needs_mpi
def test_an_mpi_validate_does_not_know_is_exit_2_in_one_line(tmp_path):
    """MPICH's other launcher, gforker, as a module's mpirun: real, and no MPI validate can launch."""
    extra = peer_modulepath("mpich/5.0.2")
    gforker = under("mpich/5.0.2", extra, "command -v mpiexec.gforker").strip()
    assert gforker.endswith("/mpiexec.gforker"), gforker
    bindir = tmp_path / "gforker-bin"
    bindir.mkdir()
    (bindir / "mpirun").symlink_to(gforker)
    mods = tmp_path / "mods" / "gforker"
    mods.mkdir(parents=True)
    (mods / "5.0.2.lua").write_text('load("mpich/5.0.2")\nprepend_path("PATH", "%s")\n' % bindir)
    proc, dirs = validate(
        tmp_path,
        "--baseline",
        "gforker/5.0.2",
        "--modulepath",
        str(tmp_path / "mods"),
        *extra,
        timeout=120,
    )
    assert proc.returncode == 2 and dirs == [], proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("validate: cannot run: --baseline gforker/5.0.2: its mpirun (")
    assert "printed: invalid mpiexec argument --version" in proc.stderr


@needs_mpi
def test_the_same_mpi_on_both_sides_is_found_once():
    """Two modules of one MPI (today's normal case) share one set of binaries: the sides are the
    same object, so commands and binaries are what they were before sides existed."""
    r = Runner([str(ROOT / "modulefiles" / "local")], nodes=1, ppn=2, timeout=60)
    sides, notes = r.find_sides("openmpi/5.0.8", "openmpi-tuned/5.0.8", ["put_latency"], True)
    assert sides["baseline"] is sides["tuned"] and notes == []
    assert sides["tuned"].flavour == "openmpi" and sides["tuned"].suite == "probe"
    assert sides["tuned"].mpi["name"] == "Open MPI 5.0.8"
