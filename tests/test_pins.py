"""environment.yml and pyproject.toml must install the same pinned packages."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins(requirements) -> dict[str, str]:
    pins = {}
    for req in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)\s*", req)
        assert m, f"not pinned with ==: {req!r}"
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_environment_yml_pins_what_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected = _pins(project["dependencies"] + project["optional-dependencies"]["dev"])
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = lines.index("  - pip:")
    pip_lines = [line.strip()[2:] for line in lines[start + 1 :] if line.strip().startswith("- ")]
    assert "-e ." in pip_lines, "environment.yml must install the course package itself"
    assert _pins([p for p in pip_lines if p != "-e ."]) == expected
    assert expected["torch"] == "2.13.0"
