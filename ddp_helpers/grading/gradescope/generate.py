"""The autograder's zip, built on the instructor's machine: `python -m ddp_helpers
autograder --lesson NN`. It holds Gradescope's two scripts (setup.sh and run_autograder,
files beside this module, with the lesson, torch and the wheel's name filled in), the
course's wheel, the pins it installs at (constraints.txt) and the config (config.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ...exercises import notebook_name
from ...files import replaced_whole
from ...paths import PACKAGE, ROOT
from ...versions import release, requirement_lines
from ..defaults import DEFAULT_TIMEOUT, DEFAULT_VISIBILITY, DEFAULT_ZIP
from .config import CONFIG, DISTRIBUTION, SKIP, TORCH_INDEX, AutograderError

# The exact versions behind the stored outputs, where the project keeps them (else the pins
# of pyproject.toml).
CONSTRAINT_FILES = ("constraints.txt",)
# Gradescope's two scripts, as the zip holds them (placeholders: @LESSON@, @TORCH@ ...).
SCRIPTS = {
    name: Path(__file__).with_name(name).read_text(encoding="utf-8")
    for name in ("setup.sh", "run_autograder")
}

INSTRUCTOR_TEXT = {
    "no_project": (
        "The autograder is built from the course's own folder (pyproject.toml beside "
        "ddp_helpers/), and this copy of ddp_helpers is not in one ({package}). Run the "
        "command in a clone of the course, after `make setup`."
    ),
    "wheel_failed": (
        "Building the course's wheel failed (pip wheel, {how}):\n{output}\nIt needs "
        "setuptools 61 or newer in this environment (`{python} -m pip install setuptools`), "
        "or the package index to fetch it from; no autograder was written."
    ),
    "built": (
        "Wrote {out}: Gradescope's autograder for lesson {lesson} ({notebook}): ddp-basics "
        "{version}, torch {torch} (CPU), pins from {pins}; a notebook may run {timeout:g} s. "
        "Upload it as a programming assignment's autograder (Ubuntu base image; 2 CPUs and "
        "2 GB or more); learners submit their {notebook}."
    ),
}


def _project_root() -> Path:
    if not (ROOT / "pyproject.toml").is_file():
        raise AutograderError(INSTRUCTOR_TEXT["no_project"].format(package=PACKAGE))
    return ROOT


def _build_wheel(root: Path, tmp: Path) -> Path:
    """The course's wheel, built from a copy of its sources (the clone stays as it was)."""
    src, out = tmp / "src", tmp / "dist"
    src.mkdir()
    for path in root.iterdir():
        if path.is_file() and path.name.startswith(("pyproject.toml", "README", "LICENSE")):
            shutil.copy2(path, src / path.name)
    shutil.copytree(root / "ddp_helpers", src / "ddp_helpers", ignore=shutil.ignore_patterns(*SKIP))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"]
    if importlib.util.find_spec("setuptools") is not None:  # else pip fetches it to build
        argv += ["--no-build-isolation", "--no-index"]
    argv += ["-q", "-w", str(out), str(src)]
    run = subprocess.run(argv, capture_output=True, text=True, cwd=tmp)
    wheels = sorted(out.glob("*.whl")) if out.is_dir() else []
    if run.returncode != 0 or len(wheels) != 1:
        output = "\n".join((run.stdout + run.stderr).strip().splitlines()[-15:])
        how = f"exit code {run.returncode}"
        raise AutograderError(
            INSTRUCTOR_TEXT["wheel_failed"].format(how=how, output=output, python=sys.executable)
        )
    return wheels[0]


def _constraint(line: str) -> str | None:
    """`name==version` (with its marker) for pip's -c, or None: a constraint has no extras
    or URL, and this package itself comes from the wheel."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    if req.url or not req.specifier or canonicalize_name(req.name) == DISTRIBUTION:
        return None
    # A local label (+cpu, +cu128) names one build: the image gets PyTorch's CPU one.
    specifier = ",".join(str(s).split("+")[0] for s in req.specifier)
    return f"{req.name}{specifier}" + (f"; {req.marker}" if req.marker else "")


def _pins(root: Path) -> tuple[str, str, str, str]:
    """(constraints.txt for the zip, torch's version, where the pins came from, extras).

    The pins are the project's constraints file; without one, the exact pins of
    pyproject.toml, and this environment's version of each dependency given as a range.
    """
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    for name in CONSTRAINT_FILES:
        if (root / name).is_file():
            pins = [
                _constraint(line) for line in requirement_lines((root / name).read_text("utf-8"))
            ]
            break
    else:
        name, pins = "pyproject.toml and this environment", []
        for line in project.get("dependencies", []) + extras.get("grade", []):
            req = Requirement(line)
            if not any(s.operator == "==" for s in req.specifier):
                try:
                    line = f"{req.name}=={version(req.name)}"
                except PackageNotFoundError:
                    pass
            pins.append(_constraint(line))
    pins = [p for p in pins if p is not None]
    torch = [p.split("==", 1)[1] for p in pins if p.lower().startswith("torch==")]
    torch_version = torch[0].split(";")[0].strip() if torch else _torch_installed()
    extra = "[grade]" if "grade" in extras else ""
    return "".join(p + "\n" for p in pins), torch_version, name, extra


def _torch_installed() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from ...torch_compat import KNOWN_GOOD

    try:
        return release(version("torch"))
    except PackageNotFoundError:
        return KNOWN_GOOD[0]


def _write_zip(out: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """The zip, made whole beside `out` and then moved into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with replaced_whole(out, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16  # a regular file, with its mode
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)


def build_autograder(
    lesson: str,
    out=DEFAULT_ZIP,
    timeout: float = DEFAULT_TIMEOUT,
    hidden_visibility: str = DEFAULT_VISIBILITY,
) -> str:
    """Write Gradescope's autograder zip for a lesson; return the line that says what it is."""
    from importlib.metadata import version

    root = _project_root()
    out = Path(out)
    constraints, torch, pins, extras = _pins(root)
    with tempfile.TemporaryDirectory(prefix="ddp-autograder-") as tmp:
        wheel = _build_wheel(root, Path(tmp))
        config = {
            "lesson": lesson,
            "timeout": timeout,
            "hidden_visibility": hidden_visibility,
            "distribution": DISTRIBUTION,
            "version": version(DISTRIBUTION),
            "torch": torch,
        }
        setup = SCRIPTS["setup.sh"].replace("@LESSON@", lesson)
        setup = setup.replace("@TORCH_INDEX@", TORCH_INDEX)
        setup = setup.replace("@TORCH@", torch).replace("@WHEEL@", wheel.name)
        setup = setup.replace("@EXTRAS@", extras)
        _write_zip(
            out,
            {
                "setup.sh": (setup.encode(), 0o755),
                "run_autograder": (SCRIPTS["run_autograder"].encode(), 0o755),
                CONFIG: (json.dumps(config, indent=2).encode() + b"\n", 0o644),
                "constraints.txt": (constraints.encode(), 0o644),
                f"dist/{wheel.name}": (wheel.read_bytes(), 0o644),
            },
        )
    return INSTRUCTOR_TEXT["built"].format(
        out=out,
        lesson=lesson,
        notebook=notebook_name(lesson),
        version=config["version"],
        torch=torch,
        pins=pins,
        timeout=timeout,
    )
