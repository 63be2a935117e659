"""A real Slurm on this machine, for the tests and for an admin who wants to try the project:
Debian's `slurm-wlm` + `munge`, every file in one directory.

One node (`hosts=0`, what most tests use): this machine is the node, under its own hostname.

Several hosts (`hosts=N`): N hosts made of Linux namespaces, like the nodes of a small cluster.
Each host is a network + UTS + mount namespace with its own hostname (`<tag>n1`, `<tag>n2`, ...),
its own address on a private bridge (10.250.0.11, .12, ...; /etc/hosts of the cluster
bind-mounted over its own) and its own slurmd, pinned to its share of the cores. A login host
(`<tag>login`, 10.250.0.1) holds the bridge, slurmctld and the client commands. The machine's own
network namespace gets no interface, route or address: nothing the hosts send can leave them.
munged is shared (one key, like a real cluster's) through its socket file. Open MPI inside an
`-N2` allocation then sees two nodes: ranks on different hosts talk over TCP, not shared memory.

    cluster = slurmcluster.start(tmpdir, hosts=2)   # returns once every node is idle
    job_id, state, out = cluster.sbatch("#!/bin/bash\nhostname\n", "-N2", "--ntasks-per-node=1")
    cluster.stop()                                  # scancel, stop the daemons, remove the namespaces

From a shell (`make cluster-up`, `make cluster-shell`, `make cluster-down` call these):

    python3 tools/slurmcluster.py up --hosts 2 DIR      # start and leave it running
    python3 tools/slurmcluster.py shell DIR [CMD ...]   # a shell (or CMD) on the login host
    python3 tools/slurmcluster.py down DIR              # stop it; also after a crash of `up`'s caller

Nothing touches /etc/slurm, /etc/munge or the system's daemons: munged gets its own key, socket,
pid, seed and log files, and Slurm is told that socket through `AuthInfo=socket=...`. In one-node
mode ports are picked free in an unusual range so two clusters (or anything else) do not clash; the
hosts' namespaces have ports of their own.
"""

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run with any python3
from tunedmpi import files  # noqa: E402
from tunedmpi.bench import machine  # noqa: E402

SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
NEEDED = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sinfo",
    "scontrol",
    "scancel",
    "squeue",
)
APT_PACKAGES = "munge slurmctld slurmd slurm-client"  # what provides NEEDED on Debian 12
# accounting (sacct answers): slurmdbd over a MariaDB of the cluster's own, in its directory
NEEDED_ACCOUNTING = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
APT_PACKAGES_ACCOUNTING = "slurmdbd mariadb-server"
# what the namespace hosts need on top (iproute2's ip, util-linux's unshare/taskset/mount)
NEEDED_HOSTS = ("ip", "unshare", "taskset", "mount")
APT_PACKAGES_HOSTS = "iproute2 util-linux mount"
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
}
# Variables of the calling shell that would leak a foreign job, sbatch/salloc/srun defaults
# (SBATCH_PARTITION, ...) or module state into our jobs.
FOREIGN = (
    "SLURM_",
    "SBATCH_",
    "SALLOC_",
    "SRUN_",
    "PBS_",
    "LSB_",
    "FLUX_",
    "TUNEDMPI_",
    "UCX_",
    "OMPI_MCA_",
    "PRTE_MCA_",
    "PMIX_",
    "LMOD",
    "MODULE",
    "_LMFILES_",
    "LOADEDMODULES",
    "__LMOD",
)
# ...but the machine's measurement lock is the caller's (bench/machine.py): a validate or sweep in
# one of our jobs must meet the caller's other measurements there, not a lock of its own.
KEPT = (machine.ENV,)
# The hosts' private network. It exists only inside the cluster's namespaces, so it cannot clash
# with the machine's own networks or with another cluster's.
SUBNET = "10.250.0"
LOGIN_ADDR = SUBNET + ".1"
STATE_FILE = "cluster.json"  # in the cluster's directory: what `down` needs from another process


def which(name):
    return shutil.which(name, path=SBIN_PATH)


def missing(hosts=0, accounting=False):
    """Names of the programs a cluster of `hosts` namespace hosts (0: one node), with accounting or
    not, needs that are not installed (empty when all are)."""
    names = NEEDED + (NEEDED_HOSTS if hosts else ()) + (NEEDED_ACCOUNTING if accounting else ())
    return [name for name in names if not which(name)]


def cannot_make_hosts():
    """Why namespace hosts cannot be made here (None when they can): they need root."""
    if os.geteuid() != 0:
        return "namespace hosts need root (network namespaces, veth pairs, a bridge)"
    return None


def _free_ports(n=2):
    """n consecutive free TCP ports in 46000-47999 (slurmctld, slurmd[, slurmdbd, MariaDB])."""
    for _ in range(200):
        base = random.randrange(46000, 48000 - n, 2)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("", port))
            return tuple(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no two free TCP ports in 46000-47999")


def _tail(path, chars=3000):
    try:
        text = files.read_text(path, errors="replace")
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


def _ip(*args, check=True):
    return subprocess.run(
        [which("ip")] + list(args), capture_output=True, text=True, timeout=30, check=check
    )


def on_host(host, hosts_file, argv, cores=None):
    """argv as a command that runs on a namespace host: in its network namespace, under its
    hostname, with the cluster's hosts file as /etc/hosts, on its cores. Every step execs the
    next, so the pid is the final program's."""
    wrap = [
        which("ip"),
        "netns",
        "exec",
        host,
        which("unshare"),
        "--uts",
        "--mount",
        "--propagation",
        "private",
    ]
    if cores:
        wrap += [which("taskset"), "-c", ",".join(map(str, cores))]
    # `ip netns exec` mounts a fresh /sys (the namespace's own interfaces) without the cgroup
    # tmpfs under it. Slurm 22.05's slurmd will not start without one (it stats
    # /sys/fs/cgroup/systemd to tell cgroup v1 from v2); proctrack/linuxproc and task/none use
    # nothing in it, so an empty v1 layout is enough.
    script = (
        'hostname "$1" && mount --bind "$2" /etc/hosts && '
        "{ mountpoint -q /sys/fs/cgroup || { mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup && "
        "mkdir /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd; }; } && "
        'shift 2 && exec "$@"'
    )
    return wrap + ["sh", "-c", script, "sh", host, str(hosts_file)] + list(argv)


def namespaces():
    """Names of the network namespaces `ip netns` knows."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_namespaces(names):
    """Kill every process left in each namespace (job steps, daemons), then delete it: its veth
    ends and the bridge go with it. Returns what could not be removed."""
    left = []
    for ns in names:
        if ns not in namespaces():
            continue
        for _ in range(50):
            pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if _ip("netns", "delete", ns, check=False).returncode != 0:
            left.append(ns)
    return left


def _daemon_order(name):
    """Stop order: the slurmds (named slurmd or slurmd@<host>), slurmctld, slurmdbd, its MariaDB,
    then munged."""
    return ["slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"].index(name.split("@")[0])


def _end(pid, alive, term_wait=15, kill_wait=5):
    """SIGTERM, then SIGKILL after term_wait s; True once alive() says it is gone. alive: for a child
    of ours, Popen.poll (which reaps it); for another's, whether /proc/<pid> exists."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, kill_wait)):
        if not alive():
            return True
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive():
            time.sleep(0.1)
    return not alive()


class Cluster:
    """A running cluster; see start()."""

    def __init__(self, root, hosts=0, shared_cores=False, accounting=False, partitions=()):
        self.root = Path(root)
        self.accounting = accounting  # slurmdbd + MariaDB: sacct answers for the jobs run
        self.partitions = list(partitions)  # more partitions over all nodes, after `debug`
        self.conf = self.root / "slurm.conf"
        self.munge_socket = None
        self.procs = {}  # daemon name -> Popen (each run in the foreground: we own the pid)
        self.logs = {}  # daemon name -> [its stdout/stderr file, its own log file]
        self.ports = None
        self.startup_seconds = None
        cores = sorted(os.sched_getaffinity(0))
        if hosts:
            # `tm` + 4 hex digits: a hostname, a Slurm node name and a netns name, unique per cluster
            self.tag = "tm%04x" % random.randrange(0x10000)
            self.login = self.tag + "login"
            self.nodes = ["%sn%d" % (self.tag, i + 1) for i in range(hosts)]
            self.addrs = dict(
                [(self.login, LOGIN_ADDR)]
                + [(n, "%s.%d" % (SUBNET, 11 + i)) for i, n in enumerate(self.nodes)]
            )
            # each host its own share of the cores, as nodes do not share cores; with fewer cores
            # than hosts, or shared_cores (a node of several CPUs on a small machine), all of them
            share = 0 if shared_cores else len(cores) // hosts
            self.cores = {
                n: (cores[i * share : (i + 1) * share] if share else cores)
                for i, n in enumerate(self.nodes)
            }
            self.cpus = max(share, 1) if share else len(cores)
        else:
            self.tag, self.login = None, None
            self.nodes = [socket.gethostname().split(".")[0]]
            self.addrs = {}
            self.cores = {self.nodes[0]: cores}
            self.cpus = len(cores)
        self.host = self.nodes[
            0
        ]  # the node of a one-node cluster; the first (batch) host otherwise

    @property
    def pids(self):
        return {name: proc.pid for name, proc in self.procs.items()}

    @property
    def netns(self):
        """This cluster's network namespaces (empty for one node)."""
        return [self.login] + self.nodes if self.tag else []

    def on(self, host, argv):
        """argv as a command that runs on `host` (a node or the login host); unchanged for one node."""
        if not self.tag:
            return list(argv)
        return on_host(host, self.root / "hosts", argv, self.cores.get(host))

    def env(self, extra=None):
        """Environment for Slurm client commands and jobs: the caller's, minus foreign job/module
        state, plus SLURM_CONF for this cluster."""
        env = {k: v for k, v in os.environ.items() if k in KEPT or not k.startswith(FOREIGN)}
        env["PATH"] = SBIN_PATH
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def client(self, argv):
        """A command as it runs on the login host (this machine, for one node)."""
        return self.on(self.login, argv) if self.tag else list(argv)

    def run(self, *args, timeout=30, check=True):
        """Run a Slurm client command against this cluster; returns CompletedProcess."""
        proc = subprocess.run(
            self.client([which(args[0])] + [str(a) for a in args[1:]]),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise SlurmError(
                "%s failed (%d): %s%s"
                % (shlex.join(map(str, args)), proc.returncode, proc.stdout, proc.stderr)
            )
        return proc

    def node_states(self):
        """{node: state} as sinfo reports it."""
        proc = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=10)
        if proc.returncode != 0:
            return {"sinfo failed": proc.stderr.strip()}
        return dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())

    def node_state(self):
        """The state of the first node (the only one of a one-node cluster)."""
        return self.node_states().get(self.host, "unknown")

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
            logs = [
                log for log in self.logs[name] if log.exists() and log.stat().st_size
            ] or self.logs[name]
            parts.append(
                "--- %s (pid %d, %s), %s:\n%s" % (name, proc.pid, status, logs[0], _tail(logs[0]))
            )
        return "\n".join(parts)

    def sbatch(self, script_text, *args, wait=True, timeout=60, env=None):
        """Submit a batch script; with wait, block until it ends and return
        (job_id, JobState, the job's stdout+stderr). Without wait, (job_id, None, None)."""
        jobs = self.root / "jobs"
        jobs.mkdir(exist_ok=True)
        script = jobs / ("job-%d.sh" % len(list(jobs.glob("job-*.sh"))))
        files.write_atomic(script, script_text)
        cmd = [
            which("sbatch"),
            "--parsable",
            "--output=%s/slurm-%%j.out" % jobs,
            "--chdir=%s" % jobs,
        ]
        cmd += [str(a) for a in args] + [str(script)]
        proc = subprocess.run(
            self.client(cmd), env=self.env(env), capture_output=True, text=True, timeout=30
        )
        if proc.returncode != 0:
            raise SlurmError(
                "sbatch %s failed (%d): %s\n%s"
                % (shlex.join(cmd[4:]), proc.returncode, proc.stderr, self.diagnostics())
            )
        job_id = proc.stdout.strip().split(";")[0]
        if not wait:
            return job_id, None, None
        return (job_id, *self.wait(job_id, timeout))

    def wait(self, job_id, timeout=60):
        """Block until job `job_id` ends: (its JobState, its stdout+stderr); scancel it after timeout."""
        jobs = self.root / "jobs"
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.job_info(job_id).get("JobState")
            if state in TERMINAL:
                break
            time.sleep(0.2)
        else:
            self.run("scancel", job_id, check=False)
            raise SlurmError(
                "job %s still %s after %ss\n%s" % (job_id, state, timeout, self.diagnostics())
            )
        out = jobs / ("slurm-%s.out" % job_id)
        return state, files.read_text(out, errors="replace") if out.exists() else ""

    def stop(self, timeout=15):
        """Cancel our jobs, stop the slurmds, slurmctld and munged (in that order) by pid, then
        remove the hosts' namespaces with whatever still runs in them. Raises SlurmError if a
        daemon is still alive after SIGKILL or a namespace could not be removed."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:  # running steps belong to slurmd's children: let Slurm end them first
                self.run(
                    "scancel",
                    "--full",
                    "--quiet",
                    "--user=%s" % os.getuid(),
                    check=False,
                    timeout=10,
                )
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    q = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.2)
            except subprocess.TimeoutExpired:
                pass
        survivors = []
        for name in sorted(self.procs, key=_daemon_order):
            proc = self.procs[name]
            if not _end(proc.pid, lambda: proc.poll() is None, timeout):
                survivors.append("%s (pid %d)" % (name, proc.pid))
        left = remove_namespaces(self.netns)
        state = self.root / STATE_FILE
        if state.exists():
            state.unlink()
        if survivors or left:
            raise SlurmError(
                "still running after SIGKILL: %s; namespaces not removed: %s"
                % (", ".join(survivors) or "none", ", ".join(left) or "none")
            )

    # -- start-up ---------------------------------------------------------------------------------

    def _daemon(self, name, args, host=None):
        """Start a daemon in the foreground (so its pid is ours to stop) in its own session, on
        `host` (None: this machine)."""
        log = self.root / "log" / (name.replace("@", "-") + ".out")
        own = {"slurmctld": "slurmctld.log", "munged": "munged.log"}.get(
            name, name.replace("@", "-") + ".log"
        )
        self.logs[name] = [log, self.root / "log" / own]
        argv = [which(args[0])] + [str(a) for a in args[1:]]
        with files.append_to(log) as fh:
            self.procs[name] = subprocess.Popen(
                self.on(host, argv) if host else argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.root,
                start_new_session=True,
            )

    def _wait(self, what, ready, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmError(
                        "%s exited (%s) while waiting for %s\n%s"
                        % (name, proc.returncode, what, self.diagnostics())
                    )
            if ready():
                return
            time.sleep(0.2)
        raise SlurmError(
            "timed out after %ss waiting for %s\n%s" % (timeout, what, self.diagnostics())
        )

    def _start_munge(self):
        mdir = self.root / "munge"
        if mdir.is_symlink():
            raise SlurmError("%s is a symbolic link: remove it (the cluster makes its own)" % mdir)
        # a stopped cluster's directory is reused (make cluster-down, then cluster-up)
        mdir.mkdir(exist_ok=True)
        mdir.chmod(0o755)  # munged wants its socket's directory searchable by all
        key = mdir / "munge.key"
        key.unlink(missing_ok=True)  # a stopped cluster's key: mungekey --create won't overwrite
        subprocess.run(
            [which("mungekey"), "--create", "--keyfile=%s" % key],
            check=True,
            capture_output=True,
            timeout=30,
        )
        sock = mdir / "munge.socket"
        if len(str(sock)) > 100:  # sun_path holds 108 bytes, and munged adds ".lock"
            raise SlurmError("munge socket path too long (%d chars): %s" % (len(str(sock)), sock))
        self.munge_socket = sock
        # --force: run as root and accept the pytest temp dir's permissions. A socket file is
        # reachable from every network namespace: all hosts share this munged.
        self._daemon(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                "--socket=%s" % sock,
                "--key-file=%s" % key,
                "--pid-file=%s" % (mdir / "munged.pid"),
                "--seed-file=%s" % (mdir / "munged.seed"),
                "--log-file=%s" % (self.root / "log" / "munged.log"),
            ],
        )
        self._wait("the munge socket", sock.exists, 15)

    def _make_hosts(self):
        """The login namespace with the bridge, one namespace per node with a veth end on it, and
        the hosts file every host sees as /etc/hosts. Recorded before it is made, so that `down`
        (or stop) can remove a half-made network."""
        self._save_state()
        files.write_atomic(
            self.root / "hosts",
            "127.0.0.1 localhost\n"
            + "".join("%s %s\n" % (addr, name) for name, addr in self.addrs.items()),
        )
        _ip("netns", "add", self.login)
        _ip("-n", self.login, "link", "set", "lo", "up")
        _ip("-n", self.login, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.login, "addr", "add", LOGIN_ADDR + "/24", "dev", "br0")
        _ip("-n", self.login, "link", "set", "br0", "up")
        for i, node in enumerate(self.nodes):
            port = "p%d" % (i + 1)
            _ip("netns", "add", node)
            _ip("-n", node, "link", "set", "lo", "up")
            # made in the root namespace, each end moved at once: the root keeps nothing
            _ip(
                "link",
                "add",
                "tmveth%s%d" % (self.tag[2:], i),
                "netns",
                node,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.login,
            )
            _ip("-n", node, "link", "set", "tmveth%s%d" % (self.tag[2:], i), "name", "eth0")
            _ip("-n", node, "addr", "add", self.addrs[node] + "/24", "dev", "eth0")
            _ip("-n", node, "link", "set", "eth0", "up")
            _ip("-n", self.login, "link", "set", port, "master", "br0")
            _ip("-n", self.login, "link", "set", port, "up")

    def _save_state(self):
        state = {
            "hosts": len(self.nodes) if self.tag else 0,
            "netns": self.netns,
            "nodes": self.nodes,
            "login": self.login,
            "conf": str(self.conf),
            "pids": self.pids,
        }
        files.write_atomic(self.root / STATE_FILE, json.dumps(state, indent=1) + "\n")

    def _write_conf(self):
        r = self.root
        for sub in ["state", "spool", "log", "run"] + (
            ["spool/" + n for n in self.nodes] if self.tag else []
        ):
            (r / sub).mkdir(exist_ok=True)
        if self.tag:
            # each host has its own ports: Slurm's standard ones (and slurmdbd's, MariaDB's)
            self.ports = (6817, 6818, 6819, 3306)
            ctld = "SlurmctldHost=%s(%s)" % (self.login, LOGIN_ADDR)
            # %n: one spool, pid and log file per node, as all slurmds share this directory
            per_node = [
                "SlurmdSpoolDir=%s/spool/%%n" % r,
                "SlurmdPidFile=%s/run/slurmd-%%n.pid" % r,
                "SlurmdLogFile=%s/log/slurmd-%%n.log" % r,
            ]
            nodes = [
                "NodeName=%s NodeAddr=%s CPUs=%d RealMemory=1000 State=UNKNOWN"
                % (n, self.addrs[n], self.cpus)
                for n in self.nodes
            ]
        else:
            # slurmctld, slurmd, then slurmdbd and MariaDB (used with accounting)
            self.ports = _free_ports(4)
            ctld = (
                "SlurmctldHost=%s(127.0.0.1)" % self.host
            )  # the address too: no name lookup needed
            per_node = [
                "SlurmdSpoolDir=%s/spool" % r,
                "SlurmdPidFile=%s/run/slurmd.pid" % r,
                "SlurmdLogFile=%s/log/slurmd.log" % r,
            ]
            # CPUs as nproc counts them: more than slurmd finds would make the node INVALID
            nodes = [
                "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=1000 State=UNKNOWN"
                % (self.host, self.cpus)
            ]
        files.write_atomic(
            self.conf,
            "\n".join(
                [
                    "ClusterName=tmtest",
                    ctld,
                    "SlurmctldPort=%d" % self.ports[0],
                    "SlurmdPort=%d" % self.ports[1],
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    "AuthInfo=socket=%s" % self.munge_socket,
                    "StateSaveLocation=%s/state" % r,
                    "SlurmctldPidFile=%s/run/slurmctld.pid" % r,
                    "SlurmctldLogFile=%s/log/slurmctld.log" % r,
                ]
                + per_node
                + [
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    # no cgroups in containers: track processes through /proc, no task binding
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                ]
                + self._accounting_conf()
                + [
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
                    # for at least 5 s. `sbatch --wait` polls after 2 s and multiplies its sleep by 4
                    # while it is below MinJobAge/2: 5 keeps it at 2 s (16 made it 2, 8, 8 ... s: a 1 s
                    # job took 10 s; the default 300 made a 12 s job take 42 s), and a job it has not
                    # yet seen end is kept 3 s past its next look. 0 is no help: Slurm 22.05 raises it
                    # to 2 s and purges almost at once.
                    "MinJobAge=5",
                    "MailProg=/bin/true",
                ]
                + nodes
                + [
                    "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP"
                    % ",".join(self.nodes),
                ]
                + [
                    "PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP"
                    % (p, ",".join(self.nodes))
                    for p in self.partitions
                ]
                + [
                    "",
                ]
            ),
        )

    @property
    def dbd_addr(self):
        """Where slurmdbd and its MariaDB listen: the login host, or this machine's loopback."""
        return LOGIN_ADDR if self.tag else "127.0.0.1"

    def _accounting_conf(self):
        """slurm.conf's accounting lines: none, or slurmdbd storing every job with its comment."""
        if not self.accounting:
            return ["AccountingStorageType=accounting_storage/none"]
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=%s" % self.dbd_addr,
            "AccountingStoragePort=%d" % self.ports[2],
            # the munge socket of connections to slurmdbd (AuthInfo covers the rest)
            "AccountingStoragePass=%s" % self.munge_socket,
            "AccountingStoreFlags=job_comment",
        ]

    def _start_accounting(self):
        """A MariaDB of the cluster's own (its data, socket and log in root/db), a database user for
        slurmdbd with a random password, slurmdbd on it, the cluster registered. All on the login
        host (this machine for one node); nothing touches /etc/mysql or the system's MariaDB."""
        db = self.root / "db"
        (db / "data").mkdir(parents=True, exist_ok=True)
        sock = db / "mysqld.sock"
        sock.unlink(missing_ok=True)  # a stopped cluster's (its readiness is the socket's presence)
        mysql = ["--no-defaults", "--user=root", "--datadir=%s" % (db / "data")]
        if not (db / "data" / "mysql").is_dir():
            subprocess.run(
                [which("mariadb-install-db")]
                + mysql
                + ["--auth-root-authentication-method=socket", "--skip-test-db"],
                check=True,
                capture_output=True,
                timeout=120,
            )
        self._daemon(
            "mariadbd",
            ["mariadbd"]
            + mysql
            + [
                "--socket=%s" % sock,
                "--pid-file=%s" % (db / "mysqld.pid"),
                "--port=%d" % self.ports[3],
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--log-error=%s" % (self.root / "log" / "mariadbd.log"),
                "--innodb-buffer-pool-size=32M",
            ],
            host=self.login,
        )
        self._wait("MariaDB's socket", sock.exists, 60)
        password = "%032x" % random.getrandbits(128)
        sql = (
            "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{p}';"
            "ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{p}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        ).format(p=password)
        subprocess.run(
            self.on(
                self.login, [which("mariadb"), "--no-defaults", "--socket=%s" % sock, "-e", sql]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
        dbd_conf = self.root / "slurmdbd.conf"  # beside slurm.conf: slurmdbd finds it there
        files.write_atomic(
            dbd_conf,
            "\n".join(
                [
                    "AuthType=auth/munge",
                    "AuthInfo=socket=%s" % self.munge_socket,
                    "DbdHost=%s" % (self.login or self.host),
                    "DbdAddr=%s" % self.dbd_addr,
                    "DbdPort=%d" % self.ports[2],
                    "SlurmUser=root",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    "StoragePort=%d" % self.ports[3],
                    "StorageUser=slurm",
                    "StoragePass=%s" % password,
                    "StorageLoc=slurm_acct_db",
                    "PidFile=%s/run/slurmdbd.pid" % self.root,
                    "LogFile=%s/log/slurmdbd.log" % self.root,
                    "DebugLevel=info",
                    "",
                ]
            ),
        )
        dbd_conf.chmod(0o600)  # slurmdbd refuses a slurmdbd.conf others can read (the password)
        self._daemon("slurmdbd", ["slurmdbd", "-D"], host=self.login)
        self._wait("slurmdbd", lambda: self._sacctmgr("list", "cluster").returncode == 0, 60)
        self._sacctmgr("add", "cluster", "tmtest", check=True)

    def _sacctmgr(self, *args, check=False):
        proc = subprocess.run(
            self.client([which("sacctmgr"), "-i"] + list(args)),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        if check and proc.returncode != 0 and "already exists" not in proc.stdout + proc.stderr:
            raise SlurmError("sacctmgr %s: %s%s" % (" ".join(args), proc.stdout, proc.stderr))
        return proc

    def _start_slurm(self):
        # -D: foreground, so the pid is ours; -c on slurmctld: cold start from an empty state dir
        self._daemon("slurmctld", ["slurmctld", "-D", "-c", "-f", self.conf], host=self.login)
        if self.tag:
            for node in self.nodes:
                self._daemon(
                    "slurmd@" + node, ["slurmd", "-D", "-N", node, "-f", self.conf], host=node
                )
        else:
            self._daemon("slurmd", ["slurmd", "-D", "-f", self.conf])
        self._save_state()
        want = {n: "idle" for n in self.nodes}
        self._wait(
            "node(s) %s to be idle" % ",".join(self.nodes), lambda: self.node_states() == want, 60
        )


def start(tmpdir, hosts=0, shared_cores=False, accounting=False, partitions=()):
    """Start munged, slurmctld and slurmd under tmpdir (`hosts` namespace hosts, or this machine as
    the one node; with accounting also MariaDB and slurmdbd; `partitions` besides debug); return
    the Cluster once every node is idle. On any failure what was already started is stopped and
    removed, and SlurmError (with logs) is raised."""
    absent = missing(hosts, accounting)
    if absent:
        raise SlurmError(
            "not installed: %s (apt-get install %s%s%s)"
            % (
                " ".join(absent),
                APT_PACKAGES,
                " " + APT_PACKAGES_HOSTS if hosts else "",
                " " + APT_PACKAGES_ACCOUNTING if accounting else "",
            )
        )
    if hosts and cannot_make_hosts():
        raise SlurmError(cannot_make_hosts())
    t0 = time.monotonic()
    cluster = Cluster(tmpdir, hosts, shared_cores, accounting, partitions)
    (cluster.root / "log").mkdir(parents=True, exist_ok=True)
    try:
        cluster._start_munge()
        if hosts:
            cluster._make_hosts()
        cluster._write_conf()
        if accounting:
            cluster._start_accounting()
        cluster._start_slurm()
    except BaseException:
        cluster.stop()
        raise
    cluster.startup_seconds = time.monotonic() - t0
    return cluster


# -- a cluster that outlives the command that started it (make cluster-up / cluster-down) ----------


def down(root):
    """Stop the cluster recorded in root/cluster.json (started by `up`, or left by a crashed test):
    TERM then KILL its daemons, remove its namespaces. Returns a list of problems (empty: clean)."""
    path = Path(root) / STATE_FILE
    if not path.exists():
        return []
    state = json.loads(files.read_text(path))
    problems = []
    if state.get("login") and state["login"] in namespaces():
        env = dict(os.environ, SLURM_CONF=state["conf"])
        subprocess.run(
            [
                which("ip"),
                "netns",
                "exec",
                state["login"],
                which("scancel"),
                "--full",
                "--quiet",
                "--user=%s" % os.getuid(),
            ],
            env=env,
            capture_output=True,
            timeout=30,
        )
    for name in sorted(state.get("pids", {}), key=_daemon_order):
        pid = state["pids"][name]
        if not _end(pid, lambda: Path("/proc/%d" % pid).exists()):
            problems.append("%s (pid %d) still running" % (name, pid))
    problems += [
        "namespace %s not removed" % ns for ns in remove_namespaces(state.get("netns", []))
    ]
    if not problems:
        path.unlink()
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(prog="slurmcluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up_p = sub.add_parser("up", help="start a cluster in DIR and leave it running")
    up_p.add_argument(
        "--hosts", type=int, default=2, help="namespace hosts (0: this machine as the one node)"
    )
    up_p.add_argument(
        "--shared-cores",
        action="store_true",
        help="every host gets all of this machine's cores (default: a share each)",
    )
    up_p.add_argument(
        "--accounting",
        action="store_true",
        help="also slurmdbd on a MariaDB of the cluster's own: sacct answers (tunedmpi coverage)",
    )
    up_p.add_argument("dir")
    sh_p = sub.add_parser("shell", help="a shell (or CMD) on the login host of the cluster in DIR")
    sh_p.add_argument("dir")
    sh_p.add_argument("command", nargs=argparse.REMAINDER)
    down_p = sub.add_parser("down", help="stop the cluster in DIR and remove its namespaces")
    down_p.add_argument("dir")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    if args.cmd == "up":
        if (root / STATE_FILE).exists():
            sys.exit(
                "slurmcluster: a cluster is recorded in %s already; `down %s` first"
                % (root / STATE_FILE, args.dir)
            )
        root.mkdir(parents=True, exist_ok=True)
        try:
            cluster = start(root, args.hosts, args.shared_cores, args.accounting)
        except SlurmError as exc:
            sys.exit("slurmcluster: %s" % exc)
        print(
            "slurmcluster: %d node(s) idle after %.0f s: %s (conf %s)"
            % (len(cluster.nodes), cluster.startup_seconds, " ".join(cluster.nodes), cluster.conf)
        )
        print("  a shell on the login host: python3 tools/slurmcluster.py shell %s" % args.dir)
        print("  stop it:                    python3 tools/slurmcluster.py down %s" % args.dir)
        return 0
    if args.cmd == "shell":
        state_path = root / STATE_FILE
        if not state_path.exists():
            sys.exit("slurmcluster: no cluster in %s (start one with `up`)" % root)
        state = json.loads(files.read_text(state_path))
        command = args.command or [os.environ.get("SHELL", "/bin/bash")]
        env = dict(os.environ, SLURM_CONF=state["conf"], PATH=SBIN_PATH)
        if state.get("login"):
            command = on_host(state["login"], root / "hosts", command)
        os.execvpe(command[0], command, env)
    problems = down(root)
    if problems:
        sys.exit("slurmcluster: " + "; ".join(problems))
    print("slurmcluster: stopped, nothing left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
