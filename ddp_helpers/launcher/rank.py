"""What runs inside one rank process: set up the rank, run the user's code, report back."""

from __future__ import annotations

import faulthandler
import io
import linecache
import os
import pickle
import signal
import sys
import time
import traceback
import types

from .. import torch_compat
from ..i18n import messages
from ..procs import die_with_parent, set_process_name
from .pickling import dumps
from .protocol import (
    RELEASE,
    WARM,
    BecomeRank,
    Call,
    Cell,
    LaunchRequest,
    RankError,
    RankResult,
    expect,
)
from .tracebacks import is_internal
from .wire import write_message

MESSAGES = messages(
    "launcher.rank",
    {
        "unsendable": (
            "the return value ({type}) could not be sent back to the notebook: {error}. "
            "Return plain data (numbers, lists, dicts, tensors)."
        ),
    },
)


def _user_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    # Drop the launcher's own frames at the top so the traceback starts in the user's code.
    while tb is not None and is_internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    exc.__traceback__ = tb
    return "".join(traceback.format_exception(exc))


def _error_message(exc: BaseException, message: str | None = None) -> RankError:
    try:
        exc_bytes = pickle.dumps(exc)
        pickle.loads(exc_bytes)
    except Exception:
        exc_bytes = None
    return RankError(
        type=type(exc).__qualname__,
        module=type(exc).__module__,
        message=str(exc) if message is None else message,
        traceback=_user_traceback(exc),
        time=time.monotonic(),
        exception=exc_bytes,
    )


def _setup_process(task: BecomeRank, fds: tuple[int, ...]) -> tuple:
    req, rank = task.request, task.rank
    out_fd, err_fd, ctl_fd, stk_fd, *store_fd = fds
    die_with_parent(task.zygote)
    set_process_name(f"ddp-rank-{rank}")
    try:
        os.setpgid(0, 0)  # own group, so the launcher can stop this rank's own children too
    except OSError:
        pass
    _reset_signals()
    _redirect_output(out_fd, err_fd)
    stack_file = open(stk_fd, "w", closefd=True)  # noqa: SIM115

    # A fatal signal (segfault, abort) or the launcher's SIGUSR1 at a timeout writes every
    # thread's Python stack to this pipe, even while the rank is stuck inside C++.
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    _take_the_kernels_place(req, rank)
    torch_compat.prepare_rank(
        req.compat,
        torch_compat.RankSetup(store_fd[0] if store_fd else None, req.master_port, req.nprocs),
        req.guards,
    )
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    return ctl_fd, stack_file, main


def _reset_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    # Interrupts are the kernel's to handle: it asks each rank for its stack, then stops it.
    # VS Code's stop button also sends SIGINT to every process under the kernel; a rank that
    # died of it would take its stack with it. Its own children inherit the ignoring.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass


def _redirect_output(out_fd: int, err_fd: int) -> None:
    """stdin from /dev/null; stdout and stderr, of Python and of C alike, to the pipes."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)

    def text_stream(fd):
        return io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
            write_through=True,
        )

    sys.stdout = sys.__stdout__ = text_stream(1)
    sys.stderr = sys.__stderr__ = text_stream(2)


def _take_the_kernels_place(req: LaunchRequest, rank: int) -> None:
    """The kernel's environment, folder, import path and cells, as the rank's own."""
    os.environ.clear()
    os.environ.update(req.env)
    os.environ.update(req.rank_env[rank])  # what torchrun gives this rank (plan.py)
    try:
        os.chdir(req.cwd)
    except OSError:
        pass
    sys.path[:] = req.sys_path
    # As in an interactive interpreter: a script's parse_args() run in a rank sees no
    # arguments (the kernel's own, `-f kernel.json`, would make it fail).
    sys.argv[:] = [""]
    # The kernel's notebook cells exist only in its memory: copy them so that tracebacks
    # from functions defined in cells show their source lines.
    for name, lines in req.sources.items():
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    if req.daemon:  # spawn(daemon=True): multiprocessing then refuses it children, as torch's
        import multiprocessing

        multiprocessing.current_process().daemon = True


def run_rank(task: BecomeRank, fds: tuple[int, ...]) -> int:
    """Run one rank to completion in this (forked) process, then exit with os._exit.

    Only a launch without guards returns: its exit code, for the caller to end the process
    as a script ends, through the interpreter's own exit (see _exit_unguarded)."""
    code = 70
    try:
        task = expect(task, BecomeRank, sender="the zygote")
        ctl_fd, stack_file, main = _setup_process(task, fds)
    except BaseException as exc:  # the launcher's own fault: still say what happened
        try:
            write_message(fds[2], _error_message(exc))
        finally:
            os._exit(code)
    cold = [
        name for name in torch_compat.warm_modules(task.request.compat) if name not in sys.modules
    ]
    guarded = task.request.guards
    try:
        code = _run_user_code(task.request, ctl_fd, main)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        _ask_for_the_warm_up(task.zygote, cold)
        if guarded and task.rank == 0 and task.request.nprocs > 1:
            _leave_last()
        if guarded:
            os._exit(code)
    os.close(ctl_fd)  # the result (or error) is out: the run loop judges it before the exit
    return code


def _ask_for_the_warm_up(zygote: int, cold: list[str]) -> None:
    """This rank imported what its zygote lacks (it built a DDP model): WARM tells the
    zygote, which imports it once idle, so that the next launches' ranks need not."""
    # Its parent, still: a zygote that is gone may have left its pid to another process.
    if any(name in sys.modules for name in cold) and os.getppid() == zygote:
        try:
            os.kill(zygote, WARM)
        except OSError:  # the zygote is gone: nothing to warm
            pass


def _leave_last() -> None:
    """Rank 0 serves the run's store: it exits only once every other rank has.

    A rank that returns goes at once (os._exit). Were rank 0 first, a peer still reading
    the store (in torch's barrier after init_process_group, TORCH_DIST_INIT_BARRIER, or
    in destroy_process_group) would lose it: "Broken pipe". The zygote, which sees its
    ranks exit, sends RELEASE when rank 0 is the last one left; it is blocked in every rank,
    so it waits here for nobody else. A launch stops its ranks at its timeout, or after a
    failure, as ever: this wait never outlasts the run.
    """
    signal.sigwait({RELEASE})


def _run_user_code(req: LaunchRequest, ctl_fd: int, main: types.ModuleType) -> int:
    import torch

    torch.set_num_threads(req.threads)
    if req.backend == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # its node's GPU of that number

    value = None
    try:
        if isinstance(req.work, Call):
            fn, args, kwargs = pickle.loads(req.work.pickled)
            value = fn(*args, **kwargs)
        else:
            _run_cell(req.work, main)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            write_message(ctl_fd, _error_message(exc))
            return 1
    except BaseException as exc:
        write_message(ctl_fd, _error_message(exc))
        return 1

    try:
        payload = dumps(value, cpu_tensors=True)
    except Exception as exc:
        message = MESSAGES["unsendable"].format(type=type(value).__name__, error=exc)
        write_message(ctl_fd, _error_message(exc, message))
        return 1
    write_message(ctl_fd, RankResult(payload))
    # With guards (the default) the caller ends the process with os._exit: no interpreter
    # teardown runs, so gloo and DDP objects are never destroyed at exit, which is where
    # their "terminate called without an active exception" abort comes from. Without, the
    # interpreter's exit runs after this, with the result already sent.
    return 0


def _run_cell(cell: Cell, main: types.ModuleType) -> None:
    namespace = main.__dict__
    for name, blob in cell.namespace.items():
        try:
            namespace[name] = pickle.loads(blob)
        except Exception:  # a name the cell may not even use: leave it out
            pass
    exec(compile(cell.source, cell.filename, "exec"), namespace)
