"""Each submission confined: a clean environment, bubblewrap's namespaces, and limits.

Every submission's kernel, ranks and checks start from an allow-listed environment (the
section "the environment" below), with or without the sandbox: an instructor's tokens
never reach a notebook, and so never its feedback.

The sandbox is the default where bubblewrap can run here (probed once); `--sandbox` asks
for it whatever the cost, `--no-sandbox` does without it. In the sandbox, a submission's
kernel, ranks and checks run inside bubblewrap (bwrap):
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
import functools
import os
import re
import shutil
import site
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ...entry_points import CONFINE
from ...i18n import messages
from ...paths import PACKAGE  # ddp_helpers/, the course's own code
from ...procs import kill_descendants, with_this_package
from ..defaults import DEFAULT_DISK, DEFAULT_TASKS
from ..folders import WorkFolders
from .limits import MECHANISMS, SEEN, Limits, first_usable

LIMITS = tuple(MECHANISMS)  # how a submission's limits can be held (limits.py)
_INSTALL = (
    "(Debian and Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
    "bubblewrap`; Arch: `sudo pacman -S bubblewrap`)"
)
_ALLOW = (
    "(`sudo sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 and later also "
    "`sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`)"
)
_WITHOUT = (
    "Grading without the sandbox (each notebook still gets a clean environment and the limits): "
)
INSTRUCTOR_TEXT = {
    "no_bwrap": (
        "--sandbox needs bubblewrap (the `bwrap` command), which is not installed. Install "
        f"it {_INSTALL} and run the command again, or give --no-sandbox to grade "
        "submissions you trust without it. Nothing was graded."
    ),
    "no_namespaces": (
        "--sandbox could not start bubblewrap here ({error}): this machine does not let "
        f"this user create namespaces. Allow unprivileged user namespaces {_ALLOW}, or run "
        "the grader as root, or in a container started with --privileged. Nothing was graded."
    ),
    # The default, when the sandbox cannot run: one sentence, the first line of the output.
    "fallback_no_bwrap": (
        _WITHOUT + "bubblewrap (`bwrap`) is not installed; install it for the sandbox "
        f"{_INSTALL}, or give --no-sandbox to grade without it and without this note."
    ),
    "fallback_no_namespaces": (
        _WITHOUT + "bubblewrap cannot create namespaces here ({error}); allow unprivileged "
        f"user namespaces for the sandbox {_ALLOW}, or give --no-sandbox to grade without it "
        "and without this note."
    ),
    "pass_env_name": (
        "--pass-env takes the name of an environment variable (letters, digits and _); "
        "got {value!r}."
    ),
    "pass_env_unset": (
        "--pass-env {name}: {name} is not set here, so the notebooks would not get it; set "
        "it (`export {name}=...`) or leave out --pass-env {name}. Nothing was graded."
    ),
    "pass_env_own": (
        "--pass-env {name}: the grader gives every submission a {name} of its own ({why}), "
        "so it cannot be passed. Nothing was graded."
    ),
    "bad_size": (
        "--memory takes a size such as 4G, 512M or 2000000000 (bytes), at least 256M; "
        "got {value!r}."
    ),
    "bad_limits": "--limits takes one of {known}; got {value!r}.",
    "bad_tasks": (
        "--tasks takes a whole number of processes and threads, 16 or more; got {value!r}."
    ),
    "bad_disk": "--disk takes a size such as 1G or 512M, at least 64M; got {value!r}.",
}

# What the learner's feedback says when the notebook hit a limit: in the submission's language.
MESSAGES = messages(
    "grading.sandbox",
    {
        "memory_hit": (
            "The notebook, with everything it started, ran into its memory limit of {limit} "
            "({how}). Grading went on with the next submission."
        ),
        "tasks_hit": (
            "The notebook started more processes and threads than its limit of {limit} "
            "({how}); what it had started was stopped."
        ),
        "disk_hit": (
            "The notebook wrote more than its disk limit of {limit} into its folders ({how}); "
            "what it had started was stopped."
        ),
        "disk_bytes": "{size} written",
        "disk_files": "more than {count} files",
        "disk_full": "its folders were full, and writes past them failed",
        "disk_hidden": "files it made where the grader could not measure them: {error}",
    },
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, least: int = 256 << 20, error: str = "bad_size") -> int:
    """Bytes in '4G', '512M', '2000000000'; a ValueError that says what is accepted."""
    m = _SIZE.match(str(text))
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()]) if m else 0
    if size < least:
        raise ValueError(INSTRUCTOR_TEXT[error].format(value=text))
    return size


def parse_disk(text: str) -> int:
    """--disk: bytes, at least 64M."""
    return parse_size(text, 64 << 20, "bad_disk")


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
    mechanism: str = "rlimit"  # how the limits are held: a name of limits.MECHANISMS
    pass_env: tuple[str, ...] = ()  # the grader's variables passed beyond the allow-list
    disk: int = DEFAULT_DISK  # bytes the submission may write: its box and its logs

    @property
    def limits(self) -> type[Limits]:
        return MECHANISMS[self.mechanism]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Confinement:
        return cls(**dict(data, pass_env=tuple(data.get("pass_env", ()))))


@dataclass(frozen=True)
class ConfinementRequest:
    """What a grading run asks of its confinement (the grade command's options), before
    choose() checks it here and makes it a Confinement."""

    sandbox: bool | None = None  # None: where bubblewrap can run; True: it or an error; False: none
    memory: int | None = None  # bytes, per submission
    tasks: int | None = None  # processes and threads, per submission; None: DEFAULT_TASKS
    threads: int = 1  # CPU threads per process
    pass_env: tuple[str, ...] = ()  # the grader's variables a submission keeps
    limits: str | None = None  # how its limits are held (LIMITS); None: what works here
    disk: int | None = None  # bytes a submission may write; None: DEFAULT_DISK


def choose(request: ConfinementRequest) -> Confinement:
    """The confinement asked for, checked now: a SandboxError or ValueError before anything
    is graded. sandbox=None: the sandbox where it can run here (else fallback_note() says
    why not); True: the sandbox or a SandboxError; False: no sandbox. `limits` forces how
    the limits are held (LIMITS; default: the first of them that works here)."""
    sandbox, tasks, limits = request.sandbox, request.tasks, request.limits
    if limits is not None and limits not in LIMITS:
        raise ValueError(
            INSTRUCTOR_TEXT["bad_limits"].format(value=limits, known=", ".join(LIMITS))
        )
    if tasks is not None and tasks < 16:
        raise ValueError(INSTRUCTOR_TEXT["bad_tasks"].format(value=tasks))
    pass_env = tuple(dict.fromkeys(request.pass_env))
    check_passed(pass_env, os.environ)
    problem = bwrap_problem() if sandbox is not False else None
    if sandbox and problem is not None:
        kind, error = problem
        raise SandboxError(INSTRUCTOR_TEXT[kind].format(error=error))
    mechanism = limits or first_usable()
    boxed = sandbox is not False and problem is None
    return Confinement(
        boxed,
        request.memory,
        tasks or DEFAULT_TASKS,
        request.threads,
        mechanism,
        pass_env,
        request.disk or DEFAULT_DISK,
    )


@functools.cache
def bwrap_problem() -> tuple[str, str] | None:
    """Why bubblewrap cannot run here, as (message key, its error), or None if it can.

    Probed once per process, by running `true` in every namespace the sandbox uses (a few
    milliseconds); the `bwrap` on PATH is the one probed, so a test can put another first.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "no_bwrap", ""
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--cap-drop", "ALL", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        error = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        return "no_namespaces", error
    return None


def fallback_note() -> str | None:
    """The one sentence that says the default grades without the sandbox, why, and how to
    have it; None where the sandbox can run."""
    problem = bwrap_problem()
    if problem is None:
        return None
    kind, error = problem
    return INSTRUCTOR_TEXT[f"fallback_{kind}"].format(error=error)


# ---------------------------------------------------------------- the environment

# Every variable a submission's processes (kernel, ranks, checks) get, in one place. Of the
# grader's own environment only these are passed, when set (they say where things are and
# how to speak, never who you are):
PASSED = (
    "PATH",  # commands a notebook runs (`nvidia-smi`, `sleep`) are found as in the grader
    "PYTHONPATH",  # the kernel imports what the grader imports (this package first: below)
    "LD_LIBRARY_PATH",  # CUDA's and the environment's own libraries, where a system needs it
    "CUDA_VISIBLE_DEVICES",  # the GPUs the grader was given
    "LANG",  # the locale (with LC_* below) and the time zone
    "LANGUAGE",
    "TZ",
)
PASSED_PREFIXES = (
    "LC_",  # the locale
    "DDP_HELPERS_",  # the course's own settings: its language, the launcher's switches
)
# The grader's own, not the notebook's: which process to die with, how tests order output.
GRADER_ONLY = ("DDP_HELPERS_GRADER_PID", "DDP_HELPERS_OUTPUT", "DDP_HELPERS_CGROUP_NAME")
# Set for every submission, whatever the grader has (Cage.env), so not passable:
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SET_HERE = {
    "HOME": "a folder of its own, removed after it: no dotfiles, credentials or caches of yours",
    "TMPDIR": "a folder of its own, removed after it",
    **dict.fromkeys(THREAD_COUNTS, "--threads"),
}
# Also set: PYTHONPATH with this package first, DDP_HELPERS_WARM_UP=0 (the launcher starts
# at the first launch), and PYTHONUSERBASE where the grader's Python has a user site (`pip
# install --user`), which the private HOME would hide. Left out on purpose: VIRTUAL_ENV and
# CONDA_* (the kernel runs the grader's own interpreter, which finds its environment by
# itself), JUPYTER_* and IPYTHONDIR (a fresh kernel, not your configuration), proxies (they
# may hold passwords), and everything else: what a notebook needs beyond this, an instructor
# names with --pass-env.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name(text: str) -> str:
    """A --pass-env argument, checked: the name of an environment variable."""
    if not _NAME.match(text):
        raise ValueError(INSTRUCTOR_TEXT["pass_env_name"].format(value=text))
    return text


def check_passed(names: Iterable[str], environ: Mapping[str, str]) -> None:
    """A ValueError for a --pass-env name that is not set, or that the grader sets itself."""
    for name in names:
        if name in SET_HERE or name in GRADER_ONLY:
            why = SET_HERE.get(name, "the grader's own")
            raise ValueError(INSTRUCTOR_TEXT["pass_env_own"].format(name=name, why=why))
        if name not in environ:
            raise ValueError(INSTRUCTOR_TEXT["pass_env_unset"].format(name=name))


def submission_environment(
    environ: Mapping[str, str], conf: Confinement, home: str, tmp: str
) -> dict[str, str]:
    """The environment of a submission's processes: the allow-listed part of `environ`, the
    names conf.pass_env gives, and what is set for every submission."""
    env = {
        name: value
        for name, value in environ.items()
        if name in PASSED or name.startswith(PASSED_PREFIXES) or name in conf.pass_env
    }
    for name in GRADER_ONLY:
        env.pop(name, None)
    env |= dict.fromkeys(THREAD_COUNTS, str(conf.threads))
    env |= {"HOME": home, "TMPDIR": tmp, "DDP_HELPERS_WARM_UP": "0"}
    user_base = _user_base()
    if user_base is not None:
        env["PYTHONUSERBASE"] = user_base
    return with_this_package(env)  # the grader's own copy, wherever the notebook runs


def _user_base() -> str | None:
    """The base of the grader's user site (`pip install --user`), where its Python uses one."""
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        return site.getuserbase()
    return None


# ---------------------------------------------------------------- one submission


CGROUP_NAME_ENV = "DDP_HELPERS_CGROUP_NAME"  # the grader to its worker: the cgroups' name


class Cage:
    """One submission's confinement: its cgroups, the command that starts a process in it,
    what it may write (its box: folders.py), and which limit (if any) it ran into."""

    def __init__(self, conf: Confinement, folders: WorkFolders, name: str | None = None, disk=None):
        self.conf = conf
        self.folders = folders
        self.disk = disk  # disk.Disk: the tmpfs its folders are on, or None: measured
        self.watched_hit: tuple[str, str] | None = None  # a limit this process found
        self._next_measure = 0.0
        self.dirs: dict[str, Path] = conf.limits.folders(name or cgroup_name())
        for path in set(self.dirs.values()):
            path.mkdir()
        if self.dirs:
            conf.limits.write(self.dirs, conf.memory, conf.tasks)

    def env(self) -> dict[str, str]:
        """The environment of the submission's processes (kernel, ranks, checks): the
        allow-listed part of this process's, with the submission's own home and TMPDIR."""
        folders = self.folders
        return submission_environment(os.environ, self.conf, folders.home, folders.tmp)

    def command(
        self, argv: list[str], cwd: str, read_only: Iterable[str] = (), writable: Iterable[str] = ()
    ) -> list[str]:
        """argv, started inside the cage: in its cgroups, under its rlimits, in bwrap (which
        shows it the files `read_only` too: the kernel's connection file; and the folders
        `writable` beside its box: the checks' own)."""
        confine = [sys.executable, "-P", "-m", CONFINE]
        for path in set(self.dirs.values()):
            confine += ["--cgroup", str(path)]
        confine += self.conf.limits.confine_args(self.conf.memory)
        confine += ["--fsize", str(self.conf.disk)]  # no one file past the disk limit
        inner = self._bwrap(argv, cwd, read_only, writable) if self.conf.sandbox else argv
        return [*confine, "--", *inner]

    def _bwrap(
        self, argv: list[str], cwd: str, read_only: Iterable[str], writable: Iterable[str]
    ) -> list[str]:
        box = self.folders.box
        args = [shutil.which("bwrap") or "bwrap"]
        args += ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", self.folders.shm, "/dev/shm"]
        if self._on_tmpfs:  # one disk for all it writes: /tmp is a folder of its box
            args += ["--bind", self.folders.tmp, "/tmp"]
        else:
            args += [*tmpfs_size(self.conf.disk), "--tmpfs", "/tmp"]
        for system in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
            args += ["--ro-bind-try", system, system]
        for name in ("passwd", "group", "hosts", "nsswitch.conf", "localtime", "ld.so.cache"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for path in _python_paths():
            args += ["--ro-bind", path, path]
        args += ["--bind", box, box]  # the one folder it writes: the grader's are beside it
        for path in writable:  # each a mount point inside: no process in it can replace it
            args += ["--bind", path, path]
        for path in read_only:
            args += ["--ro-bind", path, path]
        args += ["--remount-ro", "/", "--chdir", cwd]
        return [*args, "--", *argv]

    @property
    def _on_tmpfs(self) -> bool:
        return self.disk is not None and self.disk.root is not None

    def exit_code(self, code: int) -> int:
        """A process's exit code as subprocess would give it without bubblewrap in between
        (which passes on a killed process as 128 + the signal)."""
        return 128 - code if self.conf.sandbox and code > 128 else code

    def watch(self) -> bool:
        """On every tick: the tasks counted (where no cgroup counts them) and the disk
        measured (_measure_disk). Over a limit, everything the submission started is
        stopped. True once a limit was hit."""
        if self.watched_hit is None:
            self.watched_hit = self._count_tasks() or self._measure_disk()
            if self.watched_hit is not None:
                kill_descendants()
        return self.watched_hit is not None

    def _count_tasks(self) -> tuple[str, str] | None:
        if not self.conf.limits.watches_tasks:
            return None
        import psutil

        try:
            tasks = sum(p.num_threads() for p in psutil.Process().children(recursive=True))
        except psutil.Error:
            return None
        return (
            ("tasks", SEEN["tasks_counted"].format(tasks=tasks))
            if tasks > self.conf.tasks
            else None
        )

    def _measure_disk(self, now: bool = False) -> tuple[str, str] | None:
        """The disk limit, if the box and the logs are past it: measured on every tick of
        the watch while that is cheap (a few ms for a lesson's files), less often when a
        walk takes longer (many files), so that the measure costs at most 1/20 of a core."""
        if self._on_tmpfs:  # the kernel holds it to the size: statvfs says if it filled
            return ("disk", MESSAGES["disk_full"]) if self.disk.watch() else None
        started = time.monotonic()
        if not now and started < self._next_measure:
            return None
        try:
            used, files = disk_used(self.folders.root, FILES)
        except OSError as exc:  # what it cannot measure counts as over the limit
            return "disk", MESSAGES["disk_hidden"].format(error=exc.strerror or exc)
        self._next_measure = started + 20 * (time.monotonic() - started)
        if files > FILES:
            return "disk", MESSAGES["disk_files"].format(count=FILES)
        if used >= self.conf.disk:
            return "disk", MESSAGES["disk_bytes"].format(size=shown_size(used))
        return None

    def hit(self, memory_errors: int = 0) -> tuple[str, str] | None:
        """(which limit, how it was seen) if the submission ran into one, else None."""
        hit = self.conf.limits.hit(self.dirs, self.conf.memory, memory_errors)
        if self.watched_hit is None:
            self.watched_hit = self._measure_disk(now=True)  # what it wrote at the very end
        return hit or self.watched_hit

    def message(self, hit: tuple[str, str]) -> str:
        which, how = hit
        if which == "memory":
            return MESSAGES["memory_hit"].format(limit=format_size(self.conf.memory), how=how)
        if which == "disk":
            return MESSAGES["disk_hit"].format(limit=shown_size(self.conf.disk), how=how)
        return MESSAGES["tasks_hit"].format(limit=self.conf.tasks, how=how)

    def close(self, within: float) -> bool:
        """Remove the cgroups, killing whatever the worker left in them, within `within`
        seconds; True once none is left."""
        return self.conf.limits.empty(self.dirs, within)


FILES = 10_000  # files and folders a submission may make (each costs the measure time)


def disk_used(folder: str, most: int) -> tuple[int, int]:
    """(bytes on disk, entries) of everything in `folder`, links not followed; the count
    stops a little past `most` (the walk must stay cheap). An entry it cannot measure (a
    path past PATH_MAX, a folder it may not read) raises its OSError: a submission's file
    hidden from the walk is no file that costs nothing. One removed meanwhile is skipped."""
    used, entries, stack = 0, 0, [folder]
    while stack and entries <= most:
        with contextlib.suppress(FileNotFoundError), os.scandir(stack.pop()) as it:
            for entry in it:
                entries += 1
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return used, entries


def shown_size(size: int) -> str:
    """'1G', '64M', '70.3M': a size for a message."""
    exact = format_size(size)
    return exact if not exact.endswith("bytes") else f"{size / (1 << 20):.1f}M"


@functools.cache
def tmpfs_size(size: int) -> list[str]:
    """bwrap's arguments that cap the next tmpfs at `size` bytes, where this bwrap can
    (0.7 and later: --size); [] where it cannot, and the memory limit holds /tmp instead."""
    probe = subprocess.run(
        [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--size", str(size)]
        + ["--tmpfs", "/tmp", "true"],
        capture_output=True,
    )
    return ["--size", str(size)] if probe.returncode == 0 else []


def cgroup_name() -> str:
    """A new name for one submission's cgroups, with the pid of the process that chose it
    (the grader), so that what one grader left is told from what others are using."""
    return f"ddp-grade-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_leftover_cgroups(conf: Confinement, name: str, within: float) -> bool:
    """Kill what a worker killed from outside left in its cgroups called `name`, and remove
    them (within `within` s); True once none is left."""
    return conf.limits.empty(conf.limits.folders(name), within)


def _python_paths() -> list[str]:
    """What Python needs, read-only: the interpreter, the environment (with the user site,
    where there is one: see submission_environment), this package.

    Not the folder the package sits in: the course's other files, and submissions an
    instructor keeps beside it, stay out of the sandbox.
    """
    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    paths.update(os.path.realpath(p) for p in site.getsitepackages() if os.path.isdir(p))
    if _user_base() is not None:
        paths.add(os.path.realpath(site.getusersitepackages()))
    paths.add(str(PACKAGE))
    outer = []  # nested paths are covered by the outer one
    for path in sorted(paths):
        if not any(path.startswith(o + os.sep) for o in outer) and path != "/":
            outer.append(path)
    return outer
