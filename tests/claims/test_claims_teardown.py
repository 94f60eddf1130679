"""Claims lesson 04 makes about how its exported script ends (os._exit), shown in plain
Python processes, no launcher between (docs/claims.md names each claim's cell)."""

from __future__ import annotations

import subprocess
import sys

# A process that has registered what a normal exit runs: an atexit handler (where logging
# flushes its handlers, trackers upload, pools join their workers) and a finalizer.
ENDS = """\
import atexit, os, sys, weakref

class Writer:
    pass

writer = Writer()
weakref.finalize(writer, print, "finalizer ran", flush=True)
atexit.register(print, "atexit ran", flush=True)
print("trained", flush=True)
if sys.argv[1] == "os._exit":
    os._exit(0)
"""


def test_os_exit_runs_no_atexit_handler_and_no_finalizer():
    # 04-34, 04-35: os._exit(0) ends the process at once: neither the atexit handlers nor
    # the finalizers a normal exit runs.
    said = {}
    for end in ("os._exit", "return"):
        run = subprocess.run(
            [sys.executable, "-c", ENDS, end], capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, run.stderr
        said[end] = run.stdout.splitlines()
    assert said["os._exit"] == ["trained"]
    assert sorted(said["return"]) == ["atexit ran", "finalizer ran", "trained"]
