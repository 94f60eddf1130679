"""`make compat`: the course installed into kernels that already hold their own torch.

A learner's kernel (Colab, Kaggle, VS Code, conda) comes with its torch and its Jupyter
kernel. For each environment below, this builds a fresh venv that already holds them,
runs the lessons' own set-up cell there (the one `build` writes for Colab and Kaggle, with
the course's wheel in place of the repository: no constraints.txt), and checks that the
install changed nothing that was there (torch, the kernel packages, the rest) and that
`pip check` is clean. Then, in that venv, the five solution notebooks run
under nbclient, 3 times each (--repeat), and every exercise's check must say correct, with
no warning, every time; the
launcher's fault tests run there (which rank is blamed rests on torch's error text); and
gloo's teardown deadlock is reproduced with the launcher's fix off and on
(benchmarks/gloo_teardown.py): the table says whether that torch still needs the fix; and
the claims suite (tests/claims) runs there: the lessons' sentences about torch that no
longer hold with that release are listed by cell (docs/claims.md).

    oldest   Colab-like: torch 2.8, ipykernel 6.17, IPython 7.34, Python 3.12, and every
             dependency at the oldest release line pyproject.toml admits
    previous torch 2.12, the release line before the lock's, the newest kernel, Python 3.12
    newest   the newest torch the package index serves, the newest kernel, Python 3.13

It prints a table. Each torch is gigabytes: the wheels are kept in a cache folder
(~/.cache/ddp-basics/compat, or --cache DIR), so a second run downloads nothing but what
the index has newer. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ddp_helpers.paths import ROOT  # the repository, as the package finds it

# What a hosted kernel already holds and must keep: the install may add, never change these.
KERNEL = ("torch", "ipykernel", "ipython", "jupyter-client", "jupyter-core", "pyzmq", "tornado")
FAULT_TESTS = (  # copied into one folder, where they import support as in tests/
    "conftest.py",
    "support.py",
    "cluster/slurm.py",  # conftest.py's SLURM fixture (kept in its folder: cluster.slurm)
    "launcher/test_faults.py",
    "launcher/test_failures.py",
    "launcher/test_output.py",
    "launcher/test_run.py",
    "launcher/test_tracebacks.py",
    "test_torch_compat.py",
    "exercises/test_load_device_text.py",
)
# The claims suite (tests/claims): what the lessons say of torch, shown on this torch.
CLAIMS_TESTS = tuple(
    f"test_claims_{name}.py"
    for name in (
        "basics",
        "collectives",
        "ddp",
        "guards",
        "teardown",
        "torchrun",
        "training",
        "sharding",
        "compile",
    )
)
PIP_TIMEOUT = 1800  # a cold cache downloads several GB
PREVIOUS = "2.12"  # the release line before the lock's torch (2.13)


class CompatError(Exception):
    """A step of one environment failed; the message says which and why."""


@dataclass
class Environment:
    """A fresh venv and what it holds before the course is installed."""

    name: str
    python: str
    holds: list[str]
    figures: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def oldest_line(requirement: str) -> str | None:
    """'torch>=2.8,<2.16' -> 'torch==2.8.*': the oldest release line the range admits."""
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(.*)", requirement)
    name, spec = m.group(1), m.group(2)
    low = re.search(r">=\s*([0-9]+(?:\.[0-9]+)*)", spec)
    if not low:
        return None
    parts = (low.group(1).split(".") + ["0"])[:2]
    return f"{name}=={'.'.join(parts)}.*"


def pip_environment() -> dict[str, str]:
    """This machine's pip settings (index, mirrors, certificates) without any constraint.

    A site-wide constraints file (pip.conf `constraint = ...`) would stop the torch under
    test from being installed; every other setting is kept, passed as PIP_* variables with
    no configuration file read.
    """
    env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        m = re.fullmatch(r"(global|install)\.([a-z0-9-]+)='(.*)'", line.strip())
        if m and m.group(2) != "constraint":
            env.setdefault("PIP_" + m.group(2).upper().replace("-", "_"), m.group(3))
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    return env


def run(cmd: list[str], env: dict, timeout: float = PIP_TIMEOUT, cwd=None) -> str:
    """Run cmd; its output, or CompatError with the end of it."""
    proc = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise CompatError(f"`{' '.join(map(str, cmd))}` failed ({proc.returncode}):\n{tail}")
    return proc.stdout


def newest_torch(env: dict) -> str:
    out = run([sys.executable, "-m", "pip", "index", "versions", "torch"], env, timeout=300)
    m = re.search(r"^torch \(([^)]+)\)", out, re.M)
    if not m:
        raise CompatError(f"`pip index versions torch` said no version:\n{out}")
    return m.group(1)


def environments(env: dict) -> list[Environment]:
    project = _project()
    grade = project["optional-dependencies"]["grade"]
    kernel = [r for r in grade if _norm(r).startswith("ipykernel")]
    floors = [oldest_line(r) for r in project["dependencies"] + kernel]
    newest = newest_torch(env)
    return [
        Environment("oldest", "3.12", [f for f in floors if f]),
        Environment("previous", "3.12", [f"torch=={PREVIOUS}.*", "ipykernel", "ipython"]),
        Environment("newest", "3.13", [f"torch=={newest}", "ipykernel", "ipython"]),
    ]


def interpreter(version: str) -> str:
    """A working python{version}: on PATH, or one of pyenv's (whose shim may not serve it)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in root.glob(f"versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print(sys.executable)"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return probe.stdout.strip()
    raise CompatError(
        f"no working python{version}: install it (e.g. pyenv install {version}, or apt-get "
        f"install python{version}-venv), or change this environment's `python` in {__file__}"
    )


def installed(py: Path, env: dict) -> dict[str, str]:
    out = run([str(py), "-m", "pip", "list", "--format=json"], env, timeout=120)
    return {_norm(p["name"]): p["version"] for p in json.loads(out)}


def build_wheel(folder: Path, env: dict) -> Path:
    """The course's wheel, built from a copy (setuptools leaves build/ where it builds)."""
    source = folder / "source"
    shutil.copytree(
        ROOT / "ddp_helpers", source / "ddp_helpers", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder), str(source)],
        env,
    )
    (wheel,) = folder.glob("ddp_basics-*.whl")
    return wheel


def prepare(e: Environment, work: Path, env: dict, cache: Path) -> Path:
    """The venv, holding what the kernel holds before the course arrives.

    The wheels go through the cache folder: pip's own HTTP cache is not enough, as a proxy
    may forbid storing (this one's does) and it keeps no file of several GB for long.
    """
    venv = work / e.name
    run([interpreter(e.python), "-m", "venv", str(venv)], env, timeout=300)
    py = venv / "bin" / "python"
    t0 = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    run([str(py), "-m", "pip", "download", "-q", "-d", str(cache), *e.holds], env)
    e.figures["download_s"] = time.monotonic() - t0
    run([str(py), "-m", "pip", "install", "-q", "--no-index", "-f", str(cache), *e.holds], env)
    e.figures["prepare_s"] = time.monotonic() - t0
    return py


def install_course(e: Environment, py: Path, wheel: Path, work: Path, env: dict) -> None:
    """The lessons' own set-up cell installs the wheel (no lock); nothing there may change.

    The cell is the one `build` puts at the top of every lesson for Colab and Kaggle, its
    requirement the wheel instead of the repository. Run twice in one kernel: the first
    installs and imports the course without a restart, the second must print nothing.
    """
    from ddp_helpers.authoring.build import SETUP_INSTALL
    from ddp_helpers.authoring.links import torch_range

    before = installed(py, env)
    cell = SETUP_INSTALL.format(requirement=str(wheel), torch=torch_range(ROOT / "pyproject.toml"))
    t0 = time.monotonic()
    try:
        nb = execute(py, work, [cell, cell], work / f"{e.name}-setup", env)
    except Exception as exc:  # noqa: BLE001 - what the learner would see stop the cell
        raise CompatError(f"the lessons' set-up cell failed: {str(exc)[-2000:]}") from None
    e.figures["install_s"] = time.monotonic() - t0
    if nb.cells[1].outputs:
        e.problems.append(f"the set-up cell, run again, printed: {_text(nb)[-500:]}")
    after = installed(py, env)
    changed = {n: (v, after.get(n, "removed")) for n, v in before.items() if after.get(n) != v}
    if changed:
        held = [n for n in changed if n in KERNEL]
        e.problems.append(
            "the install changed what the kernel held: "
            + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in changed.items())
            + (f" (of them, the kernel's own: {', '.join(held)})" if held else "")
        )
    e.figures["added"] = sorted(set(after) - set(before))
    e.figures["versions"] = {n: after.get(n, "-") for n in ("torch", "ipykernel", "ipython")}
    e.figures["versions"]["python"] = run(
        [str(py), "-c", "import sys; print(sys.version.split()[0])"], env
    ).strip()
    try:
        run([str(py), "-m", "pip", "check"], env, timeout=300)
    except CompatError as exc:
        e.problems.append(f"pip check: {exc}")
    where = run(
        [str(py), "-c", "import ddp_helpers; print(ddp_helpers.__file__)"], env, cwd=py.parent
    )
    if str(py.parent.parent) not in where:
        e.problems.append(f"ddp_helpers was imported from {where.strip()}, not from the venv")


def execute(py: Path, work: Path, cells, folder: Path, env: dict):
    """Run a notebook (or these code cells) in a kernel of the venv, in folder; return it.

    The kernel gets env: its `%pip` must see the same settings as the venv's set-up.
    Raises nbclient's CellExecutionError at a cell's error, as a learner would see it stop.
    """
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    specs = work / f"{py.parent.parent.name}-jupyter" / "kernels"
    name = "compat"
    if not (specs / name).exists():
        (specs / name).mkdir(parents=True)
        argv = [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (specs / name / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": argv,
                    "display_name": name,
                    "language": "python",
                    # ipykernel 6 under Python 3.12 warns about its debugger at every start.
                    "env": {"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
                }
            )
        )
    if isinstance(cells, list):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    else:
        nb = cells
    folder.mkdir(parents=True, exist_ok=True)
    km = KernelManager(
        kernel_name=name, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)])
    )
    try:
        NotebookClient(
            nb, km=km, timeout=300, resources={"metadata": {"path": str(folder)}}
        ).execute(env=env)
    finally:  # nbclient leaves running a kernel it was given
        if km.has_kernel:
            km.shutdown_kernel(now=False)
    return nb


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out:
                parts.append(out["data"].get("text/plain", ""))
            elif out.get("output_type") == "error":
                parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "\n".join(parts)


def run_notebooks(e: Environment, py: Path, work: Path, env: dict, repeat: int = 3) -> None:
    """Each solution notebook in the venv's kernel, `repeat` times, each time in a fresh
    kernel and folder: every check correct, no warning. A run that is clean once and not
    the next is a finding too (a hang under load, a race)."""
    from ddp_helpers.exercises import LESSONS

    e.figures["notebooks"] = {}
    for lesson in LESSONS:
        runs = [_run_notebook(e, py, work, env, lesson, n) for n in range(repeat)]
        e.figures["notebooks"][lesson] = runs


def _run_notebook(e: Environment, py: Path, work: Path, env: dict, lesson: str, n: int):
    """(seconds, checks correct, checks) of one run of a solution; its problems noted."""
    import nbformat

    from ddp_helpers.exercises import exercises_of, notebook_name

    path = ROOT / "solutions" / notebook_name(lesson)
    nb = nbformat.read(path, as_version=4)
    t0 = time.monotonic()
    try:  # in a folder of its own, as a learner's working folder
        execute(py, work, nb, work / f"{e.name}-run-{lesson}-{n}", env)
    except Exception as exc:  # noqa: BLE001 - the cell's error is the finding
        e.problems.append(f"{path.name} (run {n + 1}): {type(exc).__name__}: {str(exc)[-1500:]}")
    seconds = time.monotonic() - t0
    text = _text(nb)
    ids = [ex.id for ex in exercises_of(lesson)]
    passed = [i for i in ids if f"✅ Exercise {i}: correct" in text]
    where = f"{path.name} (run {n + 1})"
    if len(passed) != len(ids):
        e.problems.append(
            f"{where}: checks correct for {passed} of {ids}"
            + "".join(f"\n    {line}" for line in text.splitlines() if line[:1] in "❌⏳")
        )
    warnings = [line for line in text.splitlines() if "[ddp_helpers] warning" in line]
    noise = [line for line in text.splitlines() if "[Gloo]" in line]
    if warnings or noise:
        e.problems.append(f"{where}: " + "; ".join(warnings + noise[:3]))
    return seconds, len(passed), len(ids)


def run_fault_tests(e: Environment, py: Path, work: Path, env: dict) -> None:
    """The launcher's fault and torch_compat tests, on the installed wheel in the venv."""
    folder = work / f"{e.name}-tests"
    (folder / "tests").mkdir(parents=True)
    for name in FAULT_TESTS:
        to = folder / "tests" / (name if name.startswith("cluster/") else Path(name).name)
        to.parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "tests" / name, to)
    run([str(py), "-m", "pip", "install", "-q", "pytest"], env)
    t0 = time.monotonic()
    cmd = [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "tests"]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    e.figures["fault_tests_s"] = time.monotonic() - t0
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    e.figures["fault_tests"] = summary
    if proc.returncode != 0:
        e.problems.append(f"fault tests: {summary}\n{proc.stdout[-3000:]}{proc.stderr[-1000:]}")


def run_claims(e: Environment, py: Path, work: Path, env: dict) -> None:
    """tests/claims on this torch: each claim of docs/claims.md whose test fails here is a
    sentence of a lesson that no longer holds with it (noted, by cell, not a problem of the
    install: the table says how many)."""
    folder = work / f"{e.name}-claims"
    (folder / "tests").mkdir(parents=True)
    for name in (*CLAIMS_TESTS, "claims_support.py"):
        shutil.copy(ROOT / "tests" / "claims" / name, folder / "tests" / name)
    # The one marker the claims use (pyproject.toml declares it), or pytest warns at each.
    ini = "[pytest]\nmarkers =\n    under_launcher(why): see pyproject.toml\n"
    (folder / "pytest.ini").write_text(ini)
    run([str(py), "-m", "pip", "install", "-q", "pytest"], env)
    cmd = [str(py), "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "-o", "addopts="]
    wide = {**env, "COLUMNS": "400"}  # or the summary cuts each failure's reason to 80 columns
    proc = subprocess.run(
        [*cmd, "tests"], cwd=folder, env=wide, capture_output=True, text=True, timeout=900
    )
    log = work / f"{e.name}-claims.log"
    log.write_text(proc.stdout + proc.stderr)
    failed = failures(proc.stdout)
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    e.figures["claims"] = summary  # the whole output: {work}/<name>-claims.log, with --keep
    e.figures["claims_broken"] = [
        f"{cell} ({claim}): {failed[test]}" for cell, claim, test in claim_rows() if test in failed
    ]
    if proc.returncode not in (0, 1):  # 1: some claims fail, the finding; else pytest broke
        e.problems.append(f"claims suite: {summary}\n{proc.stdout[-2000:]}{proc.stderr[-1000:]}")


def failures(output: str) -> dict[str, str]:
    """pytest -rf's short summary: each failed test's name -> why (its first line, cut)."""
    failed = {}
    for line in output.splitlines():
        if line.startswith("FAILED "):
            test, _, why = line.removeprefix("FAILED ").partition(" - ")
            name = test.split("::")[-1].split("[")[0]
            failed.setdefault(name, why.strip()[:200] or "(no message)")
    return failed


def claim_rows() -> list[tuple[str, str, str]]:
    """(cell, claim, test name) of each row of docs/claims.md backed by a test (its
    evidence may name a source or a measurement after the test: `test: ... + source: ...`)."""
    rows = []
    for line in (ROOT / "docs" / "claims.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 4 and cells[3].startswith("test: "):
            test = re.match(r"test: tests/claims/(\w+\.py)::(\w+)", cells[3])
            if test and test.group(1) in CLAIMS_TESTS:
                rows.append((cells[0], cells[2], test.group(2)))
    return rows


TEARDOWN_RUNS = 20  # of each setting: the hang came in about 4 runs of 10 without the fix


def teardown_counts(output: str) -> dict[str, tuple[int, int]]:
    """benchmarks/gloo_teardown.py's summary: setting -> (bad runs, runs)."""
    counts = {}
    for line in output.splitlines():
        m = re.fullmatch(r"(.+?)\s+(\d+) bad of (\d+)", line.strip())
        if m:
            counts[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return counts


def run_teardown_reproducer(e: Environment, py: Path, work: Path, env: dict) -> None:
    """gloo's teardown deadlock with the launcher's fix off and on, on this torch: whether
    the fix is still needed (it hangs without) and whether it holds (never with)."""
    folder = work / f"{e.name}-teardown" / "benchmarks"
    folder.mkdir(parents=True)
    for name in ("gloo_teardown.py", "soak.py"):
        shutil.copy(ROOT / "benchmarks" / name, folder)
    cmd = [str(py), str(folder / "gloo_teardown.py"), "--runs", str(TEARDOWN_RUNS)]
    cmd += ["--block", str(TEARDOWN_RUNS)]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    counts = teardown_counts(proc.stdout)
    without, kept = counts.get("without the fix"), counts.get("groups kept until exit")
    if proc.returncode != 0 or without is None or kept is None:
        e.problems.append(f"teardown reproducer: {proc.stdout[-2000:]}{proc.stderr[-1000:]}")
        return
    need = "still needed" if without[0] else "not seen: perhaps fixed in this torch"
    e.figures["teardown"] = f"{without[0]}/{without[1]} bad without the fix ({need})"
    if kept[0]:
        e.problems.append(f"teardown: {kept[0]} of {kept[1]} runs bad with the groups kept")


def check_environment(
    e: Environment, wheel: Path, work: Path, env: dict, cache: Path, repeat: int = 3
) -> None:
    print(f"[{e.name}] python{e.python}: {' '.join(e.holds)}", flush=True)
    try:
        py = prepare(e, work, env, cache)
        install_course(e, py, wheel, work, env)
        print(f"[{e.name}] set-up cell: {e.figures['install_s']:.1f} s; notebooks", flush=True)
        run_notebooks(e, py, work, env, repeat)
        print(f"[{e.name}] fault tests", flush=True)
        run_fault_tests(e, py, work, env)
        print(f"[{e.name}] gloo's teardown deadlock, fix off and on", flush=True)
        run_teardown_reproducer(e, py, work, env)
        print(f"[{e.name}] the lessons' claims (tests/claims)", flush=True)
        run_claims(e, py, work, env)
    except (CompatError, subprocess.TimeoutExpired) as exc:
        e.problems.append(str(exc))


def report(envs: list[Environment], wheel: Path) -> None:
    from ddp_helpers.exercises import LESSONS

    print(f"\nmake compat: {wheel.name} installed without constraints.txt")
    rows = [("", *(e.name for e in envs))]
    v = [e.figures.get("versions", {}) for e in envs]
    for key in ("python", "torch", "ipykernel", "ipython"):
        rows.append((key, *(x.get(key, "-") for x in v)))
    for label, key in (("venv prepared (s)", "prepare_s"), ("  of which download", "download_s")):
        rows.append((label, *(f"{e.figures.get(key, 0):.0f}" for e in envs)))
    rows.append(
        ("set-up cell installs (s)", *(f"{e.figures.get('install_s', 0):.1f}" for e in envs))
    )
    rows.append(("packages it added", *(str(len(e.figures.get("added", []))) for e in envs)))
    for lesson in LESSONS:
        cells = []
        for e in envs:
            runs = e.figures.get("notebooks", {}).get(lesson)
            if not runs:
                cells.append("-")
                continue
            clean = sum(correct == total for _, correct, total in runs)
            times = [seconds for seconds, _, _ in runs]
            cells.append(f"{clean}/{len(runs)} runs all ✅, {min(times):.1f}-{max(times):.1f} s")
        rows.append((f"solutions/{lesson}", *cells))
    rows.append(("fault tests", *(e.figures.get("fault_tests", "-") for e in envs)))
    rows.append(("gloo teardown", *(e.figures.get("teardown", "-") for e in envs)))
    rows.append(("claims (tests/claims)", *(e.figures.get("claims", "-") for e in envs)))
    rows.append(("result", *("ok" if not e.problems else "FAILED" for e in envs)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for e in envs:
        print(f"\n{e.name}: the install added {', '.join(e.figures.get('added', [])) or 'nothing'}")
        for claim in e.figures.get("claims_broken", []):
            print(f"{e.name}: a claim that does not hold with this torch: {claim}")
        for problem in e.problems:
            print(f"{e.name}: FAILED: {problem}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["oldest", "previous", "newest"], action="append")
    parser.add_argument("--keep", action="store_true", help="keep the venvs (GBs) and print where")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each solution notebook (default 3)"
    )
    default_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    parser.add_argument(
        "--cache",
        type=Path,
        default=default_cache / "ddp-basics" / "compat",
        help="the folder that keeps the downloaded wheels (default: %(default)s)",
    )
    args = parser.parse_args()
    env = pip_environment()
    work = Path(tempfile.mkdtemp(prefix="ddp-compat-"))
    envs: list[Environment] = []
    try:
        envs = [e for e in environments(env) if not args.only or e.name in args.only]
        wheel = build_wheel(work / "dist", env)
        for e in envs:
            check_environment(e, wheel, work, env, args.cache, args.repeat)
        report(envs, wheel)
        size = sum(f.stat().st_size for f in args.cache.glob("*") if f.is_file())
        print(f"\nwheels kept in {args.cache}: {size / 2**30:.1f} GB")
    finally:
        if args.keep:
            print(f"\nkept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if envs and all(not e.problems for e in envs) else 1


if __name__ == "__main__":
    sys.exit(main())
