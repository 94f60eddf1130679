"""The suite's own shape: the marks conftest.py gives each file, and the fast inner loop
(`make test-fast`: `-m "not e2e"`) that they make."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from support import ROOT


def _root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_file_or_folder_given_marks_exists():
    marks = _root_conftest().MARKS
    missing = [where for where in marks if not (ROOT / where).exists()]
    assert missing == [], f"conftest.py's MARKS names what is gone: {missing}"


def test_the_fast_loop_holds_no_notebook_and_no_end_to_end_file():
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "not e2e",
            "-p",
            "no:randomly",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    files = {i.split("::")[0] for i in ids}
    assert len(ids) > 300, f"the fast loop collected only {len(ids)} tests"
    end_to_end = [f for f in files if f.startswith("solutions/") or _root_conftest().marks_of(f)]
    assert end_to_end == [], end_to_end
    # and what a browser test is, wherever it lives: never in the fast loop
    assert not any("in_a_browser" in i or "test_browser" in i for i in ids)
