"""One submission's folders while it is graded: the grader's own, and the box inside it.

The box is all a submission may write: bound read-write into the sandbox, its home, TMPDIR,
working folders, answers and kernel sockets. Everything the grader itself reads or writes
later (the kernel's and the scorer's logs, the kernel's connection file) lies beside the
box, out of the sandbox's sight, so that nothing the notebook leaves can stand in for it.
Without the sandbox the notebook runs as the grader's user and could reach them anyway:
they are then opened as files.py opens what a submission could have replaced.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

_BOX_FOLDERS = ("cwd", "tmp", "home", "score", "shm")


@dataclass(frozen=True)
class WorkFolders:
    """The folders of one submission, under `root` (the worker makes and removes it)."""

    root: str

    @classmethod
    def make(cls, disk=None) -> WorkFolders:
        """A new root in TMPDIR (the batch's folder), with its box and the box's folders;
        on `disk`'s tmpfs where it has one (confinement/disk.py)."""
        folders = cls(tempfile.mkdtemp(prefix="ddp-grade-"))
        if disk is not None:
            disk.mount(folders.root)
        os.mkdir(folders.box, 0o700)
        for name in _BOX_FOLDERS:
            os.mkdir(os.path.join(folders.box, name), 0o700)
        return folders

    def _in_box(self, name: str) -> str:
        return os.path.join(self.box, name)

    @property
    def box(self) -> str:
        return os.path.join(self.root, "box")

    @property
    def cwd(self) -> str:
        """The kernel's working folder."""
        return self._in_box("cwd")

    @property
    def tmp(self) -> str:
        return self._in_box("tmp")

    @property
    def home(self) -> str:
        return self._in_box("home")

    @property
    def shm(self) -> str:
        """What the sandbox shows as /dev/shm (shared memory, as files)."""
        return self._in_box("shm")

    @property
    def score(self) -> str:
        """The scorers' working folder."""
        return self._in_box("score")

    @property
    def answers(self) -> str:
        """Where the kernel puts the answers after every cell (worker.py's probe)."""
        return self._in_box("answers.pkl")

    @property
    def kernel_ipc(self) -> str:
        """The prefix of the kernel's Unix sockets (ipykernel adds -1, -2, ...)."""
        return self._in_box("kernel-ipc")

    @property
    def connection_file(self) -> str:
        return os.path.join(self.root, "kernel.json")

    @property
    def kernel_log(self) -> str:
        return os.path.join(self.root, "kernel.log")

    @property
    def scorer_log(self) -> str:
        return os.path.join(self.root, "scorer.log")

    @property
    def logs(self) -> tuple[str, str]:
        return self.kernel_log, self.scorer_log
