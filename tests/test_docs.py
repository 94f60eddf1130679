"""The README stays true: its layout is the package's, module by module."""

from __future__ import annotations

import re

from conftest import ROOT


def _layout_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def _listed_modules() -> set[str]:
    """The package's modules as the README's layout lists them, e.g. 'launcher/api.py'."""
    listed, folders = set(), {}
    for line in _layout_block():
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        folders = {depth: f for depth, f in folders.items() if depth < indent}
        if name.endswith("/"):
            folders[indent] = name
            continue
        if name.endswith(".py"):
            path = "".join(folders[d] for d in sorted(folders)) + name
            if path.startswith("ddp_helpers/"):
                listed.add(path.removeprefix("ddp_helpers/"))
    return listed


def test_the_readme_layout_lists_every_module_of_the_package_and_no_other():
    package = ROOT / "ddp_helpers"
    actual = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "__pycache__" not in p.parts and not (p.name == "__init__.py" and p.parent != package)
    }
    # Folders listed with a summary stand for their modules: exercises/ and authoring/.
    summarised = {"exercises/", "authoring/"}
    actual = {m for m in actual if not m.startswith(tuple(summarised))}
    assert _listed_modules() == actual


def test_every_module_says_what_it_is_for_in_its_first_line():
    for path in sorted((ROOT / "ddp_helpers").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        first = path.read_text().lstrip().splitlines()[0]
        assert re.match(r'^"""\S.+', first), f"{path.relative_to(ROOT)}: {first!r}"
