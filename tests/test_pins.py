"""Ranges in pyproject.toml, exact versions in constraints.txt, and environment.yml agreeing.

pyproject.toml says which releases the code works with (what a learner's own kernel may
hold); constraints.txt, the lock, says which version of each package `make` installs (the
stored outputs were made with them); environment.yml must install the same as `make`.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ddp_helpers import versions
from ddp_helpers.torch_compat import KNOWN_GOOD
from support import ROOT

LOCK = ROOT / "constraints.txt"
RELOCK = "run `make lock` and commit constraints.txt"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> list[Requirement]:
    project = _project()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def _lock() -> dict[str, str]:
    return versions.locked(LOCK.read_text())  # a line that is no plain pin: ValueError


def _installed_locked():
    """(name, locked version, installed metadata) of each locked package installed here."""
    for name, version in _lock().items():
        try:
            yield name, version, importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # e.g. a package only one platform needs


def _environment_yml_pip_lines() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = lines.index("  - pip:")
    return [line.strip()[2:] for line in lines[start + 1 :] if line.strip().startswith("- ")]


def test_every_dependency_is_locked_at_a_version_its_range_admits():
    lock = _lock()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is in pyproject.toml but not in constraints.txt: {RELOCK}"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={lock[name]}, outside pyproject.toml's "
            f"{req}: {RELOCK}"
        )


def test_every_locked_version_installs_on_the_oldest_python_the_course_admits():
    """README: Python 3.11 or newer. Debian 12's is 3.11.2; soupsieve 4.1.3 wants 3.11.5."""
    oldest = Version(re.search(r"[\d.]+", _project()["requires-python"]).group())
    wrong = [
        f"{name}=={version} (Python {wants})"
        for name, version, meta in _installed_locked()
        if Version(meta["Version"]).public == version
        and (wants := meta.get("Requires-Python"))
        and oldest not in SpecifierSet(wants)
    ]
    assert not wrong, (
        f"the lock does not install on Python {oldest}: " + ", ".join(wrong) + "; pin an "
        "older release of each in constraints.txt (make lock keeps a version that fits)"
    )


def test_the_learners_dependencies_are_ranges_not_pins():
    for req in map(Requirement, _project()["dependencies"]):
        assert not any(s.operator in ("==", "===") for s in req.specifier), (
            f"{req}: an exact pin here would replace that package in a learner's own kernel; "
            "pin it in constraints.txt (make lock) instead"
        )


def test_the_torch_range_is_the_one_make_compat_proved():
    (torch,) = [r for r in map(Requirement, _project()["dependencies"]) if r.name == "torch"]
    tested = sorted(Version(v) for v in KNOWN_GOOD)
    oldest, newest = tested[0], tested[-1]
    assert torch.specifier.contains(oldest) and torch.specifier.contains(newest)
    assert not torch.specifier.contains(f"{oldest.major}.{oldest.minor - 1}.99"), (
        f"{torch} admits a torch older than the oldest tested ({oldest})"
    )
    assert not torch.specifier.contains(f"{newest.major}.{newest.minor + 1}.0"), (
        f"{torch} admits a torch newer than the newest tested release line ({newest})"
    )
    assert _lock()["torch"] in KNOWN_GOOD


def test_the_lock_names_no_build_of_one_index_and_no_path_of_one_machine():
    text = LOCK.read_text()
    assert "file://" not in text and " @ " not in text and "/work/" not in text
    labelled = [v for v in _lock().values() if versions.release(v) != v]
    assert not labelled, f"a local label such as +cpu: make lock ({labelled})"


def test_environment_yml_installs_what_make_installs():
    lock = _lock()
    pip_lines = _environment_yml_pip_lines()
    pinned = {}
    for line in pip_lines:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*(\S+)", line)
        if m:
            pinned[canonicalize_name(m.group(1))] = m.group(2)
    for name, version in pinned.items():
        assert lock.get(name) == version, f"environment.yml pins {name}=={version}; the lock, " + (
            f"{lock.get(name)}"
        )
    if set(pinned) != set(lock):
        assert "-c constraints.txt" in pip_lines, (
            "environment.yml must install with the lock (`-c constraints.txt`) or pin every "
            "package it pins"
        )
    (course,) = [line for line in pip_lines if line.startswith("-e .")]
    assert course == "-e .[dev]", "environment.yml must install the course with its dev extra"


def test_this_environment_is_the_locked_one():
    """The tests run on the versions the stored outputs were made with (make installs them)."""
    wrong = [
        f"{name} {meta['Version']} (locked: {version})"
        for name, version, meta in _installed_locked()
        if Version(meta["Version"]).public != Version(version).public
    ]
    assert not wrong, "not the locked versions: " + ", ".join(wrong) + "; run `make setup`"
