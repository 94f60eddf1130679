"""Process control shared by the launcher and the grader: Linux prctl, process trees, exits."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from .i18n import messages
from .paths import ROOT

# How long a process killed with SIGKILL may take to be reaped, and a pipe an orphan of it
# holds to let go: the kernel's work, not the process's, so a few seconds are plenty.
REAP_WAIT = 5.0
PIPE_WAIT = 10.0

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36

_libc = None


def load_libc() -> None:
    """Load the C library for prctl now (in a zygote: once, before any fork); Linux only."""
    global _libc
    if sys.platform.startswith("linux") and _libc is None:
        import ctypes

        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = None


def _prctl(option: int, value) -> None:
    load_libc()
    if _libc is not None:
        _libc.prctl(option, value, 0, 0, 0)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have Linux send `sig` to this process when its parent dies; exit if it already has."""
    _prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(70)


def undumpable() -> None:
    """No other process of this user may read this one's memory or open its fds through
    /proc, nor trace it (the grader's own processes, beside a learner's ranks run as the
    same user without the sandbox); root keeps CAP_SYS_PTRACE. Reset by execve."""
    _prctl(_PR_SET_DUMPABLE, 0)


def set_process_name(name: str) -> None:
    """Name this process as `ps` and `top` show it (ddp-rank-0, ddp-zygote); Linux only."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


def become_subreaper() -> None:
    """Orphaned descendants become this process's children, so none can slip away (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def lead_group(pid: int) -> None:
    """Make pid the leader of a process group of its own (call on both sides of a fork)."""
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)


def nproc_limit() -> int | None:
    """This user's soft limit on processes (RLIMIT_NPROC, `ulimit -u`); None if unlimited."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    except (ImportError, AttributeError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def signal_group(pid: int, sig: int) -> None:
    """Send sig to pid's process group (its own children too), or to pid alone if it has none.

    pid must be an unreaped child of this process, so that it cannot have been reused.
    """
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_descendants(pid: int | None = None, include_self: bool = False) -> int:
    """SIGKILL every descendant of pid (default: this process) and reap them; count them."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return 0
    killed: set[int] = set()
    for _ in range(5):  # a process may fork while its siblings are being killed
        try:
            procs = root.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        if include_self and not killed and root.is_running():
            procs.append(root)
        procs = [p for p in procs if p.pid not in killed or p.is_running()]
        if not procs:
            break
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
            killed.add(p.pid)
        psutil.wait_procs(procs, timeout=REAP_WAIT)
    return len(killed)


def supervise(proc, step, deadline, watch=None, tick: float = 0.2) -> str:
    """Wait on a child's work until it is done, the child ends, or a deadline passes.

    Each tick runs `watch()` (a limit to enforce, descendants to note), then `step(wait)`,
    which waits up to `wait` seconds for the work to move on and is true once it is done.
    Returns "done", else "exited" once `proc` (a Popen) has ended, or "late" once
    `deadline()` (time.monotonic() seconds; it may move) has passed. The grader's worker,
    scorer and kernel are watched so; stop_tree() then ends what is left.
    """
    while True:
        if watch is not None:
            watch()
        if step(max(0.0, min(tick, deadline() - time.monotonic()))):
            return "done"
        if proc.poll() is not None:
            return "exited"
        if time.monotonic() >= deadline():
            return "late"


def stop_tree(proc, grace: float = 0.0) -> None:
    """End a child (a Popen) and every process below it, and reap it.

    With `grace`, SIGTERM first and that many seconds to clean up after itself; then
    SIGKILL to whatever of the tree is left. Its pipes are drained while it ends.
    """
    import subprocess

    if grace and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=grace)
    if proc.poll() is None:
        kill_descendants(proc.pid, include_self=True)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=PIPE_WAIT)  # a pipe still held by an orphan must not hang us


class Reaper:
    """Everything one child started, ended in one place, by each way there is to find it.

    - The tree below the child (`proc`, a Popen; None: below this process): SIGTERM first,
      with a grace to clean up after itself, then SIGKILL to whatever is left (stop_tree).
    - What was seen below it while it ran (`note()` on every tick): a child killed from
      outside leaves these behind, re-parented. Each is killed only if its pid still names
      the process seen (the same creation time), never a pid the system gave another.
    - Orphans (`orphans=True`, for a subreaper): this process's children made since the
      Reaper was, which a child that ended left to it.
    - The cgroups it ran in (`cgroups`, a callable that kills what is in them and removes
      them: Limits.empty): the kernel's own count, where there is one.
    """

    def __init__(self, proc=None, *, cgroups=None, orphans: bool = False):
        self.proc = proc
        self.cgroups = cgroups
        self.seen: dict[int, float] = {}
        self.before = children() if orphans else None

    def note(self) -> None:
        """Remember the processes below the child now, with their creation times."""
        import psutil

        if self.proc is None:
            return
        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass

    def reap(self, grace: float = 0.0) -> None:
        if self.proc is not None:
            stop_tree(self.proc, grace)
        else:
            kill_descendants()
        self._kill_seen()
        if self.before is not None:
            for pid in children() - self.before:
                kill_descendants(pid, include_self=True)
        if self.cgroups is not None:
            self.cgroups()

    def _kill_seen(self) -> None:
        import psutil

        alive = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created:
                    p.kill()
                    alive.append(p)
            except psutil.Error:
                continue
        psutil.wait_procs(alive, timeout=REAP_WAIT)


def children() -> set[int]:
    """The pids of this process's children now."""
    import psutil

    return {p.pid for p in psutil.Process().children()}


def listening_sockets(pid: int | None = None) -> list[tuple[str, int]]:
    """(address, port) of each socket a process (default: this one) listens on (lesson 01)."""
    import psutil

    proc = psutil.Process(pid)
    # psutil 6 renamed connections() to net_connections(); a hosted kernel may hold psutil 5.
    connections = getattr(proc, "net_connections", None) or proc.connections
    return sorted(
        (c.laddr.ip, c.laddr.port) for c in connections("inet") if c.status == psutil.CONN_LISTEN
    )


def signal_name(signum: int) -> str:
    """'SIGKILL' for 9; 'signal 77' for a number Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


EXITS = messages(
    "procs",
    {
        "killed_by": "killed by {signal}",
        "exit_code": "exit code {code}",
    },
)


def describe_exit(code: int) -> str:
    """How a process ended, from its exit code as subprocess gives it (negative: a signal).

    'exit code 3' or 'killed by SIGKILL', in the current language; launcher and grader word
    their messages around it.
    """
    if code < 0:
        return EXITS["killed_by"].format(signal=signal_name(-code))
    return EXITS["exit_code"].format(code=code)


def with_this_package(env: dict) -> dict:
    """env with this copy of ddp_helpers first on PYTHONPATH, for the processes it starts."""
    here = str(ROOT)  # the folder that holds this copy of ddp_helpers
    rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    return dict(env, PYTHONPATH=os.pathsep.join([here, *rest]))
