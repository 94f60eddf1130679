"""The README's `make lab`, started for a test on a free loopback port and stopped after; and
`jupyter lab` or `jupyter notebook` with a config folder of the test's choosing."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

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


@contextlib.contextmanager
def jupyter_server(app: str, root, config, token: str):
    """`jupyter lab` or `jupyter notebook` (this environment's) serving root, with config as
    its only config folder (JUPYTER_CONFIG_PATH, as `make lab` passes jupyter/), headless on
    a free loopback port; yields its base address, and leaves nothing running."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(JUPYTER_CONFIG_PATH=str(config), JUPYTER_TOKEN=token)
    env.pop("DISPLAY", None)
    proc = subprocess.Popen(
        [Path(sys.executable).parent / "jupyter", app, "--no-browser", "--allow-root",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.root_dir={root}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                time.sleep(0.5)
        else:
            raise AssertionError(f"jupyter {app} did not start in 120 s")
        yield base
    finally:
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.terminate()
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, alive
