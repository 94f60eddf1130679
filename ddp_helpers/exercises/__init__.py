"""The course's lessons and their exercises: `from ddp_helpers.exercises import lesson01 as ex`."""

import importlib
import sys
from pathlib import Path

# The one list of lessons. Each number names its notebooks, `lessons/NN_<name>.ipynb` and
# `solutions/NN_<name>.ipynb`, and its exercises, `ddp_helpers/exercises/lessonNN/` (one
# module per exercise):
# a new lesson is one entry here plus those three files.
LESSONS = {
    "01": "rank_and_world_size",
    "02": "process_group",
    "03": "ddp_wrap",
    "04": "sampler_and_checkpoint",
    "05": "sharding",  # optional, after the course (README): sharding the memory
}


NOTEBOOKS = "[0-9][0-9]_*.ipynb"  # a glob for lesson notebooks in a folder


# A lesson's identity is its two digits, "03"; its notebooks' names start with them
# (03_ddp_wrap.ipynb) and its exercises are numbered from the number without its zero ("3.1").
# These three are the only places that take names and numbers apart.
def lesson_of_notebook(path) -> str:
    """'03' for '03_ddp_wrap.ipynb' (a path or a name): the lesson a notebook belongs to."""
    return Path(path).name[:2]


def lesson_of_exercise(exercise_id: str) -> str:
    """'03' for exercise "3.1": the lesson an exercise belongs to."""
    return exercise_id.split(".")[0].zfill(2)


def exercise_prefix(lesson: str) -> str:
    """'3' for "03": how the lesson's exercises are numbered ("3.1", "3.2", ...)."""
    return lesson.lstrip("0") or "0"


def notebook_name(lesson: str) -> str:
    """'01_rank_and_world_size.ipynb' for "01": the file name in lessons/ and solutions/."""
    return f"{lesson}_{LESSONS[lesson]}.ipynb"


def module_name(lesson: str) -> str:
    """The module holding a lesson's exercises, e.g. 'ddp_helpers.exercises.lesson01'."""
    return f"{__name__}.lesson{lesson}"


def exercises_of(lesson: str) -> list:
    """The Exercise objects of a lesson ("01", "02", ...), in order."""
    return importlib.import_module(module_name(lesson)).EXERCISES


def builds_ddp(lesson: str) -> bool:
    """Whether the lesson's cells and checks wrap models in DDP (its module's BUILDS_DDP)."""
    return getattr(importlib.import_module(module_name(lesson)), "BUILDS_DDP", False)


def expect_ddp_if_imported() -> None:
    """Where a lesson's notebook starts (%load_ext, after its `import ... as ex`): tell the
    launcher to expect DDP models if a lesson imported so far builds them."""
    from ..launcher import expect_ddp

    if any(
        getattr(sys.modules.get(module_name(lesson)), "BUILDS_DDP", False) for lesson in LESSONS
    ):
        expect_ddp()
