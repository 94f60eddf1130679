"""The grader against submissions that attack it through their paths and their size (issue
48): a file named like an option, an output that is a submission, a notebook that would
take the grader's memory, trees past PATH_MAX or locked, links on a glob's path, one file
under two names, the course's solved notebook handed in.

Each is graded as an instructor would grade it (the command line, in a folder of its own)
or found as the batch finds it, and checked as an instructor would check: the row and the
feedback of the hostile one, the other learners' rows and files, and what is left (no
process, nothing in TMPDIR). No kernel runs here: what is refused is refused before one
would, and the other learners' notebooks are ones the grader refuses at once (no lesson).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from fixtures.submissions import NAMES
from grading_common import _row, grade_in, left_running, tmpdir_of

from ddp_helpers import grading
from ddp_helpers.files import remove_tree
from ddp_helpers.grading import GradeOptions, Status, TimeBudget, notebooks
from ddp_helpers.grading.orchestration import finding
from ddp_helpers.grading.outputs.class_report import Tally, render
from ddp_helpers.grading.outputs.reports import feedback_markdown
from ddp_helpers.paths import ROOT
from ddp_helpers.procs import with_this_package

LESSON = "from ddp_helpers.exercises import lesson01 as ex"
OUTPUTS = ["--out", "grades.csv", "--feedback", "fb", "--report", "report.html"]
# As root, a folder of mode 000 is readable anyway: the grader runs without that power.
WITHOUT_ROOTS_ACCESS = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _notebook(path: Path, source: str = "print('not a lesson')") -> Path:
    """A notebook: by default one the grader refuses at once (it imports no lesson)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)
    return path


def _rows(tmp: Path, name: str = "grades.csv") -> dict[str, dict]:
    with open(tmp / name, newline="", encoding="utf-8") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def _feedback(tmp: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((tmp / "fb").iterdir()))


def _nothing_left(tmp: Path, run) -> None:
    assert run.tmp_left == [] and left_running(tmp) == []


def _shell_grade(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m ddp_helpers grade ...` as bash runs it, globs expanded by the shell."""
    tmpdir = tmpdir_of(cwd)
    tmpdir.mkdir(exist_ok=True)
    env = with_this_package(dict(os.environ, TMPDIR=str(tmpdir)))
    try:
        run = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -m ddp_helpers grade {command}'],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        run.tmp_left = sorted(p.name for p in tmpdir.iterdir())
    finally:
        remove_tree(tmpdir)
    return run


# ---------------------------------------------------------------- nothing written onto a submission


def test_a_file_named_like_an_option_that_a_glob_gives_the_grader_overwrites_nothing(tmp_path):
    alice = _notebook(tmp_path / "alice_week1.ipynb", LESSON)
    _notebook(tmp_path / "--out=alice_week1.ipynb")  # mallory's
    _notebook(tmp_path / "bob.ipynb", LESSON)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    run = _shell_grade("*.ipynb", tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--out=alice_week1.ipynb: a file here named like an option" in run.stderr
    assert "python -m ddp_helpers grade --out grades.csv -- *.ipynb" in run.stderr
    assert "Grading" not in run.stderr  # nothing graded
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nor written
    assert alice.read_bytes() == before["alice_week1.ipynb"]
    _nothing_left(tmp_path, run)


def test_after_double_dash_a_file_named_like_an_option_is_a_submission(tmp_path):
    _notebook(tmp_path / "--out=alice_week1.ipynb")
    alice = _notebook(tmp_path / "alice_week1.ipynb")
    before = alice.read_bytes()
    run = _shell_grade("--out grades.csv --feedback fb -- *.ipynb", tmp_path)
    assert run.returncode == 0, run.stderr
    rows = _rows(tmp_path)
    assert set(rows) == {"'--out=alice_week1.ipynb", "alice_week1.ipynb"}  # a CSV cell: no formula
    assert {row["status"] for row in rows.values()} == {"invalid"}
    assert "not one of the course's lessons" in _feedback(tmp_path)
    assert sorted(p.name for p in (tmp_path / "fb").iterdir()) == [
        "--out_alice_week1.md",
        "alice_week1.md",
    ]
    assert alice.read_bytes() == before
    _nothing_left(tmp_path, run)


def test_an_output_option_that_names_a_notebook_there_is_refused(tmp_path):
    alice = _notebook(tmp_path / "alice.ipynb", LESSON)
    before = alice.read_bytes()
    run = grade_in(["bob.ipynb", "--report", "alice.ipynb"], tmp_path)
    assert run.returncode == 2
    assert "--report alice.ipynb names a notebook that is there" in run.stderr
    assert "put -- before the submissions" in run.stderr
    assert alice.read_bytes() == before and not (tmp_path / "grades.csv").exists()
    _nothing_left(tmp_path, run)


def _hard_link(tmp: Path) -> list[str]:
    os.link(tmp / "alice.ipynb", tmp / "grades.csv")
    return ["alice.ipynb", "bob.ipynb"]


def _symlink(tmp: Path) -> list[str]:
    (tmp / "out").mkdir()
    (tmp / "out" / "grades.csv").symlink_to(tmp / "alice.ipynb")
    return ["alice.ipynb", "bob.ipynb", "--out", "out/grades.csv"]


def _report_given(tmp: Path) -> list[str]:
    (tmp / "notes.html").write_text("<p>alice's notes, handed in</p>")
    return ["alice.ipynb", "notes.html", "--report", "notes.html"]


def _feedback_file(tmp: Path) -> list[str]:
    (tmp / "fb").mkdir()
    (tmp / "fb" / "alice.md").write_text("alice's report, handed in as a file of its own")
    return ["alice.ipynb", "fb/alice.md", "--feedback", "fb"]


def _gradescope_file(tmp: Path) -> list[str]:
    (tmp / "gs").mkdir()
    (tmp / "gs" / "results.json").write_text('{"handed": "in"}')
    return ["gs/results.json", "--gradescope", "gs"]


def _tmp_file(tmp: Path) -> list[str]:
    (tmp / "grades.csv.tmp").write_text("a submission whose name is the CSV's own first draft")
    return ["alice.ipynb", "grades.csv.tmp"]


COLLISIONS = {
    "CSV a hard link to alice's": (_hard_link, "grades.csv (the CSV of grades)", "alice.ipynb"),
    "CSV a symbolic link to alice's": (
        _symlink,
        "out/grades.csv (the CSV of grades)",
        "alice.ipynb",
    ),
    "report given as a submission": (
        _report_given,
        "notes.html (the class report)",
        "notes.html",
    ),
    "feedback file given as a submission": (
        _feedback_file,
        "fb/alice.md (a feedback file)",
        "fb/alice.md",
    ),
    "results.json given as a submission": (
        _gradescope_file,
        "gs/results.json (a results.json)",
        "gs/results.json",
    ),
    "the CSV's draft given as a submission": (
        _tmp_file,
        "grades.csv.tmp (the CSV of grades)",
        "grades.csv.tmp",
    ),
}


@pytest.mark.parametrize("case", COLLISIONS)
def test_an_output_that_is_a_submission_is_refused_before_anything_is_graded(tmp_path, case):
    make, output, submission = COLLISIONS[case]
    _notebook(tmp_path / "alice.ipynb", LESSON)
    _notebook(tmp_path / "bob.ipynb")
    args = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    run = grade_in(args, tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"error: {output} is " in run.stderr
    assert f"the submission {submission}, so writing it would replace" in run.stderr
    assert "Nothing was graded or written." in run.stderr and "Grading" not in run.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    _nothing_left(tmp_path, run)


def test_an_output_folder_that_holds_submissions_writes_beside_them(tmp_path):
    # Only a file of the same name would be a clash: the feedback goes next to the notebooks.
    alice = _notebook(tmp_path / "subs" / "alice" / "01.ipynb")
    before = alice.read_bytes()
    run = grade_in(["subs", "--feedback", "subs/alice", "--out", "subs/grades.csv"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert alice.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "subs" / "alice").iterdir()) == [
        "01.ipynb",
        "subs__alice__01.md",
    ]
    assert _rows(tmp_path, "subs/grades.csv")["subs/alice/01.ipynb"]["status"] == "invalid"
    _nothing_left(tmp_path, run)


# ---------------------------------------------------------------- the grader's memory

PEAK_BOUND = 300 << 20  # bytes above the interpreter's own: the grader reading any one file
CHILD_LIMIT = 2 << 30  # the address space of the process that reads it: a broken bound fails
# there, not on the machine (before this bound, 8 MiB of `{}` took 1.6 GB)
MEASURE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from ddp_helpers.grading.orchestration import submissions
from ddp_helpers.nbformat_quick import nbformat
nbformat()  # what reading a notebook loads, in the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:
    (sub,) = submissions.find_submissions([sys.argv[1]])
    problem = sub.problem
except MemoryError:
    problem = "MemoryError"
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"above": after - before, "problem": problem}}))
"""


def _filled(path: Path, unit: bytes, size: int, text: bool = False) -> Path:
    """A lesson-01 notebook of `size` bytes whose metadata holds a list of `unit` repeated (or,
    with text, one string of it), written without building it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(LESSON)]
    nb.metadata["filler"] = "FILL"
    head, tail = nbformat.writes(nb).encode().split(b'"FILL"')
    room = size - len(head) - len(tail) - 3
    with open(path, "wb") as f:
        f.write(head)
        if text:
            f.write(b'"' + unit + b"a" * (room - len(unit) + 1) + b'"')
        else:
            f.write(b"[" + unit * (room // len(unit)) + b" " * (room % len(unit)) + b"0]")
        f.write(tail)
    return path


def _read_measured(path: Path) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", MEASURE.format(limit=CHILD_LIMIT), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=with_this_package(dict(os.environ)),
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


FILES = {
    "8 MiB of {}": (b"{},", 8 << 20, False, "holds more than 500,000 JSON values"),
    "64 MiB of 0": (b"0,", notebooks.MAX_NOTEBOOK, False, "holds more than 500,000"),
    "64 MiB of empty strings": (b'"",', notebooks.MAX_NOTEBOOK, False, "more than 500,000"),
    "64 MiB of text with an emoji": (
        "\N{GRINNING FACE}".encode(),
        notebooks.MAX_NOTEBOOK,
        True,
        "takes 268,435,",
    ),
    # The most the grader parses: 128 MiB of text in memory (all of it 4 bytes a character).
    "32 MiB of text with an emoji": ("\N{GRINNING FACE}".encode(), 32 << 20, True, None),
    "480,000 values of {}": (b"{},", 720_000, False, None),
}


@pytest.mark.parametrize("case", FILES)
def test_reading_a_submission_costs_the_grader_bounded_memory(tmp_path, case):
    unit, size, text, refused = FILES[case]
    path = _filled(tmp_path / NAMES["01"], unit, size, text)
    assert path.stat().st_size == size
    read = _read_measured(path)
    assert read["above"] < PEAK_BOUND, f"{read['above'] >> 20} MiB"
    if refused is None:
        assert read["problem"] is None  # a notebook of lesson 01, read whole
    else:
        assert refused in read["problem"] and "Clear its outputs" in read["problem"]


def test_thousands_of_bad_outputs_cost_the_grader_nothing_to_validate(tmp_path):
    # 75 KB: jsonschema's errors for them took the grader to 1.3 GB and 18 s.
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(LESSON)]
    text = nbformat.writes(nb).replace(
        '"outputs": []', '"outputs": [' + ",".join(["{}"] * 25_000) + "]"
    )
    (tmp_path / "bad_outputs.ipynb").write_text(text)
    read = _read_measured(tmp_path / "bad_outputs.ipynb")
    assert read["above"] < 50 << 20 and read["problem"] is None  # the outputs are not read


# ---------------------------------------------------------------- trees the batch cannot read


def _unreadable_tree(tmp: Path) -> None:
    """subs/ with bob's notebook, a folder locked (mode 000) with carol's, a folder and a
    notebook whose names are not UTF-8, and dave's notebook past PATH_MAX."""
    _notebook(tmp / "subs" / "bob" / "01.ipynb")
    _notebook(tmp / "subs" / "carol" / "01.ipynb")
    (tmp / "subs" / "carol").chmod(0)
    os.mkdir(os.fsencode(tmp / "subs") + b"/\xffve")
    os.rename(_notebook(tmp / "subs" / "x.ipynb"), os.fsencode(tmp / "subs/bob") + b"/\xfe.ipynb")
    fd = os.open(tmp / "subs", os.O_RDONLY | os.O_DIRECTORY)
    for name in ["dave"] + ["deeper" * 40] * 20:  # 20 * 241 bytes: past PATH_MAX
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("01.ipynb", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)


def test_every_path_that_cannot_be_read_gets_a_row_that_says_so(tmp_path):
    _unreadable_tree(tmp_path)
    tmpdir = tmpdir_of(tmp_path)
    tmpdir.mkdir(exist_ok=True)
    grade = [sys.executable, "-m", "ddp_helpers", "grade", "subs", *OUTPUTS]
    try:
        run = subprocess.run(
            WITHOUT_ROOTS_ACCESS + grade if os.geteuid() == 0 else grade,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=with_this_package(dict(os.environ, TMPDIR=str(tmpdir))),
        )
        left = sorted(p.name for p in tmpdir.iterdir())
    finally:
        (tmp_path / "subs" / "carol").chmod(0o700)
        remove_tree(tmpdir)
    assert run.returncode == 0, run.stderr
    rows = _rows(tmp_path)
    deep = [name for name in rows if name.startswith("subs/dave/")]
    assert len(deep) == 1 and len(deep[0].encode()) > 4096
    problems = {name: row["status"] for name, row in rows.items()}
    assert set(problems.values()) == {"invalid"}
    assert {name for name in rows if not name.startswith("subs/dave/")} == {
        "subs/bob/01.ipynb",
        "subs/bob/\ufffd.ipynb",
        "subs/carol",
        "subs/\ufffdve",
    }
    feedback = _feedback(tmp_path)
    assert "The grader could not read this folder (Permission denied)" in feedback
    assert "This file's name is not valid UTF-8" in feedback
    assert "This folder's name is not valid UTF-8" in feedback
    assert "This notebook's path is " in feedback and "Move it to a shorter path" in feedback
    assert "not one of the course's lessons" in feedback  # bob's own row, as it would be
    assert "subs/dave" in (tmp_path / "report.html").read_text()
    assert left == [] and left_running(tmp_path) == []
    remove_tree(tmp_path / "subs")  # pytest's own clean-up recurses


def test_a_folder_removed_while_it_is_walked_gets_a_row(tmp_path):
    _notebook(tmp_path / "a.ipynb")
    _notebook(tmp_path / "b" / "01.ipynb")
    walk = finding.walk(str(tmp_path))
    first = next(walk)  # a.ipynb: the top folder has been listed
    remove_tree(tmp_path / "b")
    (where, student, problem), *rest = list(walk)
    assert first[0] == str(tmp_path / "a.ipynb") and rest == []
    assert where == str(tmp_path / "b") and student == "b"
    assert problem.startswith("The grader could not read this folder (No such file or directory)")


def test_a_worker_folder_past_any_recursion_limit_ends_the_batch_cleanly(tmp_path, monkeypatch):
    # 1,100 nested folders took shutil.rmtree past Python's recursion limit: no report, and
    # the batch's folder left in TMPDIR.
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    for who in ("alice", "bob"):
        _notebook(tmp_path / "subs" / who / NAMES["01"], LESSON)

    def deep_worker(sub, budget, cancel=None, tmp_root=None):
        """What a notebook can leave in its folder: 5,000 folders, the last one locked."""
        fd = os.open(tempfile.mkdtemp(prefix="ddp-grade-", dir=tmp_root), os.O_RDONLY)
        for _ in range(5000):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.fchmod(fd, 0)
        os.close(fd)
        return _row(sub, Status.OK)

    options = GradeOptions(
        out=tmp_path / "grades.csv",
        feedback=tmp_path / "fb",
        report=tmp_path / "report.html",
        budget=TimeBudget(notebook=5),
    )
    rows = grading.grade([tmp_path / "subs"], options, grade_one=deep_worker)
    assert [r.status for r in rows] == [Status.OK, Status.OK]
    assert [row["status"] for row in _rows(tmp_path).values()] == ["ok", "ok"]
    assert "Class report" in (tmp_path / "report.html").read_text()
    assert len(list((tmp_path / "fb").iterdir())) == 2
    assert list(tmpdir.iterdir()) == []


# ---------------------------------------------------------------- whose work it is


def test_a_learners_link_that_a_glob_puts_on_the_path_gives_them_no_one_elses_work(tmp_path):
    alice = _notebook(tmp_path / "subs" / "alice" / "week1" / "01.ipynb")
    _notebook(tmp_path / "subs" / "bob" / "week1" / "01.ipynb")
    (tmp_path / "subs" / "mallory").symlink_to("alice")
    before = alice.read_bytes()
    run = _shell_grade("subs/*/week1/*.ipynb " + " ".join(OUTPUTS), tmp_path)
    assert run.returncode == 0, run.stderr
    rows = _rows(tmp_path)
    assert set(rows) == {f"subs/{who}/week1/01.ipynb" for who in ("alice", "bob", "mallory")}
    feedback = (tmp_path / "fb" / "subs__mallory__week1__01.md").read_text()
    assert "subs/mallory is a symbolic link (to alice) on this notebook's path" in feedback
    assert "Give the folder that holds the submissions instead" in feedback
    for who in ("alice", "bob"):  # their own rows, as they would be
        mine = (tmp_path / "fb" / f"subs__{who}__week1__01.md").read_text()
        assert "not one of the course's lessons" in mine and "symbolic link" not in mine
    assert alice.read_bytes() == before
    _nothing_left(tmp_path, run)


def test_one_file_under_two_names_is_graded_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notebook(tmp_path / "subs" / "alice" / "01.ipynb")
    (tmp_path / "subs" / "mallory").symlink_to("alice")
    _notebook(tmp_path / "subs" / "bob" / "01.ipynb")
    (tmp_path / "subs" / "eve").mkdir()
    os.link(tmp_path / "subs" / "bob" / "01.ipynb", tmp_path / "subs" / "eve" / "01.ipynb")
    # mallory's folder given by name: the instructor's (a link), searched as given.
    found = {s.name: s for s in grading.find_submissions(["subs/alice", "subs/mallory", "subs"])}
    assert found["subs/alice/01.ipynb"].problem == notebooks.PROBLEMS["no_lesson"]
    assert found["subs/mallory/01.ipynb"].problem.startswith(
        "This is the same file as subs/alice/01.ipynb, reached here through a symbolic link"
    )
    for who, other in (("bob", "eve"), ("eve", "bob")):  # hard links: neither is graded
        assert found[f"subs/{who}/01.ipynb"].problem.startswith(
            f"This is the same file as subs/{other}/01.ipynb (one file under several names"
        )
    assert found["subs/mallory"].problem.startswith("This folder is a symbolic link (to alice)")


@pytest.mark.parametrize("how", ["hard link", "copy"])
def test_the_courses_solved_notebook_handed_in_is_named_as_such(tmp_path, how):
    solved = ROOT / "solutions" / NAMES["01"]
    handed = tmp_path / "carol" / NAMES["01"]
    handed.parent.mkdir()
    if how == "hard link":
        os.link(solved, handed)
    else:
        handed.write_bytes(solved.read_bytes())
    _notebook(tmp_path / "dave" / NAMES["01"], LESSON)  # not the course's, byte for byte
    carol, dave = grading.find_submissions([tmp_path / "carol", tmp_path / "dave"])
    assert carol.problem is None and dave.problem is None and dave.course_copy is None
    assert carol.course_copy == (f"solutions/{NAMES['01']}", how == "hard link")
    row = _row(carol, Status.OK)
    said = {
        "hard link": f"the course's solved notebook `solutions/{NAMES['01']}` itself (the same",
        "copy": f"a copy, byte for byte, of the course's solved notebook `solutions/{NAMES['01']}`",
    }[how]
    assert said in feedback_markdown(row, 30)
    page = render([row, _row(dave, Status.OK)], 30, 1.0, Tally())
    assert "The course's own notebooks" in page and page.count("<li>") == 1
    kind = "the same file (a hard link to it)" if how == "hard link" else "a copy, byte for byte"
    assert f"{kind} of <code>solutions/{NAMES['01']}</code>" in page
