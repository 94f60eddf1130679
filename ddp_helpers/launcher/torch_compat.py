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

from .. import i18n
from ..i18n import messages

# torch releases the launcher is tested with: the lock's, and those `make compat` installs
# (docs/development.md, "torch versions"). Another release works, with a warning (peer_text).
KNOWN_GOOD = ("2.8.0", "2.12.1", "2.13.0", "2.15.0")

MESSAGES = messages(
    "launcher.torch_compat",
    {
        "fallback": "[ddp_helpers] warning: {what} is not usable ({why}); {lost}",
        "disabled": "switched off by DDP_HELPERS_DISABLE",
        "missing": "torch {version} has no such thing",
        "signature": "its arguments are ({found}) in torch {version}, not ({expected})",
        "untested": "torch {version} is not among the releases this was checked with ({known})",
        "no_effect": "applied in torch {version}, it changes nothing",
        "no_error": "torch {version} raises no error there",
        "other_text": "torch {version} says: {said}",
        # What a touchpoint is, where that is prose, and what its fallback loses.
        "peer_text.what": (
            "gloo's and c10d's error text ('Connection reset/closed by peer', 'distributed_c10d')"
        ),
        "load_device_text.what": (
            "torch.load's error text for a device this machine lacks ('deserialize object on')"
        ),
        "rendezvous_store.lost": (
            "torch creates the store itself on MASTER_PORT: it listens on every interface, and "
            "a MASTER_PORT the notebook sets is used as it is"
        ),
        "listen_fd.lost": (
            "torch creates the store itself on MASTER_PORT: it listens on every interface, and "
            "a MASTER_PORT the notebook sets is used as it is"
        ),
        "dynamo_preload.lost": "the first DDP(...) in every rank takes 1-2 s longer",
        "keep_groups.lost": (
            "a rank that frees a gloo group (destroy_process_group(), or the DDP model that "
            "holds it) after a backward can hang until the launch's timeout"
        ),
        "debug_level.lost": (
            "TORCH_DISTRIBUTED_DEBUG only takes effect if it was set before the first launch"
        ),
        "peer_text.lost": "the earliest failure is blamed, which may be a victim",
        "load_device_text.lost": (
            "lesson 04's load check shows torch's own error, not its hint, for a checkpoint "
            "loaded without map_location"
        ),
    },
)


@dataclass(frozen=True)
class Touchpoint:
    """One internal of torch the launcher uses: what (the code it names, or, where that is
    prose, MESSAGES[f"{name}.what"]), and what its fallback loses (MESSAGES[f"{name}.lost"])."""

    name: str
    code: str | None = None

    @property
    def what(self) -> str:
        return self.code if self.code is not None else MESSAGES[f"{self.name}.what"]

    @property
    def lost(self) -> str:
        return MESSAGES[f"{self.name}.lost"]


TOUCHPOINTS = {
    t.name: t
    for t in (
        # Rank 0 serves the process group's store on the socket the launcher bound to
        # 127.0.0.1 before any rank started: no port race, no store reachable from the
        # network, and a lesson's own MASTER_PORT=12355 never collides with another notebook.
        Touchpoint("rendezvous_store", "torch.distributed.rendezvous._create_c10d_store"),
        # The store takes over the launcher's listening socket (libuv store, torch >= 2.8).
        Touchpoint("listen_fd", "TCPStore(master_listen_fd=...)"),
        # DDP imports torch._dynamo when a model is wrapped; the launcher's helper imports
        # it once, while idle, so that no rank pays 1-2 s for it (warm_modules).
        Touchpoint("dynamo_preload", "torch._dynamo"),
        # Every process group a rank destroys stays referenced until the rank's os._exit,
        # so no gloo group is freed while Python runs: freeing one can deadlock gloo's
        # worker thread against the GIL (torch 2.13, under load; see keep_groups_until_exit).
        Touchpoint(
            "keep_groups", "torch.distributed.destroy_process_group, distributed_c10d._world.pg_map"
        ),
        # TORCH_DISTRIBUTED_DEBUG set in the notebook takes effect in the ranks (torch reads
        # it once, at import, in the launcher's helper).
        Touchpoint("debug_level", "torch.distributed.set_debug_level_from_env"),
        # Tells a rank that failed because a peer died (a victim) from the rank that caused
        # it, and a collective mismatch from other crashes.
        Touchpoint("peer_text"),
        # Lesson 04's load check tells a checkpoint loaded without map_location (its tensors
        # saved on a GPU this machine lacks) from the answer's other errors by torch's text.
        Touchpoint("load_device_text"),
    )
}

# Error text of gloo and c10d the blame relies on (touchpoint "peer_text").
PEER_GONE = "by peer"  # gloo: "Connection reset by peer", "Connection closed by peer"
C10D_FRAME = "distributed_c10d"  # in the stack of a rank that aborted inside a collective

# torch.load's error for a tensor saved on a device this machine lacks (touchpoint
# "load_device_text"): "Attempting to deserialize object on a CUDA device but ...".
MISSING_DEVICE = "deserialize object on"


def is_missing_device(exc: BaseException) -> bool:
    """True for torch.load's error on a tensor saved on a device this machine lacks."""
    return isinstance(exc, RuntimeError) and MISSING_DEVICE in str(exc)


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
    from ..versions import torch_release

    return torch_release()


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


def _check_keep_groups() -> str | None:
    """destroy_process_group() is there to wrap, and torch's registry of live groups, which
    the wrapper reads, holds them as keys (the wrapper keeps what it would free)."""
    import torch.distributed as dist

    if not callable(getattr(dist, "destroy_process_group", None)):
        return MESSAGES["missing"].format(version=_version())
    try:
        from torch.distributed import distributed_c10d as c10d

        registry = c10d._world.pg_map
        world = c10d.GroupMember
    except (ImportError, AttributeError):
        return MESSAGES["missing"].format(version=_version())
    if not isinstance(registry, dict) or not hasattr(world, "WORLD"):
        return MESSAGES["no_effect"].format(version=_version())
    return None


def _check_debug_level() -> str | None:
    """Set TORCH_DISTRIBUTED_DEBUG, read the level back, then put both back as they were."""
    import torch.distributed as dist

    if not callable(getattr(dist, "set_debug_level_from_env", None)):
        return MESSAGES["missing"].format(version=_version())
    before, level = os.environ.get("TORCH_DISTRIBUTED_DEBUG"), dist.get_debug_level()
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    try:
        dist.set_debug_level_from_env()
        if dist.get_debug_level() != dist.DebugLevel.DETAIL:
            return MESSAGES["no_effect"].format(version=_version())
    finally:
        if before is None:
            del os.environ["TORCH_DISTRIBUTED_DEBUG"]
        else:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = before
        dist.set_debug_level(level)
    return None


def _check_peer_text() -> str | None:
    if _version() not in KNOWN_GOOD:
        return MESSAGES["untested"].format(version=_version(), known=i18n.listed(KNOWN_GOOD))
    return None


def _check_load_device_text() -> str | None:
    """Load a saved tensor onto cuda:99 with torch told there is no CUDA, then no such GPU.

    Those are the two errors a checkpoint saved on a GPU gets where that GPU is missing
    (a machine without CUDA, or with fewer GPUs). torch is told, not asked: asking the
    CUDA driver here would keep every rank forked from this process from using CUDA.
    """
    import io

    import torch

    saved = io.BytesIO()
    torch.save(torch.zeros(1), saved)
    cuda = torch.cuda
    real = cuda.is_available, cuda.device_count
    try:
        for available in (False, True):
            cuda.is_available, cuda.device_count = (lambda a=available: a), (lambda: 0)
            saved.seek(0)
            try:
                torch.load(saved, map_location="cuda:99")
            except Exception as exc:  # noqa: BLE001 - whatever it raises is what is checked
                if not is_missing_device(exc):
                    said = f"{type(exc).__name__}: {exc}"
                    return MESSAGES["other_text"].format(version=_version(), said=said)
            else:
                return MESSAGES["no_error"].format(version=_version())
    finally:
        cuda.is_available, cuda.device_count = real
    return None


_CHECKS = {
    "rendezvous_store": _check_rendezvous_store,
    "listen_fd": _check_listen_fd,
    "dynamo_preload": _check_dynamo_preload,
    "keep_groups": _check_keep_groups,
    "debug_level": _check_debug_level,
    "peer_text": _check_peer_text,
    "load_device_text": _check_load_device_text,
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


def warm_modules(results: dict[str, str | None]) -> tuple[str, ...]:
    """What the zygote imports once it is idle, so that no rank imports it (dynamo_preload).

    DDP imports torch._dynamo when a model is wrapped: 1-2 s in each rank that does it.
    """
    if not usable(results, "dynamo_preload"):
        return ()
    return ("torch._dynamo", "torch.nn.parallel.distributed")


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


# Every process group this rank destroyed: referenced until os._exit, never freed.
KEPT_GROUPS: list = []


def keep_groups_until_exit() -> None:
    """Make certain no gloo process group is freed while the rank's Python runs.

    Freeing a gloo group can deadlock in torch 2.13 (seen under load, with gdb): every
    backward() stashes a Python object in thread-local state (torch.autograd.graph.
    _engine_run_backward: `torch._C._stash_obj_in_tls("context", ...)`), each gloo work
    launched meanwhile (DDP's all-reduces) captures it, and gloo's worker thread frees a
    finished work, which then needs the GIL, a moment after the work completes. When the
    main thread frees the group first, `~ProcessGroupGloo` joins that worker while holding
    the GIL. The group is freed when its last reference goes: in destroy_process_group(),
    which clears torch's registry of groups, or later with the DDP model that holds it. So
    destroy_process_group() first puts every group it is about to forget in KEPT_GROUPS:
    torch still shuts them down and forgets them, but their destructors never run, and a
    rank ends with os._exit, which frees the process without running any. A group never
    destroyed stays in torch's registry until then too. Nothing else changes: no sleep, no
    timing, no setting for the rank's whole life.
    """
    import functools

    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    real_destroy = dist.destroy_process_group

    @functools.wraps(real_destroy)
    def destroy_process_group(group=None):
        if group is None or group is c10d.GroupMember.WORLD:
            KEPT_GROUPS.extend(c10d._world.pg_map)  # all of them go
        elif group in c10d._world.pg_map:
            KEPT_GROUPS.append(group)
        return real_destroy(group)

    dist.destroy_process_group = destroy_process_group


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
    if usable(results, "keep_groups"):
        keep_groups_until_exit()
    if usable(results, "debug_level"):
        debug_level_from_environment()
