"""procs.Reaper: everything one child started, ended in one place (the grader's clean-up)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from ddp_helpers.procs import Reaper
from support import SOON

# A child whose grandchild leaves it (a double fork: re-parented away from the child's tree)
# and says its pid; then the child waits to be killed.
DETACHING = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(1, b"%d\\n" % os.getpid())
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # not holding the pipe it was given
        time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _until(condition) -> None:
    deadline = time.monotonic() + SOON
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_what_a_child_killed_from_outside_left_is_killed_if_it_was_seen_and_is_still_it():
    proc = subprocess.Popen([sys.executable, "-c", DETACHING], stdout=subprocess.PIPE)
    grandchild = int(proc.stdout.readline())
    reaper = Reaper(proc)
    reaper.seen[grandchild] = psutil.Process(grandchild).create_time()  # as note() would have
    reaper.seen[os.getpid()] = 0.0  # a pid whose process is not the one seen: left alone
    proc.kill()  # killed from outside: it cleaned nothing up
    proc.wait()
    assert not _gone(grandchild)
    reaper.reap()
    _until(lambda: _gone(grandchild))
    assert proc.stdout.closed or proc.returncode is not None


PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         stdout=subprocess.DEVNULL)  # not holding the pipe it was given
print(child.pid, flush=True)
time.sleep(60)
"""


def test_note_remembers_what_runs_below_the_child_and_reap_ends_it_all():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    grandchild = int(proc.stdout.readline())
    reaper = Reaper(proc)
    reaper.note()
    assert reaper.seen[grandchild] == psutil.Process(grandchild).create_time()
    reaper.reap(grace=SOON)  # SIGTERM first: the child ends, its child is left; then killed
    assert proc.returncode is not None
    _until(lambda: _gone(grandchild))


# A subreaper that runs a child which starts a process and exits at once: that process, an
# orphan, becomes the subreaper's child; Reaper(orphans=True) ends it.
SUBREAPER = """
import subprocess, sys
import psutil
from ddp_helpers.procs import Reaper, become_subreaper

become_subreaper()
reaper = Reaper(orphans=True)
leaving = (
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(60)'], stdout=subprocess.DEVNULL); print(p.pid, flush=True)"
)
proc = reaper.proc = subprocess.Popen([sys.executable, "-c", leaving], stdout=subprocess.PIPE)
orphan = int(proc.stdout.readline())
proc.wait()
assert orphan in {p.pid for p in psutil.Process().children()}, "not re-parented here"
reaper.reap()
try:
    gone = psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
except psutil.NoSuchProcess:
    gone = True
print("gone" if gone else "alive", flush=True)
"""


def test_orphans_left_to_a_subreaper_are_killed():
    from ddp_helpers.procs import with_this_package

    out = subprocess.run(
        [sys.executable, "-c", SUBREAPER],
        capture_output=True,
        text=True,
        timeout=60,
        env=with_this_package(dict(os.environ)),
    )
    assert out.stdout.strip() == "gone", out.stderr
