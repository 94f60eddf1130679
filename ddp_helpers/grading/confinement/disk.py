"""A submission's own disk: a tmpfs of the --disk size on its work folder, which the kernel
holds it to, not a walk its files could hide from or outrun.

The worker enters mount and IPC namespaces of its own before anything else (as root; else
in a user namespace of its own, where the system allows one, as bubblewrap needs too) and
mounts the tmpfs on the submission's folder there: every file of the submission (its box,
its logs, the checks' folders) lives in it, a write past the size fails (ENOSPC) whoever
makes it, and the whole tree is gone, with no walk, when the worker unmounts it or dies.
The mounts are the worker's alone: the grader and other submissions see an empty folder.
The same namespaces give a submission run without the sandbox a /dev/shm of its own (its
box's) and SysV IPC objects that end with the worker.

Where no namespace can be had, `Disk.kind` is "walk": the grader measures the folders on
every tick (sandbox.disk_used), and counts what it cannot measure as over the limit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_MNT_DETACH = 2
FULL = 1 << 20  # free bytes under which the disk counts as full: the write that hit it failed


@dataclass
class Disk:
    """How a submission's disk is held: "tmpfs" (its folder a tmpfs of `size` bytes and
    `files` inodes) or "walk" (measured by the grader); `why` says why not a tmpfs."""

    kind: str
    size: int
    files: int
    why: str = ""
    root: str | None = None  # the folder the tmpfs is mounted on, once it is
    peak: int = 0  # bytes in use at the fullest the grader saw
    filled: bool = False  # seen full (or out of inodes) at some tick

    @classmethod
    def own(cls, size: int, files: int) -> Disk:
        """Namespaces of this process's own, if it may have them: call before any thread
        starts (a user namespace needs a single-threaded process)."""
        why = _own_namespaces()
        return cls("walk" if why else "tmpfs", size, files, why or "")

    def mount(self, root: str) -> None:
        """The tmpfs on `root` (an empty folder of the worker's), owned by this user; where
        the system refuses it, the disk is measured instead ("walk")."""
        if self.kind != "tmpfs":
            return
        options = f"size={self.size},nr_inodes={self.files},mode=0700"
        options += f",uid={os.geteuid()},gid={os.getegid()}"
        flags = _MS_NOSUID | _MS_NODEV
        if _libc().mount(b"tmpfs", root.encode(), b"tmpfs", flags, options.encode()) != 0:
            self.kind, self.why = "walk", f"mount: {os.strerror(ctypes.get_errno())}"
            return
        self.root = root

    def share_memory_in(self, folder: str) -> None:
        """/dev/shm is `folder` (in the tmpfs) for everything this process starts."""
        if self.root is not None and os.path.isdir("/dev/shm"):
            _libc().mount(folder.encode(), b"/dev/shm", None, _MS_BIND, None)  # else as it was

    def watch(self) -> bool:
        """On a tick: True once the tmpfs was seen full (bytes or inodes)."""
        if self.root is None:
            return False
        try:
            st = os.statvfs(self.root)
        except OSError:
            return self.filled
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.peak = max(self.peak, used)
        self.filled |= st.f_bavail * st.f_frsize < FULL or st.f_favail == 0
        return self.filled

    def unmount(self) -> bool:
        """Drop the tmpfs and everything in it at once; True if it was mounted."""
        if self.root is None:
            return False
        _libc().umount2(self.root.encode(), _MNT_DETACH)
        self.root = None
        return True


def _own_namespaces() -> str | None:
    """Enter new mount and IPC namespaces, in a new user namespace where this user is not
    root; None once in them, else why not. Mounts made then stay in them (private)."""
    libc = _libc()
    if libc is None:
        return "no C library to call unshare with (not Linux)"
    flags = _CLONE_NEWNS | _CLONE_NEWIPC
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        uid, gid = os.geteuid(), os.getegid()
        if uid == 0 or libc.unshare(_CLONE_NEWUSER | flags) != 0:
            return f"unshare: {os.strerror(errno or ctypes.get_errno())}"
        try:  # the same user inside, with the capabilities a new namespace gives
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            return f"user namespace: {exc}"
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"mount: {os.strerror(ctypes.get_errno())}"
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        with contextlib.suppress(OSError):
            _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC
