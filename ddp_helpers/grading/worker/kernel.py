"""A fresh IPython kernel driven over the Jupyter protocol: start it, run cells with a
deadline, interrupt it, stop it (the grader runs each submission's notebook in one)."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import stat
import subprocess
import sys
import time

from ...files import append_fd, read_tail
from ...procs import describe_exit, stop_tree, supervise
from ..budget import TICKS
from ..folders import WorkFolders

# What the grader takes of a kernel (whose every byte the notebook controls), at most:
MAX_MESSAGE = 16 << 20  # bytes of one part of one message (a print, an error)
RECONNECT_MS = 1000  # ZeroMQ's wait before it reconnects (the grader checks every tick)
DYING = 1.0  # seconds a kernel that disconnected gets to be seen exiting (it died, then)
LOG_TAIL = 64 << 10  # bytes of the end of a log
LINE = 500  # characters of one line of a log or a traceback
FRAMES = 100  # entries (frames, each some lines) of a traceback kept from an error message
FRAME = 4000  # characters of one of them
TEXT = 2000  # characters of an exception's name or message

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def start_logged(
    argv: list[str], cwd: str, env: dict, log_path: str, pass_fds=(), stdin=subprocess.DEVNULL
):
    """A process of the submission's, in a session of its own, its output to a log file
    (the grader's, out of the box: see folders.py; opened as files.py opens one, and where
    that is not a regular file any more, to nowhere: the log only ever helps to debug)."""
    try:
        log = append_fd(log_path)
    except OSError:  # replaced by a link, a FIFO (without the sandbox it can be): no log
        log = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds,
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(log)


class KernelDied(Exception):
    pass


class BrokenChannel(Exception):
    """The grader stopped talking to the kernel, for what the notebook did to the channel."""


class OutputTooBig(BrokenChannel):
    """The kernel sent a message part over MAX_MESSAGE: the grader dropped it, and stops."""


class Tampered(BrokenChannel):
    """The notebook replaced one of the kernel's sockets, which the grader connects to."""


class Malformed(BrokenChannel):
    """The kernel sent a message the Jupyter protocol does not allow (a notebook's code runs
    in the kernel and can send any): what was wrong with it, in English words."""


def _message(get, timeout: float) -> tuple[str | None, str, dict]:
    """The next message of a channel as (its parent's msg_id, its type, its content),
    each checked for its shape; queue.Empty if none came, Malformed if it is not one."""
    try:
        msg = get(timeout=timeout)
    except queue.Empty:
        raise
    except Exception as exc:  # noqa: BLE001 - jupyter_client's parse of what the notebook sent
        raise Malformed(f"unreadable ({type(exc).__name__})") from None
    if not isinstance(msg, dict):
        raise Malformed(f"a {type(msg).__name__}, not a message")
    parent, kind, content = msg.get("parent_header"), msg.get("msg_type"), msg.get("content")
    if not isinstance(parent, dict) or not isinstance(content, dict) or type(kind) is not str:
        raise Malformed("a parent header, type or content of the wrong kind")
    msg_id = parent.get("msg_id")
    return (msg_id if type(msg_id) is str else None), kind, content


def _capped_context():
    """A ZeroMQ context whose sockets drop the peer that sends a part over MAX_MESSAGE
    (before the grader holds it in memory), and reconnect only after RECONNECT_MS."""
    import zmq

    context = zmq.Context()
    context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
    return context


class Kernel:
    """A fresh IPython kernel in its own session, driven over the Jupyter protocol."""

    def __init__(self, folders: WorkFolders, env: dict, cage=None):
        """`env`: the kernel's whole environment (sandbox.Cage.env). `cage` (sandbox.Cage):
        the kernel runs inside it, and is watched on every tick."""
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        self.connection_file = folders.connection_file
        # Unix sockets in the submission's box: no ports to race for, nothing to reach.
        # Their paths must fit in 107 bytes; under a long TMPDIR, TCP on loopback instead.
        ipc = folders.kernel_ipc
        self.sockets: dict[str, tuple[int, int] | None] = {}  # path -> (device, inode)
        if len(ipc.encode()) + 6 <= 100:
            _, info = write_connection_file(self.connection_file, transport="ipc", ip=ipc)
            ports = [info[f"{name}_port"] for name in ("shell", "iopub", "control")]
            self.sockets = {f"{ipc}-{port}": None for port in ports}
        elif cage is not None and cage.conf.sandbox:  # its loopback is not the grader's
            raise RuntimeError(f"the folder {folders.root} is too deep for a sandboxed kernel")
        else:
            write_connection_file(self.connection_file, ip="127.0.0.1")
        self.log_path = folders.kernel_log
        self.cage = cage
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]
        if cage is not None:
            argv = cage.command(argv, folders.cwd, read_only=[self.connection_file])
        self.client = BlockingKernelClient(context=_capped_context())
        self.client.load_connection_file(self.connection_file)  # before the kernel runs
        self.proc = start_logged(argv, folders.cwd, env, self.log_path)
        self._monitors: list = []

    def log_tail(self, lines: int = 15) -> str:
        """The end of the kernel's own output, without ipykernel's start-up banner: at most
        LOG_TAIL bytes of it, read as files.py reads what a submission could replace."""
        text = read_tail(self.log_path, LOG_TAIL).decode(errors="replace")
        banner_end = text.rfind("--existing ")
        if banner_end >= 0:
            text = text[text.find("\n", banner_end) + 1 :] if "\n" in text[banner_end:] else ""
        return "\n".join(cap(line, LINE) for line in text.strip().splitlines()[-lines:])

    def _connect(self, deadline: float) -> None:
        """Once ipykernel has made its sockets, connect to them (never before: the notebook
        has run nothing yet, so they are the kernel's) and note what each one is."""
        import zmq

        while self.sockets and None in map(_socket_id, self.sockets):
            if self.proc.poll() is not None:
                raise KernelDied(self._how_it_died())
            if time.monotonic() > deadline:
                raise TimeoutError("its sockets did not appear")
            time.sleep(TICKS.sockets)
        for path in self.sockets:
            self.sockets[path] = _socket_id(path)
        self.client.start_channels(stdin=False, hb=False)
        for channel in (self.client.shell_channel, self.client.iopub_channel):
            self._monitors.append(channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED))

    def check_channels(self) -> None:
        """On every tick: OutputTooBig once a message was dropped for its size (ZeroMQ
        disconnects its sender; KernelDied if the kernel exits within DYING instead),
        Tampered if a socket the grader connects to was replaced (a reconnect, RECONNECT_MS
        later at the earliest, would follow it)."""
        import zmq

        for monitor in self._monitors:
            with contextlib.suppress(zmq.Again):
                monitor.recv_multipart(zmq.NOBLOCK)
                # A kernel that ends disconnects too: that is no message too big.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(DYING)
                    raise KernelDied(self._how_it_died())
                raise OutputTooBig(MAX_MESSAGE)
        for path, seen in self.sockets.items():
            if _socket_id(path) != seen:
                raise Tampered(os.path.basename(path))

    def wait_ready(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        self._connect(deadline)
        # kernel_info until the shell answers, then an empty execute until iopub shows it
        # (a subscriber that connected late would miss the first cell's messages).
        for channel_ready in (self._shell_ready, self._iopub_ready):
            while True:
                try:
                    if channel_ready(deadline):
                        break
                except TimeoutError:
                    pass
                if self.proc.poll() is not None:
                    raise KernelDied(self._how_it_died())
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer within {limit:g} s")

    def _reply(self, get, msg_id: str) -> tuple[str, dict] | None:
        """(type, content) of the first message answering msg_id, within a probe's wait."""
        end = time.monotonic() + TICKS.probe
        while time.monotonic() < end:
            try:
                parent, kind, content = _message(get, TICKS.reply)
            except queue.Empty:
                if self.proc.poll() is not None:
                    return None
                continue
            if parent == msg_id:
                return kind, content
        return None

    def _shell_ready(self, deadline: float) -> bool:
        return self._reply(self.client.get_shell_msg, self.client.kernel_info()) is not None

    def _iopub_ready(self, deadline: float) -> bool:
        msg_id = self.client.execute("", silent=True, store_history=False)
        reply = self._reply(self.client.get_iopub_msg, msg_id)
        if reply is None:
            return False
        kind, content = reply
        if kind != "status" or content.get("execution_state") != "idle":
            self._wait_idle(msg_id, deadline, [])
        return True

    def execute(self, code: str, deadline: float, silent: bool = False) -> dict | None:
        """Run code; the error it raised (or None). Raises TimeoutError, KernelDied."""
        msg_id = self.client.execute(
            code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False
        )
        errors: list[dict] = []
        self._wait_idle(msg_id, deadline, errors)
        return errors[0] if errors else None

    def _wait_idle(self, msg_id: str, deadline: float, errors: list) -> None:
        """Until msg_id's execution is idle, its errors into `errors`; else KernelDied,
        TimeoutError. A cage is watched on every tick: over its task limit, everything it
        started is stopped."""

        def idle(wait: float) -> bool:
            try:
                parent, kind, content = _message(self.client.get_iopub_msg, wait)
            except queue.Empty:
                return False
            if parent != msg_id:
                return False
            if kind == "error" and not errors:  # the first is the one reported
                errors.append(capped_error(content))
            return kind == "status" and content.get("execution_state") == "idle"

        def watch() -> None:
            self.check_channels()
            if self.cage is not None:
                self.cage.watch()

        ended = supervise(self.proc, idle, lambda: deadline, watch, tick=TICKS.watch)
        if ended == "exited":
            raise KernelDied(self._how_it_died())
        if ended == "late":
            raise TimeoutError(msg_id)

    def _how_it_died(self) -> str:
        code = self.proc.returncode
        return describe_exit(code if self.cage is None else self.cage.exit_code(code))

    def _kernel_pid(self) -> int:
        """The kernel's own process: in a sandbox, bubblewrap's descendant, not proc."""
        if self.cage is None or not self.cage.conf.sandbox:
            return self.proc.pid
        import psutil

        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                if "ipykernel_launcher" in " ".join(p.cmdline()):
                    return p.pid
        return self.proc.pid

    def interrupt(self, msg_id: str, grace: float) -> dict | None:
        """Send SIGINT; the error it produced (the KeyboardInterrupt traceback) if any,
        waiting `grace` seconds for it (TimeBudget.interrupt_grace)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._kernel_pid(), signal.SIGINT)
        errors: list[dict] = []
        try:
            self._wait_idle(msg_id, time.monotonic() + grace, errors)
        except (TimeoutError, KernelDied):
            return errors[0] if errors else None
        return errors[0] if errors else {}

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        for monitor in self._monitors:
            with contextlib.suppress(Exception):
                monitor.close(linger=0)
        stop_tree(self.proc)
        with contextlib.suppress(Exception):
            self.client.context.destroy(linger=0)


def _socket_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the Unix socket at path, not followed if a link; None if there is
    none (nothing there, or something else)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


# Where a frame of IPython's traceback begins: a notebook cell's, or a file's.
_FRAME = re.compile(r"(Cell In\[\d+\]|Input In \[\d+\]|File )")
_CELL_FRAME = ("Cell In[", "Input In [")


def cap(text, limit: int) -> str:
    """text as str, cut to `limit` characters with a mark where it was cut."""
    text = text if type(text) is str else str(text)
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more]"


def capped_error(content) -> dict:
    """An error message's content as the grader keeps it: strings, each of them capped."""
    content = content if isinstance(content, dict) else {}
    traceback = content.get("traceback")
    frames = traceback[-FRAMES:] if isinstance(traceback, list) else []
    return {
        "ename": cap(content.get("ename", ""), TEXT),
        "evalue": cap(content.get("evalue", ""), TEXT),
        "traceback": [cap(frame, FRAME) for frame in frames],
    }


def error_text(error: dict, keep: int = 25) -> str:
    """A traceback for the learner's feedback: its last `keep` lines (where it happened),
    after the learner's own innermost cell frame when that one is further up (stopped deep
    inside a library, the learner still sees which line of theirs was running)."""
    text = strip_ansi("\n".join(error.get("traceback") or []))
    if not text.strip():
        text = f"{error.get('ename')}: {error.get('evalue')}"
    lines = [cap(line, LINE) for line in text.strip().splitlines()]
    tail = lines[-keep:]
    starts = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    cells = [i for i in starts if lines[i].startswith(_CELL_FRAME)]
    if not cells or cells[-1] >= len(lines) - keep:
        return "\n".join(tail)
    end = next((i for i in starts if i > cells[-1]), len(lines))
    return "\n".join([*lines[cells[-1] : end][:keep], "...", *tail])
