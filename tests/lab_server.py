"""The README's `make lab`, started for a test on a free loopback port and stopped after."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request

import psutil

from support import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def make_lab(token: str, target: str = "lab", **env):
    """`make lab` (or `make notebook`) with this token (and env), headless; yields its base
    address.

    Stopping it leaves nothing behind: the server's kernels and their ranks are checked.
    """
    port = free_port()
    environ = dict(os.environ, PORT=str(port), JUPYTER_TOKEN=token, **env)
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "DDP_HELPERS_OUTPUT", "JUPYTER_CONFIG_PATH"):
        environ.pop(name, None)  # headless, and as a learner's lab prints: as it comes
    proc = subprocess.Popen(
        ["make", target],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, f"`make {target}` did not start in 120 s"
                time.sleep(0.5)
        yield base
    finally:
        family = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGTERM)  # the server shuts its kernels down
        proc.wait(timeout=60)
        _, alive = psutil.wait_procs(family, timeout=20)
        assert not alive, f"left running after `make {target}` stopped: {alive}"
