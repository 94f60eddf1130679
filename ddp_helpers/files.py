"""Files written whole, and files read where someone else could have written first.

What the grader writes (the CSV, feedback, results.json, the report, a zip) is made whole
beside its place and then moved there, so a reader never sees half of one. What the grader
or a check reads or writes where a learner's code could have been first (a submission, its
logs, its answers, a checkpoint its ranks saved) is opened without following a symbolic
link, only if it is a regular file, and read up to a size: a link to your private key,
/dev/zero or a FIFO gets an error, not its content. A leaf: it imports nothing of the course.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFile(OSError):
    """A path the grader would read or write is a link, a device, a FIFO or a folder."""


class TooBig(OSError):
    """A file the grader reads is over the size it reads."""

    def __init__(self, path, size: int, limit: int):
        super().__init__(f"{path} is {size} bytes, over the {limit} bytes read")
        self.size, self.limit = size, limit


@contextlib.contextmanager
def replaced_whole(path, mode: str = "w", **open_args):
    """A file to write `path`'s new content into; it replaces `path` only once complete.

    Opened as open(mode, **open_args) at `path` + ".tmp"; on an error the old file stays
    and the partial one is removed.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode, **open_args) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _open_regular(path, flags: int, mode: int = 0o600) -> int:
    """An fd of the regular file at path, the last component not followed if a link."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise NotARegularFile(f"{path} is a symbolic link") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def append_fd(path) -> int:
    """An fd appending to the regular file at path (made if missing), for a log."""
    return _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def read_capped(path, limit: int) -> bytes:
    """The whole regular file at path; TooBig if it is over `limit` bytes."""
    fd = _open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooBig(path, max(size, len(data)), limit)
    return data


def read_tail(path, limit: int) -> bytes:
    """The last `limit` bytes (at most) of the regular file at path; b"" if there is none."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit)


def remove_tree(path) -> bool:
    """Remove a folder and what it holds, never following a link and never raising; True
    once it is gone. (Provisional: replaced by the iterative remover.)"""
    import shutil

    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return True
    except (OSError, RecursionError):
        return False
    return True
