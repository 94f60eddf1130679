"""How the package's modules depend on each other: no import cycle, the grader free of the
exercises' private modules, and the light commands light (a fresh interpreter says what it
loaded)."""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_helpers.entry_points import ALL as ENTRY_POINTS
from ddp_helpers.paths import PACKAGE  # the package, as it finds itself


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by its dotted name, with its file and whether it is a
    package's __init__."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = _modules()


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The package's modules one import statement names (`from . import x` names x where x
    is a module, else the package it comes from)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: None if is_package else -1]
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" for alias in node.names]
        names = [name if name in MODULES else base for name in names]
    targets = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.add(name)
    return sorted(targets)


def _imports() -> dict[str, set[str]]:
    """Each module's imports of the package, at its top and inside its functions alike."""
    graph = {}
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for target in _targets(node, module, is_package)
        }
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as the modules along it, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_graph_sees_the_imports_it_must():
    graph = _imports()
    assert "ddp_helpers.grading.defaults" in graph["ddp_helpers.__main__"]
    assert "ddp_helpers.launcher" in graph["ddp_helpers.exercises.running"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    cycle = _cycle(_imports())
    assert cycle is None, "an import cycle: " + " -> ".join(cycle)


def test_the_grader_imports_no_private_module_of_the_exercises():
    graph = _imports()
    private = {
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith("ddp_helpers.grading")
        for target in targets
        if target.startswith("ddp_helpers.exercises.") and target.rpartition(".")[2][0] == "_"
    }
    assert not private, private


def _loaded(code: str) -> list[str]:
    """The package's modules a fresh interpreter holds after running code."""
    shown = "print(*sorted(m for m in sys.modules if m.startswith('ddp_helpers')))"
    result = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\n{shown}"],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _loaded_by(command: list[str]) -> list[str]:
    """The package's modules `python -m ddp_helpers COMMAND...` loads."""
    return _loaded(
        "from ddp_helpers.__main__ import main\n"
        f"try:\n    main({command!r})\nexcept SystemExit:\n    pass"
    )


@pytest.mark.parametrize("command", [["build", "--check"], ["build", "--help"], ["--help"]])
def test_the_build_command_loads_nothing_of_the_grader_or_the_launcher(command):
    loaded = _loaded_by(command)
    assert "ddp_helpers.__main__" in loaded
    heavy = [m for m in loaded if m.startswith(("ddp_helpers.grading", "ddp_helpers.launcher"))]
    assert not heavy, heavy


def test_the_grader_s_data_types_load_without_the_launcher():
    loaded = _loaded("import ddp_helpers.grading.results")
    assert "ddp_helpers.grading.results" in loaded
    assert not [m for m in loaded if m.startswith("ddp_helpers.launcher")], loaded


@pytest.mark.parametrize("target", ENTRY_POINTS)
def test_each_process_entry_point_is_a_module_that_runs_as_a_program(target):
    path, is_package = MODULES[target]
    if is_package:  # `python -m package` runs its __main__
        path, _ = MODULES[f"{target}.__main__"]
    tree = ast.parse(path.read_text())
    assert (
        any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) for node in tree.body)
        or path.name == "__main__.py"
    ), f"{path} has no `if __name__ == '__main__':`"


def test_every_process_the_package_starts_of_its_own_is_named_in_the_registry():
    # A literal 'ddp_helpers.x.y' beside "-m" would start a module the registry does not know.
    named = []
    for name, (path, _) in MODULES.items():
        if name == "ddp_helpers.entry_points":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if "-m" in words:
                    after = words[words.index("-m") + 1 :][:1]
                    named += [(name, w) for w in after if str(w).startswith("ddp_helpers")]
    assert not named, named
    scripts = (PACKAGE / "grading" / "gradescope").glob("*")
    for script in (s for s in scripts if s.suffix in ("", ".sh") and s.is_file()):
        for line in script.read_text().splitlines():
            if " -m ddp_helpers" in line and not line.lstrip().startswith("#"):
                assert any(f"-m {t} " in line + " " for t in ENTRY_POINTS), (script, line)


def _folder_graphs() -> dict[str, dict[str, set[str]]]:
    """For each package, its direct members as nodes (a subpackage stands for everything in
    it, a module for itself) and the imports between them, inside functions too."""
    graph = _imports()
    packages = {name for name, (_, is_package) in MODULES.items() if is_package}
    out: dict[str, dict[str, set[str]]] = {}
    for package in packages:

        def member(module: str, package=package) -> str | None:
            if not module.startswith(package + "."):
                return None
            return package + "." + module[len(package) + 1 :].split(".")[0]

        nodes: dict[str, set[str]] = {}
        for module, targets in graph.items():
            if (a := member(module)) is None:
                continue
            nodes.setdefault(a, set())
            nodes[a] |= {b for t in targets if (b := member(t)) is not None and b != a}
        out[package] = nodes
    return out


def test_no_import_cycle_between_the_folders_of_a_package():
    # grading/outputs <-> grading/gradescope was one, hidden by imports inside functions.
    cycles = {p: c for p, g in _folder_graphs().items() if (c := _cycle(g))}
    assert not cycles, cycles


# The grader's layers, lowest first: a module imports its own layer or those below, never one
# above (the worker never reaches the batch; outputs never reach the worker for its words).
GRADING_LAYERS = [
    {"results", "defaults", "budget", "folders", "words", "notebooks"},  # data, every role's
    {"confinement"},
    {"worker", "outputs"},
    {"orchestration"},
    {"api"},
    {"gradescope"},
]


def test_no_module_of_the_grader_imports_a_layer_above_its_own():
    layer = {name: n for n, names in enumerate(GRADING_LAYERS) for name in names}
    members = _folder_graphs()["ddp_helpers.grading"]
    assert {m.rpartition(".")[2] for m in members} - {"__init__"} == set(layer), "a new member"
    upward = [
        f"{a} imports {b}"
        for a, targets in members.items()
        for b in targets
        if a.rpartition(".")[2] in layer
        and layer[b.rpartition(".")[2]] > layer[a.rpartition(".")[2]]
    ]
    assert not upward, upward


# The package's own layers, lowest first: the leaves every part may use, the mechanisms
# over processes and torch, the launcher, what runs on it, what is made of that, the face.
PACKAGE_LAYERS = [
    {"entry_points", "files", "i18n", "lazy", "nbformat_quick", "paths", "stubs", "versions"},
    {"procs", "torch_compat"},
    {"launcher"},
    {"exercises", "magic"},
    {"demos", "authoring", "grading"},
    {"__main__", "__init__"},
]


def test_no_part_of_the_package_imports_a_layer_above_its_own():
    layer = {name: n for n, names in enumerate(PACKAGE_LAYERS) for name in names}
    members = _folder_graphs()["ddp_helpers"]
    short = {m.rpartition(".")[2] for m in members}
    assert short - set(layer) == set(), f"place it in PACKAGE_LAYERS: {short - set(layer)}"
    upward = [
        f"{a} imports {b}"
        for a, targets in members.items()
        for b in targets
        if layer[b.rpartition(".")[2]] > layer[a.rpartition(".")[2]]
    ]
    assert not upward, upward


# ---------------------------------------------------------------- imports inside functions

# Every import the package makes inside a function, as (the modules it is in: a glob, what it
# imports: a module and its submodules), with why it is not at the top of its module. Any
# other import goes at the top; a new one here needs its reason, and each reason that can be
# is held by a test of this file.
FUNCTION_IMPORTS = {
    # `import ddp_helpers` is every command's first step, and the grader's data types'.
    ("ddp_helpers", "ddp_helpers.magic"): "IPython and the launcher: at %load_ext only",
    ("ddp_helpers", "ddp_helpers.exercises"): "the lessons' checks: at %load_ext only",
    ("ddp_helpers", "ddp_helpers.launcher"): "the helper process warms up at %load_ext only",
    ("ddp_helpers.exercises", "ddp_helpers.launcher"): "LESSONS (build, grade) without it",
    # Each command loads its own modules, and --help none of them.
    ("ddp_helpers.__main__", "ddp_helpers.authoring"): "build, export, pace: each its own",
    ("ddp_helpers.__main__", "ddp_helpers.grading"): "build nothing of the grader; grade --help "
    "only its defaults",
    # torch (1-2 s) loads in the zygote, the ranks and the checks' processes.
    ("ddp_helpers.exercises.*", "torch"): "`import ... as ex` and the scorer without torch; a "
    "reference's imports are its notebook's",
    ("ddp_helpers.demos.*", "torch"): "a demo's module imports without torch: its ranks use it",
    ("ddp_helpers.launcher.*", "torch"): "the kernel's side of the launcher runs without torch",
    ("ddp_helpers.torch_compat", "torch"): "checked and applied in the zygote and the ranks",
    (
        "ddp_helpers.versions",
        "torch",
    ): "torch_release: asked where torch runs anyway (zygote, setup)",
    ("ddp_helpers.grading.gradescope.image", "torch"): "setup names a missing torch itself",
    # A reference is its notebook's code (tests/exercises/test_answers.py), its imports too.
    ("ddp_helpers.exercises.lesson03.accumulate", "contextlib"): "3.4's reference imports it",
    (
        "ddp_helpers.exercises.lesson04.capstone",
        "ddp_helpers.exercises.lesson02",
    ): "4.1's reference: the notebook's setup and cleanup",
    (
        "ddp_helpers.exercises.lesson04.capstone",
        "ddp_helpers.exercises.lesson03",
    ): "4.1's reference: the notebook's wrap",
    # The package's tables (LESSONS, exercises_of) import the lessons, which import model.
    ("ddp_helpers.exercises.model", "ddp_helpers.exercises"): "the lessons' tables: the "
    "package imports model first",
    ("ddp_helpers.exercises.model", "__main__"): "the kernel's namespace is __main__ when "
    "called: IPython puts the user's there",
    ("ddp_helpers.exercises.tripwire", "os"): "_tripwire's code runs as a reference's, with "
    "its module's globals",
    ("ddp_helpers.exercises.model", "IPython"): "only in a kernel: the scorer and the ranks "
    "have none",
    # cloudpickle loads at the first launch, not at `import ddp_helpers.launcher` (%load_ext).
    ("ddp_helpers.exercises.tripwire", "ddp_helpers.launcher.pickling"): "cloudpickle: grading's "
    "tripwire only",
    ("ddp_helpers.magic", "ddp_helpers.launcher.pickling"): "cloudpickle: a %%ddp cell run",
    ("ddp_helpers.launcher.api", "ddp_helpers.launcher.pickling"): "cloudpickle: a launch",
    ("ddp_helpers.launcher.plain", "ddp_helpers.launcher.pickling"): "cloudpickle: a plain "
    "value read",
    ("ddp_helpers.launcher.zygote", "ddp_helpers.launcher.rank"): "a rank's code (and "
    "cloudpickle) in the forked rank only",
    ("ddp_helpers.launcher.rank", "multiprocessing"): "only a rank that spawn(daemon=True) made",
    # The demos import in milliseconds: what they draw and measure with loads when they do.
    ("ddp_helpers.demos.*", "matplotlib"): "matplotlib (0.3 s): when a picture is drawn",
    ("ddp_helpers.demos.pictures", "matplotlib_fontja"): "a Japanese font: when one is drawn",
    ("ddp_helpers.demos.pictures", "matplotlib_inline"): "retina pictures: in a kernel only",
    ("ddp_helpers.demos.pictures", "IPython"): "retina pictures: in a kernel only",
    ("ddp_helpers.demos.communication", "numpy"): "the ring model's fit only",
    ("ddp_helpers.demos.*", "ddp_helpers.launcher"): "the launcher: when a measurement runs",
    ("ddp_helpers.demos.*", "ddp_helpers.exercises.lesson05.common"): "lesson 05's model "
    "(and the checks' launcher with it): when measured",
    # The grader's processes each load what they use.
    ("ddp_helpers.procs", "psutil"): "psutil (25 ms): where processes are listed, not in "
    "every process that imports procs (zygote, ranks)",
    ("ddp_helpers.grading.*", "psutil"): "psutil (25 ms): where processes are listed",
    ("ddp_helpers.procs", "resource"): "Unix only: nproc_limit is None without it",
    ("ddp_helpers.grading.worker.kernel", "jupyter_client"): "the worker's kernel only: the "
    "scorer imports kernel.py without it",
    ("ddp_helpers.grading.worker.kernel", "zmq"): "the worker's kernel only, as jupyter_client",
    ("ddp_helpers.grading.outputs.class_report", "matplotlib"): "matplotlib (0.3 s): --report",
    ("ddp_helpers.grading.gradescope.run", "ddp_helpers.grading"): "setup (same __main__) "
    "checks the image's packages before any of the grader loads",
    ("ddp_helpers.grading.gradescope.generate", "packaging"): "a dev dependency: `autograder` "
    "from a checkout only",
    # The standard library's heavier modules, where the importing module has them not already.
    ("ddp_helpers", "threading"): "the warm-up thread: at %load_ext only",
    ("ddp_helpers.authoring.pace", "ddp_helpers.authoring"): "pace --write only: build and "
    "translations (hashlib, tomllib)",
    ("ddp_helpers.authoring.*", "argparse"): "main(), run alone: `build` imports these modules",
    ("ddp_helpers.*", "unittest"): "unittest.mock (55 ms: asyncio, ssl): a harness's patches, "
    "in a rank",
    ("ddp_helpers.*", "statistics"): "statistics (5 ms): a measurement's median only",
    ("ddp_helpers.*", "tempfile"): "tempfile (6 ms: shutil, bz2, lzma): a check's folders, in "
    "a rank",
    ("ddp_helpers.*", "datetime"): "a gloo group's timeout, in a rank (where torch has it)",
    ("ddp_helpers.procs", "ctypes"): "prctl: the zygote's load_libc only",
    ("ddp_helpers.procs", "subprocess"): "subprocess (5 ms): stop_tree's callers have it",
    ("ddp_helpers.grading.gradescope.*", "importlib.metadata"): "importlib.metadata (30 ms): "
    "setup's and the zip's versions",
    ("ddp_helpers.grading.gradescope.generate", "tomllib"): "tomllib (11 ms): the pins of a "
    "checkout without a lock",
    ("ddp_helpers.grading.gradescope.generate", "ddp_helpers.torch_compat"): "KNOWN_GOOD: "
    "when torch is not the lock's",
    # nbformat loads through nbformat_quick, without its 1.7 s IRI grammar.
    ("ddp_helpers.nbformat_quick", "nbformat"): "the module that imports it quickly",
    ("ddp_helpers.grading.notebooks", "nbformat"): "read_notebook's nbformat_quick loaded it",
    ("ddp_helpers.authoring.build", "nbclient"): "build --execute only",
    ("ddp_helpers.authoring.same_code", "IPython"): "IPython (0.3 s): a cell with a magic only",
    ("ddp_helpers.authoring.website", "pygments"): "make site's lexer: Sphinx asks for it",
    ("ddp_helpers.authoring.website", "ipython_pygments_lexers"): "make site's lexer, as pygments",
}


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """What one import statement imports: the package's own modules (_targets), or the
    other modules it names."""
    if isinstance(node, ast.ImportFrom) and (node.level or node.module.startswith("ddp_")):
        return _targets(node, module, is_package)
    names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    return [name for name in names if not name.startswith("ddp_helpers")]


def _function_imports() -> set[tuple[str, str]]:
    """(module, what it imports) for every import inside a function or method."""
    found = set()
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found |= {
                    (module, target)
                    for node in ast.walk(function)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for target in _imported(node, module, is_package)
                }
    return found


def _listed(module: str, target: str) -> list[tuple[str, str]]:
    return [
        (where, what)
        for where, what in FUNCTION_IMPORTS
        if fnmatch.fnmatchcase(module, where) and (target == what or target.startswith(what + "."))
    ]


def test_every_import_inside_a_function_is_listed_with_its_reason():
    found = _function_imports()
    assert ("ddp_helpers", "ddp_helpers.magic") in found  # the walk sees them
    unlisted = sorted(f"{m} imports {t}" for m, t in found if not _listed(m, t))
    assert not unlisted, "import these at the top of their modules, or list them (why): " + (
        ", ".join(unlisted)
    )
    used = {entry for m, t in found for entry in _listed(m, t)}
    assert set(FUNCTION_IMPORTS) <= used, set(FUNCTION_IMPORTS) - used  # none listed in vain
    assert all("\n" not in why and len(why) <= 100 for why in FUNCTION_IMPORTS.values())


def test_grade_help_loads_of_the_grader_only_its_defaults():
    loaded = _loaded_by(["grade", "--help"])
    grader = [m for m in loaded if m.startswith(("ddp_helpers.grading", "ddp_helpers.launcher"))]
    assert grader == ["ddp_helpers.grading", "ddp_helpers.grading.defaults"], grader


def test_the_scorer_and_every_lessons_exercises_load_without_torch():
    # `import ... as ex` in a notebook, and a scorer that walks every lesson's references:
    # torch (1-2 s of CPU) loads only where a check's values need it (the ranks, a tensor).
    code = (
        "import sys\nimport ddp_helpers.grading.worker.scorer as scorer\n"
        "scorer._references()\nprint('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"]
