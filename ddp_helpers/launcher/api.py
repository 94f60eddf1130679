"""launch, spawn and run_cell: run a function or a notebook cell on N ranks (every lesson)."""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
import time
import weakref

from ..procs import describe_exit
from . import client, torch_compat
from .failures import (
    MESSAGES as FAILURE_MESSAGES,
)
from .failures import (
    DistributedError,
    RankFailure,
    failure_of,
    failure_report,
    start_failure_error,
    timeout_report,
)
from .output import OutputRouter
from .plan import Options, place, rank_environment
from .run import Run
from .tracebacks import cell_sources, relabel_cells, render_stack

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = {
    "exit_quirk": (
        "[ddp_helpers] warning: rank {rank} {how} at exit, after it had returned its "
        "result; the result is kept. (gloo and DDP sometimes abort at interpreter exit.)"
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
}


class Results(tuple):
    """The return value of each rank, indexed by rank."""

    @property
    def rank0(self):
        return self[0]

    def __repr__(self) -> str:
        return f"Results({list(self)!r})"


_launch_lock = threading.Lock()  # one launch at a time in a kernel (its zygote is shared)
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


def _shared_env(options: Options, backend: str) -> tuple[dict, int]:
    """The environment every rank of a run shares, and its thread count."""
    env = dict(os.environ)
    threads = env.get("OMP_NUM_THREADS", "")
    threads = int(threads) if threads.isdigit() and int(threads) > 0 else 0
    # Simulated nodes share this machine's cores like any other ranks.
    threads = threads or max(1, _cpu_count() // options.nprocs)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MPLBACKEND"] = "Agg"  # the notebook's inline backend means nothing in a rank
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # see client.py
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


def _new_run(kind: str, payload, options: Options, extra: dict | None = None) -> Run:
    """Place the ranks, build their request, and start them (through this kernel's zygote)."""
    zygote = client.get()
    for line in zygote.unsaid:  # what a torch touchpoint's fallback loses, said once
        sys.stderr.write(line + "\n")
    zygote.unsaid = []
    placement = place(options, zygote.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    nprocs = options.nprocs
    if nprocs > 4 * _cpu_count():
        sys.stderr.write(MESSAGES["too_many_ranks"].format(nprocs=nprocs, cpus=_cpu_count()))
        sys.stderr.write("\n")
    if placement.notice:
        sys.stderr.write(placement.notice + "\n")
    ordered = options.ordered
    if ordered is None:
        ordered = os.environ.get("DDP_HELPERS_OUTPUT", "live") == "ordered"
    run_id = f"{os.getpid()}-{time.monotonic_ns()}"
    env, threads = _shared_env(options, placement.backend)
    # The rendezvous socket: bound to loopback and listening before any rank starts,
    # held until the run ends (rank 0 serves the store on it), so no port race.
    store_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    store_socket.bind(("127.0.0.1", 0))
    store_socket.listen(128)
    port = store_socket.getsockname()[1]
    async_errors = os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    req = {
        "op": "launch",
        "id": run_id,
        "kind": kind,
        "payload": payload,
        "nprocs": nprocs,
        "backend": placement.backend,
        "env": env,
        "rank_env": [
            rank_environment(options, placement, rank, "127.0.0.1", port, run_id, async_errors)
            for rank in range(nprocs)
        ],
        "threads": threads,
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
        "sources": cell_sources(),
        "master_port": port,
        **(extra or {}),
    }
    run = Run(zygote, req, nprocs, options.timeout, OutputRouter(nprocs, ordered))
    try:
        run.start(store_socket)
    finally:
        store_socket.close()
    return run


def _outcome(run: Run) -> Results:
    """The ranks' values, or the error that says which rank failed and why."""
    __tracebackhide__ = True
    if run.interrupted:
        stacks = [r for r in run.records if r.stack]
        if stacks:  # where each rank was when stop was pressed, above the KeyboardInterrupt
            parts = [FAILURE_MESSAGES["interrupted_where"]]
            parts += [f"rank {r.rank}:\n{render_stack(r.stack)}" for r in stacks]
            print("\n\n".join(parts), file=sys.stderr, flush=True)
        raise KeyboardInterrupt
    if run.start_failure is not None:
        f = run.start_failure
        raise start_failure_error(f["rank"], run.nprocs, f["error"], f["nproc_limit"])
    if run.launcher_died:
        client.shutdown()
        raise DistributedError(FAILURE_MESSAGES["launcher_died"], kind="launcher")
    records = run.records
    if run.timed_out:
        stacks = [
            RankFailure(
                rank=r.rank,
                kind="timeout",
                stack=render_stack(r.stack) or None,
                finished=r.has_result and not r.stack,
            )
            for r in records
        ]
        paragraph, report = timeout_report(run.timeout, stacks)
        failures = {f.rank: f for f in stacks if not f.finished}
        raise DistributedError(paragraph, kind="timeout", failures=failures, report=report)
    failures = [f for r in records if (f := failure_of(r, relabel_cells, render_stack))]
    if failures:
        peer_text = torch_compat.usable(run.zygote.compat, "peer_text")
        returned = [r.rank for r in records if r.has_result]
        paragraph, report, first = failure_report(failures, run.nprocs, returned, peer_text)
        raise DistributedError(
            paragraph,
            kind=first.kind,
            failures={f.rank: f for f in failures},
            rank=first.rank,
            report=report,
            returned_ranks=returned,
            original=_exception_of(records[first.rank].error),
        )
    for record in records:
        if record.exitcode:
            code = record.exitcode
            how = f"was {describe_exit(code)}" if code < 0 else f"exited with code {code}"
            sys.stderr.write(MESSAGES["exit_quirk"].format(rank=record.rank, how=how) + "\n")
    return Results(pickle.loads(r.result) for r in records)


def _exception_of(error: dict | None) -> BaseException | None:
    if error is None or error.get("exception") is None:
        return None
    try:
        return pickle.loads(error["exception"])
    except Exception:
        return None


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
    run.poll(until=time.monotonic() + 0.5)  # read what it has written; settle, if finished
    if not run.done:
        raise RuntimeError(MESSAGES["spawn_running"])
    _background = None
    try:
        _outcome(run)
        what = MESSAGES["spawn_ok"]
    except (DistributedError, KeyboardInterrupt) as exc:
        what = str(exc) or type(exc).__name__
    sys.stderr.write(MESSAGES["spawn_unjoined"].format(what=what) + "\n")


def _run(kind: str, payload, options: Options, extra: dict | None = None) -> Results:
    __tracebackhide__ = True
    if not _launch_lock.acquire(blocking=False):
        raise RuntimeError(MESSAGES["busy"])
    try:
        _settle_background()
        run = _new_run(kind, payload, options, extra)
        try:
            run.poll()
        finally:
            run.kill()  # only does something after an error inside the loop itself
        return _outcome(run)
    finally:
        _launch_lock.release()


def _pickle_call(fn, args, kwargs) -> bytes:
    from .pickling import dumps

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
):
    """Drop-in for torch.multiprocessing.spawn: fn(rank, *args) on nprocs ranks (lesson 02).

    `rank` is the global rank (RANK); with nnodes > 1 the ranks are spread over that many
    simulated machines, as `launch` does.
    """
    __tracebackhide__ = True
    global _background
    options = Options.checked(nprocs, nnodes, backend, timeout)
    payload = _pickle_call(_call_with_rank, (fn, tuple(args)), {})
    if join:
        _run("call", payload, options)
        return None
    if not _launch_lock.acquire(blocking=False):
        raise RuntimeError(MESSAGES["busy"])
    try:
        _settle_background()
        context = SpawnContext(_new_run("call", payload, options))
        _background = (context._run, weakref.ref(context))
    finally:
        _launch_lock.release()
    return context
