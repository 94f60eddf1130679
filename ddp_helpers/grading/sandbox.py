"""Each submission confined: bubblewrap's namespaces, and limits on memory and tasks.

With `--sandbox`, a submission's kernel, ranks and checks run inside bubblewrap (bwrap):
a network namespace with only loopback, a PID namespace, no capabilities, the course's
package and the Python environment read-only, its own temporary folder as home and
working directory (and a private /tmp), nothing else of the file system, and death with
the grader. The lessons and solutions stay outside: a submission cannot read the answers.

The limits hold with or without the sandbox: memory and tasks (processes and threads)
through a cgroup (v2 where it can be used, v1 where the grader may write it, as root
often can), or else through RLIMIT_DATA per process and a watch that counts the tasks.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # ddp_helpers/, the course's own code
CGROUP = Path("/sys/fs/cgroup")
DEFAULT_TASKS = 512  # processes and threads: a 2-rank lesson uses about 100

MESSAGES = {
    "no_bwrap": (
        "--sandbox needs bubblewrap (the `bwrap` command), which is not installed. Install "
        "it (Debian and Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf "
        "install bubblewrap`; Arch: `sudo pacman -S bubblewrap`) and run the command again, "
        "or leave out --sandbox for submissions you trust. Nothing was graded."
    ),
    "no_namespaces": (
        "--sandbox could not start bubblewrap here ({error}): this machine does not let "
        "this user create namespaces. Allow unprivileged user namespaces (`sudo sysctl "
        "kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 and later also `sudo sysctl "
        "kernel.apparmor_restrict_unprivileged_userns=0`), or run the grader as root, or in "
        "a container started with --privileged. Nothing was graded."
    ),
    "bad_size": (
        "--memory takes a size such as 4G, 512M or 2000000000 (bytes), at least 256M; "
        "got {value!r}."
    ),
    "bad_tasks": (
        "--tasks takes a whole number of processes and threads, 16 or more; got {value!r}."
    ),
    "memory_hit": (
        "The notebook, with everything it started, ran into its memory limit of {limit} "
        "({how}). Grading went on with the next submission."
    ),
    "tasks_hit": (
        "The notebook started more processes and threads than its limit of {limit} "
        "({how}); what it had started was stopped."
    ),
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes in '4G', '512M', '2000000000'; a ValueError that says what is accepted."""
    m = _SIZE.match(str(text))
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()]) if m else 0
    if size < 256 << 20:
        raise ValueError(MESSAGES["bad_size"].format(value=text))
    return size


def format_size(size: int) -> str:
    for unit in ("T", "G", "M"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return f"{size} bytes"


class SandboxError(Exception):
    """The sandbox asked for cannot be had here; the message says how to get it."""


@dataclass(frozen=True)
class Confinement:
    """How every submission of a batch is confined (it travels to the workers as JSON)."""

    sandbox: bool = False
    memory: int | None = None  # bytes, for the submission as a whole
    tasks: int = DEFAULT_TASKS  # processes and threads
    threads: int = 1  # OMP/MKL threads per process
    mechanism: str = "rlimit"  # how the limits are held: cgroup2, cgroup1 or rlimit

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Confinement:
        return cls(**data)


def choose(sandbox: bool, memory: int | None, tasks: int | None, threads: int = 1) -> Confinement:
    """The confinement asked for, checked now: a SandboxError before anything is graded."""
    if tasks is not None and tasks < 16:
        raise ValueError(MESSAGES["bad_tasks"].format(value=tasks))
    if sandbox:
        _check_bwrap()
    forced = os.environ.get("DDP_HELPERS_LIMITS")  # tests and troubleshooting only
    mechanism = forced or next((m for m in ("cgroup2", "cgroup1") if _cgroup_usable(m)), "rlimit")
    return Confinement(sandbox, memory, tasks or DEFAULT_TASKS, threads, mechanism)


def _check_bwrap() -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError(MESSAGES["no_bwrap"])
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--cap-drop", "ALL", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        error = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        raise SandboxError(MESSAGES["no_namespaces"].format(error=error))


# ---------------------------------------------------------------- cgroups


def _own_cgroup_v2() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return CGROUP / line[3:].lstrip("/")
    return None


def _cgroup_dirs(mechanism: str, name: str) -> dict[str, Path]:
    """Where a submission's cgroups go: controller -> folder."""
    if mechanism == "cgroup2":
        own = _own_cgroup_v2()
        return {"memory": own / name, "pids": own / name} if own else {}
    return {"memory": CGROUP / "memory" / name, "pids": CGROUP / "pids" / name}


def _cgroup_usable(mechanism: str) -> bool:
    """Whether a child cgroup with memory and pids limits can be made and removed here."""
    if mechanism == "cgroup2":
        own = _own_cgroup_v2()
        if (
            own is None
            or not (CGROUP / "cgroup.controllers").exists()
            or not (own / "cgroup.subtree_control").exists()
        ):
            return False
        controls = (own / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(controls):
            return False  # enabling them here would move this process: not ours to do
    elif not (CGROUP / "memory" / "memory.limit_in_bytes").exists():
        return False
    dirs = _cgroup_dirs(mechanism, f"ddp-grade-probe-{uuid.uuid4().hex[:8]}")
    try:
        for path in set(dirs.values()):
            path.mkdir()
        return True
    except OSError:
        return False
    finally:
        for path in set(dirs.values()):
            with contextlib.suppress(OSError):
                path.rmdir()


# ---------------------------------------------------------------- one submission


class Cage:
    """One submission's confinement: its cgroups, the command that starts a process in it,
    and which limit (if any) it ran into."""

    def __init__(self, conf: Confinement, workdir: str):
        self.conf = conf
        self.workdir = workdir
        self.dirs: dict[str, Path] = {}
        self.watched_hit = None  # the task limit, found by counting (rlimit)
        if conf.mechanism in ("cgroup2", "cgroup1"):
            self.dirs = _cgroup_dirs(conf.mechanism, f"ddp-grade-{uuid.uuid4().hex[:12]}")
            for path in set(self.dirs.values()):
                path.mkdir()
            self._write_limits()

    def _write_limits(self) -> None:
        memory, pids = self.dirs["memory"], self.dirs["pids"]
        if self.conf.mechanism == "cgroup2":
            if self.conf.memory:
                (memory / "memory.max").write_text(str(self.conf.memory))
                with contextlib.suppress(OSError):
                    (memory / "memory.swap.max").write_text("0")
            (pids / "pids.max").write_text(str(self.conf.tasks))
        else:
            if self.conf.memory:
                (memory / "memory.limit_in_bytes").write_text(str(self.conf.memory))
                with contextlib.suppress(OSError):
                    (memory / "memory.memsw.limit_in_bytes").write_text(str(self.conf.memory))
            (pids / "pids.max").write_text(str(self.conf.tasks))

    def env(self, env: dict) -> dict:
        """The environment of the submission's processes."""
        threads = str(self.conf.threads)
        env = dict(
            env,
            OMP_NUM_THREADS=threads,
            MKL_NUM_THREADS=threads,
            OPENBLAS_NUM_THREADS=threads,
        )
        if self.conf.sandbox:
            env["HOME"] = self.workdir
        return env

    def command(self, argv: list[str], cwd: str) -> list[str]:
        """argv, started inside the cage: in its cgroups or under its rlimits, in bwrap."""
        confine = [sys.executable, "-P", "-m", "ddp_helpers.grading.confine"]
        for path in set(self.dirs.values()):
            confine += ["--cgroup", str(path)]
        if self.conf.mechanism == "rlimit" and self.conf.memory:
            confine += ["--data", str(self.conf.memory)]
        inner = self._bwrap(argv, cwd) if self.conf.sandbox else argv
        return [*confine, "--", *inner]

    def _bwrap(self, argv: list[str], cwd: str) -> list[str]:
        args = [shutil.which("bwrap") or "bwrap"]
        args += ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
        for system in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
            args += ["--ro-bind-try", system, system]
        for name in ("passwd", "group", "hosts", "nsswitch.conf", "localtime", "ld.so.cache"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for path in _python_paths():
            args += ["--ro-bind", path, path]
        args += ["--bind", self.workdir, self.workdir, "--remount-ro", "/", "--chdir", cwd]
        args += ["--setenv", "HOME", self.workdir, "--"]
        return args + argv

    def exit_code(self, code: int) -> int:
        """A process's exit code as subprocess would give it without bubblewrap in between
        (which passes on a killed process as 128 + the signal)."""
        return 128 - code if self.conf.sandbox and code > 128 else code

    def watch(self) -> bool:
        """Count the tasks (rlimit mechanism): over the limit, stop them all. True if hit."""
        if self.conf.mechanism != "rlimit" or self.watched_hit:
            return bool(self.watched_hit)
        import psutil

        from ..procs import kill_descendants

        try:
            tasks = sum(p.num_threads() for p in psutil.Process().children(recursive=True))
        except psutil.Error:
            return False
        if tasks > self.conf.tasks:
            self.watched_hit = f"{tasks} counted"
            kill_descendants()
            return True
        return False

    def hit(self, memory_errors: int = 0) -> tuple[str, str] | None:
        """(which limit, how it was seen) if the submission ran into one, else None."""
        if self.conf.mechanism == "cgroup2":
            events = _counters(self.dirs["memory"] / "memory.events")
            if self.conf.memory and (events.get("oom_kill", 0) or events.get("max", 0)):
                return "memory", "the kernel's out-of-memory killer, in its cgroup"
            if _counters(self.dirs["pids"] / "pids.events").get("max", 0):
                return "tasks", "a fork was refused in its cgroup"
        elif self.conf.mechanism == "cgroup1":
            memory = self.dirs["memory"]
            if self.conf.memory and (
                _counters(memory / "memory.oom_control").get("oom_kill", 0)
                or _read_int(memory / "memory.failcnt")
                or _read_int(memory / "memory.memsw.failcnt")
            ):
                return "memory", "the kernel's out-of-memory killer, in its cgroup"
            if _counters(self.dirs["pids"] / "pids.events").get("max", 0):
                return "tasks", "a fork was refused in its cgroup"
        else:
            if self.conf.memory and memory_errors:
                return "memory", "an allocation failed under its RLIMIT_DATA, per process"
            if self.watched_hit:
                return "tasks", self.watched_hit
        return None

    def message(self, hit: tuple[str, str]) -> str:
        which, how = hit
        if which == "memory":
            return MESSAGES["memory_hit"].format(limit=format_size(self.conf.memory), how=how)
        return MESSAGES["tasks_hit"].format(limit=self.conf.tasks, how=how)

    def close(self) -> None:
        """Remove the cgroups (the worker has killed what was in them)."""
        for path in set(self.dirs.values()):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # its last processes are still being reaped
                    time.sleep(0.1)


def _python_paths() -> list[str]:
    """What Python needs, read-only: the interpreter, the environment, this package.

    Not the folder the package sits in: the course's other files, and submissions an
    instructor keeps beside it, stay out of the sandbox.
    """
    import site

    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    paths.update(os.path.realpath(p) for p in site.getsitepackages() if os.path.isdir(p))
    paths.add(str(PACKAGE))
    outer = []  # nested paths are covered by the outer one
    for path in sorted(paths):
        if not any(path.startswith(o + os.sep) for o in outer) and path != "/":
            outer.append(path)
    return outer


def _counters(path: Path) -> dict[str, int]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
