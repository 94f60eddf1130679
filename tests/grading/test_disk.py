"""A submission's disk (grading/confinement/disk.py): a tmpfs the kernel holds to its size,
in mount namespaces of the worker's own, as root and as a user without privileges.

Each case runs in a process of its own, as the worker does, and writes what issue 48's
hostile notebooks wrote around the old walk: 318 MiB in 32 MiB pieces as fast as it goes,
180 MiB past PATH_MAX, 20,000 files. Every write is bounded by the test itself (the tmpfs
takes memory: 64 MiB of it at most, and the writes stop at their own totals).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ddp_helpers.files import remove_tree
from ddp_helpers.procs import with_this_package

LIMIT = 64 << 20
FILES = 5_000

_WRITER = """
import json, os, sys
from ddp_helpers.grading.confinement.disk import Disk

disk = Disk.own(LIMIT, FILES)
root = sys.argv[1]
disk.mount(root)


def written(write, most):
    done = 0
    try:
        while done < most:
            done += write()
    except OSError as exc:
        return done, exc.strerror
    return done, None


with open(os.path.join(root, "fast.bin"), "wb", buffering=0) as f:
    fast = written(lambda: f.write(b"\\1" * (32 << 20)), 318 << 20)
os.unlink(os.path.join(root, "fast.bin"))
fd = os.open(root, os.O_RDONLY)
for _ in range(30):  # 30 folders of 250-character names: a path of 7,500 bytes
    os.mkdir("d" * 250, dir_fd=fd)
    inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
out = os.open("deep.bin", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
deep = written(lambda: os.write(out, b"\\0" * (1 << 20)), 180 << 20)
full = disk.watch()
os.close(out)
os.unlink("deep.bin", dir_fd=fd)
count = [0]


def one_file():
    open(os.path.join(root, f"f{count[0]}"), "w").close()
    count[0] += 1
    return 1


files = written(one_file, 4 * FILES)
mounts = open("/proc/self/mountinfo").read()
print(json.dumps({
    "kind": disk.kind, "why": disk.why, "fast": fast, "deep": deep, "files": files,
    "full": full, "peak": disk.peak, "mounted_inside": f" {root} " in mounts,
}))
""".replace("LIMIT", str(LIMIT)).replace("FILES", str(FILES))


def _as_nobody():
    nobody = pwd.getpwnam("nobody")
    os.setgid(nobody.pw_gid)
    os.setgroups([])
    os.setuid(nobody.pw_uid)


@pytest.fixture
def folder():
    """A folder every user can reach (pytest's own is root's alone), removed after."""
    path = Path(tempfile.mkdtemp(prefix="ddp-disk-test-"))
    path.chmod(0o755)
    yield path
    remove_tree(path)


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_kernel_holds_a_submissions_disk_to_its_size(folder, user):
    if user == "nobody" and os.geteuid() != 0:
        user = "this user"  # not root already: the case without privileges as it is
    root = folder / "submission"
    root.mkdir()
    python = sys.executable
    if user == "nobody":
        os.chown(root, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
        # This virtual environment may lie in root's home, which nobody cannot enter: the
        # system's Python runs the disk's code (the standard library's alone) as well.
        python = shutil.which("python3", path="/usr/bin:/bin") or python
    run = subprocess.run(
        [python, "-c", _WRITER, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=with_this_package(dict(os.environ)),
        preexec_fn=_as_nobody if user == "nobody" else None,
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert found["kind"] == "tmpfs", (
        f"no tmpfs for {user}: {found['why']} (the grader falls back to measuring the disk; "
        "allow user namespaces, as bubblewrap needs too)"
    )
    fast, deep = found["fast"], found["deep"]
    assert fast[1] == deep[1] == "No space left on device", found
    assert 32 << 20 <= fast[0] <= LIMIT, found  # up to the limit, and not a byte past it
    assert LIMIT - (4 << 20) <= deep[0] <= LIMIT, found  # 30 folders deep: the same
    assert found["full"] and found["peak"] <= LIMIT, found
    assert found["files"][1] == "No space left on device" and found["files"][0] < FILES
    assert found["mounted_inside"]
    # Outside the worker's namespace nothing was mounted, and nothing is left when it ends.
    assert f" {root} " not in open("/proc/self/mountinfo").read()
    assert list(root.iterdir()) == []


def test_where_there_is_no_tmpfs_what_the_walk_cannot_measure_is_over_the_limit(folder):
    """The fallback (no namespace to be had): the walk measures, and a file it cannot reach
    (past PATH_MAX here) raises, which the cage counts as over the limit."""
    from ddp_helpers.grading.confinement.sandbox import disk_used

    fd = os.open(folder, os.O_RDONLY)
    for _ in range(20):  # 20 folders of 250-character names: past PATH_MAX (4,096)
        os.mkdir("d" * 250, dir_fd=fd)
        inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("hidden.bin", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "wb") as f:
        f.write(b"\0" * (1 << 20))
    os.close(fd)
    with pytest.raises(OSError, match="too long"):
        disk_used(str(folder), 10_000)
