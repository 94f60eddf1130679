"""Every place the package relies on torch's internals or its error text: one object each.

Raising the torch pin is the biggest risk this package faces. Each `Touchpoint` below owns
its self-check (run once, when the launcher's helper process starts), what it does in a new
rank when usable (`apply`), what it does instead on public APIs when not (`fallback`), and
the line saying what that loses. A self-check answers None or a `Reason` (a kind and its
fields), rendered in the notebook's language only when a warning is shown. A touchpoint
can also be switched off by hand: DDP_HELPERS_DISABLE=rendezvous_store,dynamo_preload.

A touchpoint that one lesson's check relies on lives beside that check, built from the same
class (lesson 04's `torch.load` text: exercises/lesson04/load.py, LOAD_DEVICE_TEXT).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from . import i18n
from .i18n import Messages, messages
from .versions import torch_release

# torch releases the launcher is tested with: the lock's, and those `make compat` installs
# (docs/development.md, "torch versions"). Another release works, with a warning (peer_text).
KNOWN_GOOD = ("2.8.0", "2.12.1", "2.13.0", "2.15.0")

MESSAGES = messages(
    "torch_compat",
    {
        "fallback": "[ddp_helpers] warning: {what} is not usable ({why}); {lost}",
        # Why a touchpoint is not usable: a Reason's kind and its fields.
        "disabled": "switched off by DDP_HELPERS_DISABLE",
        "missing": "torch {version} has no such thing",
        "signature": "its arguments are ({found}) in torch {version}, not ({expected})",
        "untested": "torch {version} is not among the releases this was checked with ({known})",
        "no_effect": "applied in torch {version}, it changes nothing",
        "no_error": "torch {version} raises no error there",
        "other_text": "torch {version} says: {said}",
        "broken": "its self-check failed in torch {version}: {error}",
        # What a touchpoint is, where that is prose, and what its fallback loses.
        "peer_text.what": (
            "gloo's and c10d's error text ('Connection reset/closed by peer', 'distributed_c10d')"
        ),
        "rendezvous_store.lost": (
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
    },
)


def torch_version() -> str:
    return torch_release()


@dataclass(frozen=True)
class Reason:
    """Why a touchpoint is not usable: a kind (a key of MESSAGES) and its fields.

    Made in the launcher's helper process and sent to the kernel, it is worded there, in the
    notebook's language, and only when a warning is shown."""

    kind: str
    fields: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, kind: str, **fields: str) -> Reason:
        return cls(kind, tuple(sorted(fields.items())))

    def get(self, field: str) -> str | None:
        return dict(self.fields).get(field)

    def __str__(self) -> str:
        return MESSAGES[self.kind].format(version=torch_version(), **dict(self.fields))


@dataclass(frozen=True)
class RankSetup:
    """What a new rank's touchpoints are applied with: the socket the launcher bound for
    rank 0's store (or None), its port, and the launch's world size."""

    listen_fd: int | None
    port: int
    world_size: int


class Touchpoint:
    """One internal of torch, or one text of its errors, that the package relies on.

    `code`: the code it names (None where it is a text: then `texts[f"{name}.what"]` says
    what). `texts`: the catalog holding `f"{name}.lost"`, what its fallback loses."""

    name: str = ""
    code: str | None = None
    texts: Messages = MESSAGES
    # One of the launcher's guards (docs/launcher.md, "Guards"): a launch with guards=False
    # neither applies it nor its fallback, so its ranks run as under torchrun.
    guard: bool = False

    @property
    def what(self) -> str:
        return self.code if self.code is not None else self.texts[f"{self.name}.what"]

    @property
    def lost(self) -> str:
        return self.texts[f"{self.name}.lost"]

    def check(self) -> Reason | None:
        """None when torch has it as this package uses it; else why not (torch imported)."""
        raise NotImplementedError

    def apply(self, rank: RankSetup) -> None:
        """In a new rank, when usable."""

    def fallback(self, rank: RankSetup) -> None:
        """In a new rank, when not usable."""

    def warning(self, why: Reason) -> str:
        # `what` is code or Japanese text: the space the template keeps for code goes
        return i18n.tightened(MESSAGES["fallback"].format(what=self.what, why=why, lost=self.lost))


# ---------------------------------------------------------------- the touchpoints


class RendezvousStore(Touchpoint):
    """Rank 0 serves the process group's store on the socket the launcher bound to 127.0.0.1
    before any rank started: no port race, no store reachable from the network, and a
    lesson's own MASTER_PORT=12355 never collides with another notebook. Two internals:
    torch's store factory, which every single-machine rendezvous calls, and the libuv
    store's taking over a listening socket (torch >= 2.8)."""

    name = "rendezvous_store"
    code = "torch.distributed.rendezvous._create_c10d_store, TCPStore(master_listen_fd=...)"
    ARGUMENTS = ("hostname", "port", "rank", "world_size", "timeout", "use_libuv")
    LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", ""})

    def check(self) -> Reason | None:
        from torch.distributed import TCPStore

        rendezvous = importlib.import_module("torch.distributed.rendezvous")
        fn = getattr(rendezvous, "_create_c10d_store", None)
        if not callable(fn) or "master_listen_fd" not in (TCPStore.__init__.__doc__ or ""):
            return Reason.of("missing")
        found = tuple(inspect.signature(fn).parameters)
        if found[: len(self.ARGUMENTS)] != self.ARGUMENTS:
            return Reason.of(
                "signature", found=", ".join(found), expected=", ".join(self.ARGUMENTS)
            )
        return None

    def apply(self, rank: RankSetup) -> None:
        """Point every single-machine rendezvous at the launcher's own loopback socket.

        Rank 0 serves the store on that socket; a MASTER_ADDR that is not loopback (a real
        multi-node run) is left alone."""
        from torch.distributed import TCPStore

        # (`import torch.distributed.rendezvous as m` gives the function of that name.)
        rendezvous = importlib.import_module("torch.distributed.rendezvous")
        original = rendezvous._create_c10d_store
        loopback, port, world_size = self.LOOPBACK, rank.port, rank.world_size

        def create_store(hostname, port_, rank_, world_size_, timeout, use_libuv=True):
            if hostname not in loopback or world_size_ != world_size:
                return original(hostname, port_, rank_, world_size_, timeout, use_libuv)
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
            if rank_ == 0 and rank.listen_fd is not None:
                return TCPStore(
                    "127.0.0.1",
                    port,
                    world_size,
                    is_master=True,
                    timeout=timeout,
                    wait_for_workers=False,
                    multi_tenant=True,
                    use_libuv=use_libuv,
                    master_listen_fd=os.dup(rank.listen_fd),  # the store closes what it is given
                )
            return TCPStore(
                "127.0.0.1", port, world_size, is_master=False, timeout=timeout, use_libuv=use_libuv
            )

        rendezvous._create_c10d_store = create_store

    def fallback(self, rank: RankSetup) -> None:
        if rank.listen_fd is not None:
            os.close(rank.listen_fd)  # free the port: torch's own store binds MASTER_PORT itself


class DynamoPreload(Touchpoint):
    """DDP imports torch._dynamo when a model is wrapped: 1-2 s in each rank that does it.
    The launcher's helper imports `modules` once, while idle, so that no rank pays for it."""

    name = "dynamo_preload"
    code = "torch._dynamo"
    modules = ("torch._dynamo", "torch.nn.parallel.distributed")

    def check(self) -> Reason | None:
        return Reason.of("missing") if importlib.util.find_spec("torch._dynamo") is None else None


# Every process group a rank destroyed: referenced until os._exit, never freed.
KEPT_GROUPS: list = []


class KeepGroups(Touchpoint):
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

    name = "keep_groups"
    code = "torch.distributed.destroy_process_group, distributed_c10d._world.pg_map"
    guard = True

    def check(self) -> Reason | None:
        """destroy_process_group() is there to wrap, and torch's registry of live groups,
        which the wrapper reads, holds them as keys (the wrapper keeps what it would free)."""
        import torch.distributed as dist

        if not callable(getattr(dist, "destroy_process_group", None)):
            return Reason.of("missing")
        try:
            from torch.distributed import distributed_c10d as c10d

            registry = c10d._world.pg_map
            world = c10d.GroupMember
        except (ImportError, AttributeError):
            return Reason.of("missing")
        if not isinstance(registry, dict) or not hasattr(world, "WORLD"):
            return Reason.of("no_effect")
        return None

    def apply(self, rank: RankSetup) -> None:
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


class DebugLevel(Touchpoint):
    """TORCH_DISTRIBUTED_DEBUG set in the notebook takes effect in the ranks, as in a fresh
    process (torch reads it once, at import, in the launcher's helper)."""

    name = "debug_level"
    code = "torch.distributed.set_debug_level_from_env"

    def check(self) -> Reason | None:
        """Set TORCH_DISTRIBUTED_DEBUG, read the level back, then put both back as they were."""
        import torch.distributed as dist

        if not callable(getattr(dist, "set_debug_level_from_env", None)):
            return Reason.of("missing")
        before, level = os.environ.get("TORCH_DISTRIBUTED_DEBUG"), dist.get_debug_level()
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        try:
            dist.set_debug_level_from_env()
            if dist.get_debug_level() != dist.DebugLevel.DETAIL:
                return Reason.of("no_effect")
        finally:
            if before is None:
                del os.environ["TORCH_DISTRIBUTED_DEBUG"]
            else:
                os.environ["TORCH_DISTRIBUTED_DEBUG"] = before
            dist.set_debug_level(level)
        return None

    def apply(self, rank: RankSetup) -> None:
        import torch.distributed as dist

        dist.set_debug_level_from_env()


class PeerText(Touchpoint):
    """Tells a rank that failed because a peer died (a victim) from the rank that caused it,
    and a collective's abort from other crashes, by torch's text.

    The check reads what it can in this process: that the collectives live in a module named
    C10D_FRAME, so an abort inside one shows that name in the rank's stack. gloo's PEER_GONE
    is written by its C++ transport when a socket closes, which no check here can provoke: a
    release counts as checked once tests/launcher/test_faults.py (a failing rank blamed, its
    victims not) passes on it, which `make compat` runs for every release in KNOWN_GOOD."""

    name = "peer_text"
    PEER_GONE = "by peer"  # gloo: "Connection reset by peer", "Connection closed by peer"
    C10D_FRAME = "distributed_c10d"  # in the stack of a rank that aborted inside a collective

    def check(self) -> Reason | None:
        import torch.distributed as dist

        where = inspect.getsourcefile(inspect.unwrap(dist.all_reduce)) or ""
        if self.C10D_FRAME not in os.path.basename(where):
            return Reason.of("other_text", said=os.path.basename(where))
        if torch_version() not in KNOWN_GOOD:
            return Reason.of("untested", known=i18n.listed(KNOWN_GOOD))
        return None


TOUCHPOINTS: tuple[Touchpoint, ...] = (
    RendezvousStore(),
    DynamoPreload(),
    KeepGroups(),
    DebugLevel(),
    PeerText(),
)
PEER_GONE, C10D_FRAME = PeerText.PEER_GONE, PeerText.C10D_FRAME

Results = dict[str, Reason | None]


def _disabled() -> set[str]:
    return {n.strip() for n in os.environ.get("DDP_HELPERS_DISABLE", "").split(",") if n.strip()}


def check(touchpoints: Iterable[Touchpoint] = TOUCHPOINTS) -> Results:
    """Run every self-check (torch imported): touchpoint's name -> None if usable, else why."""
    disabled = _disabled()
    results: Results = {}
    for point in touchpoints:
        if point.name in disabled:
            results[point.name] = Reason.of("disabled")
            continue
        try:
            results[point.name] = point.check()
        except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check
            results[point.name] = Reason.of("broken", error=f"{type(exc).__name__}: {exc}")
    return results


def warnings(results: Results, touchpoints: Iterable[Touchpoint] = TOUCHPOINTS) -> list[str]:
    """One line per touchpoint that is not usable, saying what is lost."""
    return [p.warning(results[p.name]) for p in touchpoints if results.get(p.name) is not None]


def usable(results: Results, name: str) -> bool:
    return results.get(name) is None


def warm_modules(results: Results) -> tuple[str, ...]:
    """What the zygote imports once it is idle, so that no rank imports it (dynamo_preload)."""
    return DynamoPreload.modules if usable(results, DynamoPreload.name) else ()


def prepare_rank(results: Results, rank: RankSetup, guards: bool = True) -> None:
    """In a new rank: apply every usable touchpoint, or its fallback; without `guards`, none
    of those that are guards (KeepGroups: destroy_process_group() then frees the group)."""
    for point in TOUCHPOINTS:
        if point.guard and not guards:
            continue
        (point.apply if usable(results, point.name) else point.fallback)(rank)


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
