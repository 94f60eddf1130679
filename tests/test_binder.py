"""Binder's configuration (.binder/, read by repo2docker), as far as this machine can try it.

repo2docker itself needs Docker and the network, so these tests take its steps one by one:
the requirements, handed to pip against loopback stand-ins for PyPI and PyTorch's CPU index,
resolve torch to the CPU build and pin what constraints.txt pins; postBuild, run in a fresh
virtual environment as repo2docker runs it (in the repository's folder, after the
requirements), installs the package from the repository without fetching anything and leaves
the course's settings where Jupyter reads them, which a real Notebook 7 server then shows.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import urllib.request
import zipfile
from pathlib import Path

from lab_server import jupyter_server
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ddp_helpers import versions
from support import ROOT

BINDER = ROOT / ".binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LESSON = "lessons/01_rank_and_world_size.ipynb"


def _requirements() -> tuple[list[str], dict[str, Requirement]]:
    """requirements.txt's option lines and its requirements by (canonical) name."""
    options, reqs = [], {}
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-"):
            options.append(line)
        elif line:
            req = Requirement(line)
            reqs[canonicalize_name(req.name)] = req
    return options, reqs


def _locked() -> dict[str, str]:
    """constraints.txt: the exact version of each package behind the stored outputs."""
    return versions.locked((ROOT / "constraints.txt").read_text())


def _pinned(req: Requirement) -> str:
    (spec,) = req.specifier
    assert spec.operator == "==", f"{req} is not pinned with =="
    return spec.version


def test_requirements_pin_a_cpu_torch_and_the_versions_of_constraints_txt():
    options, reqs = _requirements()
    # PyPI stays the main index (most of these packages are only there); torch's CPU build
    # comes from PyTorch's own.
    assert options == [f"--extra-index-url {CPU_INDEX}"]
    locked = _locked()
    torch = Version(_pinned(reqs["torch"]))
    assert torch.local == "cpu", f"torch=={torch}: not the CPU build"
    assert torch.public == locked["torch"]
    others = {name: _pinned(req) for name, req in reqs.items() if name != "torch"}
    assert others == {name: locked[name] for name in others}
    # postBuild installs the package with --no-deps: every dependency must be here, in range.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dep.name)
        assert name in reqs, f"{dep.name} (a dependency of the package) is missing"
        assert dep.specifier.contains(Version(_pinned(reqs[name])).public), dep
    assert {"ipykernel", "jupyterlab", "notebook"} <= set(reqs)
    # Binder's Python is the one constraints.txt was compiled with (its header says which).
    compiled = re.search(
        r"pip-compile with Python (\d+\.\d+)", (ROOT / "constraints.txt").read_text()
    )
    assert compiled, "constraints.txt does not say which Python it was compiled with"
    assert (BINDER / "runtime.txt").read_text().strip() == f"python-{compiled[1]}"


def _fake_wheel(folder: Path, name: str, version: str) -> str:
    """An empty wheel that pip takes for `name` `version` (all a dry run reads)."""
    dist = f"{name.replace('-', '_')}-{version}"
    filename = f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(folder / filename, "w") as whl:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        whl.writestr(f"{dist}.dist-info/METADATA", meta)
        whl.writestr(
            f"{dist}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{dist}.dist-info/RECORD", "")
    return filename


@contextlib.contextmanager
def _serve(folder: Path):
    """A static HTTP server on 127.0.0.1 for folder; yields its address."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _index(root: Path, versions: dict[str, str]) -> None:
    """A PEP 503 simple index under root: each project with one fake wheel."""
    for name, version in versions.items():
        folder = root / name
        folder.mkdir(parents=True)
        wheel = _fake_wheel(folder, name, version)
        (folder / "index.html").write_text(
            f'<html><body><a href="{wheel}">{wheel}</a></body></html>'
        )


def _pip_env(**extra) -> dict:
    """This environment without any pip configuration: no index but the ones given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    return dict(env, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)


def test_requirements_resolve_torch_to_the_cpu_build_though_pypi_has_the_same_version(tmp_path):
    """PyPI's torch 2.13.0 is the CUDA build; the CPU index's is 2.13.0+cpu. pip, given the
    real requirements.txt (its CPU index's address pointed at a loopback copy), picks the
    CPU build, and every other pin from PyPI."""
    _, reqs = _requirements()
    _index(tmp_path / "pypi", {name: Version(_pinned(r)).public for name, r in reqs.items()})
    _index(tmp_path / "cpu", {"torch": _pinned(reqs["torch"])})
    with _serve(tmp_path) as base:
        text = (BINDER / "requirements.txt").read_text()
        assert CPU_INDEX in text
        local = tmp_path / "requirements.txt"
        local.write_text(text.replace(CPU_INDEX, f"{base}/cpu/"))
        report = tmp_path / "report.json"
        run = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
             "--no-deps", "--no-cache-dir", "--index-url", f"{base}/pypi/",
             "--report", str(report), "-r", str(local)],
            env=_pip_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    chosen = {
        canonicalize_name(item["metadata"]["name"]): (
            item["metadata"]["version"],
            item["download_info"]["url"].removeprefix(base).split("/")[1],
        )
        for item in json.loads(report.read_text())["install"]
    }
    assert chosen["torch"] == (_pinned(reqs["torch"]), "cpu")
    assert {n: v for n, v in chosen.items() if n != "torch"} == {
        n: (_pinned(r), "pypi") for n, r in reqs.items() if n != "torch"
    }


def _checkout(dest: Path) -> Path:
    """The repository's files as a clone has them (and new ones not yet committed)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _fresh_venv(path: Path) -> Path:
    """A virtual environment that sees none of this one's packages; pip from ensurepip, and
    this environment's setuptools copied in (on Binder, torch's requirements bring it)."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "uninstall", "--yes", "--quiet", "setuptools"],
        env=_pip_env(), check=True, timeout=60,
    )  # fmt: skip
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    setuptools = importlib.metadata.distribution("setuptools")
    for file in setuptools.files:
        source = Path(setuptools.locate_file(file))
        if source.is_file() and "__pycache__" not in file.parts:
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / file)
    return python


def _notebook_server(root: Path, config: Path, token: str):
    """`jupyter notebook` (this environment's) reading config as one of its config folders."""
    return jupyter_server("notebook", root, config, token)


def test_postbuild_installs_the_package_in_place_and_the_courses_settings(tmp_path):
    repo = _checkout(tmp_path / "repo")
    python = _fresh_venv(tmp_path / "venv")
    env = _pip_env(
        PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}",
        VIRTUAL_ENV=str(python.parent.parent),
        PIP_NO_INDEX="1",  # postBuild must not need the network: all it needs is there
    )
    script = repo / ".binder" / "postBuild"
    script.chmod(0o755)  # as repo2docker does, then runs it from the repository's folder
    run = subprocess.run(
        ["./.binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr

    # The package is the repository's own folder (editable), and only it was installed.
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(u.find_spec('ddp_helpers').origin); print(m.version('ddp-basics'))"
    )
    out = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    origin, version = out.stdout.split()
    assert Path(origin) == repo / "ddp_helpers" / "__init__.py", out.stderr
    assert version == tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], env=env, capture_output=True, text=True
    )
    assert {p["name"] for p in json.loads(listed.stdout)} == {"ddp-basics", "pip", "setuptools"}

    # The settings, in <prefix>/etc/jupyter, the folder a Jupyter installed in that
    # environment reads. (The fresh environment has no Jupyter: this one's serves with that
    # folder as its config folder; without it, Notebook 7 has build prompts, windowed cells
    # and its tree as the start page.)
    etc = tmp_path / "venv" / "etc" / "jupyter"
    for name in ("page_config.json", "default_setting_overrides.json"):
        assert (etc / "labconfig" / name).is_file(), run.stdout
    with _notebook_server(repo, etc, "binder") as base:
        with urllib.request.urlopen(f"{base}/?token=binder") as page:
            assert page.url.startswith(f"{base}/lab/tree/{LESSON}")
            assert '"buildCheck": false' in page.read().decode()
        url = f"{base}/lab/api/settings/@jupyterlab/notebook-extension:tracker?token=binder"
        with urllib.request.urlopen(url) as resp:
            tracker = json.loads(resp.read())["schema"]["properties"]
        assert tracker["windowingMode"]["default"] == "none"
