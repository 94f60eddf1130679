"""Gradescope's own autograder, as Gradescope runs it: `python -m ddp_helpers autograder`
builds the zip; it is unpacked into a root laid out like Gradescope's (source/, submission/,
results/, run_autograder), setup.sh's check runs (--skip-install: this environment already
holds torch, and the zip's own wheel, unpacked, is what grades), and run_autograder grades
a right, a wrong, a hanging and a malformed submission, each into a results.json that the
specification's schema accepts, with no code of the grader's extra cases in any output.

Gradescope's container blocks bubblewrap's user namespaces: a `bwrap` that fails as it
does there comes first on PATH; grading must not care, and says nothing of it (the container
is the sandbox): not even with DDP_HELPERS_SANDBOX=1 set, as it is for lesson 04's runs.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest
from fixtures.submissions import (
    ENDLESS,
    FULL,
    NAMES,
    _insert_after,
    _replace,
    short,
)

from ddp_helpers.grading.gradescope import config as autograder_config
from ddp_helpers.grading.gradescope import generate
from ddp_helpers.grading.gradescope import run as run_step
from support import ROOT, extra_case_lines, processes_under

SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "gradescope_results.schema.json").read_text())
BLOCKED_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"


class Gradescope:
    """A root laid out like Gradescope's /autograder, holding one autograder zip."""

    def __init__(self, folder: Path, lesson: str, *options: str, environ: dict | None = None):
        self.root, self.lesson = folder, lesson
        self.environ = environ or {}  # more of the container's environment
        self.zip = folder / "autograder.zip"
        folder.mkdir(parents=True)
        build = subprocess.run(
            [sys.executable, "-m", "ddp_helpers", "autograder", "--lesson", lesson]
            + ["--out", str(self.zip), *options],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert build.returncode == 0, build.stderr
        self.built = build.stdout
        with zipfile.ZipFile(self.zip) as zf:
            self.names = zf.namelist()
            self.modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
            zf.extractall(folder / "source")
        for name in ("setup.sh", "run_autograder"):  # zipfile drops the modes: unzip keeps them
            (folder / "source" / name).chmod(self.modes[name] & 0o777)
        (wheel,) = (folder / "source" / "dist").glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(folder / "site")
            self.wheel_names = zf.namelist()
        shutil.copy2(folder / "source" / "run_autograder", folder / "run_autograder")
        (folder / "bin").mkdir()
        (folder / "bin" / "bwrap").write_text(BLOCKED_BWRAP)
        (folder / "bin" / "bwrap").chmod(0o755)
        self.setup = subprocess.run(
            ["bash", str(folder / "source" / "setup.sh"), "--skip-install"],
            cwd=folder / "source",
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(self.env(), PYTHON=sys.executable),
        )

    def env(self) -> dict:
        tmp = self.root / "tmp"
        tmp.mkdir(exist_ok=True)
        return dict(
            os.environ,
            AUTOGRADER_ROOT=str(self.root),
            PYTHONPATH=str(self.root / "site"),  # the zip's own copy of the course's package
            PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ['PATH']}",
            OMP_NUM_THREADS="1",
            TMPDIR=str(tmp),
            **self.environ,
        )

    def submit(self, files: dict[str, object]) -> dict:
        """Grade one submission (file name -> notebook or text) as Gradescope would."""
        for name in ("submission", "results", "tmp"):
            shutil.rmtree(self.root / name, ignore_errors=True)
            (self.root / name).mkdir()
        for name, content in files.items():
            path = self.root / "submission" / name
            if isinstance(content, str):
                path.write_text(content)
            else:
                nbformat.write(content, path)
        run = subprocess.run(
            [str(self.root / "run_autograder")],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=300,
            env=self.env(),
        )
        results = self.root / "results" / "results.json"
        return {
            "run": run,
            "text": results.read_text() if results.exists() else "",
            "data": json.loads(results.read_text()) if results.exists() else None,
            "left": processes_under(self.root),
            "temporary": sorted(p.name for p in (self.root / "tmp").iterdir()),
        }


def _wrong_04():
    """Lesson 04 with a wrong quiz and an evaluate() that only the extra cases catch (it
    reads the first three batches of its share: all of them in the check's data sets, not
    in the larger ones the grader draws)."""
    nb = short("solutions", "04")
    _replace(
        nb, 'return {1: "b", 2: "a", 3: "c", 4: "a"}', 'return {1: "a", 2: "a", 3: "c", 4: "a"}'
    )
    _replace(
        nb,
        "for x, y in DataLoader(mine, batch_size=batch_size):",
        "for x, y in list(DataLoader(mine, batch_size=batch_size))[:3]:",
    )
    return nb


@pytest.fixture(scope="module")
def lesson04(tmp_path_factory):
    gs = Gradescope(
        tmp_path_factory.mktemp("gradescope") / "autograder",
        "04",
        "--timeout",
        "120",
        environ={"DDP_HELPERS_SANDBOX": "1"},
    )
    text = (ROOT / "lessons" / NAMES["04"]).read_text()
    runs = {
        # Learners' files keep the names they chose.
        "right": gs.submit({"alice_lesson4.ipynb": short("solutions", "04")}),
        "wrong": gs.submit({NAMES["04"]: _wrong_04()}),
        "malformed": gs.submit({NAMES["04"]: text[: len(text) // 2]}),
        "other_lesson": gs.submit({NAMES["01"]: short("solutions", "01")}),
        "no_notebook": gs.submit({"answers.py": "def make_loader(): ...\n"}),
    }
    return gs, runs


# The hanging notebook's limit: time for the kernel to start and import torch (over 2 s on a
# slow 2-core machine) and to define exercise 1.1, so that the endless cell is where it stops.
HANGING_LIMIT = "8"


@pytest.fixture(scope="module")
def hanging(tmp_path_factory):
    """Lesson 01's autograder with a short limit, and a notebook whose ranks never finish
    after exercise 1.1 (and that starts a process in a session of its own)."""
    folder = tmp_path_factory.mktemp("gradescope") / "autograder"
    gs = Gradescope(folder, "01", "--timeout", HANGING_LIMIT)
    nb = short("solutions", "01")
    _insert_after(nb, "def gpu_for_this_rank(", ENDLESS)
    return gs, gs.submit({NAMES["01"]: nb})


def _all_runs(lesson04, hanging) -> dict:
    return {**lesson04[1], "hanging": hanging[1]}


def test_the_zip_holds_gradescopes_two_scripts_and_the_course_as_a_wheel(lesson04):
    gs, _ = lesson04
    assert {"setup.sh", "run_autograder", "autograder.json", "constraints.txt"} <= set(gs.names)
    assert [n for n in gs.names if n.startswith("dist/")] == [
        n for n in gs.names if n.startswith("dist/ddp_basics-") and n.endswith(".whl")
    ]
    for script in ("setup.sh", "run_autograder"):
        assert gs.modes[script] & stat.S_IXUSR, f"{script} is not executable in the zip"
    assert "ddp_helpers/exercises/lesson04/evaluate.py" in gs.wheel_names  # its extra cases
    assert "ddp_helpers/demos/fsdp_train.py" in gs.wheel_names  # lesson 05 runs it, installed too
    assert not [n for n in gs.names + gs.wheel_names if n.endswith(".ipynb")]
    config = json.loads((gs.root / "source" / "autograder.json").read_text())
    assert (config["lesson"], config["timeout"]) == ("04", 120.0)
    setup = (gs.root / "source" / "setup.sh").read_text()
    assert f"torch=={config['torch']}" in setup and autograder_config.TORCH_INDEX in setup
    assert f"torch=={config['torch']}" in (gs.root / "source" / "constraints.txt").read_text()
    assert "Wrote " in gs.built and "lesson 04" in gs.built


def test_setup_checks_the_installation_and_records_its_python(lesson04):
    gs, _ = lesson04
    assert gs.setup.returncode == 0, gs.setup.stderr
    assert "Autograder for lesson 04 ready: ddp-basics" in gs.setup.stdout
    assert (gs.root / "source" / "python").read_text().strip() == sys.executable


def test_every_results_json_matches_the_specification(lesson04, hanging):
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for name, run in _all_runs(lesson04, hanging).items():
        assert run["run"].returncode == 0, f"{name}: {run['run'].stderr[-3000:]}"
        assert run["data"] is not None, f"{name}: no results.json\n{run['run'].stderr[-3000:]}"
        validator.validate(run["data"])
        assert sum(t["score"] for t in run["data"]["tests"]) == run["data"]["score"], name


def test_the_container_is_the_sandbox_so_nothing_is_said_of_bubblewrap(lesson04, hanging):
    for name, run in _all_runs(lesson04, hanging).items():
        for where in ("stdout", "stderr"):
            text = getattr(run["run"], where)
            assert "without the sandbox" not in text and "bubblewrap" not in text, (name, where)


def test_a_right_notebook_under_another_name_gets_every_point(lesson04):
    data = lesson04[1]["right"]["data"]
    assert data["score"] == FULL["04"] == sum(t["max_score"] for t in data["tests"]), data
    assert data["output"] == f"Lesson 04: {FULL['04']} of {FULL['04']} points. Status: ok."
    assert {t["status"] for t in data["tests"]} == {"passed"}


def test_a_wrong_notebook_loses_the_points_of_its_wrong_answers(lesson04):
    data = lesson04[1]["wrong"]["data"]
    tests = {t["name"]: t for t in data["tests"]}
    assert data["score"] == FULL["04"] - 2, json.dumps(data, indent=1)
    assert (tests["4.3 quiz_answers"]["status"], tests["4.3 quiz_answers"]["score"]) == (
        "failed",
        0.0,
    )
    assert tests["4.4 evaluate"]["status"] == "failed"
    assert "shown when grades are published" in tests["4.4 evaluate"]["output"]
    extra = tests["4.4 evaluate: the grader's extra cases"]
    assert (extra["status"], extra["visibility"]) == ("failed", "after_published")
    assert tests["4.2 make_loader"]["status"] == "passed"


def test_a_malformed_notebook_is_invalid_and_says_why(lesson04):
    data = lesson04[1]["malformed"]["data"]
    assert data["score"] == 0.0
    assert data["output"].startswith("This file could not be graded: This file is not a Jupyter")
    assert "broken JSON at line" in data["tests"][0]["output"]


def test_another_lessons_notebook_or_none_at_all_is_invalid_and_says_why(lesson04):
    other = lesson04[1]["other_lesson"]["data"]
    assert other["score"] == 0.0
    assert "this is lesson 01's notebook but lesson 04 was asked for" in other["output"]
    none = lesson04[1]["no_notebook"]["data"]
    assert none["score"] == 0.0
    assert "No notebook (.ipynb) was submitted (the submission holds answers.py)" in none["output"]
    assert NAMES["04"] in none["output"]


def test_a_hanging_notebook_is_stopped_at_its_limit_and_keeps_earlier_answers(hanging):
    gs, run = hanging
    assert gs.setup.returncode == 0, gs.setup.stderr
    data = run["data"]
    notebook = data["tests"][0]
    assert (notebook["name"], notebook["status"]) == ("Notebook", "failed")
    assert f"stopped after {HANGING_LIMIT} s" in notebook["output"]
    tests = {t["name"]: t for t in data["tests"]}
    assert tests["1.1 gpu_for_this_rank"]["status"] == "passed" and data["score"] == 1.0


def test_nothing_is_left_running_or_on_disk(lesson04, hanging):
    for name, run in _all_runs(lesson04, hanging).items():
        assert not run["left"], f"{name}: left running: {run['left']}"
        assert not run["temporary"], f"{name}: left in TMPDIR: {run['temporary']}"


def test_no_output_holds_the_code_of_the_extra_cases(lesson04, hanging):
    lines = extra_case_lines()
    assert lines  # the extra cases have code to leak
    for name, run in _all_runs(lesson04, hanging).items():
        for where, text in (
            ("results.json", run["text"]),
            ("stdout", run["run"].stdout),
            ("stderr", run["run"].stderr),
        ):
            assert not [line for line in lines if line in text], f"{name}: {where}"


def test_run_autograder_before_setup_says_so(tmp_path):
    (tmp_path / "source").mkdir()
    script = tmp_path / "run_autograder"
    script.write_text(generate.SCRIPTS["run_autograder"])
    script.chmod(0o755)
    run = subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        env=dict(os.environ, AUTOGRADER_ROOT=str(tmp_path)),
    )
    assert run.returncode == 1 and "setup.sh did not finish" in run.stderr


def test_the_notebook_is_picked_by_its_name_then_by_its_lesson(tmp_path):
    right, other = short("solutions", "04"), short("solutions", "01")

    def pick(files: dict) -> tuple:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        for name, nb in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, folder / name)
        path, problem = run_step.pick_notebook(folder, "04")
        return (path.relative_to(folder).as_posix() if path else None), problem

    assert pick({NAMES["04"]: right, "copy.ipynb": right}) == (NAMES["04"], None)
    assert pick({"mine.ipynb": right, "old.ipynb": other}) == ("mine.ipynb", None)
    assert pick({"a/mine.ipynb": right, ".ipynb_checkpoints/x.ipynb": right}) == (
        "a/mine.ipynb",
        None,
    )
    path, problem = pick({"one.ipynb": right, "two.ipynb": right})
    assert path is None and "2 notebooks were submitted (one.ipynb, two.ipynb)" in problem


def test_the_pins_come_from_the_constraints_file_where_there_is_one(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "ddp-basics"\ndependencies = ["torch>=2.8", "numpy>=1.26"]\n'
        '[project.optional-dependencies]\ngrade = ["ipykernel>=6.17"]\n'
    )
    (tmp_path / "constraints.txt").write_text(
        "# pip-compile's output\n--extra-index-url file:///opt/pypi/simple\n"
        "torch==2.13.0+cu128 \\\n    --hash=sha256:0123\n    # via ddp-basics\n"
        "numpy==2.4.6  # via torch\nddp-basics[grade] @ file:///work/main\n"
        'jupyterlab==4.6.6 ; python_version >= "3.11"\n'
    )
    text, torch, source, extras = generate._pins(tmp_path)
    assert (torch, source, extras) == ("2.13.0", "constraints.txt", "[grade]")
    assert text.splitlines() == [
        "torch==2.13.0",
        "numpy==2.4.6",
        'jupyterlab==4.6.6; python_version >= "3.11"',
    ]
