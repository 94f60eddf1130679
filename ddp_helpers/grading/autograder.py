"""Gradescope's own autograder: `python -m ddp_helpers autograder --lesson NN` builds its zip.

Gradescope builds an image from the zip once (setup.sh, as root: CPU-only torch and this
package's wheel at the course's pins, then `python -m ddp_helpers.grading.autograder
setup`), and runs run_autograder in a fresh container of it for each submission: `run`
picks the notebook in /autograder/submission and grades it with `grade` (batch.py,
gradescope.py), which writes /autograder/results/results.json. The container is the
sandbox there: bubblewrap's user namespaces are usually blocked inside it, so --no-sandbox,
said outright (the default would say in its output that bubblewrap cannot run).
AUTOGRADER_ROOT moves /autograder elsewhere (tests).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..exercises import LESSONS, notebook_name
from ..files import replaced_whole
from .defaults import DEFAULT_OUT, DEFAULT_VISIBILITY

DISTRIBUTION = "ddp-basics"
CONFIG = "autograder.json"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # CPU-only wheels, reachable from Gradescope
# The exact versions behind the stored outputs, where the project keeps them (else the pins
# of pyproject.toml).
CONSTRAINT_FILES = ("constraints.txt",)
_SKIP = (".ipynb_checkpoints", "__MACOSX", "__pycache__")

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
    "version_mismatch": (
        "setup.sh installed {name} {found}, but this autograder was built with {wanted}. "
        "Build the zip again (`python -m ddp_helpers autograder --lesson {lesson}`) and "
        "upload it; nothing else should install {name} in the image."
    ),
    "torch_mismatch": (
        "torch {found} is installed, but this autograder pins torch {wanted}, the version "
        "the course's checks are tested with. Install that version (setup.sh does, from "
        "{index}) or build the zip again from a course with other pins."
    ),
    "missing_module": (
        "The grader needs {module}, which is not installed ({error}); setup.sh installs it "
        "with the course's wheel: see the pip output above."
    ),
    "ready": (
        "Autograder for lesson {lesson} ready: ddp-basics {version}, torch {torch}, "
        "Python {python} ({executable})."
    ),
    "no_config": (
        "{path} is missing or unreadable ({error}): {source} is not the folder of an "
        "autograder that `python -m ddp_helpers autograder` built."
    ),
    "no_notebook": (
        "No notebook (.ipynb) was submitted{found}. Submit lesson {lesson}'s notebook, "
        "{notebook} (JupyterLab: File > Download), as a file of its own."
    ),
    "found": " (the submission holds {files})",
    "several": (
        "{count} notebooks were submitted ({files}), and none of them is lesson {lesson}'s "
        "alone. Submit only lesson {lesson}'s notebook, {notebook}."
    ),
}


class AutograderError(Exception):
    """The autograder cannot be built, set up or run; the message says what to do."""


# ---------------------------------------------------------------- the scripts in the zip

SETUP_SH = r"""#!/usr/bin/env bash
# DDP Basics: Gradescope's autograder for lesson @LESSON@. Gradescope runs this once, as root,
# when it builds the autograder's image: Python 3.11 or newer, a virtual environment in
# .venv with CPU-only torch and the course's package at the versions of constraints.txt,
# then a check of what was installed (python -m ddp_helpers.grading.autograder setup).
#   bash setup.sh --skip-install   only that check, with $PYTHON: an environment that
#                                  already holds the package and torch (the course's tests)
# TORCH_INDEX_URL: another index for torch (default: PyTorch's CPU-only wheels).
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$SOURCE"

python_311() {  # the first Python 3.11 or newer
  local py
  for py in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$py"
      return 0
    fi
  done
  return 1
}

if [ "${1:-}" != "--skip-install" ]; then
  if ! python_311 >/dev/null; then  # Ubuntu 22.04: Python 3.10, with a 3.11 beside it
    apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv
  fi
  PY="$(python_311)" || {
    echo "setup.sh: no Python 3.11 or newer: choose Gradescope's Ubuntu 24.04 base image" >&2
    exit 1
  }
  if ! "$PY" -m venv "$SOURCE/.venv"; then  # Ubuntu's venv module is a package of its own
    rm -rf "$SOURCE/.venv"
    minor="$("$PY" -c 'import sys; print(sys.version_info[1])')"
    apt-get update -qq && apt-get install -y -qq "python3.$minor-venv"
    "$PY" -m venv "$SOURCE/.venv"
  fi
  PIP=("$SOURCE/.venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check)
  # torch alone from PyTorch's CPU index (PyPI's Linux build brings CUDA: gigabytes); its
  # dependencies then come from PyPI at the course's pins, with the package.
  "${PIP[@]}" --no-deps --index-url "${TORCH_INDEX_URL:-@TORCH_INDEX@}" "torch==@TORCH@"
  "${PIP[@]}" -c constraints.txt "./dist/@WHEEL@@EXTRAS@"
  "$SOURCE/.venv/bin/python" -m pip check
  PYTHON="$SOURCE/.venv/bin/python"
fi
PY="$(python_311)" || { echo "setup.sh: no Python 3.11 or newer (set PYTHON)" >&2; exit 1; }
exec "$PY" -m ddp_helpers.grading.autograder setup "$SOURCE"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# DDP Basics: Gradescope runs this for each submission, as /autograder/run_autograder. It
# grades the notebook in /autograder/submission into /autograder/results/results.json.
# AUTOGRADER_ROOT moves /autograder elsewhere (tests).
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
cd "$ROOT"
PY="$(cat "$ROOT/source/python" 2>/dev/null || true)"
if [ -z "$PY" ] || [ ! -x "$PY" ]; then
  echo "run_autograder: $ROOT/source/python names no Python: setup.sh did not finish." >&2
  exit 1
fi
exec "$PY" -m ddp_helpers.grading.autograder run --root "$ROOT"
"""


# ---------------------------------------------------------------- building the zip


def _project_root() -> Path:
    from ..paths import PACKAGE as package
    from ..paths import ROOT as root

    if not (root / "pyproject.toml").is_file():
        raise AutograderError(INSTRUCTOR_TEXT["no_project"].format(package=package))
    return root


def _build_wheel(root: Path, tmp: Path) -> Path:
    """The course's wheel, built from a copy of its sources (the clone stays as it was)."""
    src, out = tmp / "src", tmp / "dist"
    src.mkdir()
    for path in root.iterdir():
        if path.is_file() and path.name.startswith(("pyproject.toml", "README", "LICENSE")):
            shutil.copy2(path, src / path.name)
    shutil.copytree(
        root / "ddp_helpers", src / "ddp_helpers", ignore=shutil.ignore_patterns(*_SKIP)
    )
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


def _lines(text: str) -> list[str]:
    """The requirements of a requirements or constraints file (pip-compile's too)."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].split(" --")[0].strip()  # comments, --hash and such
        if line and not line.startswith(("#", "-")):  # options: --index-url, -e, -c ...
            found.append(line)
    return found


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
            pins = [_constraint(line) for line in _lines((root / name).read_text("utf-8"))]
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

    from ..torch_compat import KNOWN_GOOD
    from ..versions import release

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
    out="autograder.zip",
    timeout: float = 300.0,
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
        setup = SETUP_SH.replace("@LESSON@", lesson).replace("@TORCH_INDEX@", TORCH_INDEX)
        setup = setup.replace("@TORCH@", torch).replace("@WHEEL@", wheel.name)
        setup = setup.replace("@EXTRAS@", extras)
        _write_zip(
            out,
            {
                "setup.sh": (setup.encode(), 0o755),
                "run_autograder": (RUN_AUTOGRADER.encode(), 0o755),
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


# ---------------------------------------------------------------- inside Gradescope's image


def read_config(source: Path) -> dict:
    path = source / CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        if config["lesson"] not in LESSONS:
            raise KeyError(f"no lesson {config['lesson']!r}")
        return config
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AutograderError(
            INSTRUCTOR_TEXT["no_config"].format(path=path, error=exc, source=source)
        ) from None


def finish_setup(source: Path) -> str:
    """setup.sh's check: the package and torch it pins, the grader's modules; then record
    this Python for run_autograder (source/python). Returns the line that says so."""
    import platform
    from importlib.metadata import version

    from ..exercises import exercises_of

    config = read_config(source)
    found = version(config["distribution"])
    if found != config["version"]:
        raise AutograderError(
            INSTRUCTOR_TEXT["version_mismatch"].format(
                name=config["distribution"], found=found, wanted=config["version"], **config
            )
        )
    for module in ("torch", "ipykernel", "jupyter_client", "nbformat", "psutil", "cloudpickle"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise AutograderError(
                INSTRUCTOR_TEXT["missing_module"].format(module=module, error=exc)
            ) from None
    import torch

    from ..versions import torch_release

    if torch_release() != config["torch"]:
        raise AutograderError(
            INSTRUCTOR_TEXT["torch_mismatch"].format(
                found=torch.__version__, wanted=config["torch"], index=TORCH_INDEX
            )
        )
    exercises_of(config["lesson"])  # the checks and the extra cases import
    (source / "python").write_text(sys.executable + "\n", encoding="utf-8")
    return INSTRUCTOR_TEXT["ready"].format(
        lesson=config["lesson"],
        version=found,
        torch=torch.__version__,
        python=platform.python_version(),
        executable=sys.executable,
    )


def _listed(paths: list[Path], folder: Path) -> str:
    names = [p.relative_to(folder).as_posix() for p in paths[:8]]
    return ", ".join(names) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")


def pick_notebook(folder: Path, lesson: str) -> tuple[Path | None, str | None]:
    """(the notebook to grade, None) or (None, why there is none to grade)."""
    from .submissions import lesson_of

    files = sorted(
        p
        for p in (folder.rglob("*") if folder.is_dir() else ())
        if p.is_file() and not any(part in _SKIP for part in p.relative_to(folder).parts)
    )
    notebooks = [p for p in files if p.suffix.lower() == ".ipynb"]
    words = {"lesson": lesson, "notebook": notebook_name(lesson)}
    if not notebooks:
        found = INSTRUCTOR_TEXT["found"].format(files=_listed(files, folder)) if files else ""
        return None, INSTRUCTOR_TEXT["no_notebook"].format(found=found, **words)
    if len(notebooks) == 1:
        return notebooks[0], None
    for pick in (
        [p for p in notebooks if p.name == words["notebook"]],
        [p for p in notebooks if lesson_of(p) == (lesson, None)],
    ):
        if len(pick) == 1:
            return pick[0], None
    files = _listed(notebooks, folder)
    return None, INSTRUCTOR_TEXT["several"].format(count=len(notebooks), files=files, **words)


def run(root: Path) -> int:
    """Grade root/submission into root/results/results.json; 0, or 2 with the error said."""
    from .api import run_batch
    from .batch import GradeOptions
    from .budget import TimeBudget
    from .gradescope import write_results
    from .results import Row, Submission
    from .submissions import GradingError

    source, results = root / "source", root / "results"
    config = read_config(source)
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").unlink(missing_ok=True)  # only this run's verdict counts
    notebook, problem = pick_notebook(root / "submission", config["lesson"])
    if notebook is None:
        sub = Submission(root / "submission", "submission", None, problem)
        write_results(Row.invalid(sub), results / "results.json")
        print(f"invalid: {problem}", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="ddp-autograder-") as tmp:
        options = GradeOptions(
            out=os.path.join(tmp, DEFAULT_OUT),
            budget=TimeBudget(notebook=float(config["timeout"])),
            lesson=config["lesson"],
            gradescope=results,
            hidden_visibility=config["hidden_visibility"],
            sandbox=False,  # Gradescope's container is the sandbox
        )
        try:
            run_batch([str(notebook)], options)
        except (GradingError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    return 0


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ddp_helpers.grading.autograder",
        description="The Python side of setup.sh and run_autograder in Gradescope's image.",
    )
    steps = parser.add_subparsers(dest="step", required=True)
    setup = steps.add_parser("setup", help="check the installation; record this Python")
    setup.add_argument("source", help="the unpacked zip (/autograder/source)")
    grade = steps.add_parser("run", help="grade root/submission into root/results")
    grade.add_argument(
        "--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"), help="(/autograder)"
    )
    args = parser.parse_args(argv)
    try:
        if args.step == "setup":
            print(finish_setup(Path(args.source)))
            return 0
        return run(Path(args.root))
    except AutograderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
