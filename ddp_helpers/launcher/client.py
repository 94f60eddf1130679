"""The kernel's handle on its zygote, the helper process that forks the ranks (zygote.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

from .. import torch_compat
from ..entry_points import ZYGOTE
from ..i18n import messages
from ..procs import REAP_WAIT, nproc_limit, with_this_package
from . import wire
from .failures import DistributedError, nproc_limit_text
from .plan import zygote_environment
from .protocol import Broken, ProtocolError, Ready, WarmUp, expect

MESSAGES = messages(
    "launcher.client",
    {
        "launcher_broken": (
            "The launcher could not start its helper process: {error}. Check that torch is "
            "installed in this kernel's environment (run `make lab` to set it up)."
        ),
        "no_process": (
            "The launcher could not start its helper process: the system refused to create "
            "another process ({error}). {limit}End other processes of yours, then run the cell "
            "again."
        ),
    },
)


class ZygoteClient:
    """One zygote process and the socket to it; what it found (GPUs, torch touchpoints)."""

    def __init__(self, fork_fails_at: int | None = None):
        """`fork_fails_at`: for the tests, a rank that no launch can fork (Zygote's)."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = with_this_package(zygote_environment(os.environ))
        argv = [*_confined_by, sys.executable, "-m", ZYGOTE]
        argv.append(str(child.fileno()))
        if fork_fails_at is not None:
            argv.append(str(fork_fails_at))
        # Confined, the zygote and its ranks have a loopback of their own: the store's
        # socket is bound there, by the zygote (LaunchRequest.master_port 0).
        self.binds_store = bool(_confined_by)
        try:
            self.proc = subprocess.Popen(
                argv,
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # the notebook's interrupt (SIGINT to the group) skips it
            )
        except OSError as exc:  # no process to be had (RLIMIT_NPROC): say so, not EAGAIN
            parent.close()
            limit = nproc_limit_text(nproc_limit() or None)
            raise DistributedError(
                MESSAGES["no_process"].format(error=exc, limit=limit), kind="launcher"
            ) from None
        finally:
            child.close()
        self.sock = parent
        self.pid = os.getpid()
        self.ready = False
        # One message at a time on the socket: a launch's request (several writes when it
        # carries many fds) and a WarmUp from another thread must not interleave.
        self._sending = threading.Lock()
        self.told_ddp = False

    def send(self, msg, fds=()) -> None:
        with self._sending:
            wire.send(self.sock, msg, fds)

    def expect_ddp(self) -> None:
        """WarmUp, once: read by the zygote as soon as it serves (queued until then)."""
        if self.told_ddp:
            return
        self.told_ddp = True
        try:
            self.send(WarmUp())
        except OSError:  # it is gone: the launch that needs it says so
            pass

    def wait_ready(self) -> ZygoteClient:
        """Wait for the zygote's hello (torch imported, GPUs counted); raise if it failed."""
        if self.ready:
            return self
        try:
            msg, _ = wire.recv(self.sock)
            msg = expect(msg, Ready, Broken, sender="the launcher's helper")
        except (EOFError, ProtocolError) as exc:
            self.close()
            error = "it exited while starting" if isinstance(exc, EOFError) else str(exc)
            raise DistributedError(
                MESSAGES["launcher_broken"].format(error=error), kind="launcher"
            ) from None
        if isinstance(msg, Broken):
            self.close()
            raise DistributedError(
                MESSAGES["launcher_broken"].format(error=msg.error), kind="launcher"
            )
        self.gpus = msg.gpus
        self.compat = msg.compat
        # Said once, at the first launch of this zygote (not from a background thread).
        self.unsaid = torch_compat.warnings(self.compat)
        self.ready = True
        return self

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=REAP_WAIT)  # its socket closed, it exits
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_zygote: ZygoteClient | None = None
_lock = threading.Lock()
_confined_by: tuple[str, ...] = ()  # the command every zygote starts under (confine())
_ddp_expected = False  # expect_ddp() was called: every zygote of this kernel warms up


def get() -> ZygoteClient:
    """This kernel's zygote, started if it is not running."""
    global _zygote
    with _lock:
        if _zygote is None or not _zygote.alive():
            _zygote = ZygoteClient()
        if _ddp_expected:  # after the assignment: expect_ddp() reads _zygote after its flag
            _zygote.expect_ddp()
        try:
            return _zygote.wait_ready()
        except DistributedError:  # it closed itself
            _zygote = None
            raise
        except BaseException:  # interrupted mid-hello: the stream is out of step, drop it
            _zygote.proc.kill()
            _zygote.sock.close()
            _zygote = None
            raise


def start() -> None:
    """Start the zygote without waiting for it: it imports torch while the caller works."""
    global _zygote
    with _lock:
        if _zygote is None or not _zygote.alive():
            try:
                _zygote = ZygoteClient()
            except DistributedError:  # no process to be had: the launch that needs it says so
                _zygote = None
        if _zygote is not None and _ddp_expected:
            _zygote.expect_ddp()


def running() -> ZygoteClient | None:
    """This kernel's zygote if one is running, without starting one."""
    with _lock:
        ok = _zygote is not None and _zygote.ready and _zygote.alive()
        return _zygote if ok else None


def warm_up() -> None:
    """Start the launcher's helper process now, so the first launch is fast (lesson 01)."""
    get()


def expect_ddp() -> None:
    """This kernel's ranks will build DDP models (lessons 03 and 04 say so at %load_ext).

    The launcher's helper then imports what DDP imports on construction (torch._dynamo,
    about 1 s) once it is idle (between cells, or as soon as a launch's ranks are gone), so
    that no rank does. Without this call it does so after the first launch whose ranks built
    one. Starts no process.
    """
    global _ddp_expected
    # Not under _lock, which get() holds while a zygote starts (about 1 s): the flag first,
    # then the zygote, as get() and start() assign the zygote first, then read the flag, so
    # that a zygote started meanwhile is told by one side or the other (or both: once).
    _ddp_expected = True
    zygote = _zygote
    if zygote is not None and zygote.alive():
        zygote.expect_ddp()


def confine(command: list[str]) -> None:
    """Start every zygote of this process under `command` (the grader's scorer: inside the
    submission's sandbox and limits, so that the ranks running a learner's answers cannot
    see the process that judges them). Call before the first launch."""
    global _confined_by
    _confined_by = tuple(command)


def shutdown() -> None:
    """Stop the launcher's helper process (it also stops by itself with the kernel)."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None
