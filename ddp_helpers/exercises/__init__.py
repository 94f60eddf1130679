"""Exercises of the four lessons: `from ddp_helpers.exercises import lesson01 as ex`."""

LESSONS = {
    "01": "ddp_helpers.exercises.lesson01",
    "02": "ddp_helpers.exercises.lesson02",
    "03": "ddp_helpers.exercises.lesson03",
    "04": "ddp_helpers.exercises.lesson04",
}


def exercises_of(lesson: str) -> list:
    """The Exercise objects of lesson "01".."04", in order."""
    import importlib

    return importlib.import_module(LESSONS[lesson]).EXERCISES
