"""Files read where a learner could have been first, and trees removed whatever they hold
(ddp_helpers/files.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_helpers.files import NotARegularFile, append_fd, read_capped, read_tail, remove_tree
from ddp_helpers.procs import with_this_package

THE_OWNERS = "the owner's own line\n"

# ---------------------------------------------------------------- what is refused


def _symlink(tmp: Path) -> Path:
    (tmp / "target").write_text(THE_OWNERS)
    (tmp / "log").symlink_to(tmp / "target")
    return tmp / "log"


def _hard_link(tmp: Path) -> Path:
    (tmp / "target").write_text(THE_OWNERS)
    os.link(tmp / "target", tmp / "log")
    return tmp / "log"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "log")
    return tmp / "log"


def _device(tmp: Path) -> Path:
    return Path("/dev/null")


def _folder(tmp: Path) -> Path:
    (tmp / "log").mkdir()
    return tmp / "log"


REFUSED = {"symlink": _symlink, "hard link": _hard_link, "fifo": _fifo, "device": _device}
REFUSED["folder"] = _folder


@pytest.mark.parametrize("kind", REFUSED)
def test_what_is_not_a_file_of_its_own_is_neither_read_nor_appended_to(tmp_path, kind):
    path = REFUSED[kind](tmp_path)
    with pytest.raises(NotARegularFile):
        read_capped(path, 1 << 20)
    with pytest.raises(NotARegularFile):
        os.close(append_fd(path))
    assert read_tail(path, 1 << 20) == b""
    if (tmp_path / "target").exists():  # what the link led to is as it was
        assert (tmp_path / "target").read_text() == THE_OWNERS


def test_a_hard_link_is_refused_saying_it_has_other_names(tmp_path):
    path = _hard_link(tmp_path)
    with pytest.raises(NotARegularFile, match="has other names: it is a hard link"):
        os.close(append_fd(path))
    assert (tmp_path / "target").read_text() == THE_OWNERS
    assert os.stat(tmp_path / "target").st_nlink == 2  # nothing removed either


def test_a_hard_link_is_read_where_the_caller_says_other_names_are_fine(tmp_path):
    # The instructor's own folder of submissions: a file there may have other names.
    assert read_capped(_hard_link(tmp_path), 1 << 20, other_names=True) == THE_OWNERS.encode()


def test_a_file_of_its_own_is_read_and_appended_to(tmp_path):
    fd = append_fd(tmp_path / "log")  # made where missing
    os.write(fd, b"one\n")
    os.close(fd)
    fd = append_fd(tmp_path / "log")
    os.write(fd, b"two\n")
    os.close(fd)
    assert read_capped(tmp_path / "log", 100) == b"one\ntwo\n"
    assert read_tail(tmp_path / "log", 4) == b"two\n"


# ---------------------------------------------------------------- removing a tree

DEPTH = 5000  # folders, one in the other: a path of 5000 * 13 bytes, far past PATH_MAX
# Root may open and write to a folder of mode 000 anyway: as root the removal runs without
# those powers, so that the modes hold for it as for a grader that is not root.
WITHOUT_ROOTS_ACCESS = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _deep_tree(base: Path, outside: Path) -> Path:
    """base/tree: DEPTH folders deep, with at some depths a file, a FIFO, links to the
    folder and the file outside, a dangling link, and a folder of mode 000 with a file in it
    at the bottom. Made with fds, as nothing can name its bottom by path."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    name = "tree"
    for depth in range(DEPTH + 1):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, name = inner, "folder-level"
        if depth % 1000 == 0:
            _litter(fd, outside)
    os.mkdir("locked", dir_fd=fd)
    locked = os.open("locked", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(os.open("inside", os.O_CREAT | os.O_WRONLY, dir_fd=locked))
    os.fchmod(locked, 0)
    os.close(locked)
    os.fchmod(fd, 0o500)  # no write: nothing in it could be removed as it is
    os.close(fd)
    return base / "tree"


def _litter(fd: int, outside: Path) -> None:
    os.close(os.open("file", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.mkfifo("fifo", dir_fd=fd)
    os.symlink(outside, "to-the-folder", dir_fd=fd)
    os.symlink(outside / "keep.txt", "to-the-file", dir_fd=fd)
    os.symlink("no/such/thing", "dangling", dir_fd=fd)


def _outside(base: Path) -> Path:
    """Files and a folder the links point to: a link followed would lose them."""
    outside = base / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("kept\n")
    (outside / "sub" / "also.txt").write_text("kept too\n")
    return outside


def _removed_as_its_owner(path: Path) -> bool:
    """remove_tree(path) in a process of its own, as root without root's access."""
    code = "import sys; from ddp_helpers.files import remove_tree; print(remove_tree(sys.argv[1]))"
    command = [sys.executable, "-c", code, str(path)]
    run = subprocess.run(
        WITHOUT_ROOTS_ACCESS + command if os.geteuid() == 0 else command,
        capture_output=True,
        text=True,
        timeout=120,
        env=with_this_package(dict(os.environ)),
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip() == "True"


def test_a_deep_locked_tree_full_of_links_is_removed_and_nothing_outside(tmp_path):
    outside = _outside(tmp_path)
    top = _deep_tree(tmp_path, outside)
    try:
        assert _removed_as_its_owner(top) is True
        assert not top.exists()
        assert (outside / "keep.txt").read_text() == "kept\n"
        assert (outside / "sub" / "also.txt").read_text() == "kept too\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    finally:
        remove_tree(top)  # pytest's own clean-up would fail on it (shutil.rmtree recurses)


def test_a_link_given_is_removed_and_not_what_it_points_to(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert remove_tree(tmp_path / "link") is True
    assert (tmp_path / "target" / "keep").read_text() == "x"
    assert remove_tree(tmp_path / "no-such-folder") is True  # gone already
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "file") is True and not (tmp_path / "file").exists()


def test_what_cannot_be_removed_is_left_and_said(tmp_path):
    (tmp_path / "theirs" / "tree" / "inside").mkdir(parents=True)
    (tmp_path / "theirs").chmod(0o500)  # the folder above it: not writable by its owner
    try:
        assert _removed_as_its_owner(tmp_path / "theirs" / "tree") is False
        assert list((tmp_path / "theirs" / "tree").iterdir()) == []  # what could go went
    finally:
        (tmp_path / "theirs").chmod(0o700)
