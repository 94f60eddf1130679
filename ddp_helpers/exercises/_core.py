"""Exercise objects: check(answer), hint(), solution(), and a lesson's progress()."""

from __future__ import annotations

import contextlib
import inspect
import textwrap
import traceback
from dataclasses import dataclass, field

from .. import i18n
from ..launcher import DistributedError
from ..stubs import exercise_raised
from .texts import MESSAGES, Listed, Phrase, Texts, and_list, sayer  # noqa: F401 - re-exported
from .verdicts import CheckStatus, Hidden  # noqa: F401 - Hidden: the grader's, from here too


@dataclass(frozen=True)
class Mistake:
    """One way an answer can be wrong. Its message is the module's MESSAGES[key] (or this
    module's), its title MESSAGES[f"{key}.title"]; `hint` names the hint that helps."""

    hint: str | None = None


# What run_on_ranks raises for every exercise that runs ranks; an exercise gives them a
# hint by declaring them itself.
RANK_MISTAKES = {"hang": Mistake(), "mismatch": Mistake()}


class Wrong(Exception):
    """Raised by a checker: the answer runs but is wrong, as the mistake `key` says."""

    def __init__(self, key: str, /, **fields):
        super().__init__(key)
        self.key, self.fields = key, fields


@dataclass
class Result:
    """The outcome of one check: what it found, as a mistake's key and fields; the text
    is made when it is shown, in the language of that moment."""

    exercise: str
    status: CheckStatus
    mistake: str | None = None  # None when correct
    fields: dict = field(default_factory=dict)
    hint_name: str | None = None
    hidden: Hidden | None = None  # None: the grader's extra cases did not run
    texts: Texts = field(default_factory=Texts, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status is CheckStatus.CORRECT

    @property
    def message(self) -> str:
        """What the check says, as the learner sees it."""
        t, id = self.texts, self.exercise
        if self.status is CheckStatus.CORRECT:
            text = t.text("correct", id=id, detail=self.fields.get("detail", ""))
        elif self.status is CheckStatus.WRONG:
            text = t.text("wrong", id=id, detail=t.text(self.mistake, **self.fields))
        else:
            text = t.text(self.mistake, id=id, **self.fields)
        return text if self.hidden is not Hidden.FAILED else t.text("hidden", message=text)

    @property
    def hint(self) -> str | None:
        """The text of the hint that names this mistake, if one does."""
        return None if self.hint_name is None else self.texts.text(f"hint.{self.hint_name}")

    @property
    def title(self) -> str | None:
        """The mistake's short title (the class report's), None when correct."""
        if self.mistake is None:
            return None
        return self.texts.text(f"{self.mistake}.title", **self.fields)

    @property
    def title_fields(self) -> dict[str, str]:
        """The fields its title names (an error's exception), as text: what the grader keeps
        of them for the class report."""
        if self.mistake is None:
            return {}
        title = self.texts.template(f"{self.mistake}.title")
        return {k: str(self.fields[k]) for k in i18n.fields(title)}

    def __str__(self) -> str:
        hint = self.hint
        return self.message if hint is None else f"{self.message}\n💡 {hint}"


def _short_traceback(exc: BaseException, limit: int = 4) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    # Keep the learner's frames and the last ones; the checker's own are noise.
    own = [f for f in frames if "ddp_helpers/exercises" not in f.filename]
    shown = (own or frames)[-limit:]
    lines = traceback.format_list(shown)
    return "".join(lines) + "".join(traceback.format_exception_only(type(exc), exc))


def _stub_of(exc: BaseException) -> str | None:
    """The exercise whose build-written stub raised exc (also inside a rank), or None.

    Only the stub as `build` writes it means "not attempted"; any other
    NotImplementedError is the answer's own error.
    """
    if isinstance(exc, DistributedError):
        return exercise_raised(exc.exc_type or "", exc.exc_message or "")
    return exercise_raised(type(exc).__name__, str(exc))


class Exercise:
    """One exercise of a lesson: `check(answer)`, `hint()`, `solution()`.

    `texts` is its module's MESSAGES; `hints` names its hints in the order `hint()` shows
    them; `mistakes` declares each mistake its check can raise, with the hint that helps
    (RANK_MISTAKES need not be declared, unless to give them a hint). A name or key without
    its text is an error here, when the module is imported.
    """

    def __init__(
        self,
        id: str,
        name: str,
        checker,
        solution,
        *,
        texts,
        hints: tuple[str, ...],
        mistakes: dict[str, Mistake],
        points: int = 1,
        hidden=None,
        minutes: float | None = None,
        further: bool = False,
    ):
        self.id = id  # "1.2": lesson 1, exercise 2, as the stub's message says
        self.name = name  # what the learner defines in the notebook
        self._checker = checker
        self._hidden = hidden  # more cases, run only by the grader (grade())
        self.texts = Texts(texts)
        self.hint_names = tuple(hints)
        self.mistakes = dict(mistakes)
        self._solution = solution
        self.points = points
        # The time the work takes, where the pace rule (lines of the answer) misjudges it.
        self.minutes = minutes
        self.further = further  # in the lesson's optional "Going further" section
        self._next_hint = 0
        self._check_texts()

    def _check_texts(self) -> None:
        """Every hint and mistake has its text, title and hint: else fail at import."""
        missing = [f"hint.{name}" for name in self.hint_names if f"hint.{name}" not in self.texts]
        for key, mistake in {**RANK_MISTAKES, **self.mistakes}.items():
            missing += [k for k in (key, f"{key}.title") if k not in self.texts]
            if mistake.hint is not None and mistake.hint not in self.hint_names:
                missing.append(f"hint.{mistake.hint} (among the hints of exercise {self.id})")
        if missing:
            raise LookupError(f"exercise {self.id} has no text for: {', '.join(missing)}")

    @property
    def hints(self) -> dict[str, str]:
        """Its hints by name, in the order `hint()` shows them."""
        return {name: self.texts.text(f"hint.{name}") for name in self.hint_names}

    def title(self, key: str, **fields) -> str:
        """The short title of one of its mistakes (the class report's)."""
        return self.texts.text(f"{key}.title", **fields)

    def evaluate(self, answer) -> Result:
        """Run the checker on an answer and return the Result, printing nothing."""
        return self._run(self._checker, answer)

    def grade(self, answer) -> Result:
        """What the grader uses: the learner's check, then the hidden cases if it passed."""
        result = self._run(self._checker, answer)
        if result.passed and self._hidden is not None:
            hidden = self._run(self._hidden, answer)
            if hidden.passed:
                result.hidden = Hidden.PASSED
            else:
                hidden.hidden = Hidden.FAILED
                result = hidden
        return result

    def _run(self, checker, answer) -> Result:
        try:
            detail = checker(answer) or ""
        except Wrong as exc:
            return self._wrong(exc)
        except BaseException as exc:  # noqa: BLE001 - a learner's error is a result
            if isinstance(exc, KeyboardInterrupt):
                raise
            stub = _stub_of(exc)
            if stub is not None:
                return self._result(CheckStatus.NOT_ATTEMPTED, *self._not_attempted(stub))
            text = exc.render() if isinstance(exc, DistributedError) else _short_traceback(exc)
            raised = exc.exc_type if isinstance(exc, DistributedError) else None
            fields = {"exception": raised or type(exc).__name__, "detail": text}
            return self._result(CheckStatus.ERROR, "error", fields)
        return self._result(CheckStatus.CORRECT, None, {"detail": detail})

    def _result(self, status, mistake, fields, hint_name=None) -> Result:
        return Result(self.id, status, mistake, fields, hint_name, texts=self.texts)

    def _wrong(self, exc: Wrong) -> Result:
        mistake = self.mistakes.get(exc.key) or RANK_MISTAKES.get(exc.key)
        if mistake is None:  # a bug in the check, not in the answer
            raise LookupError(f"exercise {self.id} does not declare mistake {exc.key!r}") from exc
        return self._result(CheckStatus.WRONG, exc.key, exc.fields, mistake.hint)

    def _not_attempted(self, stub: str) -> tuple[str, dict]:
        """The key and fields that say which stub is still there."""
        if stub == self.id:
            return "not_attempted", {}
        from . import lesson_of_exercise

        lesson = lesson_of_exercise(stub)
        if lesson == lesson_of_exercise(self.id):
            return "not_attempted_other", {"other": stub}
        # An earlier lesson's answer, pasted into this notebook as a stub still to fill.
        fields = {"function": _function_of(stub), "other": stub, "lesson": lesson}
        return "not_attempted_pasted", fields

    def check(self, answer) -> None:
        """Check an answer and say what is right or wrong with it."""
        print(self.evaluate(answer))

    def hint(self) -> None:
        """Show the next hint."""
        names = self.hint_names
        n = min(self._next_hint, len(names) - 1)
        text = self.texts.text(f"hint.{names[n]}")
        print(self.texts.text("hint_header", n=n + 1, total=len(names), id=self.id, text=text))
        if n == len(names) - 1:
            print(self.texts.text("no_more_hints"))
        self._next_hint = n + 1

    def solution(self) -> None:
        """Show the reference answer."""
        print(self.texts.text("solution_header", id=self.id))
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


def _function_of(exercise_id: str) -> Phrase:
    """`setup()` for "2.2": the function an exercise asks for, or the exercise's number."""
    from . import LESSONS, exercises_of, lesson_of_exercise

    lesson = lesson_of_exercise(exercise_id)
    if lesson in LESSONS:
        for ex in exercises_of(lesson):
            if ex.id == exercise_id:
                return Phrase("function", name=ex.name)
    return Phrase("function_unknown", id=exercise_id)


@contextlib.contextmanager
def process_group(**kwargs):
    """A check harness's gloo process group on this rank: created, then destroyed whatever
    happens, unless the answer destroyed it already. No barrier is needed around it: the
    launcher returns from init_process_group() on no rank before every rank has connected,
    and rank 0, which serves the store, leaves last (see docs/launcher.md)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", **kwargs)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_on_ranks(harness, *args, nprocs: int = 2, nnodes: int = 1, timeout: float = 30):
    """Run a checker's harness on N CPU ranks; a hang, or collectives that do not match,
    becomes the Wrong that names it ("hang", "mismatch")."""
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
            raise Wrong("hang", timeout=timeout) from None
        if exc.mismatch == "abort":
            raise Wrong("mismatch", what=Phrase("mismatch_abort", signal=exc.signal_name)) from None
        if exc.mismatch == "returned":
            returned = i18n.listed(exc.returned_ranks)
            what = Phrase("mismatch_returned", returned=returned, rank=exc.rank)
            raise Wrong("mismatch", what=what) from None
        raise


def weights_apart(a: dict, b: dict) -> float:
    """The largest |a - b| over two state dicts: nan if any is nan (which no tolerance
    passes: compare with `not diff <= tol`), inf if their keys differ."""
    import math

    if a.keys() != b.keys():
        return math.inf
    diffs = [(a[k].double() - b[k].double()).abs().max().item() for k in a]
    return math.nan if any(map(math.isnan, diffs)) else max(diffs, default=0.0)


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
            results.append(Result(ex.id, CheckStatus.MISSING, "missing", texts=ex.texts))
    return results


def progress(exercises: list[Exercise], lesson: str, namespace: dict | None = None) -> None:
    """Check every exercise of a lesson against what the notebook defines; print a table,
    the core path's exercises apart from the optional Going further's."""
    if namespace is None:
        namespace = _notebook_namespace()
    results = evaluate_all(exercises, namespace)
    core = [(ex, r) for ex, r in zip(exercises, results, strict=True) if not ex.further]
    further = [(ex, r) for ex, r in zip(exercises, results, strict=True) if ex.further]
    header = "progress_core" if further else "progress_header"
    _progress_table(MESSAGES[header].format(lesson=lesson, **_counts(core)), core)
    if further and all(r.status is CheckStatus.MISSING for _, r in further):
        ids = [ex.id for ex, _ in further]  # the notebook has not come to them yet
        key = "progress_further_ahead" if len(ids) == 1 else "progress_further_ahead_many"
        print(Texts().text(key, ids=ids[0] if len(ids) == 1 else and_list(ids)))
    elif further:
        _progress_table(MESSAGES["progress_further"].format(**_counts(further)), further)


def _counts(rows) -> dict[str, int]:
    return {"passed": sum(r.passed for _, r in rows), "total": len(rows)}


def _progress_table(header: str, rows) -> None:
    print(header)
    for ex, r in rows:
        optional = ex.further and r.status is CheckStatus.MISSING
        status = MESSAGES["further_missing"] if optional else MESSAGES["status_names"][r.status]
        print(f"  {ex.id}  {ex.name:<24} {status}")


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
