"""Files written whole, and files read where someone else could have written first.

What the grader writes (the CSV, feedback, results.json, the report, a zip) is made whole
beside its place and then moved there, so a reader never sees half of one. What the grader
or a check reads or writes where a learner's code could have been first (a submission, its
logs, its answers, a checkpoint its ranks saved) is opened without following a symbolic
link, only if it is a regular file, and read up to a size: a link to your private key,
/dev/zero or a FIFO gets an error, not its content, and so does a hard link (a file with
another name: your ~/.bashrc linked in place of a log). remove_tree removes whatever a
learner's code could have left in a folder. A leaf: it imports nothing of the course.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFile(OSError):
    """A path the grader would read or write is a link (of either kind), a device, a FIFO or
    a folder."""


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


def _open_regular(path, flags: int, mode: int = 0o600, *, other_names: bool = False) -> int:
    """An fd of the regular file at path, the last component not followed if a link; a file
    with other names (a hard link) refused unless other_names."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise NotARegularFile(f"{path} is a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO with no reader, a folder
            raise NotARegularFile(f"{path} is not a regular file") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    if info.st_nlink != 1 and not other_names:
        # A hard link reads and writes the file it shares: the owner's key, their .bashrc.
        os.close(fd)
        raise NotARegularFile(f"{path} has other names: it is a hard link to another file")
    os.set_blocking(fd, True)
    return fd


def append_fd(path) -> int:
    """An fd appending to the regular file at path (made if missing), for a log."""
    return _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def read_capped(path, limit: int, *, other_names: bool = False) -> bytes:
    """The whole regular file at path; TooBig if it is over `limit` bytes. A hard link is
    refused unless other_names (a file in the instructor's folder, not one a learner wrote)."""
    fd = _open_regular(path, os.O_RDONLY, other_names=other_names)
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


# ---------------------------------------------------------------- removing a tree

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW


def remove_tree(path) -> bool:
    """Remove path, and everything in it if it is a folder, following no link; True once it
    is gone.

    Never raises and never recurses: a tree 10,000 folders deep, names past PATH_MAX, a
    folder chmod 000, a FIFO or a link to your home are removed (the link, not what it points
    to); another file system mounted inside is not entered. What cannot be removed stays,
    and the answer is False.
    """
    parent, name = os.path.split(os.path.abspath(path))
    try:
        above = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return not os.path.lexists(path)
    try:
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(name, dir_fd=above, follow_symlinks=False).st_mode):
                _remove_folder(above, name)
            else:
                os.unlink(name, dir_fd=above)
        return not _exists(above, name)
    finally:
        os.close(above)


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _remove_folder(above: int, name: str) -> None:
    """Empty and remove the folder `name` in the folder `above`, depth first, one folder open
    at a time (a tree deeper than the fds one may hold): each level keeps its name, its
    parent's identity and what could not be removed in it. Going up is `..`, checked against
    the folder it must be: a folder moved meanwhile ends the removal instead of leading it
    somewhere else."""
    device = os.fstat(above).st_dev
    fd = _open_folder(above, name, device)
    if fd is None:
        return
    levels = [(name, _identity(above), set())]  # (name, its parent's identity, stuck names)
    try:
        while levels:
            name, parent, stuck = levels[-1]
            child = _next_folder(fd, stuck)
            if child is not None:
                inner = _open_folder(fd, child, device)
                if inner is None:
                    stuck.add(child)
                else:
                    levels.append((child, _identity(fd), set()))
                    os.close(fd)
                    fd = inner
                continue
            levels.pop()
            up = os.open("..", _FOLDER, dir_fd=fd) if levels else os.dup(above)
            os.close(fd)
            fd = up
            if _identity(fd) != parent:
                return
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                if levels:
                    levels[-1][2].add(name)
    finally:
        os.close(fd)


def _open_folder(parent: int, name: str, device: int) -> int | None:
    """An fd of the folder `name` in parent, never through a link, that this user may empty
    (a learner can chmod 000 a folder: it is made the owner's again); None if it cannot be
    opened, or is another file system's."""
    try:
        fd = os.open(name, _FOLDER, dir_fd=parent)
    except PermissionError:
        try:
            os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
            fd = os.open(name, _FOLDER, dir_fd=parent)
        except (OSError, ValueError, NotImplementedError):  # a link is not changed: refused
            return None
    except OSError:
        return None
    info = os.fstat(fd)
    if info.st_dev != device:
        os.close(fd)
        return None
    if info.st_mode & 0o700 != 0o700:
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(info.st_mode) | 0o700)
    return fd


def _next_folder(fd: int, stuck: set[str]) -> str | None:
    """The name of a folder in fd still to remove, every other entry unlinked on the way;
    None once only what is stuck is left. An entry that cannot be unlinked is stuck."""
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.name in stuck:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    return entry.name
                os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError:
                stuck.add(entry.name)
    return None
