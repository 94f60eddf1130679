"""The zygote: a process started once per kernel that imports torch, then forks ranks.

Forking from it makes a warm launch cost a fork instead of a fresh `import torch` per rank.
It is safe because this process never initialises CUDA, runs no torch op (so no OpenMP
pool exists) and has a single thread. It dies with the kernel (end of its socket), and
its ranks die with it (parent-death signal).
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import importlib
import os
import select
import signal
import socket
import sys

from .. import torch_compat
from ..procs import (
    lead_group,
    load_libc,
    nproc_limit,
    set_process_name,
    signal_group,
)
from . import wire
from .plan import MASTER_ADDR
from .protocol import (
    RELEASE,
    WARM,
    BecomeRank,
    Broken,
    Exited,
    LaunchRequest,
    ProtocolError,
    Ready,
    Refused,
    Signal,
    Started,
    StartFailed,
    WarmUp,
    expect,
)

# Modules the lessons use, imported once here so no rank pays for them.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn",
    "torch.nn.parallel",
    "torch.optim",
    "torch.utils.data",
    "torch.utils.data.distributed",
    "ddp_helpers.launcher.pickling",
    "ddp_helpers.launcher.rank",
)

# The course's own modules, whose functions a check's or a demo's ranks run: a function is
# sent by reference, so without these here every such rank imports its lesson's package
# (all of it, and the exercises' core) again, 20-80 ms of CPU a rank, most where Python
# writes no bytecode (PYTHONDONTWRITEBYTECODE=1, as in many containers: each import then
# compiles the source). Imported once the zygote is idle after its first launch (warm_up):
# about 0.1 s, once. By name: the launcher imports nothing of the course's (a test holds
# every lesson of ddp_helpers.exercises.LESSONS here).
COURSE = (
    "ddp_helpers.exercises.lesson01",
    "ddp_helpers.exercises.lesson02",
    "ddp_helpers.exercises.lesson03",
    "ddp_helpers.exercises.lesson04",
    "ddp_helpers.exercises.lesson05",
    "ddp_helpers.demos.activations",
    "ddp_helpers.demos.communication",
    "ddp_helpers.demos.scaling",
    "ddp_helpers.demos.sharding",
)
# What lesson 05's ranks import besides (its checks' and cells' checkpoints): with DDP's
# warm-up, after which it costs some 35 ms (0.5 s without: what torch._dynamo brings).
WITH_DDP = ("torch.distributed.checkpoint", "torch.distributed.checkpoint.state_dict")


def _count_gpus() -> int:
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    # Asking the CUDA runtime initialises the driver in the asking process, after which
    # forked children cannot use CUDA: ask in a throw-away child instead.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, str(torch.cuda.device_count()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return int(data or 0)


class Zygote:
    def __init__(self, sock: socket.socket, compat: dict, fork_fails_at: int | None = None):
        self.sock = sock
        self.compat = compat
        # For the tests: the rank of every launch that cannot be forked (EAGAIN, as under
        # RLIMIT_NPROC, which root, who runs the tests, is exempt from). None: no such rank.
        self.fork_fails_at = fork_fails_at
        self.children: dict[int, tuple[int, int]] = {}  # pid -> (launch id, rank)
        self.launched = False  # a launch has come (the warm-up may keep the next waiting)
        # Whether DDP models are built here (WarmUp from the kernel, WARM from a rank): then
        # torch._dynamo is imported once idle (warm_up), and `warm` says it was.
        self.warm_wanted = False
        self.warm = False
        self.course_loaded = False  # COURSE imported (once idle after the first launch)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(WARM, lambda *_: self.want_warm())
        signal.set_wakeup_fd(self.wake_w)
        while True:
            # A warm-up due: look again in a moment, once idle (a launch's end wakes the loop:
            # SIGCHLD, through the wake-up pipe). Else wait for the kernel or a signal.
            timeout = 0.01 if self._warm_due() and not self.children else None
            try:
                ready, _, _ = select.select([self.sock, self.wake_r], [], [], timeout)
            except InterruptedError:
                ready = []
            # Once DDP models are built here (want_warm), warm up when idle, or as soon as
            # the launch's ranks are gone: a caller that launches back to back (the checks,
            # the grader) may never leave the zygote idle, and without the warm-up each DDP
            # rank imports torch._dynamo (1-2 s, every launch). A launch already waiting
            # then waits for it once (about 1 s); a launch that arrives before any was made
            # never waits. The course's modules (COURSE) are due the same way after the
            # first launch: a launch waiting then waits about 0.1 s, once.
            if not self.children and self._warm_due() and (not ready or self.launched):
                self.warm_up()
            if self.wake_r in ready:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            self.reap()
            if self.sock in ready:
                try:
                    msg, fds = wire.recv(self.sock)
                except (EOFError, OSError):
                    self.kill_all()
                    return
                self.handle(msg, fds)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            launch_id, rank = self.children.pop(pid, (None, None))
            if launch_id is not None:
                self.reply(Exited(launch_id, rank, status))
                self._release_rank_zero(launch_id)

    def _release_rank_zero(self, launch_id: int) -> None:
        """Once every other rank of a launch is gone, let its rank 0 exit (see RELEASE)."""
        ranks = {rank: pid for pid, (lid, rank) in self.children.items() if lid == launch_id}
        if list(ranks) == [0]:
            try:
                os.kill(ranks[0], RELEASE)
            except ProcessLookupError:
                pass

    def want_warm(self) -> None:
        """DDP models are built here: warm up once idle (WarmUp, or WARM from a rank)."""
        self.warm_wanted = True

    def _warm_due(self) -> bool:
        return (self.warm_wanted and not self.warm) or (self.launched and not self.course_loaded)

    def warm_up(self) -> None:
        """Import, while idle, what DDP imports lazily (torch._dynamo: 1-2 s per rank), and
        after the first launch the course's own modules (COURSE).

        DDP's only where DDP models are built (want_warm): elsewhere it would cost its second
        of CPU and make every fork after it a larger process (RssAnon 217 MB against 146 MB,
        docs/benchmarks.md). The course's once a launch has come: a zygote that never
        launches (a submission that runs no cell of ranks) does not pay for them.
        """
        # The serve loop lets a launch already waiting go first, even a zygote's first.
        names: list[str] = []
        if self.launched and not self.course_loaded:
            names += COURSE
            self.course_loaded = True
        if self.warm_wanted and not self.warm:
            ddp = torch_compat.warm_modules(self.compat)
            names += [*ddp, *WITH_DDP] if ddp else []
            self.warm = True
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # an optional speed-up: a rank imports it itself if need be
                pass
        gc.freeze()

    def _close_inherited(self) -> None:
        # In a fresh child: drop the zygote's signal wiring before closing its fds, or a
        # signal would be written into whatever file reuses the wake-up fd's number.
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(WARM, signal.SIG_DFL)
        self.sock.close()
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)

    def reply(self, msg) -> None:
        try:
            wire.send(self.sock, msg)
        except OSError:
            pass

    def handle(self, msg, fds: list[int]) -> None:
        try:
            msg = expect(msg, LaunchRequest, Signal, WarmUp, sender="the kernel")
        except ProtocolError as exc:
            self.reply(Refused(str(exc)))
        else:
            if isinstance(msg, LaunchRequest):
                self.launch(msg, fds)
            elif isinstance(msg, WarmUp):
                self.want_warm()
            else:
                self.signal(msg)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def launch(self, req: LaunchRequest, fds: list[int]) -> None:
        if req.master_port == 0:  # a confined zygote: the store's socket on its own loopback
            req = _store_bound_here(req, fds)
        nprocs = req.nprocs
        self.launched = True
        pids = []
        rank = 0
        try:
            for rank in range(nprocs):
                if rank == self.fork_fails_at:
                    raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
                # Four pipes per rank; rank 0 also gets the store's listening socket.
                mine = tuple(fds[4 * rank : 4 * rank + 4]) + (tuple(fds[-1:]) if rank == 0 else ())
                task = BecomeRank(req, rank, os.getpid())
                pid = os.fork()
                if pid == 0:
                    self._become_rank(task, mine, fds)
                lead_group(pid)
                self.children[pid] = (req.id, rank)
                pids.append(pid)
        except OSError as exc:
            # Rank `rank` could not be forked (a process limit, no memory): stop and reap
            # the ranks already started, so none is left and none reports an exit, and
            # say which rank and why. This zygote is fine and serves the next launch.
            for pid in pids:
                self.children.pop(pid, None)
            _kill_and_reap(pids)
            self.reply(StartFailed(req.id, rank, str(exc), nproc_limit()))
            return
        self.reply(Started(req.id))

    def _become_rank(self, task: BecomeRank, mine, all_fds) -> None:
        try:
            self._close_inherited()
            for fd in all_fds:
                if fd not in mine:
                    os.close(fd)
            from .rank import run_rank

            code = run_rank(task, mine)  # returns only for a launch without guards
        except BaseException:
            os._exit(70)
        _exit_unguarded(code)

    def signal(self, msg: Signal) -> None:
        for pid, (lid, _rank) in list(self.children.items()):
            if lid == msg.id:
                if msg.group:
                    signal_group(pid, msg.signal)
                else:
                    try:
                        os.kill(pid, msg.signal)
                    except ProcessLookupError:
                        pass

    def kill_all(self) -> None:
        for pid in self.children:
            signal_group(pid, signal.SIGKILL)


def _store_bound_here(req: LaunchRequest, fds: list[int]) -> LaunchRequest:
    """The request with a listening socket of this zygote's for the store, at the end of
    `fds` (closed with them once the ranks are forked), and its port in every rank's
    MASTER_PORT: where the kernel's loopback is not this zygote's (the grader's checks)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((MASTER_ADDR, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    fds.append(sock.detach())
    rank_env = [{**env, "MASTER_PORT": str(port)} for env in req.rank_env]
    return dataclasses.replace(req, master_port=port, rank_env=rank_env)


def _exit_unguarded(code: int):
    """End a rank of a launch without guards as a script's process ends: SystemExit, which
    unwinds to the top of this forked process, then the interpreter's own exit (atexit
    handlers, destructors: gloo's among them, and its abort at exit, as under torchrun).

    What else that exit runs is harmless here: nothing on the way up catches SystemExit
    (serve, launch and main have no `finally` and catch no BaseException), the zygote's
    socket and wake-up pipe are closed in the child (_close_inherited), and the atexit
    handlers the zygote's imports registered (logging, multiprocessing.util, torch's own)
    are those of any process that imports torch: multiprocessing's finds no child, since
    the zygote forks its ranks itself. tests/launcher/test_guards.py checks that the zygote
    serves the next launch."""
    raise SystemExit(code)


def _kill_and_reap(pids: list[int]) -> None:
    """SIGKILL each child's process group, then wait for each: none is left, none reported."""
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def main() -> None:
    """`python -m ddp_helpers.launcher.zygote FD [FORK_FAILS_AT]`: serve the kernel on the
    socket FD (ZygoteClient passes both)."""
    fd = int(sys.argv[1])
    fork_fails_at = int(sys.argv[2]) if len(sys.argv) > 2 else None
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are the kernel's to handle
    # Blocked here, and so in every rank forked from here: RELEASE tells rank 0, whenever it
    # comes, that its peers have left (a rank that is not waiting for it never sees it).
    signal.pthread_sigmask(signal.SIG_BLOCK, {RELEASE})
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        load_libc()
        set_process_name("ddp-zygote")
        compat = torch_compat.check()
        ready = Ready(gpus=_count_gpus(), compat=compat)
    except BaseException as exc:  # tell the kernel why, instead of dying silently
        wire.send(sock, Broken(f"{type(exc).__name__}: {exc}"))
        return
    # Everything imported so far lives as long as the zygote: keep the collector off it, so
    # that a rank's collections do not walk (and copy-on-write touch) all of torch.
    gc.freeze()
    try:
        wire.send(sock, ready)
    except OSError:  # the kernel (or the grader's scorer) went away while torch loaded
        return
    Zygote(sock, compat, fork_fails_at).serve()


if __name__ == "__main__":
    main()
