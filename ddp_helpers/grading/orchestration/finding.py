"""Where a batch's notebooks are, and whose: the paths given walked with one folder open at a
time (a tree past PATH_MAX too), no link followed below what the instructor named, every
path that cannot be read given a row that says so, and one file never given two rows."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

from ...files import read_capped

# Instructor- and learner-facing text of this module, in one place for translation.
INSTRUCTOR_TEXT = {
    "link": (
        "This is a symbolic link (to {target}), not a file handed in: the grader follows no "
        "link among the submissions, so that none can stand for another learner's work or "
        "the course's. Collect the notebook file itself."
    ),
    "link_folder": (
        "This folder is a symbolic link (to {target}), not a folder handed in: the grader "
        "follows no link among the submissions. Collect the notebooks themselves."
    ),
    "link_on_path": (
        "{link} is a symbolic link (to {target}) on this notebook's path. A notebook given by "
        "its path is refused for any link on it below the folder you work in (on all of it "
        "for a path elsewhere), because a glob such as subs/*/week1/*.ipynb may have put a "
        "learner's link there, and that learner would be given another's work. Give the "
        "folder that holds the submissions instead (a folder you give may be a link; nothing "
        "in it is followed), or collect the notebook itself."
    ),
    "unreadable_folder": (
        "The grader could not read this folder ({error}), so the notebooks in it, if any, "
        "were not graded. Make it readable to you (chmod u+rx) and grade again."
    ),
    "bad_name": (
        "This file's name is not valid UTF-8 (shown with \ufffd where it cannot be read), so "
        "it cannot be written into the grades or the feedback as it is. Rename it and grade "
        "again."
    ),
    "bad_folder_name": (
        "This folder's name is not valid UTF-8 (shown with \ufffd where it cannot be read), "
        "so the notebooks in it were not graded. Rename it and grade again."
    ),
    "too_deep": (
        "This notebook's path is {length} bytes long, past the {limit} a path may have here, "
        "so no program can open it by its path. Move it to a shorter path and grade again."
    ),
    "changed": (
        "This folder was moved or replaced while the grader read it, so the rest of it was "
        "not searched. Grade again once nothing else writes there."
    ),
    "same_file": (
        "This is the same file as {other}, reached here through a symbolic link: one file is "
        "graded once, under the name that reaches it without a link. Collect each learner's "
        "own notebook."
    ),
    "same_file_unclear": (
        "This is the same file as {others} (one file under several names: a hard link, or "
        "a folder given twice through links), and no name shows whose it is, so it is graded "
        "under none of them. Keep the name that belongs to its learner and grade again."
    ),
}

PATH_MAX = 4096  # bytes of a path Linux opens, its end included (os.pathconf("/", "PC_PATH_MAX"))
_SOLVED_LIMIT = 16 << 20  # bytes of a solved notebook read to compare (the largest is ~1 MB)
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

Found = tuple[str, str | None, str | None]  # (absolute path, first folder or None, problem)


# ---------------------------------------------------------------- a folder given


def walk(top: str) -> Iterator[Found]:
    """(path, the first folder under top or None, why refused or None) of each notebook under
    top, each link standing where a notebook or a folder would, and each folder that cannot
    be read; checkpoints skipped.

    One folder is open at a time and entered by its fd, so a tree deeper than PATH_MAX is
    walked too; going up is `..`, checked to be the folder it must be. `top` itself is the
    instructor's and may be a link; nothing under it is followed.
    """
    top = os.path.abspath(top)
    try:
        fd = os.open(top, _FOLDER)
    except OSError as exc:
        yield top, None, INSTRUCTOR_TEXT["unreadable_folder"].format(error=_said(exc))
        return
    try:
        subfolders, rows = _read_folder(fd, top, None)
        yield from rows
        levels = [(top, None, _identity(fd), subfolders)]  # path, first, identity, pending
        while levels:
            where, first, _, pending = levels[-1]
            if not pending:
                levels.pop()
                if levels:
                    fd = _up(fd, levels[-1][2])
                    if fd < 0:
                        yield levels[-1][0], levels[-1][1], INSTRUCTOR_TEXT["changed"]
                        return
                continue
            name = pending.pop()
            path, first = os.path.join(where, name), first or name
            try:
                inner = os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                yield path, first, INSTRUCTOR_TEXT["unreadable_folder"].format(error=_said(exc))
                continue
            os.close(fd)
            fd = inner
            subfolders, rows = _read_folder(fd, path, first)
            yield from rows
            levels.append((path, first, _identity(fd), subfolders))
    finally:
        if fd >= 0:
            os.close(fd)


def _up(fd: int, expected: tuple[int, int]) -> int:
    """The fd of the folder above fd's (fd closed), or -1 if it is not `expected` any more
    (moved or replaced meanwhile) or cannot be opened."""
    try:
        up = os.open("..", _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        up = -1
    os.close(fd)
    if up >= 0 and _identity(up) != expected:
        os.close(up)
        up = -1
    return up


def _read_folder(fd: int, where: str, first: str | None) -> tuple[list[str], list[Found]]:
    """The subfolders of the folder open as fd (in reverse order, to be popped) and the rows of
    what else it holds: notebooks, links, names that cannot be read."""
    try:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as exc:
        return [], [(where, first, INSTRUCTOR_TEXT["unreadable_folder"].format(error=_said(exc)))]
    subfolders, rows = [], []
    for entry in entries:
        path = os.path.join(where, entry.name)
        kind = _kind(entry)
        if kind == "folder" and entry.name != ".ipynb_checkpoints":
            if _undecodable(entry.name):
                rows.append((path, first or entry.name, INSTRUCTOR_TEXT["bad_folder_name"]))
            else:
                subfolders.append(entry.name)
        elif kind == "link" and (entry.name.endswith(".ipynb") or _points_to_folder(entry)):
            key = "link" if entry.name.endswith(".ipynb") else "link_folder"
            target = _target(fd, entry.name)
            rows.append((path, first or entry.name, INSTRUCTOR_TEXT[key].format(target=target)))
        elif kind == "file" and entry.name.endswith(".ipynb"):
            rows.append((path, first, _unopenable(path)))
    return subfolders[::-1], rows


def _kind(entry: os.DirEntry) -> str:
    """'link', 'folder' or 'file' (anything else that is not a folder or a link)."""
    try:
        if entry.is_symlink():
            return "link"
        return "folder" if entry.is_dir(follow_symlinks=False) else "file"
    except OSError:
        return "file"  # gone or unreadable: its row says so when it is read


def _points_to_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # a stat of what it points to, which nothing opens
    except OSError:
        return False


def _target(fd: int, name: str) -> str:
    try:
        return readable(os.readlink(name, dir_fd=fd))
    except OSError as exc:
        return f"unreadable: {_said(exc)}"


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


# ---------------------------------------------------------------- a notebook given


def given_file(path: str) -> str | None:
    """Why a notebook given by its path cannot be graded as such, or None: a path that
    cannot be opened or written down, or a symbolic link on it (link_on_the_way)."""
    return _unopenable(os.path.abspath(path)) or link_on_the_way(path)


def link_on_the_way(path: str) -> str | None:
    """Why a notebook given by its path is refused for a symbolic link on that path, or None.

    The file and every folder its path names are checked: below the working folder for a
    path in it (the working folder and those above it are yours), all of them for a path
    elsewhere. A glob such as subs/*/week1/*.ipynb puts a learner's link subs/mallory on the
    path, and what the shell expanded cannot be told from what you typed.
    """
    cwd = os.getcwd()
    prefix = ""
    for part in path.split(os.sep):
        prefix = os.path.join(prefix, part) if prefix else (part or os.sep)
        if part in ("", ".", "..") or _at_or_above(prefix, cwd):
            continue
        if os.path.islink(prefix):
            target = readable(os.readlink(prefix))
            if prefix == path:
                return INSTRUCTOR_TEXT["link"].format(target=target)
            return INSTRUCTOR_TEXT["link_on_path"].format(link=readable(prefix), target=target)
    return None


def _at_or_above(prefix: str, cwd: str) -> bool:
    """Whether an absolute prefix is the working folder or one of the folders above it."""
    if not os.path.isabs(prefix):
        return False
    return cwd == prefix or cwd.startswith(prefix.rstrip(os.sep) + os.sep)


def _unopenable(path: str) -> str | None:
    """Why a notebook at this absolute path cannot be opened by it or named in the grades."""
    if _undecodable(path):
        return INSTRUCTOR_TEXT["bad_name"]
    length = len(os.fsencode(path))
    if length >= PATH_MAX:
        return INSTRUCTOR_TEXT["too_deep"].format(length=length, limit=PATH_MAX - 1)
    return None


def _undecodable(name: str) -> bool:
    """Whether a name Python read from the file system is not valid UTF-8 (it then holds
    surrogate escapes, which no UTF-8 file can hold)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def readable(text: str) -> str:
    """A name as it can be written down: what is not valid UTF-8 shown as \ufffd."""
    return os.fsencode(text).decode("utf-8", "replace")


def shown_name(path: str) -> str:
    """A submission's name: its path relative to the working folder when it is below it,
    else absolute; never resolved through a link (a link stands for itself); readable."""
    relative = os.path.relpath(path, os.getcwd())
    outside = relative == ".." or relative.startswith(".." + os.sep)
    return readable(path if outside else relative)


def _said(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# ---------------------------------------------------------------- one row per file


def one_row_per_file(found: dict[str, tuple[str, str | None, str | None]]) -> None:
    """Where two paths found are one file (the same st_dev and st_ino), only the one that
    reaches it without a symbolic link keeps it; the others get a row that says whose file
    it is. When no single path is plain (a hard link; a folder given twice through links),
    none of them is graded: no name shows whose it is. `found` (path -> (shown, folder,
    problem)) is changed in place."""
    by_file: dict[tuple[int, int], list[str]] = {}
    for where, (_, _, problem) in found.items():
        if problem is None:
            try:
                info = os.stat(where, follow_symlinks=False)
            except OSError:
                continue  # its own row will say why it cannot be read
            by_file.setdefault((info.st_dev, info.st_ino), []).append(where)
    for paths in by_file.values():
        if len(paths) > 1:
            _keep_one(found, sorted(paths, key=lambda where: found[where][0]))


def _keep_one(found: dict, paths: list[str]) -> None:
    plain = [where for where in paths if link_on_the_way(where) is None]
    for where in paths:
        shown, folder, _ = found[where]
        if len(plain) == 1 and where != plain[0]:
            problem = INSTRUCTOR_TEXT["same_file"].format(other=found[plain[0]][0])
        elif len(plain) != 1:
            others = ", ".join(found[other][0] for other in paths if other != where)
            problem = INSTRUCTOR_TEXT["same_file_unclear"].format(others=others)
        else:
            continue
        found[where] = (shown, folder, problem)


# ---------------------------------------------------------------- the course's own notebooks


def course_notebooks(root) -> list[str]:
    """The course's solved notebooks (solutions/*.ipynb, solutions/ja/*.ipynb) where the
    repository is there; [] for an installed package."""
    folders = [os.path.join(root, "solutions"), os.path.join(root, "solutions", "ja")]
    return sorted(
        os.path.join(folder, name)
        for folder in folders
        if os.path.isdir(folder)
        for name in os.listdir(folder)
        if name.endswith(".ipynb")
    )


class CourseCopies:
    """Tells a submission that is one of the course's solved notebooks: the same file (a hard
    link to it) or a copy byte for byte. Only a file of the same size is read."""

    def __init__(self, notebooks: list[str], root):
        self.root = str(root)
        self.by_file: dict[tuple[int, int], str] = {}
        self.by_size: dict[int, list[str]] = {}
        for path in notebooks:
            info = os.stat(path)
            self.by_file[info.st_dev, info.st_ino] = path
            self.by_size.setdefault(info.st_size, []).append(path)

    def of(self, path) -> tuple[str, bool] | None:
        """(the solved notebook, whether it is the same file) that path is, or None."""
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        same = self.by_file.get((info.st_dev, info.st_ino))
        if same is not None:
            return self._name(same), True
        for solved in self.by_size.get(info.st_size, []):
            digest = _digest(path)
            if digest is not None and digest == _digest(solved):
                return self._name(solved), False
        return None

    def _name(self, path: str) -> str:
        return os.path.relpath(path, self.root)


def _digest(path) -> bytes | None:
    """The SHA-256 of the regular file at path (no link followed), or None."""
    try:
        return hashlib.sha256(read_capped(path, _SOLVED_LIMIT, other_names=True)).digest()
    except OSError:
        return None
