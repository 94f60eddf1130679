"""docs/claims.md against the lessons and the claims suite: every row's phrase is still in
its cell, every test it names exists, every source holds its quote; and every test of the
suite backs a row."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ddp_helpers.paths import ROOT

CLAIMS = ROOT / "docs" / "claims.md"
ROW = re.compile(
    r"^\| (?P<cell>[\w-]+) \| (?P<phrase>.+?) \| (?P<claim>.+?) \| (?P<evidence>.+) \|$"
)
SOURCE = re.compile(
    r'^source: torch/(?P<path>\S+):(?P<first>\d+)(?:-(?P<last>\d+))? "(?P<quote>.+)"$'
)
PAGE = re.compile(
    r'^page: (?P<url>https://\S+) \((?:read )?(?P<date>\d{4}-\d{2}-\d{2})\) "(?P<quote>.+)"$'
)
KINDS = ("test", "source", "page", "measured")
ONE_SIDED = " (one-sided)"


def _items(evidence: str) -> list[str]:
    """A row's pieces of evidence: one, or several joined by " + " (a test for gloo and a
    page for nccl, say)."""
    return evidence.split(" + ")


def _all_items(kind: str) -> list[tuple[dict, str]]:
    return [(r, i) for r in ROWS for i in _items(r["evidence"]) if i.startswith(f"{kind}: ")]


def _rows() -> list[dict]:
    rows, notebook = [], None
    for line in CLAIMS.read_text().splitlines():
        if line.startswith("## solutions/"):
            notebook = line.removeprefix("## ").strip()
        match = ROW.match(line)
        if match and match["cell"] not in ("cell", "---"):
            fields = {k: v.replace("\\|", "|") for k, v in match.groupdict().items()}
            rows.append({**fields, "notebook": notebook})
    return rows


def _cells(notebook: str) -> dict[str, str]:
    nb = json.loads((ROOT / notebook).read_text())
    return {c["id"]: "".join(c["source"]) for c in nb["cells"]}


ROWS = _rows()


def test_the_file_has_the_claims_of_every_lesson():
    notebooks = {row["notebook"] for row in ROWS}
    assert notebooks == {str(p.relative_to(ROOT)) for p in (ROOT / "solutions").glob("0*.ipynb")}
    assert len(ROWS) > 100


def _words(text: str) -> str:
    """Text with its line breaks and runs of spaces as one space: a paragraph wrapped again
    keeps its rows, a sentence reworded does not."""
    return " ".join(text.split())


def test_every_rows_phrase_is_still_in_its_cell():
    cells = {nb: _cells(nb) for nb in {row["notebook"] for row in ROWS}}
    gone = [
        f"{row['notebook']} {row['cell']}: {row['phrase']!r}"
        for row in ROWS
        if _words(row["phrase"]) not in _words(cells[row["notebook"]].get(row["cell"], ""))
    ]
    assert not gone, "claims rewritten without their rows in docs/claims.md:\n" + "\n".join(gone)


def _tests_in(path: Path) -> set[str]:
    return set(_marks_in(path))


def _marks_in(path: Path) -> dict[str, set[str]]:
    """Each test function of a file, with the names of its pytest marks."""
    tree = ast.parse(path.read_text())
    marks = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names = set()
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute):
                    names.add(target.attr)
            marks[node.name] = names
    return marks


def _named(item: str) -> str:
    return item.removeprefix("test: ").removesuffix(ONE_SIDED)


def test_every_test_named_exists_and_every_claims_test_backs_a_row():
    named = {_named(item) for _, item in _all_items("test")}
    for name in named:
        path, _, test = name.partition("::")
        assert test in _tests_in(ROOT / path), name
    suite = {
        f"tests/claims/{path.name}::{test}"
        for path in (ROOT / "tests" / "claims").glob("test_claims_*.py")
        if path.name != "test_claims_doc.py"
        for test in _tests_in(path)
        if test.startswith("test_")
    }
    assert not suite - named, f"tests backing no row of docs/claims.md: {sorted(suite - named)}"


def test_a_test_that_cannot_fail_says_so_in_its_row_with_the_soak_that_counts():
    """A claims test marked one_sided (it also passes on the outcome that would contradict
    its claim, "clean or abort", say) backs a row only as `(one-sided)`, beside a measured
    piece: the soak and its count. And a row says one-sided only of a test so marked."""
    wrong = []
    for row, item in _all_items("test"):
        path, _, test = _named(item).partition("::")
        marked = "one_sided" in _marks_in(ROOT / path).get(test, set())
        said = item.endswith(ONE_SIDED)
        if marked != said:
            why = "cited without (one-sided)" if marked else "has no one_sided mark"
            wrong.append(f"{row['cell']}: {item}: the test {why}")
        elif said and not any(i.startswith("measured: ") for i in _items(row["evidence"])):
            wrong.append(f"{row['cell']}: {item} without a measured: piece (the soak, its count)")
    assert not wrong, (
        "a one-sided test (@pytest.mark.one_sided) is cited as `test: PATH::NAME (one-sided)` "
        "with a `measured:` piece in its row:\n" + "\n".join(wrong)
    )


@pytest.mark.parametrize(
    "row, item", _all_items("source"), ids=[r["cell"] for r, _ in _all_items("source")]
)
def test_every_source_holds_its_quote_in_the_installed_torch(row, item):
    import torch

    match = SOURCE.match(item)
    assert match, item
    path = Path(torch.__file__).parent / match["path"]
    lines = path.read_text(errors="replace").splitlines()
    first = int(match["first"])
    last = int(match["last"] or first)
    quote = match["quote"].replace('\\"', '"')
    assert quote in "\n".join(lines[first - 1 : last]), (item, lines[first - 1 : last])


def test_every_page_names_its_address_its_date_and_its_words():
    import datetime

    for row, item in _all_items("page"):
        match = PAGE.match(item)
        assert match, f'{row["cell"]}: {item!r} is not page: https://... (DATE) "QUOTE"'
        assert datetime.date.fromisoformat(match["date"]) <= datetime.date.today(), item


def test_every_row_has_evidence_of_a_known_kind(capsys):
    unbacked = [
        f"{row['cell']}: {row['evidence'][:60]}"
        for row in ROWS
        if not all(item.split(":")[0] in KINDS for item in _items(row["evidence"]))
    ]
    assert not unbacked, "rows without evidence of a known kind:\n" + "\n".join(unbacked)
    with capsys.disabled():
        print(f"\ndocs/claims.md: {len(ROWS)} claims, each with its evidence")


LAUNCHERS = {"launch", "launch_plain", "run_cell"}


def _launching(tree: ast.Module) -> set[str]:
    """The module-level functions of a test file that start ranks through the course's
    launcher: calling launch(), launch_plain() or run_cell(), or a function of the file
    that does."""
    calls = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            calls[node.name] = {
                n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                for n in ast.walk(node)
                if isinstance(n, ast.Call)
            }
    found = {name for name, called in calls.items() if called & LAUNCHERS}
    while True:
        more = {name for name, called in calls.items() if called & found} - found
        if not more:
            return found
        found |= more


def _reason(node: ast.AST) -> str:
    """The text of an under_launcher("why") mark, or ""."""
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "under_launcher"
        and node.args
        and isinstance(node.args[0], ast.Constant | ast.JoinedStr)
    ):
        return ast.unparse(node.args[0]).strip("'\"")
    return ""


def test_a_claims_test_run_under_the_launcher_says_why_its_settings_cannot_matter():
    """A test of torch's behaviour that runs under the course's launcher (its init barrier,
    kept groups, os._exit, one OpenMP thread, the loopback interface) carries
    @pytest.mark.under_launcher("why none of that changes what it asserts"); one that
    cannot say so runs in plain processes (claims_support.plain_job) or under torchrun."""
    wrong = []
    for path in sorted((ROOT / "tests" / "claims").glob("test_claims_*.py")):
        tree = ast.parse(path.read_text())
        launching = _launching(tree)
        named = {  # UNDER_LAUNCHER = pytest.mark.under_launcher("why"), used as @UNDER_LAUNCHER
            target.id: _reason(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name) and _reason(node.value)
        }
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            reasons = [
                named.get(d.id, "") if isinstance(d, ast.Name) else _reason(d)
                for d in node.decorator_list
            ]
            uses = node.name in launching
            if uses and not any(reasons):
                wrong.append(f"{path.name}::{node.name} runs under the launcher, unmarked")
            elif any(reasons) and not uses:
                wrong.append(f"{path.name}::{node.name} is marked under_launcher but is not")
    assert not wrong, "\n".join(wrong)
