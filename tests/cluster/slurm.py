"""A real two-node SLURM cluster on this one machine, for tests of multi-node launches.

Two nodes, `n1` and `n2`, each its own `slurmd` (`slurmd -N n1`), one `slurmctld` and one
`munged`, all started by the fixture `slurm_cluster` as whoever runs the tests, with their own
configuration, key, sockets, ports and logs in a temporary folder: /etc/slurm and the system's
munge key are never read or touched, and everything talks on 127.0.0.1 (see
`_listen_on_loopback_alone` for where it listens). Jobs run as they would on a real cluster
(sbatch, srun, requeue, cancel); the folder `Cluster.folder` stands for the storage a real
cluster shares between its nodes.

SLURM and munge are Debian's `slurm-wlm` and `munge`, installed here as root with apt where they
are missing (as `make test` does for Chromium and bubblewrap). Where they are missing and cannot
be installed, the tests that need them fail with `MISSING`, which says how to get them: they
never skip, so a run that did not test a cluster cannot pass for one that did.

Everything started is stopped and the folder removed when the session ends, even after a
failed test; a process of the cluster's still running then fails the teardown by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from support import SOON  # a SLURM command answers in milliseconds

MISSING = (
    "These tests run jobs on a real SLURM cluster started on this machine, and SLURM or munge "
    "is not installed. Install them (Debian/Ubuntu: sudo apt-get install slurm-wlm munge; run "
    "as root with apt, the tests install them themselves); only their programs are used, not "
    "their system services, /etc/slurm or the system's munge key."
)
PACKAGES = ("slurm-wlm", "munge")
# Every program used; the daemons live in sbin, which a user's PATH may lack.
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun")
PROGRAMS += ("squeue", "sinfo", "scontrol", "scancel")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
NODES = ("n1", "n2")
PREFIX = "ddp-slurm-"  # of each cluster's temporary folder
# What a node is said to have. config_overrides below makes SLURM believe it whatever this
# machine has, so that two nodes sharing one small machine each still offer 2 CPUs.
CPUS_PER_NODE = 2
# States in which a job has ended for good (a requeued job goes back to PENDING instead).
ENDED = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}
# Up, from start to both nodes idle: a few seconds, far more on a loaded 2-core machine.
START_DEADLINE = 60.0
# Stopped: jobs cancelled (KillWait below is 2 s) and the daemons ended.
STOP_DEADLINE = 30.0
ASK = 5.0  # for one answer of many asked while the cluster starts or stops
POLL = 0.1  # between looks at the cluster's state: it answers in milliseconds
LOG_LINES = 25  # of each daemon's log, in a failure's message


def _path() -> str:
    return os.environ.get("PATH", "") + os.pathsep + SBIN


def _missing() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name, path=_path()) is None]


def ensure_installed() -> None:
    """Installs SLURM and munge with apt as root where missing; fails with MISSING otherwise.

    Installing is tried without `apt-get update` first (quick where the lists are fresh), then
    with it. The lock timeout lets two pytest workers that both need them take turns.
    """
    if not _missing():
        return
    why = "not installed here: that needs root and apt-get"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        lock = ["-o", "DPkg::Lock::Timeout=300"]

        def apt(*args: str) -> str:
            """What went wrong, or "" if nothing did."""
            try:
                done = subprocess.run(
                    ["apt-get", *lock, *args],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
            except subprocess.TimeoutExpired:
                return f"apt-get {args[0]} took over 900 s"
            last = "".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-1:])
            return "" if done.returncode == 0 else f"apt-get {args[0]} failed: {last}"

        why = apt("install", "-y", "-qq", *PACKAGES)
        if why:
            why = apt("update", "-qq") or apt("install", "-y", "-qq", *PACKAGES)
    missing = _missing()
    if missing:
        pytest.fail(f"{MISSING} (Missing: {', '.join(missing)}; {why}.)", pytrace=False)


def _free_ports(count: int) -> list[int]:
    """Distinct loopback ports free now, below the kernel's ephemeral range.

    The daemons bind them a moment later. A port the kernel handed out for bind(("", 0))
    could be handed out again meanwhile, to any of the tests running beside these (the
    launcher's sockets, kernels, gloo's connections): that once made a slurmd fail with
    "Address already in use". A port below the range is never handed out so; each is
    tried (all held open at once, so none is chosen twice)."""
    import random

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = random.sample(range(max(1024, low - 8000), low), 200)
    with contextlib.ExitStack() as stack:
        chosen = []
        for port in candidates:
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise AssertionError(f"no {count} free loopback ports below {low}")


def _listen_on_loopback_alone() -> bool:
    """Whether SLURM's daemons and srun can be told to listen on 127.0.0.1 alone.

    Told to (NoInAddrAny), they listen on the address of the machine's name, whatever the
    configuration says: where the name is not 127.0.0.1, they would not be found there (and on
    Debian's 127.0.1.1, slurmstepd's connections back to srun come from 127.0.0.1 and are
    refused). There they listen on every address, as by default, and are reached on 127.0.0.1
    all the same.
    """
    try:
        return socket.gethostbyname(socket.gethostname()) == "127.0.0.1"
    except OSError:
        return False


def _die_with_parent() -> None:
    """In a daemon before it starts: ended if pytest itself is killed, so none outlives it."""
    os.setsid()  # its own process group, to be stopped whole
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _owner() -> str:
    """This process, as no other (a pid may be reused, not with the same start time)."""
    return f"{os.getpid()}@{psutil.Process().create_time()}"


def _gone(owner: str) -> bool:
    pid, _, created = owner.partition("@")
    try:
        return psutil.Process(int(pid)).create_time() != float(created)
    except (psutil.Error, ValueError):
        return True


def _processes_of(names: set[str], roots: list[Path]) -> list[psutil.Process]:
    """Running processes of the clusters named: daemons, job steps and tasks, found by the
    environment they inherit (or SLURM gives them) and by where they work."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            env = p.environ()
            if (
                env.get("DDP_SLURM_CLUSTER") in names
                or env.get("SLURM_CLUSTER_NAME") in names
                or any(Path(p.cwd()).is_relative_to(root) for root in roots)
            ):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def _sweep_killed_runs() -> None:
    """Ends what a run killed outright (SIGKILL, as by a CI timeout) left, and removes its folder.

    Its daemons ended with it (they die with their parent), but not its jobs' steps and tasks:
    those SLURM starts apart, and without the daemons they would run on for ever. A cluster is
    another run's while the process that started it (its folder's `owner`) lives.
    """
    names, roots = set(), []
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError, ValueError):
            owner, name = (folder / "owner").read_text().split()
            if _gone(owner):
                names.add(name)
                roots.append(folder)
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            env = p.environ()
            if "DDP_SLURM_CLUSTER" in env and _gone(env.get("DDP_SLURM_OWNER", "")):
                names.add(env["DDP_SLURM_CLUSTER"])
    left = _processes_of(names, roots)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5)
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


class Cluster:
    """The running cluster, and helpers to use it as a user of a real one would.

    `env` is what a SLURM command needs (SLURM_CONF above all; jobs inherit it), `folder` the
    storage shared by the nodes (jobs start in it and write their output there), `nodes` the
    names of the nodes.
    """

    nodes = NODES

    def __init__(self, root: Path):
        self.root = root
        self.name = "t" + uuid.uuid4().hex[:10]  # unique per run: no job or state is shared
        self.conf = root / "slurm.conf"
        self.folder = root / "shared"
        self.procs: dict[str, subprocess.Popen] = {}
        env = {
            k: v
            for k, v in os.environ.items()
            # A SLURM setting of the environment (say pytest itself runs in a SLURM job) would
            # send the commands elsewhere or change what they ask for; the test that happened
            # to start the cluster is not the one whose jobs inherit this.
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_"))
            and k != "PYTEST_CURRENT_TEST"
        }
        # The marks by which its processes are found, to be stopped (here, or by the next run
        # where this one was killed).
        owner = _owner()
        (root / "owner").write_text(f"{owner} {self.name}\n")
        env.update(DDP_SLURM_CLUSTER=self.name, DDP_SLURM_OWNER=owner)
        env.update(PATH=_path(), SLURM_CONF=str(self.conf))
        self.env = env

    # ------------------------------------------------------------------ using it

    def run(self, *args: str, timeout: float = SOON, check: bool = True):
        """Runs a SLURM command (`run("squeue", "-h")`) in `folder`; fails the test if it does."""
        try:
            done = subprocess.run(
                [str(a) for a in args],
                env=self.env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            command = " ".join(map(str, args))
            raise AssertionError(f"{command} took over {timeout} s\n{self.logs()}") from None
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(map(str, args))} failed ({done.returncode}):\n"
                f"{done.stdout}{done.stderr}\n{self.logs()}"
            )
        return done

    def submit(self, script: str | Path, *sbatch_args: str) -> str:
        """Submits a batch script; its id. It starts in `folder`, its output there too
        (`output(job)`), unless the arguments say otherwise."""
        done = self.run("sbatch", "--parsable", *sbatch_args, str(script))
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """What `scontrol show job` says of a job (it remembers ended ones: MinJobAge)."""
        text = self.run("scontrol", "show", "job", "--oneliner", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def state(self, job_id: str) -> str:
        return self.job(job_id)["JobState"]

    def wait(self, job_id: str, timeout: float) -> str:
        """Waits for a job to end for good; its final state (COMPLETED, FAILED, ...).

        A job still running at `timeout` is cancelled, so it does not hold the nodes for the
        tests that follow, and the test fails with its output and the daemons' logs.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(job_id)
            if state in ENDED:
                return state
            if time.monotonic() > deadline:
                self.cancel(job_id)
                raise AssertionError(
                    f"job {job_id} still {state} after {timeout} s (cancelled now)\n"
                    f"output:\n{self.output(job_id)}\n{self.logs()}"
                )
            time.sleep(POLL)

    def cancel(self, job_id: str, *scancel_args: str) -> None:
        """Cancels a job (or signals it: `cancel(job, "--signal=USR1")`)."""
        self.run("scancel", *scancel_args, job_id)

    def requeue(self, job_id: str) -> None:
        """Sends a job back to the queue, as a preemption or a failed node would."""
        self.run("scontrol", "requeue", job_id)

    def output(self, job_id: str) -> str:
        """The job's output file as sbatch names it by default (`slurm-<id>.out` in `folder`)."""
        path = self.folder / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def address(self, node: str) -> str:
        """A node's address, as its jobs and other nodes reach it."""
        text = self.run("scontrol", "show", "node", "--oneliner", node).stdout
        return re.search(r"NodeAddr=(\S+)", text).group(1)

    def logs(self) -> str:
        """The last lines of each daemon's output, for a failure's message.

        Their output, not their log files: run in the foreground, they write to both, and the
        output also has what went wrong before the log file could be opened (munged in the
        foreground writes no log file at all).
        """
        parts = []
        for name in self.procs:
            out = self.root / f"{name}.out"
            lines = out.read_text(errors="replace").splitlines()[-LOG_LINES:]
            parts.append(f"--- {name}, last lines of its output:\n" + "\n".join(lines))
        return "\n".join(parts)

    # ------------------------------------------------------------------ starting it

    def write_conf(self) -> None:
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        r = self.root
        listen_anywhere = not _listen_on_loopback_alone()
        user = pwd.getpwuid(os.getuid()).pw_name
        for folder in ["state", *(f"spool-{node}" for node in NODES)]:
            (r / folder).mkdir()
        (r / "plugstack.conf").write_text("")  # none of the system's SPANK plugins
        lines = [
            f"ClusterName={self.name}",
            # "localhost": slurmctld refuses a name that is neither it nor the machine's.
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            # Whoever runs the tests (root, to run jobs as other users, is not needed here).
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            # Our own munged, found through its socket by every daemon and command.
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge.socket'},cred_expire=10",
            # Each file of a node's slurmd named by its node (%n): two share this machine.
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool-%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd-%n.log'}",
            f"PlugStackConfig={r / 'plugstack.conf'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *([] if listen_anywhere else ["CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"]),
            # No cgroups (a container may have none to give) and no accounting database.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            # Jobs may be requeued, and an ended job stays known to `scontrol show job` for an
            # hour (there is no accounting to ask instead).
            "JobRequeue=1",
            "MinJobAge=3600",
            # A requeued job may start again cred_expire + 1 s later (default 120 s: too long
            # here), when the scheduler next looks (every 60 s by default, or 30 s backfill).
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            # A cancelled job's tasks get SIGKILL 2 s after SIGTERM, not 30.
            "KillWait=2",
            "ReturnToService=2",
            "MailProg=/bin/true",  # the default, /bin/mail, is missing: an error logged
            "InactiveLimit=0",
        ]
        for node, port in zip(NODES, node_ports, strict=True):
            lines.append(
                f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost Port={port} "
                f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
            )
        lines.append(f"PartitionName=main Nodes={','.join(NODES)} Default=YES State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def start_daemon(self, name: str, *args: str) -> None:
        """Starts a daemon in the foreground (so it stays our child), output to name.out."""
        with open(self.root / f"{name}.out", "wb") as out:  # the daemon has its own copy
            self.procs[name] = subprocess.Popen(
                [shutil.which(args[0], path=_path()), *args[1:]],
                env=self.env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    def wait_for(self, what: str, ready, deadline: float) -> None:
        """Waits until `ready()` is true; fails with the daemons' logs at the deadline or as
        soon as one of them has ended."""
        while not ready():
            ended = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if ended or time.monotonic() > deadline:
                why = f"daemons ended: {ended}" if ended else f"not within {START_DEADLINE} s"
                raise AssertionError(
                    f"the test SLURM cluster did not start ({what}; {why})\n{self.logs()}"
                )
            time.sleep(POLL)

    def start(self) -> None:
        deadline = time.monotonic() + START_DEADLINE
        r = self.root
        # munged checks that every folder above its socket can be entered by all.
        r.chmod(0o755)
        self.folder.mkdir()
        key = r / "munge.key"
        self.run("mungekey", "--create", f"--keyfile={key}")
        socket_path = r / "munge.socket"
        self.start_daemon(
            "munged",
            "munged",
            "--foreground",
            f"--key-file={key}",
            f"--socket={socket_path}",
            f"--pid-file={r / 'munged.pid'}",
            f"--log-file={r / 'munged.log'}",
            f"--seed-file={r / 'munged.seed'}",
            "--origin=127.0.0.1",  # not the address of the machine's name
        )
        self.wait_for("munged", lambda: socket_path.exists(), deadline)
        self.write_conf()
        self.start_daemon("slurmctld", "slurmctld", "-D", "-f", str(self.conf))
        self.wait_for("slurmctld", self._controller_up, deadline)
        # Only then the nodes, which otherwise wait a while to register again.
        for node in NODES:
            self.start_daemon(f"slurmd-{node}", "slurmd", "-D", "-N", node, "-f", str(self.conf))
        self.wait_for("both nodes idle", self._nodes_idle, deadline)

    def _ask(self, *args: str) -> str:
        """A command's output, or "" where it fails or hangs (the cluster not up, or ending)."""
        try:
            return self.run(*args, timeout=ASK, check=False).stdout
        except AssertionError:  # it took too long
            return ""

    def _controller_up(self) -> bool:
        return "is UP" in self._ask("scontrol", "ping")

    def _nodes_idle(self) -> bool:
        out = self._ask("sinfo", "--noheader", "--Node", "--format=%N %T")
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return all(states.get(node) == "idle" for node in NODES)

    # ------------------------------------------------------------------ stopping it

    def stop(self) -> list[str]:
        """Stops everything it started; what was still running at the end and had to be killed
        (empty when all went as it should)."""
        deadline = time.monotonic() + STOP_DEADLINE
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            # Jobs first, while the nodes are there to end them.
            self._ask("scancel", "--full", f"--user={os.getuid()}")
            while time.monotonic() < deadline and self._ask("squeue", "--noheader", "--format=%i"):
                time.sleep(POLL)
        # Nodes, then controller, then munged: each still has what it needs to end cleanly.
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        left = []
        for p in _processes_of({self.name}, [self.root]):
            with contextlib.suppress(psutil.Error):
                left.append(f"{p.pid} {' '.join(p.cmdline())}")
                p.kill()
        return left


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    """A started cluster, stopped and removed on leaving even when what ran in it failed."""
    ensure_installed()
    _sweep_killed_runs()
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    try:
        c = Cluster(root)
        try:
            c.start()
            yield c
        finally:
            left = c.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not left, f"processes of the test SLURM cluster left running (killed now): {left}"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    """A two-node SLURM cluster shared by the session's tests (it takes seconds to start)."""
    with cluster() as c:
        yield c
