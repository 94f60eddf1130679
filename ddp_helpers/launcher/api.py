"""launch, spawn and run_cell: run a function or a notebook cell on N ranks (every lesson)."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import sys
import threading
import time
import weakref

from .. import torch_compat
from ..i18n import messages
from . import client
from .failures import DistributedError, exit_quirks, interrupt_report, run_error
from .output import OutputRouter
from .plain import MESSAGES as PLAIN
from .plain import PlainOnly, load_plain, not_plain_text
from .plan import MASTER_ADDR, STOP, Options, place, rank_environments, shared_environment
from .protocol import Call, Cell, LaunchRequest
from .run import Run
from .tracebacks import cell_sources, relabel_cells, render_stack

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = messages(
    "launcher.api",
    {
        "too_many_ranks": (
            "[ddp_helpers] warning: {nprocs} ranks on {cpus} CPU cores; each rank is a process, "
            "so this will be slow. 2-4 ranks are plenty to learn with."
        ),
        "unpicklable": (
            "{what} cannot be sent to the rank processes: {error}. Each rank is a separate "
            "process, so what you pass must be picklable: define it at the top level of a cell, "
            "or create it inside the function instead."
        ),
        # What could not be pickled, as unpicklable's {what} names it.
        "what_function": "The function",
        "what_argument": "Argument {n} ({type})",
        "what_keyword": "Keyword argument {name!r} ({type})",
        "busy": "Another launch is still running in this kernel; wait for it (or join it) first.",
        "spawn_running": (
            "An earlier spawn(join=False) is still running in this kernel: call .join() on the "
            "context it returned (or .terminate() to stop it) before you launch again."
        ),
        "spawn_dropped": (
            "[ddp_helpers] note: an earlier spawn(join=False) was never joined and nothing can "
            "join it any more, so its ranks were stopped."
        ),
        "spawn_unjoined": (
            "[ddp_helpers] note: an earlier spawn(join=False) finished without being joined: {what}"
        ),
        "spawn_ok": "it succeeded.",
        "bad_start_method": (
            "start_method must be 'spawn', 'fork' or 'forkserver' (the start methods of Python's "
            "multiprocessing); got {value!r}. Here every one of them starts the ranks the same "
            "way, forked from the launcher's helper process, which has never touched CUDA, so "
            "code written for torch.multiprocessing.spawn runs unchanged whichever it names."
        ),
    },
)

START_METHODS = ("spawn", "fork", "forkserver")


class Results(tuple):
    """The return value of each rank, indexed by rank."""

    @property
    def rank0(self):
        return self[0]

    def __repr__(self) -> str:
        return f"Results({list(self)!r})"


# One launch at a time in a kernel (its zygote is shared). An RLock, so that _launching can
# ask whether this thread holds it (release() refuses a thread that does not).
_launch_lock = threading.RLock()
_background: tuple[Run, weakref.ref] | None = None  # a spawn(join=False) not joined yet


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


def _new_run(work: Call | Cell, options: Options, daemon: bool = False) -> Run:
    """Place the ranks, build their request, and start them (through this kernel's zygote)."""
    zygote = client.get()
    for line in zygote.unsaid:  # what a torch touchpoint's fallback loses, said once
        sys.stderr.write(line + "\n")
    zygote.unsaid = []
    placement = place(options, zygote.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if options.nprocs > 4 * _cpu_count():
        message = MESSAGES["too_many_ranks"].format(nprocs=options.nprocs, cpus=_cpu_count())
        sys.stderr.write(message + "\n")
    if placement.notice:
        sys.stderr.write(placement.notice + "\n")
    ordered = options.ordered
    if ordered is None:
        ordered = os.environ.get("DDP_HELPERS_OUTPUT", "live") == "ordered"
    run_id = f"{os.getpid()}-{time.monotonic_ns()}"
    env, threads = shared_environment(
        os.environ,
        options.nprocs,
        placement.backend,
        _cpu_count(),
        _loopback_interface(),
        options.guards,
    )
    # The rendezvous socket: bound to loopback and listening before any rank starts,
    # held until the run ends (rank 0 serves the store on it), so no port race. A confined
    # zygote binds it on its own loopback instead (port 0 asks it to).
    store_socket, port = None, 0
    if not zygote.binds_store:
        store_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        store_socket.bind((MASTER_ADDR, 0))
        store_socket.listen(128)
        port = store_socket.getsockname()[1]
    request = LaunchRequest(
        id=run_id,
        work=work,
        nprocs=options.nprocs,
        backend=placement.backend,
        env=env,
        rank_env=rank_environments(options, placement, port, run_id, env),
        threads=threads,
        cwd=os.getcwd(),
        sys_path=list(sys.path),
        sources=cell_sources(),
        master_port=port,
        compat=zygote.compat,
        daemon=daemon,
        guards=options.guards,
    )
    run = Run(zygote, request, options.timeout, OutputRouter(options.nprocs, ordered))
    try:
        run.start(store_socket)
    finally:
        if store_socket is not None:
            store_socket.close()
    return run


def _outcome(run: Run, plain: bool = False) -> Results:
    """The ranks' values, or the error that says which rank failed and why. `plain`: the
    ranks are not trusted (launch_plain): their values are taken as plain data only, and
    their exceptions as text only."""
    __tracebackhide__ = True
    if run.interrupted:
        where = interrupt_report(run.records, render_stack)
        if where:  # where each rank was when stop was pressed, above the KeyboardInterrupt
            print(where, file=sys.stderr, flush=True)
        raise KeyboardInterrupt
    peer_text = torch_compat.usable(run.zygote.compat, "peer_text")
    error = run_error(run.end(), relabel_cells, render_stack, peer_text, originals=not plain)
    if error is not None:
        if error.kind == "launcher":  # a fresh helper process for the next launch
            client.shutdown()
        raise error
    for line in exit_quirks(run.records, run.req.guards):
        sys.stderr.write(line + "\n")
    if plain:
        return Results(_plain_value(r.rank, r.result) for r in run.records)
    return Results(pickle.loads(r.result) for r in run.records)


def _plain_value(rank: int, data: bytes):
    """A rank's value as plain data, or the DistributedError that names what it held."""
    try:
        return load_plain(data)
    except PlainOnly as exc:
        what = exc.what
    except Exception as exc:  # noqa: BLE001 - bytes no pickle of ours makes
        what = PLAIN["unreadable"].format(kind=type(exc).__name__)
    raise DistributedError(not_plain_text(rank, what), kind="result", rank=rank)


def _settle_background() -> None:
    """Deal with a spawn(join=False) that was never joined, before a new launch starts."""
    global _background
    if _background is None:
        return
    run, context = _background
    if context() is None:  # dropped: nobody can ever join it
        run.kill()
        _background = None
        sys.stderr.write(MESSAGES["spawn_dropped"] + "\n")
        return
    run.poll(until=time.monotonic() + STOP.settle)  # read what it has written, if finished
    if not run.done:
        raise RuntimeError(MESSAGES["spawn_running"])
    _background = None
    try:
        _outcome(run)
        what = MESSAGES["spawn_ok"]
    except (DistributedError, KeyboardInterrupt) as exc:
        what = str(exc) or type(exc).__name__
    sys.stderr.write(MESSAGES["spawn_unjoined"].format(what=what) + "\n")


@contextlib.contextmanager
def _launching():
    """This kernel's one launch at a time, once an unjoined spawn(join=False) is settled.

    The lock is taken inside the `try`: an interrupt (the kernel's stop button) that lands
    just after acquire() returned, before a `try` after it could begin, would leave it held
    and every later launch in the kernel refused as busy. The `finally` lets it go where this
    thread holds it, whenever the interrupt came."""
    try:
        if not _launch_lock.acquire(blocking=False):
            raise RuntimeError(MESSAGES["busy"])
        _settle_background()
        yield
    finally:
        with contextlib.suppress(RuntimeError):  # not held by this thread: another launch's
            _launch_lock.release()


def _run(work: Call | Cell, options: Options, daemon: bool = False, plain: bool = False) -> Results:
    __tracebackhide__ = True
    with _launching():
        run = _new_run(work, options, daemon)
        try:
            run.poll()
        finally:
            run.kill()  # only does something after an error inside the loop itself
        return _outcome(run, plain)


def _pickle_call(fn, args, kwargs) -> bytes:
    from .pickling import dumps

    try:
        return dumps((fn, args, kwargs))
    except Exception as exc:
        what = MESSAGES["what_function"]
        for i, arg in enumerate(args):
            try:
                dumps(arg)
            except Exception:
                what = MESSAGES["what_argument"].format(n=i + 1, type=type(arg).__name__)
                break
        for name, value in kwargs.items():
            try:
                dumps(value)
            except Exception:
                what = MESSAGES["what_keyword"].format(name=name, type=type(value).__name__)
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
    guards: bool = True,
    **kwargs,
) -> Results:
    """Run fn(*args, **kwargs) on `nprocs` ranks, one process each; return each rank's value.

    With nnodes > 1 the ranks are spread over that many simulated machines, as `torchrun
    --nnodes N --nproc-per-node nprocs/N` would start them (lesson 01). `guards=False`
    runs and ends each rank as torchrun would, without the launcher's init barrier, kept
    groups and os._exit (docs/launcher.md, "Guards").
    """
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, backend, timeout, ordered, guards)
    return _run(Call(_pickle_call(fn, args, kwargs)), options)


def launch_plain(fn, *args, nprocs: int = 2, nnodes: int = 1, timeout: float | None = None):
    """launch() for a caller that does not trust what runs on the ranks (the checks, which
    run a learner's answer there), on gloo, output in rank order: each rank's value comes
    back as plain data only (numbers, strings, bytes, lists, tuples, dicts, sets, tensors;
    plain.py), its exception as text, and nothing a rank sends runs code in this process."""
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, "gloo", timeout, True)
    return _run(Call(_pickle_call(fn, args, {})), options, plain=True)


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
    guards: bool = True,
) -> None:
    """Run a cell's source on every rank (what `%%ddp` does); `namespace`: pickled variables."""
    __tracebackhide__ = True
    options = Options.checked(nprocs, nnodes, backend, timeout, ordered, guards)
    _run(Cell(source, filename, namespace or {}), options)


def _call_with_rank(fn, args):
    return fn(int(os.environ["RANK"]), *args)


class SpawnContext:
    """What spawn(join=False) returns: join() it until it says True, as with torch's."""

    def __init__(self, run: Run):
        self._run = run

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` s (None: until done); True once every rank has finished."""
        __tracebackhide__ = True
        global _background
        until = None if timeout is None else time.monotonic() + timeout
        try:
            if not self._run.poll(until):
                return False
        finally:
            if self._run.done and _background is not None and _background[0] is self._run:
                _background = None
        _outcome(self._run)
        return True

    def terminate(self) -> None:
        """Stop every rank now."""
        global _background
        self._run.kill()
        if _background is not None and _background[0] is self._run:
            _background = None


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
    guards: bool = True,
):
    """Drop-in for torch.multiprocessing.spawn: fn(rank, *args) on nprocs ranks (lesson 02).

    `rank` is the global rank (RANK); with nnodes > 1 the ranks are spread over that many
    simulated machines, as `launch` does. `daemon=True` makes the ranks daemonic, as
    torch's: multiprocessing then refuses them child processes (a DataLoader with
    workers); either way no rank outlives the kernel. `start_method` may be any of
    multiprocessing's, 'spawn', 'fork' or 'forkserver', and each does the same here: the
    ranks are forked from the launcher's helper process, which never initialises CUDA, so
    they are as fresh as spawned ones, and as quick to start as forked ones. `guards` as
    for launch.
    """
    __tracebackhide__ = True
    global _background
    options = Options.checked(nprocs, nnodes, backend, timeout, guards=guards)
    if start_method not in START_METHODS:
        raise ValueError(MESSAGES["bad_start_method"].format(value=start_method))
    work = Call(_pickle_call(_call_with_rank, (fn, tuple(args)), {}))
    if join:
        _run(work, options, bool(daemon))
        return None
    with _launching():
        context = SpawnContext(_new_run(work, options, bool(daemon)))
        _background = (context._run, weakref.ref(context))
    return context
