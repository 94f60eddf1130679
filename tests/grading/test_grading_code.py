"""The grader's code, for its next reader."""

from __future__ import annotations

from support import ROOT

# ---------------------------------------------------------------- the code, for its next reader

LONG = 60  # lines: a function longer than this says why in its docstring
LONG_BECAUSE = f"Over {LONG} lines because"


def _long_functions(paths) -> list[str]:
    """Each function of `paths` over LONG lines whose docstring does not say why."""
    import ast

    long = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > LONG and LONG_BECAUSE not in (ast.get_docstring(node) or ""):
                long.append(f"{path}:{node.lineno} {node.name}: {lines} lines")
    return long


def test_no_function_of_the_package_is_long_without_saying_why():
    # Every module of the package, the grader's folders included (a glob of grading/*.py
    # alone read 6 of its 31 files once it moved into folders).
    paths = sorted((ROOT / "ddp_helpers").rglob("*.py"))
    assert len(paths) > 90 and any("confinement" in p.parts for p in paths)
    long = [line.replace(f"{ROOT}/", "") for line in _long_functions(paths)]
    assert not long, (
        f"split these, or say why in the docstring ('{LONG_BECAUSE} ...'):\n" + "\n".join(long)
    )


def test_the_length_rule_finds_a_long_function_and_spares_one_that_says_why(tmp_path):
    body = "".join(f"    x{n} = {n}\n" for n in range(LONG))
    (tmp_path / "long.py").write_text(f"def long():\n{body}")
    (tmp_path / "said.py").write_text(f'def said():\n    """{LONG_BECAUSE} it must."""\n{body}')
    found = _long_functions([tmp_path / "long.py", tmp_path / "said.py"])
    assert len(found) == 1 and "long.py:1 long" in found[0]


def test_a_stopped_notebooks_traceback_keeps_the_learners_line_above_a_deep_stack():
    from ddp_helpers.grading.worker.kernel import error_text

    deep = [f"File /site-packages/lib.py:{n}, in f{n}()\n---> {n} f{n + 1}()" for n in range(30)]
    cell = "Cell In[3], line 14\n     13 x = 1\n---> 14 launch(spin, nprocs=2)"
    error = {
        "traceback": ["\x1b[0;31mKeyboardInterrupt\x1b[0m", cell, *deep, "KeyboardInterrupt: "]
    }
    text = error_text(error)
    assert text.startswith("Cell In[3], line 14") and "launch(spin, nprocs=2)" in text
    assert text.endswith("KeyboardInterrupt:") and "f29()" in text and "f0()" not in text
    short = {"traceback": [cell, deep[0], "KeyboardInterrupt: "]}
    assert error_text(short) == "\n".join(
        [*cell.splitlines(), *deep[0].splitlines(), "KeyboardInterrupt:"]
    )
