"""`make lab` serves the course: headless, on the port asked for, as root or not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request

from conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_the_lessons_on_the_given_port():
    port = _free_port()
    env = dict(os.environ, PORT=str(port), JUPYTER_TOKEN="ddp-test")
    env.pop("DISPLAY", None)
    proc = subprocess.Popen(
        ["make", "lab"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token=ddp-test", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "JupyterLab did not start in 120 s"
                time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/?token=ddp-test", timeout=5) as resp:
            assert "/lab/tree/lessons" in resp.url
        with urllib.request.urlopen(f"{base}/api/contents/lessons?token=ddp-test") as resp:
            assert b'"type": "directory"' in resp.read()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
