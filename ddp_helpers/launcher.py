"""Run a function or a notebook cell on N ranks, one process each (used by every lesson)."""

from __future__ import annotations

import codecs
import linecache
import os
import pickle
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

from . import _wire
from .plan import Options, place, rank_environment

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = {
    "exception": "rank {rank} raised {type}: {message}",
    "sys_exit": "rank {rank} called sys.exit({code})",
    "exit_code": (
        "rank {rank} exited with code {code} before returning a result (os._exit, or a "
        "crash inside C/C++ code)"
    ),
    "exit_zero": (
        "rank {rank} exited (code 0) without returning a result: did it call os._exit(0)?"
    ),
    "killed": "rank {rank} was killed by {signame} (signal {signum})",
    "killed_hint_kill": (
        "SIGKILL from outside usually means the machine ran out of memory (the kernel's "
        "OOM killer): try fewer ranks or a smaller model."
    ),
    "others_stopped": "The other ranks were stopped.",
    "also_failed": "rank {rank} also failed: {summary}",
    "traceback_of": "Traceback of rank {rank} (most recent call last):",
    "stack_at_death": "Python stack of rank {rank} when it died (most recent call last):",
    "timeout": (
        "The run did not finish within {timeout:g} s, so every rank was stopped. "
        "Where each rank was at that moment (most recent call last):"
    ),
    "timeout_hint": (
        "A rank waiting in a collective (barrier, all_reduce, broadcast, DDP's backward) "
        "that another rank never reaches hangs forever: look for a collective inside "
        "`if rank == 0:`, or a rank that returned early. Raise `timeout=` if the work is "
        "just slow."
    ),
    "rank_finished": "rank {rank}: had already finished",
    "peer_returned": (
        "{ranks} had already returned when this happened. A collective (barrier, all_reduce, "
        "broadcast, DDP's backward) that not every rank calls, for example one inside "
        "`if rank == 0:`, fails like this or hangs."
    ),
    "no_stack": "rank {rank}: gave no stack (it did not answer the dump signal)",
    "exit_quirk": (
        "[ddp_helpers] warning: rank {rank} {how} at exit, after it had returned its "
        "result; the result is kept. (gloo and DDP sometimes abort at interpreter exit.)"
    ),
    "launcher_died": (
        "The launcher's helper process died unexpectedly, so the ranks were stopped. Run the "
        "cell again; if it keeps happening, restart the kernel."
    ),
    "launcher_broken": (
        "The launcher could not start its helper process: {error}. Check that torch is "
        "installed in this kernel's environment (run `make lab` to set it up)."
    ),
    "too_many_ranks": (
        "[ddp_helpers] warning: {nprocs} ranks on {cpus} CPU cores; each rank is a process, "
        "so this will be slow. 2-4 ranks are plenty to learn with."
    ),
    "unpicklable": (
        "{what} cannot be sent to the rank processes: {error}. Each rank is a separate "
        "process, so what you pass must be picklable: define it at the top level of a cell, "
        "or create it inside the function instead."
    ),
    "busy": ("Another launch is still running in this kernel; wait for it (or join it) first."),
}

_CELL_FILE = re.compile(r'File "([^"]+)", line (\d+)')
_FH_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
INTERNAL_FILES = ("ddp_helpers/worker.py", "ddp_helpers/_zygote.py", "ddp_helpers/launcher.py")
_STREAMS = ("stdout", "stderr")


class DistributedError(RuntimeError):
    """A rank failed, died, or the run timed out; says which rank and why."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        rank: int | None = None,
        exc_type: str | None = None,
        exc_message: str | None = None,
        traceback: str | None = None,
        exitcode: int | None = None,
        signal_name: str | None = None,
        stacks: dict | None = None,
        original: BaseException | None = None,
        returned_ranks: list[int] | None = None,
    ):
        super().__init__(message)
        self.kind = kind  # "exception", "exit", "signal", "timeout" or "launcher"
        self.rank = rank
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.traceback = traceback
        self.exitcode = exitcode
        self.signal_name = signal_name
        self.stacks = stacks or {}
        self.original = original
        # Ranks that had returned when the failure happened: with a peer's "connection
        # reset", the sign of a collective that only some ranks called.
        self.returned_ranks = returned_ranks or []


class Results(tuple):
    """The return value of each rank, indexed by rank."""

    @property
    def rank0(self):
        return self[0]

    def __repr__(self) -> str:
        return f"Results({list(self)!r})"


# ---------------------------------------------------------------- the zygote client


def with_this_package(env: dict) -> dict:
    """env with this copy of ddp_helpers first on PYTHONPATH, for the processes it starts."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    return dict(env, PYTHONPATH=os.pathsep.join([here, *rest]))


class _ZygoteClient:
    """The kernel's handle on its zygote process (see _zygote.py)."""

    def __init__(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # One thread per library in the zygote: a thread pool that exists at fork time is
        # copied half-alive into every rank. Ranks set their own thread count.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env["OMP_NUM_THREADS"] = "1"
        # Read once, when torch loads; see _rank_env.
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        env = with_this_package(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ddp_helpers._zygote", str(child.fileno())],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # the notebook's interrupt (SIGINT to the group) skips it
        )
        child.close()
        self.sock = parent
        self.pid = os.getpid()
        try:
            msg, _ = _wire.recv(self.sock)
        except EOFError:
            self.close()
            raise DistributedError(
                MESSAGES["launcher_broken"].format(error="it exited while starting"),
                kind="launcher",
            ) from None
        if msg["op"] != "ready":
            self.close()
            raise DistributedError(
                MESSAGES["launcher_broken"].format(error=msg.get("error")), kind="launcher"
            )
        self.gpus = msg["gpus"]
        self.info = msg

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_zygote: _ZygoteClient | None = None
_zygote_lock = threading.Lock()
_launch_lock = threading.Lock()


def _get_zygote() -> _ZygoteClient:
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive():
            _zygote = _ZygoteClient()
        return _zygote


def warm_up() -> None:
    """Start the launcher's helper process now, so the first launch is fast (lesson 01)."""
    _get_zygote()


def shutdown() -> None:
    """Stop the launcher's helper process (it also stops by itself with the kernel)."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


# ---------------------------------------------------------------- output


class _OutputRouter:
    """Turns the ranks' byte streams into whole `[rank k] ` lines on the kernel's streams."""

    PROGRESS_EVERY = 2.0  # seconds between two snapshots of a `\r` progress line

    def __init__(self, nprocs: int, ordered: bool):
        self.ordered = ordered
        self.decoders = {
            (r, s): codecs.getincrementaldecoder("utf-8")("replace")
            for r in range(nprocs)
            for s in _STREAMS
        }
        self.partial = {key: "" for key in self.decoders}
        self.last_snapshot = {key: 0.0 for key in self.decoders}
        self.snapshot_text = {key: "" for key in self.decoders}
        self.held = {key: [] for key in self.decoders}

    def feed(self, rank: int, stream: str, data: bytes) -> None:
        key = (rank, stream)
        text = self.partial[key] + self.decoders[key].decode(data)
        *lines, rest = text.split("\n")
        for line in lines:
            self._emit(key, _last_state(line.rstrip("\r")))
        self.partial[key] = rest
        if "\r" in rest:
            self._progress(key, rest)

    def _progress(self, key, rest: str) -> None:
        # Keep only the newest state of a line that `\r` keeps rewriting, and show it
        # at most every PROGRESS_EVERY seconds, so a progress bar cannot flood the cell.
        head, _, tail = rest.rpartition("\r")
        self.partial[key] = "\r" + tail if tail else "\r"
        state = _last_state(head) if not tail else tail
        now = time.monotonic()
        if state and state != self.snapshot_text[key] and not self.ordered:
            if now - self.last_snapshot[key] >= self.PROGRESS_EVERY:
                self.last_snapshot[key] = now
                self.snapshot_text[key] = state
                self._emit(key, state)

    def close_stream(self, rank: int, stream: str) -> None:
        key = (rank, stream)
        text = self.partial[key] + self.decoders[key].decode(b"", final=True)
        self.partial[key] = ""
        state = _last_state(text.rstrip("\r"))
        if state and state != self.snapshot_text[key]:
            self._emit(key, state)

    def _emit(self, key, line: str) -> None:
        rank, stream = key
        text = f"[rank {rank}] {line}\n"
        if self.ordered:
            self.held[key].append(text)
        else:
            getattr(sys, stream).write(text)

    def finish(self) -> None:
        for rank, stream in list(self.partial):
            self.close_stream(rank, stream)
        if self.ordered:
            for stream in _STREAMS:
                out = getattr(sys, stream)
                for rank in range(len(self.held) // 2):
                    out.write("".join(self.held[(rank, stream)]))
        for stream in _STREAMS:
            try:
                getattr(sys, stream).flush()
            except Exception:
                pass


def _last_state(line: str) -> str:
    return line.rpartition("\r")[2] if "\r" in line else line


# ---------------------------------------------------------------- tracebacks


def _cell_label(filename: str) -> str | None:
    """'Cell In[3]' for a notebook cell's file name, as IPython writes it; else None."""
    ip = _ipython()
    if ip is None:
        return None
    try:
        label = ip.compile.format_code_name(filename)
    except Exception:
        return None
    return f"{label[0]} {label[1]}" if label else None


def _relabel_cells(text: str) -> str:
    def sub(m):
        label = _cell_label(m.group(1))
        return f"{label}, line {m.group(2)}" if label else m.group(0)

    return _CELL_FILE.sub(sub, text)


def _parse_faulthandler(text: str) -> list[list[tuple[str, int, str]]]:
    """Thread stacks from faulthandler's dump, each most-recent-call-last."""
    threads, current = [], None
    for line in text.splitlines():
        if _FH_THREAD.match(line):
            current = []
            threads.append(current)
            continue
        m = _FH_FRAME.match(line)
        if m and current is not None:
            current.append((m.group(1), int(m.group(2)), m.group(3).strip()))
    return [list(reversed(frames)) for frames in threads]


def _render_stack(text: str) -> str:
    """faulthandler's dump rendered like a Python traceback, with source lines."""
    out = []
    for frames in _parse_faulthandler(text):
        # A rank is forked from the zygote, so its stack starts in the zygote's own frames:
        # drop that prefix, and the launcher's frames further up (its rendezvous hook).
        start = 0
        while start < len(frames) and (
            frames[start][0].endswith(INTERNAL_FILES) or frames[start][0].startswith("<frozen")
        ):
            start += 1
        frames = [f for f in frames[start:] if not f[0].endswith(INTERNAL_FILES)]
        if not frames:
            continue
        if out:
            out.append("  (another thread)")
        for filename, lineno, name in frames:
            label = _cell_label(filename)
            where = f"{label}, line {lineno}" if label else f'File "{filename}", line {lineno}'
            out.append(f"  {where}, in {name}")
            source = linecache.getline(filename, lineno).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out)


def _ipython():
    if "IPython" not in sys.modules:
        return None
    try:
        return sys.modules["IPython"].get_ipython()
    except Exception:
        return None


def _cell_sources() -> dict:
    """The in-memory sources of this kernel's cells, for tracebacks in the ranks."""
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None and entry[2]
    }


# ---------------------------------------------------------------- one run


class _RankState:
    def __init__(self, rank: int):
        self.rank = rank
        self.status: int | None = None  # raw wait status, once exited
        self.exited_at: float | None = None
        self.has_result = False
        self.result: bytes | None = None
        self.error: dict | None = None
        self.ctl = _wire.MessageReader()
        self.ctl_open = True
        self.stack = bytearray()

    @property
    def exitcode(self) -> int | None:
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    def settled(self, now: float) -> bool:
        # Judge a rank once it exited and its control pipe is drained (a child of the rank,
        # such as a DataLoader worker, may hold the pipe open: give it half a second).
        if self.status is None:
            return False
        return not self.ctl_open or now - self.exited_at > 0.5


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _loopback_interface() -> str | None:
    """The loopback interface's name: 'lo' on Linux, 'lo0' on macOS."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)


def _shared_env(options: Options, backend: str) -> tuple[dict, int]:
    """The environment every rank of a run shares, and its thread count."""
    env = dict(os.environ)
    threads = env.get("OMP_NUM_THREADS", "")
    threads = int(threads) if threads.isdigit() and int(threads) > 0 else 0
    # Simulated nodes share this machine's cores like any other ranks.
    threads = threads or max(1, _cpu_count() // options.nprocs)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MPLBACKEND"] = "Agg"  # the notebook's inline backend means nothing in a rank
    # c10d's C++ warnings (a peer's connection reset, with 40 frames of C++ stack) bury
    # the one error that matters in a cell; errors still show. torch reads this when it
    # loads, in the zygote (see _ZygoteClient); it is repeated here for what ranks start.
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # gloo and nccl open listening sockets of their own, by default on the address the
    # host name resolves to (reachable from the network): keep a one-machine run on
    # loopback unless the user chose an interface.
    loopback = _loopback_interface()
    if loopback:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)
        env.setdefault("NCCL_SOCKET_IFNAME", loopback)
    env["PYTHONUNBUFFERED"] = "1"
    env["DDP_HELPERS_BACKEND"] = backend
    return env, threads


class _Run:
    """One launch: start the ranks, route their output, watch them, collect the results."""

    GRACE = 0.2  # seconds between the first failure and stopping the other ranks

    def __init__(self, kind, payload, options: Options, extra=None):
        self.zygote = _get_zygote()
        placement = place(options, self.zygote.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        nprocs = options.nprocs
        if nprocs > 4 * _cpu_count():
            sys.stderr.write(MESSAGES["too_many_ranks"].format(nprocs=nprocs, cpus=_cpu_count()))
            sys.stderr.write("\n")
        if placement.notice:
            sys.stderr.write(placement.notice + "\n")
        self.backend = placement.backend
        self.nprocs = nprocs
        self.timeout = options.timeout
        ordered = options.ordered
        if ordered is None:
            ordered = os.environ.get("DDP_HELPERS_OUTPUT", "live") == "ordered"
        self.router = _OutputRouter(nprocs, ordered)
        self.ranks = [_RankState(r) for r in range(nprocs)]
        self.id = f"{os.getpid()}-{time.monotonic_ns()}"
        env, threads = _shared_env(options, placement.backend)
        # The rendezvous socket: bound to loopback and listening before any rank starts,
        # held until the run ends (rank 0 serves the store on it), so no port race.
        self.store_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.store_socket.bind(("127.0.0.1", 0))
        self.store_socket.listen(128)
        port = self.store_socket.getsockname()[1]
        async_errors = os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        self.req = {
            "op": "launch",
            "id": self.id,
            "kind": kind,
            "payload": payload,
            "nprocs": nprocs,
            "backend": placement.backend,
            "env": env,
            "rank_env": [
                rank_environment(options, placement, rank, "127.0.0.1", port, self.id, async_errors)
                for rank in range(nprocs)
            ],
            "threads": threads,
            "cwd": os.getcwd(),
            "sys_path": list(sys.path),
            "sources": _cell_sources(),
            "master_port": port,
            **(extra or {}),
        }
        self.fds: dict[int, tuple[int, str]] = {}
        self.sel = selectors.DefaultSelector()
        self.phase = "starting"
        self.stop_at: float | None = None  # set on the first failure: the others stop then
        self.stop_sent_at: float | None = None
        self.killed = False
        self.dump_sent_at: float | None = None
        self.timed_out = False
        self.interrupted = False
        self.launcher_died = False
        self.done = False

    # -- start

    def start(self) -> None:
        child_ends = []
        try:
            for state in self.ranks:
                for kind in ("stdout", "stderr", "ctl", "stack"):
                    r, w = os.pipe()
                    os.set_blocking(r, False)
                    self.fds[r] = (state.rank, kind)
                    self.sel.register(r, selectors.EVENT_READ)
                    child_ends.append(w)
            child_ends.append(self.store_socket.detach())
            _wire.send(self.zygote.sock, self.req, child_ends)
        except BaseException:
            self._close_fds()
            raise
        finally:
            for w in child_ends:
                os.close(w)
        self.sel.register(self.zygote.sock, selectors.EVENT_READ)
        self.deadline = None  # counted from when the ranks exist (see "started")
        self.phase = "running"

    # -- the loop

    def poll(self, until: float | None = None) -> bool:
        """Run the event loop until the run is over (True) or `until` passes (False)."""
        while not self.done:
            try:
                self._step()
            except KeyboardInterrupt:
                self.interrupted = True
                self._stop(signal.SIGKILL)
            if until is not None and time.monotonic() >= until and not self.done:
                return False
        return True

    def _step(self) -> None:
        now = time.monotonic()
        self._check_deadlines(now)
        # Past this, a rank that was SIGKILLed and never reported means the zygote is wedged.
        give_up = 1.5 if self.interrupted else 5.0
        if self.killed and now - self.stop_sent_at > give_up:
            self._finish()
            return
        if all(s.settled(now) for s in self.ranks) or self.launcher_died:
            last_exit = max((s.exited_at or now) for s in self.ranks)
            # Output pipes end when the rank (and any child of it) is gone.
            if not self._open_output() or now - last_exit > 1.0 or self.launcher_died:
                self._finish()
                return
        for key, _ in self.sel.select(timeout=0.05):
            if key.fileobj is self.zygote.sock:
                self._on_zygote_message()
            else:
                self._on_pipe(key.fd)
        self._check_failure()

    def _open_output(self) -> bool:
        return any(kind != "stack" for _, kind in self.fds.values())

    def _on_zygote_message(self) -> None:
        try:
            msg, fds = _wire.recv(self.zygote.sock)
        except (EOFError, OSError):
            self.sel.unregister(self.zygote.sock)
            self.launcher_died = True
            return
        for fd in fds:
            os.close(fd)
        if msg.get("id") != self.id:
            return
        if msg["op"] == "started":
            if self.timeout is not None:
                self.deadline = time.monotonic() + self.timeout
        elif msg["op"] == "exit":
            state = self.ranks[msg["rank"]]
            state.status = msg["status"]
            state.exited_at = time.monotonic()
        elif msg["op"] == "failed":
            self.launcher_died = True

    def _on_pipe(self, fd: int) -> None:
        rank, kind = self.fds[fd]
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        state = self.ranks[rank]
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            del self.fds[fd]
            if kind in _STREAMS:
                self.router.close_stream(rank, kind)
            elif kind == "ctl":
                state.ctl_open = False
            return
        if kind in _STREAMS:
            self.router.feed(rank, kind, data)
        elif kind == "ctl":
            for msg in state.ctl.feed(data):
                if msg["kind"] == "result":
                    state.has_result = True
                    state.result = msg["value"]
                elif msg["kind"] == "error":
                    state.error = msg
        else:
            state.stack += data

    def _check_failure(self) -> None:
        if self.stop_at is not None or self.timed_out or self.interrupted:
            return
        now = time.monotonic()
        if any(
            state.error is not None
            or (state.settled(now) and not state.has_result and not self.killed)
            for state in self.ranks
        ):
            # Stop the others after a moment's grace: a rank that is just returning
            # (its peer's failure is often the sign of a collective it skipped)
            # still gets its result out, and the error can say so.
            self.stop_at = now + self.GRACE

    def _check_deadlines(self, now: float) -> None:
        if self.stop_at is not None and self.phase == "running" and now >= self.stop_at:
            self._stop(signal.SIGTERM)
        if self.deadline is not None and now >= self.deadline and self.phase == "running":
            # Ask every live rank for its stack (faulthandler answers even inside C++).
            self.timed_out = True
            self.phase = "dumping"
            self.dump_sent_at = now
            self._signal(signal.SIGUSR1, group=False)
        if self.phase == "dumping":
            live = [s for s in self.ranks if s.status is None]
            have_all = all(s.stack for s in live)
            if now - self.dump_sent_at > (0.3 if have_all else 2.0):
                self._stop(signal.SIGKILL)
        if self.phase == "stopping" and not self.killed and now - self.stop_sent_at > 1.0:
            self._signal(signal.SIGKILL)
            self.killed = True

    def _signal(self, sig: int, group: bool = True) -> None:
        try:
            _wire.send(
                self.zygote.sock, {"op": "signal", "id": self.id, "signal": sig, "group": group}
            )
        except OSError:
            self.launcher_died = True

    def _stop(self, sig: int) -> None:
        self.phase = "stopping"
        self.stop_sent_at = time.monotonic()
        self.killed = self.killed or sig == signal.SIGKILL
        self._signal(sig)

    def _finish(self) -> None:
        self.done = True
        self._close_fds()
        self.router.finish()

    def _close_fds(self) -> None:
        for fd in list(self.fds):
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        self.fds.clear()
        try:
            self.sel.unregister(self.zygote.sock)
        except (KeyError, ValueError):
            pass
        self.sel.close()

    # -- the outcome

    def outcome(self) -> Results:
        __tracebackhide__ = True
        if self.interrupted:
            raise KeyboardInterrupt
        if self.launcher_died:
            shutdown()
            raise DistributedError(MESSAGES["launcher_died"], kind="launcher")
        if self.timed_out:
            raise self._timeout_error()
        failed = [s for s in self.ranks if s.error is not None or not s.has_result]
        if failed:
            raise self._failure_error(failed)
        for state in self.ranks:
            if state.exitcode:
                sys.stderr.write(
                    MESSAGES["exit_quirk"].format(rank=state.rank, how=_how_exited(state.exitcode))
                    + "\n"
                )
        return Results(pickle.loads(s.result) for s in self.ranks)

    def _timeout_error(self) -> DistributedError:
        parts = [MESSAGES["timeout"].format(timeout=self.timeout)]
        stacks = {}
        for state in self.ranks:
            text = _render_stack(bytes(state.stack).decode("utf-8", "replace"))
            if state.has_result and not state.stack:
                parts.append(MESSAGES["rank_finished"].format(rank=state.rank))
            elif text:
                stacks[state.rank] = text
                parts.append(f"rank {state.rank}:\n{text}")
            else:
                parts.append(MESSAGES["no_stack"].format(rank=state.rank))
        parts.append(MESSAGES["timeout_hint"])
        return DistributedError("\n\n".join(parts), kind="timeout", stacks=stacks)

    def _failure_error(self, failed: list[_RankState]) -> DistributedError:
        first = min(failed, key=self._blame_order)
        others = [
            MESSAGES["also_failed"].format(rank=s.rank, summary=_summary(s))
            for s in failed
            if s is not first and (s.error is not None or not self._was_stopped(s))
        ]
        tail = "\n".join(others + [MESSAGES["others_stopped"]] if self.nprocs > 1 else others)
        if first.error is not None:
            err = first.error
            original = None
            if err["exception"] is not None:
                try:
                    original = pickle.loads(err["exception"])
                except Exception:
                    original = None
            tb = (
                _relabel_cells(err["traceback"])
                .rstrip()
                .replace(
                    "Traceback (most recent call last):",
                    MESSAGES["traceback_of"].format(rank=first.rank),
                    1,
                )
            )
            msg = f"{_summary(first)}\n\n{tb}"
            returned = [s.rank for s in self.ranks if s.has_result]
            if returned and "by peer" in err["message"]:
                ranks = ", ".join(map(str, returned))
                msg += "\n\n" + MESSAGES["peer_returned"].format(
                    ranks=f"rank {ranks}" if len(returned) == 1 else f"ranks {ranks}"
                )
            return DistributedError(
                f"{msg}\n\n{tail}".rstrip(),
                kind="exception",
                rank=first.rank,
                exc_type=err["type"],
                exc_message=err["message"],
                traceback=tb,
                original=original,
                returned_ranks=returned,
            )
        code = first.exitcode
        msg = _summary(first)
        stack = _render_stack(bytes(first.stack).decode("utf-8", "replace"))
        if stack:
            msg += "\n\n" + MESSAGES["stack_at_death"].format(rank=first.rank) + "\n" + stack
        if code is not None and code < 0 and -code == signal.SIGKILL:
            msg += "\n\n" + MESSAGES["killed_hint_kill"]
        signame = _signal_name(-code) if code is not None and code < 0 else None
        return DistributedError(
            f"{msg}\n\n{tail}".rstrip(),
            kind="signal" if signame else "exit",
            rank=first.rank,
            exitcode=code,
            signal_name=signame,
        )

    def _was_stopped(self, state: _RankState) -> bool:
        return self.stop_sent_at is not None and (state.exited_at or 0) >= self.stop_sent_at

    def _blame_order(self, state: _RankState) -> tuple:
        """Sort key: the rank that caused a failure first, its victims after it.

        A rank whose peer died or failed sees "Connection reset/closed by peer": it is a
        victim; so is a rank the launcher stopped without an error of its own. Among the
        rest, the earliest failure (both clocks are CLOCK_MONOTONIC).
        """
        if state.error is not None:
            return (False, "by peer" in state.error["message"], state.error["time"])
        exited = state.exited_at if state.exited_at is not None else float("inf")
        return (self._was_stopped(state), False, exited)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _how_exited(code: int) -> str:
    return f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"


def _summary(state: _RankState) -> str:
    err = state.error
    if err is not None:
        if err["type"] == "SystemExit":
            return MESSAGES["sys_exit"].format(rank=state.rank, code=err["message"])
        return MESSAGES["exception"].format(
            rank=state.rank, type=err["type"], message=err["message"]
        )
    code = state.exitcode
    if code is None:
        return f"rank {state.rank} did not finish"
    if code < 0:
        return MESSAGES["killed"].format(rank=state.rank, signame=_signal_name(-code), signum=-code)
    if code == 0:
        return MESSAGES["exit_zero"].format(rank=state.rank)
    return MESSAGES["exit_code"].format(rank=state.rank, code=code)


def _run(kind, payload, options: Options, extra=None) -> Results:
    __tracebackhide__ = True
    if not _launch_lock.acquire(blocking=False):
        raise RuntimeError(MESSAGES["busy"])
    try:
        run = _Run(kind, payload, options, extra)
        run.start()
        try:
            run.poll()
        finally:
            if not run.done:  # an error inside the loop itself: never leave ranks behind
                run._signal(signal.SIGKILL)
                run._finish()
        return run.outcome()
    finally:
        _launch_lock.release()


def _pickle_call(fn, args, kwargs) -> bytes:
    from ._pickling import dumps

    try:
        return dumps((fn, args, kwargs))
    except Exception as exc:
        what = "The function"
        for i, arg in enumerate(args):
            try:
                dumps(arg)
            except Exception:
                what = f"Argument {i + 1} ({type(arg).__name__})"
                break
        for name, value in kwargs.items():
            try:
                dumps(value)
            except Exception:
                what = f"Keyword argument {name!r} ({type(value).__name__})"
                break
        raise TypeError(MESSAGES["unpicklable"].format(what=what, error=exc)) from None


def launch(
    fn,
    *args,
    nprocs: int = 2,
    nnodes: int = 1,
    backend: str = "auto",
    timeout: float | None = None,
    ordered: bool | None = None,
    **kwargs,
) -> Results:
    """Run fn(*args, **kwargs) on `nprocs` ranks, one process each; return each rank's value.

    With nnodes > 1 the ranks are spread over that many simulated machines, as `torchrun
    --nnodes N --nproc-per-node nprocs/N` would start them (lesson 01).
    """
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, backend, timeout, ordered)
    return _run("call", _pickle_call(fn, args, kwargs), options)


def run_cell(
    source: str,
    nprocs: int = 2,
    *,
    nnodes: int = 1,
    backend: str = "auto",
    timeout: float | None = None,
    ordered: bool | None = None,
    filename: str = "<cell>",
    namespace: dict[str, bytes] | None = None,
) -> None:
    """Run a cell's source on every rank (what `%%ddp` does); `namespace`: pickled variables."""
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, backend, timeout, ordered)
    _run("cell", source, options, {"filename": filename, "namespace": namespace or {}})


def _call_with_rank(fn, args):
    return fn(int(os.environ["RANK"]), *args)


class SpawnContext:
    """What spawn(join=False) returns: join() it until it says True, as with torch's."""

    def __init__(self, run: _Run):
        self._run = run
        self._released = False

    def join(self, timeout: float | None = None) -> bool:
        __tracebackhide__ = True
        until = None if timeout is None else time.monotonic() + timeout
        try:
            if not self._run.poll(until):
                return False
        except BaseException:
            self._release()
            raise
        self._release()
        self._run.outcome()
        return True

    def _release(self) -> None:
        if self._run.done and not self._released:
            self._released = True
            _launch_lock.release()


def spawn(
    fn,
    args=(),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
    *,
    nnodes: int = 1,
    backend: str = "auto",
    timeout: float | None = None,
):
    """Drop-in for torch.multiprocessing.spawn: fn(rank, *args) on nprocs ranks (lesson 02).

    `rank` is the global rank (RANK); with nnodes > 1 the ranks are spread over that many
    simulated machines, as `launch` does.
    """
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, backend, timeout)
    payload = _pickle_call(_call_with_rank, (fn, tuple(args)), {})
    if join:
        _run("call", payload, options)
        return None
    if not _launch_lock.acquire(blocking=False):
        raise RuntimeError(MESSAGES["busy"])
    try:
        run = _Run("call", payload, options)
        run.start()
    except BaseException:
        _launch_lock.release()
        raise
    return SpawnContext(run)
