"""How the package's modules depend on each other: no import cycle, the grader free of the
exercises' private modules, and the light commands light (a fresh interpreter says what it
loaded)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "ddp_helpers.launcher" in graph["ddp_helpers.exercises._core"]
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


@pytest.mark.parametrize("command", [["build", "--check"], ["build", "--help"], ["--help"]])
def test_the_build_command_loads_nothing_of_the_grader_or_the_launcher(command):
    run = (
        "from ddp_helpers.__main__ import main\n"
        f"try:\n    main({command!r})\nexcept SystemExit:\n    pass"
    )
    loaded = _loaded(run)
    assert "ddp_helpers.__main__" in loaded
    heavy = [m for m in loaded if m.startswith(("ddp_helpers.grading", "ddp_helpers.launcher"))]
    assert not heavy, heavy


def test_the_grader_s_data_types_load_without_the_launcher():
    loaded = _loaded("import ddp_helpers.grading.results")
    assert "ddp_helpers.grading.results" in loaded
    assert not [m for m in loaded if m.startswith("ddp_helpers.launcher")], loaded
