"""The course's lessons and their exercises: `from ddp_helpers.exercises import lesson01 as ex`."""

# The one list of lessons. Each number names its notebooks, `lessons/NN_<name>.ipynb` and
# `solutions/NN_<name>.ipynb`, and its exercises, `ddp_helpers/exercises/lessonNN.py`:
# a new lesson is one entry here plus those three files.
LESSONS = {
    "01": "rank_and_world_size",
    "02": "process_group",
    "03": "ddp_wrap",
    "04": "sampler_and_checkpoint",
}


def notebook_name(lesson: str) -> str:
    """'01_rank_and_world_size.ipynb' for "01": the file name in lessons/ and solutions/."""
    return f"{lesson}_{LESSONS[lesson]}.ipynb"


def module_name(lesson: str) -> str:
    """The module holding a lesson's exercises, e.g. 'ddp_helpers.exercises.lesson01'."""
    return f"{__name__}.lesson{lesson}"


def exercises_of(lesson: str) -> list:
    """The Exercise objects of a lesson ("01", "02", ...), in order."""
    import importlib

    return importlib.import_module(module_name(lesson)).EXERCISES
