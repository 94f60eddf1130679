"""Every place the launcher relies on torch's internals or its error text, checked in one place.

Raising the torch pin is the biggest risk this package faces. Each touchpoint below has a
self-check (run once, when the launcher's helper process starts), and a fallback on public
APIs that still launches, with a one-line warning saying what is lost. A touchpoint can
also be switched off by hand: DDP_HELPERS_DISABLE=rendezvous_store,dynamo_preload.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# torch releases the launcher is tested with: the lock's, and those `make compat` installs
# (docs/development.md, "torch versions"). Another release works, with a warning (peer_text).
KNOWN_GOOD = ("2.8.0", "2.13.0", "2.15.0")

MESSAGES = {
    "fallback": "[ddp_helpers] warning: {what} is not usable ({why}); {lost}",
    "disabled": "switched off by DDP_HELPERS_DISABLE",
    "missing": "torch {version} has no such thing",
    "signature": "its arguments are ({found}) in torch {version}, not ({expected})",
    "untested": "torch {version} is not among the releases this was checked with ({known})",
}


@dataclass(frozen=True)
class Touchpoint:
    """One internal of torch the launcher uses: what, why, and what its fallback loses."""

    name: str
    what: str
    purpose: str
    lost: str


TOUCHPOINTS = {
    t.name: t
    for t in (
        Touchpoint(
            "rendezvous_store",
            "torch.distributed.rendezvous._create_c10d_store",
            "rank 0 serves the process group's store on the socket the launcher bound to "
            "127.0.0.1 before any rank started: no port race, no store reachable from the "
            "network, and a lesson's own MASTER_PORT=12355 never collides with another notebook",
            "torch creates the store itself on MASTER_PORT: it listens on every interface, and "
            "a MASTER_PORT the notebook sets is used as it is",
        ),
        Touchpoint(
            "listen_fd",
            "TCPStore(master_listen_fd=...)",
            "the store takes over the launcher's listening socket (libuv store, torch >= 2.8)",
            "torch creates the store itself on MASTER_PORT: it listens on every interface, and "
            "a MASTER_PORT the notebook sets is used as it is",
        ),
        Touchpoint(
            "dynamo_preload",
            "torch._dynamo",
            "DDP imports it when a model is wrapped; the launcher's helper imports it once, "
            "while idle, so that no rank pays 1-2 s for it",
            "the first DDP(...) in every rank takes 1-2 s longer",
        ),
        Touchpoint(
            "teardown_pause",
            "torch.distributed.destroy_process_group",
            "a short GIL switch interval and a few ms with the GIL let go before a gloo group "
            "is freed (in destroy_process_group() or with a DDP model) avoid a deadlock "
            "between gloo's worker thread and the main thread (torch 2.13, under load)",
            "a rank that frees a DDP model right after destroy_process_group() can hang until "
            "the launch's timeout",
        ),
        Touchpoint(
            "debug_level",
            "torch.distributed.set_debug_level_from_env",
            "TORCH_DISTRIBUTED_DEBUG set in the notebook takes effect in the ranks (torch reads "
            "it once, at import, in the launcher's helper)",
            "TORCH_DISTRIBUTED_DEBUG only takes effect if it was set before the first launch",
        ),
        Touchpoint(
            "peer_text",
            "gloo's and c10d's error text ('Connection reset/closed by peer', 'distributed_c10d')",
            "tells a rank that failed because a peer died (a victim) from the rank that caused "
            "it, and a collective mismatch from other crashes",
            "the earliest failure is blamed, which may be a victim",
        ),
    )
}

# Error text of gloo and c10d the blame relies on (touchpoint "peer_text").
PEER_GONE = "by peer"  # gloo: "Connection reset by peer", "Connection closed by peer"
C10D_FRAME = "distributed_c10d"  # in the stack of a rank that aborted inside a collective

# Lines torch prints on a rank's stdout that say nothing to a learner: the launcher drops them.
# torch 2.8's gloo, at every init_process_group: "[Gloo] Rank 0 is connected to 1 peer ranks.
# Expected number of connected peer ranks is : 1" (2.13 prints nothing).
NOISE = (
    re.compile(
        r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
        r"Expected number of connected peer ranks is : \d+"
    ),
)


def is_noise(line: str) -> bool:
    """True for a line torch prints that the cell does not show (see NOISE)."""
    return any(pattern.fullmatch(line) for pattern in NOISE)


def _disabled() -> set[str]:
    return {n.strip() for n in os.environ.get("DDP_HELPERS_DISABLE", "").split(",") if n.strip()}


def _version() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


def _check_rendezvous_store() -> str | None:
    import importlib
    import inspect

    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    fn = getattr(rendezvous, "_create_c10d_store", None)
    if not callable(fn):
        return MESSAGES["missing"].format(version=_version())
    expected = ["hostname", "port", "rank", "world_size", "timeout", "use_libuv"]
    found = list(inspect.signature(fn).parameters)
    if found[: len(expected)] != expected:
        return MESSAGES["signature"].format(
            found=", ".join(found), expected=", ".join(expected), version=_version()
        )
    return None


def _check_listen_fd() -> str | None:
    from torch.distributed import TCPStore

    if "master_listen_fd" not in (TCPStore.__init__.__doc__ or ""):
        return MESSAGES["missing"].format(version=_version())
    return None


def _check_dynamo_preload() -> str | None:
    import importlib.util

    if importlib.util.find_spec("torch._dynamo") is None:
        return MESSAGES["missing"].format(version=_version())
    return None


def _check_teardown_pause() -> str | None:
    import torch.distributed as dist

    if not callable(getattr(dist, "destroy_process_group", None)):
        return MESSAGES["missing"].format(version=_version())
    return None


def _check_debug_level() -> str | None:
    import torch.distributed as dist

    if not callable(getattr(dist, "set_debug_level_from_env", None)):
        return MESSAGES["missing"].format(version=_version())
    return None


def _check_peer_text() -> str | None:
    if _version() not in KNOWN_GOOD:
        return MESSAGES["untested"].format(version=_version(), known=", ".join(KNOWN_GOOD))
    return None


_CHECKS = {
    "rendezvous_store": _check_rendezvous_store,
    "listen_fd": _check_listen_fd,
    "dynamo_preload": _check_dynamo_preload,
    "teardown_pause": _check_teardown_pause,
    "debug_level": _check_debug_level,
    "peer_text": _check_peer_text,
}


def check() -> dict[str, str | None]:
    """Run every self-check (torch imported): touchpoint -> None if usable, else why not."""
    disabled = _disabled()
    results = {}
    for name, fn in _CHECKS.items():
        if name in disabled:
            results[name] = MESSAGES["disabled"]
            continue
        try:
            results[name] = fn()
        except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check
            results[name] = f"{type(exc).__name__}: {exc}"
    return results


def warnings(results: dict[str, str | None]) -> list[str]:
    """One line per touchpoint that is not usable, saying what is lost."""
    return [
        MESSAGES["fallback"].format(what=TOUCHPOINTS[n].what, why=why, lost=TOUCHPOINTS[n].lost)
        for n, why in results.items()
        if why is not None
    ]


def usable(results: dict[str, str | None], name: str) -> bool:
    return results.get(name) is None


# ---------------------------------------------------------------- used in a rank


def own_the_rendezvous(listen_fd: int | None, port: int, world_size: int) -> None:
    """Point every single-machine rendezvous at the launcher's own loopback socket.

    The launcher bound 127.0.0.1:port and listens on it before any rank starts, so the
    ranks never race to bind, never collide with another notebook (even when the lesson
    sets MASTER_PORT=12355 itself) and the store is never reachable from the network.
    Rank 0 serves the store on that socket; a MASTER_ADDR that is not loopback (a real
    multi-node run) is left alone.
    """
    import importlib

    from torch.distributed import TCPStore

    # (`import torch.distributed.rendezvous as m` gives the function of that name.)
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    original = rendezvous._create_c10d_store

    def create_store(hostname, port_, rank, world_size_, timeout, use_libuv=True):
        if hostname not in _LOOPBACK or world_size_ != world_size:
            return original(hostname, port_, rank, world_size_, timeout, use_libuv)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        if rank == 0 and listen_fd is not None:
            return TCPStore(
                "127.0.0.1",
                port,
                world_size,
                is_master=True,
                timeout=timeout,
                wait_for_workers=False,
                multi_tenant=True,
                use_libuv=use_libuv,
                master_listen_fd=os.dup(listen_fd),  # the store closes what it is given
            )
        return TCPStore(
            "127.0.0.1", port, world_size, is_master=False, timeout=timeout, use_libuv=use_libuv
        )

    rendezvous._create_c10d_store = create_store


_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}


# How long the main thread lets go of the GIL before a gloo process group can be freed.
GIL_HANDOVER_S = 0.005


def pause_after_destroy() -> None:
    """Work around a torch 2.13 hang when a gloo process group is freed (seen under load).

    Every backward() stashes a Python object in thread-local state, and each gloo work
    launched after it captures that state. gloo's worker thread frees a finished work,
    which needs the GIL, a moment after the work completes. If the main thread frees the
    process group first, it joins that worker while holding the GIL: a deadlock (seen with
    gdb: `~ProcessGroupGloo` joining in the main thread, the worker in `~AsyncWork`
    waiting for the GIL). The group is freed in destroy_process_group() or, when a DDP
    model still holds it, when that model is freed. So the main thread hands over the GIL
    (sleeps a few ms, with a short switch interval) before destroy_process_group() and
    before a DDP model is finalized: the worker finishes first. The pause after destroy
    stays for gloo's threads that let go of the group itself.
    """
    import functools
    import sys
    import time

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    sys.setswitchinterval(1e-4)
    real_destroy = dist.destroy_process_group

    @functools.wraps(real_destroy)
    def destroy_process_group(*args, **kwargs):
        time.sleep(GIL_HANDOVER_S)  # gloo's workers drop their finished works first
        result = real_destroy(*args, **kwargs)
        time.sleep(0.001)  # releases the GIL: gloo's threads drop their last references
        return result

    dist.destroy_process_group = destroy_process_group
    real_del = getattr(DistributedDataParallel, "__del__", None)

    def __del__(self):  # noqa: N807 - runs before the model's reducer and group are freed
        time.sleep(GIL_HANDOVER_S)
        if real_del is not None:
            real_del(self)

    DistributedDataParallel.__del__ = __del__


def debug_level_from_environment() -> None:
    """Honour TORCH_DISTRIBUTED_DEBUG as a fresh process would (torch reads it at import)."""
    import torch.distributed as dist

    dist.set_debug_level_from_env()


def prepare_rank(results: dict[str, str | None], listen_fd, port: int, world_size: int) -> None:
    """In a new rank: apply every usable touchpoint, or its fallback."""
    if usable(results, "rendezvous_store") and usable(results, "listen_fd"):
        own_the_rendezvous(listen_fd, port, world_size)
    elif listen_fd is not None:
        os.close(listen_fd)  # free the port: torch's own store binds MASTER_PORT itself
    if usable(results, "teardown_pause"):
        pause_after_destroy()
    if usable(results, "debug_level"):
        debug_level_from_environment()
