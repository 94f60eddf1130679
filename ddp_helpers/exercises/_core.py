"""Exercise objects: check(answer), hint(), solution(), and a lesson's progress()."""

from __future__ import annotations

import contextlib
import inspect
import re
import textwrap
import traceback
from dataclasses import dataclass

from ..launcher import DistributedError

# Learner-facing text of this module, in one place so that it can be translated.
MESSAGES = {
    "correct": "✅ Exercise {id}: correct. {detail}",
    "not_attempted": (
        "⏳ Exercise {id}: not attempted yet. Replace `raise NotImplementedError(...)` with "
        "your code, run that cell, then run this check again."
    ),
    "not_attempted_other": (
        "⏳ Exercise {id}: not attempted yet: your code calls exercise {other}, which still "
        "says `raise NotImplementedError(...)`. Finish that one first."
    ),
    "not_attempted_pasted": (
        "⏳ Exercise {id}: not attempted yet: your code calls {function}, which still says "
        "`raise NotImplementedError(...)` in this notebook. Paste your answer to exercise "
        "{other} from lesson {lesson} into this notebook's cell for it, run that cell, then "
        "run this check again."
    ),
    "wrong": "❌ Exercise {id}: not yet. {detail}",
    "error": "💥 Exercise {id}: your code raised an error.\n{detail}",
    "hint_header": "💡 Hint {n} of {total} for exercise {id}: {text}",
    "no_more_hints": "(That was the last hint; `.solution()` shows the reference answer.)",
    "solution_header": "Reference solution for exercise {id}:",
    "progress_header": "Lesson {lesson}: {passed} of {total} exercises pass",
    "hang": (
        "The check did not finish within {timeout:g} s: a rank waited in a collective "
        "(barrier, all_reduce, broadcast) that another rank never called."
    ),
    "mismatch": (
        "The ranks did not make the same collective calls (barrier, all_reduce, broadcast) "
        "in the same order: {what}."
    ),
    "mismatch_abort": "a rank aborted inside a collective ({signal})",
    "mismatch_returned": "rank {returned} had already returned while rank {rank} waited in one",
    "progress_missing": "not defined in this notebook yet",
    "hidden": "{message}\n(Found by the grader's extra cases, beyond those the check shows.)",
    "status_names": {
        "correct": "correct",
        "not_attempted": "not attempted",
        "wrong": "wrong",
        "error": "error",
        "missing": "missing",
    },
}


class Wrong(Exception):
    """Raised by a checker: the answer runs but is wrong; the message says how."""

    def __init__(self, message: str, hint: int | None = None):
        super().__init__(message)
        self.hint = hint  # index of the hint that names this mistake


@dataclass
class Result:
    """The outcome of one check: status is correct, not_attempted, wrong or error."""

    exercise: str
    status: str
    message: str
    hint: str | None = None
    hidden: str | None = None  # the grader's extra cases: passed, failed, or None (not run)

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n💡 {self.hint}"


def _short_traceback(exc: BaseException, limit: int = 4) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    # Keep the learner's frames and the last ones; the checker's own are noise.
    own = [f for f in frames if "ddp_helpers/exercises" not in f.filename]
    shown = (own or frames)[-limit:]
    lines = traceback.format_list(shown)
    return "".join(lines) + "".join(traceback.format_exception_only(type(exc), exc))


_STUB = re.compile(r"exercise (\d+\.\d+)")


def _stub_of(exc: BaseException) -> str | None:
    """The exercise whose build-written stub raised exc (also inside a rank), or None.

    Only `raise NotImplementedError("exercise N.M")`, as `build` writes it, means "not
    attempted"; any other NotImplementedError is the answer's own error.
    """
    if isinstance(exc, NotImplementedError):
        text = str(exc)
    elif isinstance(exc, DistributedError) and exc.exc_type == "NotImplementedError":
        text = exc.exc_message or ""
    else:
        return None
    m = _STUB.fullmatch(text.strip())
    return m.group(1) if m else None


class Exercise:
    """One exercise of a lesson: `check(answer)`, `hint()`, `solution()`."""

    def __init__(
        self,
        id: str,
        name: str,
        checker,
        hints: list[str],
        solution,
        points: int = 1,
        hidden=None,
        minutes: float | None = None,
    ):
        self.id = id  # "1.2": lesson 1, exercise 2, as the stub's message says
        self.name = name  # what the learner defines in the notebook
        self._checker = checker
        self._hidden = hidden  # more cases, run only by the grader (grade())
        self.hints = hints
        self._solution = solution
        self.points = points
        # The time the work takes, where the pace rule (lines of the answer) misjudges it.
        self.minutes = minutes
        self._next_hint = 0

    def evaluate(self, answer) -> Result:
        """Run the checker on an answer and return the Result, printing nothing."""
        return self._run(self._checker, answer)

    def grade(self, answer) -> Result:
        """What the grader uses: the learner's check, then the hidden cases if it passed."""
        result = self._run(self._checker, answer)
        if result.passed and self._hidden is not None:
            hidden = self._run(self._hidden, answer)
            if hidden.passed:
                result.hidden = "passed"
            else:
                hidden.message = MESSAGES["hidden"].format(message=hidden.message)
                hidden.hidden = "failed"
                result = hidden
        return result

    def _run(self, checker, answer) -> Result:
        try:
            detail = checker(answer) or ""
        except Wrong as exc:
            hint = self.hints[exc.hint] if exc.hint is not None else None
            result = Result(
                self.id, "wrong", MESSAGES["wrong"].format(id=self.id, detail=exc), hint
            )
        except BaseException as exc:  # noqa: BLE001 - a learner's error is a result
            if isinstance(exc, KeyboardInterrupt):
                raise
            stub = _stub_of(exc)
            if stub is not None:
                result = Result(self.id, "not_attempted", self._not_attempted(stub))
            else:
                text = exc.render() if isinstance(exc, DistributedError) else _short_traceback(exc)
                result = Result(self.id, "error", MESSAGES["error"].format(id=self.id, detail=text))
        else:
            result = Result(
                self.id, "correct", MESSAGES["correct"].format(id=self.id, detail=detail)
            )
        return result

    def _not_attempted(self, stub: str) -> str:
        if stub == self.id:
            return MESSAGES["not_attempted"].format(id=self.id)
        lesson = stub.split(".")[0]
        if lesson == self.id.split(".")[0]:
            return MESSAGES["not_attempted_other"].format(id=self.id, other=stub)
        # An earlier lesson's answer, pasted into this notebook as a stub still to fill.
        return MESSAGES["not_attempted_pasted"].format(
            id=self.id, function=_function_of(stub), other=stub, lesson=lesson.zfill(2)
        )

    def check(self, answer) -> None:
        """Check an answer and say what is right or wrong with it."""
        print(self.evaluate(answer))

    def hint(self) -> None:
        """Show the next hint."""
        n = min(self._next_hint, len(self.hints) - 1)
        print(
            MESSAGES["hint_header"].format(
                n=n + 1, total=len(self.hints), id=self.id, text=self.hints[n]
            )
        )
        if n == len(self.hints) - 1:
            print(MESSAGES["no_more_hints"])
        self._next_hint = n + 1

    def solution(self) -> None:
        """Show the reference answer."""
        print(MESSAGES["solution_header"].format(id=self.id))
        print(self.solution_source())

    def solution_source(self) -> str:
        if callable(self._solution):
            return textwrap.dedent(inspect.getsource(self._solution))
        return repr(self._solution)

    @property
    def reference(self):
        """The reference answer itself (the grader and the tests use it)."""
        return self._solution

    def __repr__(self) -> str:
        return f"<exercise {self.id}: {self.name}>"


def _function_of(exercise_id: str) -> str:
    """`setup()` for "2.2": the function an exercise asks for, or the exercise's number."""
    from . import LESSONS, exercises_of

    lesson = exercise_id.split(".")[0].zfill(2)
    if lesson in LESSONS:
        for ex in exercises_of(lesson):
            if ex.id == exercise_id:
                return f"`{ex.name}()`"
    return f"exercise {exercise_id}"


def run_on_ranks(
    harness, *args, nprocs: int = 2, nnodes: int = 1, timeout: float = 30, hang_hint=None
):
    """Run a checker's harness on N CPU ranks; a hang becomes a Wrong that names it."""
    from ..launcher import launch

    try:
        return launch(
            harness,
            *args,
            nprocs=nprocs,
            nnodes=nnodes,
            backend="gloo",
            timeout=timeout,
            ordered=True,
        )
    except DistributedError as exc:
        if exc.kind == "timeout":
            raise Wrong(MESSAGES["hang"].format(timeout=timeout), hint=hang_hint) from None
        if exc.collective_mismatch:
            what = MESSAGES["mismatch_abort"].format(signal=exc.signal_name)
            raise Wrong(MESSAGES["mismatch"].format(what=what), hint=hang_hint) from None
        blamed = exc.failures.get(exc.rank)
        if blamed is not None and blamed.by_peer and exc.returned_ranks:
            what = MESSAGES["mismatch_returned"].format(
                returned=", ".join(map(str, exc.returned_ranks)), rank=exc.rank
            )
            raise Wrong(MESSAGES["mismatch"].format(what=what), hint=hang_hint) from None
        raise


def rank_folder(folder: str, rank: int) -> str:
    """The subfolder of rank `rank` in a check's folder: what lands there shows who wrote."""
    import os

    return os.path.join(folder, f"rank{rank}")


@contextlib.contextmanager
def rank_folders(ranks: int, prefix: str):
    """A temporary folder with an empty subfolder per rank, removed afterwards."""
    import os
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        for rank in range(ranks):
            os.mkdir(rank_folder(folder, rank))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def writers(folder: str, ranks: int) -> list[int]:
    """The ranks whose subfolder is no longer empty."""
    import os

    return [rank for rank in range(ranks) if os.listdir(rank_folder(folder, rank))]


def evaluate_all(exercises: list[Exercise], namespace: dict) -> list[Result]:
    """Each exercise checked against the object of its name in a namespace (or missing)."""
    results = []
    for ex in exercises:
        if ex.name in namespace:
            results.append(ex.evaluate(namespace[ex.name]))
        else:
            results.append(Result(ex.id, "missing", MESSAGES["progress_missing"]))
    return results


def progress(exercises: list[Exercise], lesson: str, namespace: dict | None = None) -> None:
    """Check every exercise of a lesson against what the notebook defines; print a table."""
    if namespace is None:
        namespace = _notebook_namespace()
    results = evaluate_all(exercises, namespace)
    passed = sum(r.passed for r in results)
    print(MESSAGES["progress_header"].format(lesson=lesson, passed=passed, total=len(results)))
    for ex, r in zip(exercises, results, strict=True):
        print(f"  {ex.id}  {ex.name:<24} {MESSAGES['status_names'][r.status]}")


def _notebook_namespace() -> dict:
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is not None:
        return ip.user_ns
    import __main__

    return vars(__main__)
