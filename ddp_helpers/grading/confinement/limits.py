"""How a submission's memory and task limits are held: three mechanisms behind one interface.

- `Cgroup2`: a child of the grader's own cgroup (v2) with memory.max and pids.max; the
  kernel refuses a fork or kills the submission past them, and counts it in *.events.
- `Cgroup1`: the same in the v1 hierarchies (memory/, pids/).
- `Rlimit`: where no cgroup can be made: RLIMIT_DATA per process (confine.py sets it), and
  the tasks counted by the grader on every tick (Cage.watch).

`MECHANISMS` maps each name (`grade --limits`, Confinement.mechanism) to its class; the
cgroup mechanisms come first, in the order they are tried.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
import uuid
from pathlib import Path

from ...i18n import messages
from ..budget import TICKS

CGROUP = Path("/sys/fs/cgroup")

# How each limit was seen: the {how} of the feedback's memory_hit / tasks_hit (sandbox.py).
SEEN = messages(
    "grading.limits",
    {
        "oom": "the kernel's out-of-memory killer, in its cgroup",
        "fork_refused": "a fork was refused in its cgroup",
        "rlimit_data": "an allocation failed under its RLIMIT_DATA, per process",
        "tasks_counted": "{tasks} counted",
    },
)


class Limits:
    """One mechanism. A submission's cgroups are `folders(name)` (controller -> folder, none
    for rlimit); its limits are written there, or given to confine.py as arguments."""

    name = ""
    watches_tasks = False  # the grader counts the tasks itself (no cgroup counts them)

    @classmethod
    def usable(cls) -> bool:
        """Whether it can hold the limits here (a cgroup can be made and removed)."""
        return True

    @staticmethod
    def folders(name: str) -> dict[str, Path]:
        return {}

    @staticmethod
    def write(folders: dict[str, Path], memory: int | None, tasks: int) -> None:
        """Write the limits into the submission's cgroups."""

    @staticmethod
    def confine_args(memory: int | None) -> list[str]:
        """What confine.py is told beyond the cgroups to join."""
        return []

    @staticmethod
    def hit(folders: dict[str, Path], memory: int | None, memory_errors: int):
        """("memory" or "tasks", how it was seen) if the kernel held the submission to a
        limit, else None. `memory_errors`: the MemoryErrors its cells raised."""
        return None

    @classmethod
    def empty(cls, folders: dict[str, Path], within: float) -> bool:
        """Kill whatever is still in the submission's cgroups and remove them, waiting at most
        `within` seconds for the kernel to take the last processes out. True once none of
        them is left (nothing to do without cgroups)."""
        return True


class _Cgroups(Limits):
    """What the two cgroup versions share: made as a probe to know they work."""

    @classmethod
    def usable(cls) -> bool:
        if not cls._available():
            return False
        folders = cls.folders(f"ddp-grade-probe-{uuid.uuid4().hex[:8]}")
        try:
            for path in set(folders.values()):
                path.mkdir()
            return True
        except OSError:
            return False
        finally:
            for path in set(folders.values()):
                with contextlib.suppress(OSError):
                    path.rmdir()

    @classmethod
    def _available(cls) -> bool:
        raise NotImplementedError

    # The memory limit's file, and the file that keeps swap out of it (with what it takes).
    memory_file = swap_file = ""

    @staticmethod
    def _no_swap(memory: int) -> str:
        raise NotImplementedError

    @classmethod
    def write(cls, folders: dict[str, Path], memory: int | None, tasks: int) -> None:
        if memory:
            (folders["memory"] / cls.memory_file).write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap accounting: the limit still holds
                (folders["memory"] / cls.swap_file).write_text(cls._no_swap(memory))
        (folders["pids"] / "pids.max").write_text(str(tasks))

    @staticmethod
    def _memory_hit(folder: Path) -> bool:
        """Whether the kernel held the memory cgroup at its limit (each version's counters)."""
        raise NotImplementedError

    @classmethod
    def empty(cls, folders: dict[str, Path], within: float) -> bool:
        deadline = time.monotonic() + within
        left = False
        for path in set(folders.values()):
            if path.exists():
                cls._kill_all(path)
                left |= not cls._remove(path, deadline)
        return not left

    @staticmethod
    def _kill_all(path: Path) -> None:
        """SIGKILL every process in the cgroup, as one act where the kernel has one."""
        raise NotImplementedError

    @staticmethod
    def _remove(path: Path, deadline: float) -> bool:
        """rmdir the (killed) cgroup once the kernel has taken its processes out."""
        raise NotImplementedError

    @classmethod
    def hit(cls, folders: dict[str, Path], memory: int | None, memory_errors: int):
        if memory and cls._memory_hit(folders["memory"]):
            return "memory", SEEN["oom"]
        if counters(folders["pids"] / "pids.events").get("max", 0):
            return "tasks", SEEN["fork_refused"]
        return None


class Cgroup2(_Cgroups):
    name = "cgroup2"

    @classmethod
    def _available(cls) -> bool:
        own = own_cgroup_v2()
        if (
            own is None
            or not (CGROUP / "cgroup.controllers").exists()
            or not (own / "cgroup.subtree_control").exists()
        ):
            return False
        controls = (own / "cgroup.subtree_control").read_text().split()
        # Without both, enabling them here would move this process: not ours to do.
        return {"memory", "pids"} <= set(controls)

    @staticmethod
    def folders(name: str) -> dict[str, Path]:
        own = own_cgroup_v2()
        return {"memory": own / name, "pids": own / name} if own else {}

    memory_file, swap_file = "memory.max", "memory.swap.max"

    @staticmethod
    def _no_swap(memory: int) -> str:
        return "0"  # swap on top of memory.max

    @staticmethod
    def _memory_hit(folder: Path) -> bool:
        events = counters(folder / "memory.events")
        return bool(events.get("oom_kill", 0) or events.get("max", 0))

    @staticmethod
    def _kill_all(path: Path) -> None:
        """cgroup.kill (Linux 5.14): the kernel kills every process in it at once, one that
        forks meanwhile included; before that, each pid of cgroup.procs."""
        try:
            (path / "cgroup.kill").write_text("1")
        except FileNotFoundError:
            kill_listed(path)
        except OSError:
            pass

    @staticmethod
    def _remove(path: Path, deadline: float) -> bool:
        """Wait for `populated 0` in cgroup.events (the kernel wakes a poller on each change
        of it), then rmdir once."""
        events = path / "cgroup.events"
        try:
            fd = os.open(events, os.O_RDONLY)
        except OSError:
            return _rmdir(path)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            while _populated(fd):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poller.poll(left * 1000)
        except OSError:
            pass
        finally:
            os.close(fd)
        return _rmdir(path)


class Cgroup1(_Cgroups):
    name = "cgroup1"

    @classmethod
    def _available(cls) -> bool:
        return (CGROUP / "memory" / "memory.limit_in_bytes").exists()

    @staticmethod
    def folders(name: str) -> dict[str, Path]:
        return {"memory": CGROUP / "memory" / name, "pids": CGROUP / "pids" / name}

    memory_file, swap_file = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"

    @staticmethod
    def _no_swap(memory: int) -> str:
        return str(memory)  # memory and swap together

    @staticmethod
    def _kill_all(path: Path) -> None:
        kill_listed(path)

    @classmethod
    def _remove(cls, path: Path, deadline: float) -> bool:
        """Kill what is listed until the cgroup can be removed (a process forked while its
        parent was killed is listed a moment later), up to the deadline."""
        while True:
            if _rmdir(path):
                return True
            if time.monotonic() > deadline:
                return False
            kill_listed(path)
            time.sleep(TICKS.cgroup_v1)

    @staticmethod
    def _memory_hit(folder: Path) -> bool:
        return bool(
            counters(folder / "memory.oom_control").get("oom_kill", 0)
            or read_int(folder / "memory.failcnt")
            or read_int(folder / "memory.memsw.failcnt")
        )


class Rlimit(Limits):
    name = "rlimit"
    watches_tasks = True

    @staticmethod
    def confine_args(memory: int | None) -> list[str]:
        return ["--data", str(memory)] if memory else []

    @staticmethod
    def hit(folders: dict[str, Path], memory: int | None, memory_errors: int):
        if memory and memory_errors:
            return "memory", SEEN["rlimit_data"]
        return None  # the tasks: counted by the grader (Cage.watch)


MECHANISMS: dict[str, type[Limits]] = {m.name: m for m in (Cgroup2, Cgroup1, Rlimit)}


def first_usable() -> str:
    """The first mechanism that works here; rlimit always does."""
    return next(name for name, m in MECHANISMS.items() if m.usable())


def own_cgroup_v2() -> Path | None:
    """This process's cgroup in the v2 hierarchy, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return CGROUP / line[3:].lstrip("/")
    return None


def counters(path: Path) -> dict[str, int]:
    """A cgroup file of "name count" lines, as a dict; {} where it cannot be read."""
    try:
        return counters_of(path.read_text())
    except OSError:
        return {}


def counters_of(text: str) -> dict[str, int]:
    """ "name count" lines as a dict (cgroup.events, pids.events, memory.events)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def kill_listed(path: Path) -> None:
    """SIGKILL each process the cgroup lists now."""
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


def _rmdir(path: Path) -> bool:
    """Remove an empty cgroup; True once it is gone (also when it already was)."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:  # still populated
        return False
    return True


def _populated(fd: int) -> bool:
    """cgroup.events, read afresh from its start: whether the cgroup still holds a process.
    (Reading it also tells the kernel which change was seen: poll waits for the next.)"""
    os.lseek(fd, 0, os.SEEK_SET)
    return bool(counters_of(os.read(fd, 4096).decode()).get("populated", 0))
