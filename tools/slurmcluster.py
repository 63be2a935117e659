"""A real one-node Slurm for tests: Debian's `slurm-wlm` + `munge`, every file in a temp dir.

    cluster = slurm.start(tmpdir)          # munged, slurmctld, slurmd; returns once sinfo says idle
    job_id, state, out = cluster.sbatch("#!/bin/bash\\nhostname\\n", "-N1", "--ntasks-per-node=2")
    cluster.stop()                         # scancel, then TERM (then KILL) each daemon by its pid

Nothing touches /etc/slurm, /etc/munge or the system's daemons: munged gets its own key, socket,
pid, seed and log files, and Slurm is told that socket through `AuthInfo=socket=...`. Ports are
picked free in an unusual range so two clusters (or anything else) do not clash.
"""
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "scancel", "squeue")
APT_PACKAGES = "munge slurmctld slurmd slurm-client"  # what provides NEEDED on Debian 12
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
# Variables of the calling shell that would leak a foreign job, sbatch/salloc/srun defaults
# (SBATCH_PARTITION, ...) or module state into our jobs.
FOREIGN = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "PBS_", "LSB_", "FLUX_", "TUNEDMPI_", "UCX_", "OMPI_MCA_", "PRTE_MCA_", "PMIX_",
           "LMOD", "MODULE", "_LMFILES_", "LOADEDMODULES", "__LMOD")


def which(name):
    return shutil.which(name, path=SBIN_PATH)


def missing():
    """Names of the programs this helper needs that are not installed (empty when all are)."""
    return [name for name in NEEDED if not which(name)]


def _port_pair():
    """Two consecutive free TCP ports in 46000-47999 (slurmctld, slurmd)."""
    for _ in range(200):
        base = random.randrange(46000, 47998, 2)
        socks = []
        try:
            for port in (base, base + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("", port))
            return base, base + 1
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no two free TCP ports in 46000-47999")


def _tail(path, chars=3000):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return "(%s: %s)" % (path, exc)
    return text[-chars:]


class SlurmError(RuntimeError):
    pass


def _fields(line):
    """'JobId=3 JobName=x ...' (one job of `scontrol show job -o`) as a dict; first value wins."""
    info = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq and key not in info:
            info[key] = value
    return info


class Cluster:
    """A running one-node cluster; see start()."""

    def __init__(self, root):
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = None
        self.procs = {}            # daemon name -> Popen (each run in the foreground: we own the pid)
        self.logs = {}             # daemon name -> [its stdout/stderr file, its own log file]
        self.ports = None
        self.startup_seconds = None
        self.cpus = len(os.sched_getaffinity(0))

    @property
    def pids(self):
        return {name: proc.pid for name, proc in self.procs.items()}

    def env(self, extra=None):
        """Environment for Slurm client commands and jobs: the caller's, minus foreign job/module
        state, plus SLURM_CONF for this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
        env["PATH"] = SBIN_PATH
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def run(self, *args, timeout=30, check=True):
        """Run a Slurm client command against this cluster; returns CompletedProcess."""
        proc = subprocess.run([which(args[0])] + [str(a) for a in args[1:]], env=self.env(), capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise SlurmError("%s failed (%d): %s%s" % (shlex.join(map(str, args)), proc.returncode,
                                                       proc.stdout, proc.stderr))
        return proc

    def node_state(self):
        proc = self.run("sinfo", "-h", "-N", "-o", "%T", "-n", self.host, check=False, timeout=10)
        return proc.stdout.strip() if proc.returncode == 0 else "sinfo failed: " + proc.stderr.strip()

    def job_info(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, NumNodes, ...)."""
        return _fields(self.run("scontrol", "show", "job", "-o", job_id).stdout)

    def jobs(self):
        """Every job slurmctld still knows (finished ones until MinJobAge has passed), as
        job_info dicts in job id order."""
        out = self.run("scontrol", "show", "job", "-o").stdout
        found = [_fields(line) for line in out.splitlines() if line.startswith("JobId=")]
        return sorted(found, key=lambda info: int(info["JobId"]))

    def batch_script(self, job_id):
        """The script Slurm stored for a batch job (readable until the job is purged)."""
        return self.run("scontrol", "write", "batch_script", job_id, "-").stdout

    def diagnostics(self):
        """Daemon logs and status, for assertion messages."""
        parts = []
        for name, proc in self.procs.items():
            status = "running" if proc.poll() is None else "exited %s" % proc.returncode
            # in the foreground each daemon copies its log to stdout (also errors from before the
            # log file opens), so that file is enough; its own log file only if stdout is empty
            logs = [log for log in self.logs[name] if log.exists() and log.stat().st_size] or self.logs[name]
            parts.append("--- %s (pid %d, %s), %s:\n%s" % (name, proc.pid, status, logs[0], _tail(logs[0])))
        return "\n".join(parts)

    def sbatch(self, script_text, *args, wait=True, timeout=60, env=None):
        """Submit a batch script; with wait, block until it ends and return
        (job_id, JobState, the job's stdout+stderr). Without wait, (job_id, None, None)."""
        jobs = self.root / "jobs"
        jobs.mkdir(exist_ok=True)
        script = jobs / ("job-%d.sh" % len(list(jobs.glob("job-*.sh"))))
        script.write_text(script_text)
        cmd = [which("sbatch"), "--parsable", "--output=%s/slurm-%%j.out" % jobs, "--chdir=%s" % jobs]
        cmd += [str(a) for a in args] + [str(script)]
        proc = subprocess.run(cmd, env=self.env(env), capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise SlurmError("sbatch %s failed (%d): %s\n%s" % (shlex.join(cmd[4:]), proc.returncode,
                                                               proc.stderr, self.diagnostics()))
        job_id = proc.stdout.strip().split(";")[0]
        if not wait:
            return job_id, None, None
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.job_info(job_id).get("JobState")
            if state in TERMINAL:
                break
            time.sleep(0.2)
        else:
            self.run("scancel", job_id, check=False)
            raise SlurmError("job %s still %s after %ss\n%s" % (job_id, state, timeout, self.diagnostics()))
        out = jobs / ("slurm-%s.out" % job_id)
        return job_id, state, out.read_text(errors="replace") if out.exists() else ""

    def stop(self, timeout=15):
        """Cancel our jobs, then stop slurmd, slurmctld and munged (in that order) by pid.
        Raises SlurmError if any of them is still alive after SIGKILL."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:  # running steps belong to slurmd's children: let Slurm end them first
                self.run("scancel", "--full", "--quiet", "--user=%s" % os.getuid(), check=False, timeout=10)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    q = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.2)
            except subprocess.TimeoutExpired:
                pass
        survivors = []
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    survivors.append("%s (pid %d)" % (name, proc.pid))
        if survivors:
            raise SlurmError("still running after SIGKILL: " + ", ".join(survivors))

    # -- start-up ---------------------------------------------------------------------------------

    def _daemon(self, name, args):
        """Start a daemon in the foreground (so its pid is ours to stop) in its own session."""
        log = self.root / "log" / (name + ".out")
        self.logs[name] = [log, self.root / "log" / (name + ".log")]
        with open(log, "ab") as fh:
            self.procs[name] = subprocess.Popen([which(args[0])] + [str(a) for a in args[1:]],
                                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                                env=self.env(), cwd=self.root, start_new_session=True)

    def _wait(self, what, ready, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmError("%s exited (%s) while waiting for %s\n%s"
                                     % (name, proc.returncode, what, self.diagnostics()))
            if ready():
                return
            time.sleep(0.2)
        raise SlurmError("timed out after %ss waiting for %s\n%s" % (timeout, what, self.diagnostics()))

    def _start_munge(self):
        mdir = self.root / "munge"
        mdir.mkdir()
        mdir.chmod(0o755)  # munged wants its socket's directory searchable by all
        key = mdir / "munge.key"
        subprocess.run([which("mungekey"), "--create", "--keyfile=%s" % key], check=True,
                       capture_output=True, timeout=30)
        sock = mdir / "munge.socket"
        if len(str(sock)) > 100:  # sun_path holds 108 bytes, and munged adds ".lock"
            raise SlurmError("munge socket path too long (%d chars): %s" % (len(str(sock)), sock))
        self.munge_socket = sock
        # --force: run as root and accept the pytest temp dir's permissions
        self._daemon("munged", ["munged", "--foreground", "--force", "--socket=%s" % sock,
                                "--key-file=%s" % key, "--pid-file=%s" % (mdir / "munged.pid"),
                                "--seed-file=%s" % (mdir / "munged.seed"),
                                "--log-file=%s" % (self.root / "log" / "munged.log")])
        self._wait("the munge socket", sock.exists, 15)

    def _write_conf(self):
        ctld_port, slurmd_port = self.ports = _port_pair()
        r = self.root
        for sub in ("state", "spool", "log", "run"):
            (r / sub).mkdir(exist_ok=True)
        self.conf.write_text("\n".join([
            "ClusterName=tmtest",
            "SlurmctldHost=%s(127.0.0.1)" % self.host,  # the address too: no name lookup needed
            "SlurmctldPort=%d" % ctld_port,
            "SlurmdPort=%d" % slurmd_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "StateSaveLocation=%s/state" % r,
            "SlurmdSpoolDir=%s/spool" % r,
            "SlurmctldPidFile=%s/run/slurmctld.pid" % r,
            "SlurmdPidFile=%s/run/slurmd.pid" % r,
            "SlurmctldLogFile=%s/log/slurmctld.log" % r,
            "SlurmdLogFile=%s/log/slurmd.log" % r,
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # no cgroups in containers: track processes through /proc, no task binding
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            # Finished jobs stay visible to `scontrol show job` (the only record: no accounting)
            # for at least 16 s. `sbatch --wait` sleeps 2 s, then 8 s while 8 < MinJobAge/2 is
            # false; the default 300 stretches its sleeps to 2, 8, 32, 32 ... s (a 12 s job took
            # 42 s). 0 is no help: Slurm 22.05 raises it to 2 s and purges almost at once.
            "MinJobAge=16",
            "MailProg=/bin/true",
            # CPUs as nproc counts them: more than slurmd finds would make the node INVALID
            "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=1000 State=UNKNOWN" % (self.host, self.cpus),
            "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP" % self.host,
            ""]))

    def _start_slurm(self):
        # -D: foreground, so the pid is ours; -c on slurmctld: cold start from an empty state dir
        self._daemon("slurmctld", ["slurmctld", "-D", "-c", "-f", self.conf])
        self._daemon("slurmd", ["slurmd", "-D", "-f", self.conf])
        self._wait("node %s to be idle" % self.host, lambda: self.node_state() == "idle", 60)


def start(tmpdir):
    """Start munged, slurmctld and slurmd under tmpdir; return the Cluster once its node is idle.
    On any failure the daemons already started are stopped and SlurmError (with logs) is raised."""
    absent = missing()
    if absent:
        raise SlurmError("not installed: %s (apt-get install %s)" % (" ".join(absent), APT_PACKAGES))
    t0 = time.monotonic()
    cluster = Cluster(tmpdir)
    (cluster.root / "log").mkdir(parents=True, exist_ok=True)
    try:
        cluster._start_munge()
        cluster._write_conf()
        cluster._start_slurm()
    except BaseException:
        cluster.stop()
        raise
    cluster.startup_seconds = time.monotonic() - t0
    return cluster
