"""The launcher's messages, typed: the launch request and what kernel, zygote and ranks say.

wire.py carries them (pickled); `expect` checks one where it is read, so that a message of
another version or shape is a clear error, not a KeyError deep inside the launcher. The
kernel unpickles these classes without torch: this module imports nothing heavy.

    kernel -> zygote   LaunchRequest, Signal, WarmUp
    zygote -> kernel   Ready or Broken (its hello), Started, StartFailed, Exited, Refused
    zygote -> a rank   BecomeRank (in memory: the rank is forked with it)
    rank -> kernel     RankResult or RankError, on the rank's control pipe
"""

from __future__ import annotations

import functools
import signal
import types
import typing
from dataclasses import dataclass, fields, is_dataclass

from ..i18n import messages
from ..torch_compat import Reason

MESSAGES = messages(
    "launcher.protocol",
    {
        "unexpected": "malformed message from {sender}: expected {expected}, got {got}",
        "missing": "malformed {kind} from {sender}: it has no field {field!r}",
        "wrong_type": "malformed {kind} from {sender}: {field} is {got}, not {expected}",
    },
)


class ProtocolError(ValueError):
    """A message that is not what its reader expects (another version, or a bug)."""


# ---------------------------------------------------------------- kernel -> zygote


@dataclass(frozen=True)
class Call:
    """Work for every rank: fn(*args, **kwargs), pickled by value (launch, spawn)."""

    pickled: bytes


@dataclass(frozen=True)
class Cell:
    """Work for every rank: a notebook cell's source (run_cell, %%ddp)."""

    source: str
    filename: str  # the name IPython gave the cell, so tracebacks name it
    namespace: dict[str, bytes]  # the notebook variables it uses, each pickled


@dataclass(frozen=True)
class LaunchRequest:
    """One launch: the work, and everything a rank forked from the zygote needs to run it."""

    id: str
    work: Call | Cell
    nprocs: int
    backend: str
    env: dict[str, str]  # every rank's environment (plan.shared_environment) ...
    rank_env: list[dict[str, str]]  # ... and, by rank, what torchrun adds (plan.py)
    threads: int  # torch's intra-op threads in each rank
    cwd: str
    sys_path: list[str]
    sources: dict[str, list[str]]  # the notebook's cells, for the ranks' tracebacks
    master_port: int  # the port of the listening socket rank 0 is given (0: the zygote binds one)
    compat: dict[str, Reason | None]  # the zygote's torch self-checks (torch_compat.check)
    daemon: bool = False  # spawn(daemon=True): ranks are daemonic, as multiprocessing's
    # The launcher's guards (plan.Options.guards): groups kept, os._exit, rank 0 last.
    guards: bool = True


@dataclass(frozen=True)
class Signal:
    """Send a signal to every rank of a launch (to each rank's process group if `group`)."""

    id: str
    signal: int
    group: bool = True


@dataclass(frozen=True)
class MoreFds:
    """Framing, any direction: sent ahead of a message with more descriptors than one
    message may carry, carrying some of them; wire.recv returns them with what follows."""


@dataclass(frozen=True)
class WarmUp:
    """This kernel's ranks will build DDP models: import what DDP imports once idle (as WARM)."""


# ---------------------------------------------------------------- zygote -> kernel


@dataclass(frozen=True)
class Ready:
    """The zygote's hello: torch imported, GPUs counted, torch's internals checked."""

    gpus: int
    compat: dict[str, Reason | None]


@dataclass(frozen=True)
class Broken:
    """The zygote's hello when it could not start (torch missing, an import failed)."""

    error: str


@dataclass(frozen=True)
class Started:
    """Every rank of the launch exists: its timeout counts from now."""

    id: str


@dataclass(frozen=True)
class StartFailed:
    """Rank `rank` could not be forked; the ranks before it were stopped and reaped."""

    id: str
    rank: int
    error: str
    nproc_limit: int | None  # RLIMIT_NPROC, when one is set


@dataclass(frozen=True)
class Exited:
    """A rank of the launch has exited: its raw wait status."""

    id: str
    rank: int
    status: int


@dataclass(frozen=True)
class Refused:
    """The zygote could not read a message from the kernel (another version of this package)."""

    error: str


# ---------------------------------------------------------------- zygote -> a new rank


@dataclass(frozen=True)
class BecomeRank:
    """What a process the zygote forks is to become: which rank of which launch."""

    request: LaunchRequest
    rank: int
    zygote: int  # the zygote's pid as the rank sees it (it may be in a PID namespace of its own)


# ---------------------------------------------------------------- rank -> kernel


@dataclass(frozen=True)
class RankResult:
    """A rank's return value, pickled with its tensors moved to the CPU."""

    value: bytes


@dataclass(frozen=True)
class RankError:
    """A rank's exception: what the notebook shows, and the exception itself if it pickles."""

    type: str  # its class's qualified name
    module: str
    message: str
    traceback: str
    time: float  # when it was raised (CLOCK_MONOTONIC, the same in every process)
    exception: bytes | None = None


# The zygote to a launch's rank 0: every other rank of the launch has exited (rank 0, which
# serves the run's store, leaves last: rank.py's _leave_last). Blocked in every rank.
RELEASE = signal.SIGUSR2

# A rank to its zygote: the rank imported what the zygote's warm-up imports (it built a DDP
# model, and DDP imports torch._dynamo: 1-2 s). The zygote then imports it once it is idle,
# so that the next launches' ranks do not; so does a WarmUp from the kernel. Until one of
# the two, a zygote stays without it (a lesson that builds no DDP model never pays for it).
WARM = signal.SIGUSR1

T = typing.TypeVar("T")


def expect(message, *kinds: type[T], sender: str) -> T:
    """`message` if it is one of `kinds` with each field of its type; else a ProtocolError."""
    if not isinstance(message, kinds):
        expected = " or ".join(kind.__name__ for kind in kinds)
        raise ProtocolError(
            MESSAGES["unexpected"].format(
                sender=sender, expected=expected, got=type(message).__name__
            )
        )
    _check_fields(message, sender)
    return message


def _check_fields(message, sender: str) -> None:
    kind = type(message).__name__
    for field in fields(message):
        try:
            value = getattr(message, field.name)
        except AttributeError:
            raise ProtocolError(
                MESSAGES["missing"].format(kind=kind, sender=sender, field=field.name)
            ) from None
        allowed = _field_types(type(message))[field.name]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise ProtocolError(
                MESSAGES["wrong_type"].format(
                    kind=kind,
                    sender=sender,
                    field=field.name,
                    got=type(value).__name__,
                    expected=" or ".join(t.__name__ for t in allowed),
                )
            )
        if is_dataclass(value):
            _check_fields(value, sender)


@functools.cache
def _field_types(cls: type) -> dict[str, tuple[type, ...]]:
    """Each field's annotation as the classes isinstance accepts (a shallow check)."""
    return {name: _classes(hint) for name, hint in typing.get_type_hints(cls).items()}


def _classes(hint) -> tuple[type, ...]:
    if hint is None or hint is type(None):
        return (type(None),)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(c for arg in typing.get_args(hint) for c in _classes(arg))
    if hint is float:  # an int is a number of seconds too
        return (float, int)
    return (typing.get_origin(hint) or hint,)
