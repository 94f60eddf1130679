"""An exercise as data: its mistakes (Mistake, raised by a check as Wrong), the Result of a
check, and the Exercise itself: check(answer), grade(answer), hint(), solution()."""

from __future__ import annotations

import ast
import contextvars
import copy
import hashlib
import importlib
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass, field

from .. import i18n
from ..launcher import DistributedError, pickling
from ..launcher.plan import STOP
from .answer import Answer
from .answer_errors import (
    AnswerRaised,
    answer_traceback,
    short_traceback,
    stub_of,
    without_course_frames,
)
from .space import Space
from .texts import Listed, Phrase, Texts, and_list
from .verdicts import CheckStatus, Hidden


@dataclass(frozen=True)
class Mistake:
    """One way an answer can be wrong. Its message is the module's MESSAGES[key] (or this
    module's), its title MESSAGES[f"{key}.title"]; `hint` names the hint that helps."""

    hint: str | None = None


# What run_on_ranks and run_answer raise for every exercise that runs ranks; an exercise
# gives them a hint by declaring them itself.
RANK_MISTAKES = {
    "hang": Mistake(),
    "mismatch": Mistake(),
    "endless": Mistake(),
    "from_course": Mistake(),
}


def rank_mistakes(
    hint: str | None = None, *, hang: str | None = None, mismatch: str | None = None
) -> dict[str, Mistake]:
    """An exercise's "hang" and "mismatch" (what run_on_ranks raises), each with the hint that
    helps: `hint` for both, or `hang` and `mismatch` each its own. Declared among its
    mistakes as `**rank_mistakes(hint="save_barrier")`."""
    return {"hang": Mistake(hint=hang or hint), "mismatch": Mistake(hint=mismatch or hint)}


class Wrong(Exception):
    """Raised by a checker: the answer runs but is wrong, as the mistake `key` says."""

    def __init__(self, key: str, /, **fields):
        super().__init__(key)
        self.key, self.fields = key, fields
        self.tried = None  # the configuration it was found in (space.trying), if named


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
    tried: dict = field(default_factory=dict)  # the configuration the mistake showed in

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
            detail = t.text(self.mistake, **self.fields) + self._where()
            text = t.text("wrong", id=id, detail=detail)
        else:
            text = t.text(self.mistake, id=id, **self.fields)
        return text if self.hidden is not Hidden.FAILED else t.text("hidden", message=text)

    def _where(self) -> str:
        """' (Seen with 3 ranks on 2 machines, float64 values.)': where the mistake showed."""
        if not self.tried:
            return ""
        parts = [Phrase(f"tried_{key}", v=value) for key, value in self.tried.items()]
        return self.texts.text("tried", where=Listed(parts))

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


# How long a check's launch waits before it names a hang (run_on_ranks, run_answer), and how
# long the rest of an exercise's cases may run beside it: each exercise may declare its own.
# The references' checks run in 0.1-2 s here (`make bench-checks` measures them).
HANG_TIMEOUT = 30.0
RUN_TIME = 30.0


class Exercise:
    """One exercise of a lesson: `check(answer)`, `hint()`, `solution()`.

    `texts` is its module's MESSAGES (or a tuple of tables, its own first: words that
    several exercises' messages share live in one table of their own); `hints` names its
    hints in the order `hint()` shows them; `mistakes` declares each mistake its check can
    raise, with the hint that helps (RANK_MISTAKES need not be declared, unless to give them
    a hint). A name or key without its text is an error here, when the module is imported.
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
        hang_timeout: float = HANG_TIMEOUT,
        run_time: float = RUN_TIME,
        space: Space | None = None,
    ):
        self.id = id  # "1.2": lesson 1, exercise 2, as the stub's message says
        self.name = name  # what the learner defines in the notebook
        self._checker = checker
        self._hidden = hidden  # more cases, run only by the grader (grade())
        self.texts = Texts(*texts) if isinstance(texts, tuple) else Texts(texts)
        self.hint_names = tuple(hints)
        self.mistakes = dict(mistakes)
        self._solution = solution
        self.points = points
        # The time the work takes, where the pace rule (lines of the answer) misjudges it.
        self.minutes = minutes
        self.further = further  # in the lesson's optional "Going further" section
        # Its check's launches wait at most hang_timeout to name a hang, and the rest of
        # its cases (hidden ones too) run within run_time: tests/exercises hold both.
        self.hang_timeout = hang_timeout
        self.run_time = run_time
        # What an answer could hard-code, and what the check draws of it (space.py).
        self.space = space
        self._next_hint = 0
        # The last answer that passed its check in this process: (its fingerprint, the
        # result). progress() shows that pass again for the same answer without rerunning.
        self._passed: tuple[bytes, Result] | None = None
        self._check_texts()

    @property
    def worst(self) -> float:
        """Seconds its check, hidden cases included, may take on an answer that hangs in
        its last case, until the hang is named: what the grader gives it (TimeBudget)."""
        return self.run_time + self.hang_timeout + STOP.after_timeout

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
        return self._evaluate(answer, fingerprint(answer))

    def evaluate_unless_passed(self, answer) -> Result:
        """The pass this answer's check gave in this process, if it is the answer that
        passed last (the same bytes as its ranks would receive: its code and the notebook's
        values it uses; what it imports from a module travels by name, and what it reads
        at run time, a file or a variable, not at all); else evaluate(answer). What
        progress() shows: the lesson's table without running every passed check twice.
        check() runs the check again, whatever passed before."""
        print_ = fingerprint(answer)
        if print_ is not None and self._passed is not None and self._passed[0] == print_:
            return copy.copy(self._passed[1])
        return self._evaluate(answer, print_)

    def _evaluate(self, answer, print_: bytes | None) -> Result:
        result = self._run(self._checker, answer)
        if result.passed and print_ is not None:
            self._passed = (print_, copy.copy(result))
        return result

    def grade(self, answer) -> Result:
        """What the grader uses: the learner's check, then the hidden cases if it passed.

        The ranks these run make the course's reference a tripwire and look for its code in
        the answer (in_rank): an answer that is the reference, calls it or carries its code
        is `from_course`, however it got there.
        """
        grading = GRADING.set(self)
        try:
            result = self._run(self._checker, answer)
            if result.passed and self._hidden is not None:
                hidden = self._run(self._hidden, answer)
                if hidden.passed:
                    result.hidden = Hidden.PASSED
                else:
                    hidden.hidden = Hidden.FAILED
                    result = hidden
        finally:
            GRADING.reset(grading)
        return result

    def from_course(self) -> Result:
        """The result of an answer that is the course's own reference (found by the grader
        before any check ran)."""
        return self._result(CheckStatus.WRONG, "from_course", {"name": self.name})

    @property
    def mistake_keys(self) -> frozenset[str]:
        """Every mistake key a check of it can give: its own, the ranks', the core's."""
        core = (
            "error",
            "not_attempted",
            "not_attempted_other",
            "not_attempted_pasted",
            "earlier_first",
        )
        return frozenset([*self.mistakes, *RANK_MISTAKES, *core])

    def reference_names(self) -> list[tuple[str, str]]:
        """(module, qualified name) of the reference answer, for a rank to find it by."""
        ref = self._solution
        if not callable(ref):
            return []
        return [(ref.__module__, ref.__qualname__)]

    def _run(self, checker, answer) -> Result:
        answer = answer if isinstance(answer, Answer) else Answer(answer)
        result = self._checked(checker, answer)
        if result.status in (CheckStatus.WRONG, CheckStatus.ERROR) and GRADING.get() is None:
            return self._earlier_first(answer.obj) or result
        return result

    def _earlier_first(self, answer) -> Result | None:
        """When an answer that calls the learner's own answer to an earlier exercise fails,
        and that earlier answer fails its own check, the cause is there: "fix 2.1 first"
        (2.2 calls pick_backend(); the capstone calls setup(), wrap(), cleanup()). A
        learner's check only: the grader judges each exercise on its own."""
        for earlier in _earlier_exercises(self.id):
            mine = getattr(answer, "__globals__", {}).get(earlier.name)
            if earlier.name not in _names_used(answer) or not callable(mine):
                continue
            verdict = earlier.evaluate(mine)
            if verdict.status in (CheckStatus.WRONG, CheckStatus.ERROR):
                if verdict.mistake == "earlier_first":
                    return self._result(CheckStatus.WRONG, "earlier_first", verdict.fields)
                fields = {"function": Phrase("function", name=earlier.name), "other": earlier.id}
                return self._result(
                    CheckStatus.WRONG, "earlier_first", fields | {"why": verdict.title or ""}
                )
        return None

    def _checked(self, checker, answer: Answer) -> Result:
        try:
            detail = checker(answer) or ""
        except Wrong as exc:
            return self._wrong(exc)
        except BaseException as exc:  # noqa: BLE001 - a learner's error is a result
            if isinstance(exc, KeyboardInterrupt):
                raise
            stub = stub_of(exc)
            if stub is not None:
                return self._result(CheckStatus.NOT_ATTEMPTED, *self._not_attempted(stub))
            if isinstance(exc, AnswerRaised):
                text, raised = answer_traceback(exc.traceback), exc.exc_type
            elif isinstance(exc, DistributedError):
                text, raised = without_course_frames(exc.render()), exc.exc_type
            else:
                text, raised = short_traceback(exc), None
            fields = {"exception": raised or type(exc).__name__, "detail": text}
            return self._result(CheckStatus.ERROR, "error", fields)
        return self._result(CheckStatus.CORRECT, None, {"detail": detail})

    def _result(self, status, mistake, fields, hint_name=None) -> Result:
        return Result(self.id, status, mistake, fields, hint_name, texts=self.texts)

    def _wrong(self, exc: Wrong) -> Result:
        mistake = self.mistakes.get(exc.key) or RANK_MISTAKES.get(exc.key)
        if mistake is None:  # a bug in the check, not in the answer
            raise LookupError(f"exercise {self.id} does not declare mistake {exc.key!r}") from exc
        result = self._result(CheckStatus.WRONG, exc.key, exc.fields, mistake.hint)
        result.tried = exc.tried.config if exc.tried is not None else {}
        return result

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

    def solution_source(self, namespace: dict | None = None) -> str:
        """The reference as code to paste into the notebook as it is: the course's own
        imports of earlier answers (`from .lesson02.setup import setup`) become a comment
        naming them, since the notebook holds the learner's own; a helper the notebook
        reaches as `ex.NAME` is written so, unless the notebook (`namespace`, by default the
        running notebook's) binds the name itself."""
        if not callable(self._solution):
            return repr(self._solution)
        source = textwrap.dedent(inspect.getsource(self._solution))
        lines = source.splitlines(keepends=True)
        yours, drop = [], set()
        tree = ast.parse(source)
        bound = notebook_namespace() if namespace is None else namespace
        helpers = [n for n in self._helpers_in(tree) if n.id not in bound]
        for node in sorted(helpers, key=lambda n: (-n.lineno, -n.col_offset)):
            line = lines[node.lineno - 1]
            lines[node.lineno - 1] = f"{line[: node.col_offset]}ex.{line[node.col_offset :]}"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                yours += [f"{alias.asname or alias.name}()" for alias in node.names]
                drop.update(range(node.lineno - 1, node.end_lineno))
        if not yours:
            return "".join(lines)
        kept = [line for n, line in enumerate(lines) if n not in drop]
        first = min(drop)
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        note = indent + "# " + self.texts.text("solution_uses_yours", names=and_list(yours))
        return "".join(kept[:first] + [note + "\n"] + kept[first:])

    def _helpers_in(self, tree: ast.AST) -> list[ast.Name]:
        """The names a reference reads from its own module that the lesson hands the
        notebook as `ex.NAME` (3.6's buckets_for)."""
        from . import lesson_of_exercise, module_name

        lesson = importlib.import_module(module_name(lesson_of_exercise(self.id)))
        home = sys.modules[self._solution.__module__]
        own = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        return [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and n.id not in own
            and callable(getattr(lesson, n.id, None))
            and not isinstance(getattr(lesson, n.id), types.ModuleType)
            and getattr(lesson, n.id, None) is getattr(home, n.id, object())
        ]

    @property
    def reference(self):
        """The reference answer itself (the grader and the tests use it)."""
        return self._solution

    def __repr__(self) -> str:
        return f"<exercise {self.id}: {self.name}>"


def fingerprint(answer) -> bytes | None:
    """A digest of the answer as a rank receives it (pickled by value: its code, the
    notebook's functions and values it uses); None for one that cannot be pickled."""
    try:
        return hashlib.sha256(pickling.dumps(answer)).digest()
    except Exception:  # noqa: BLE001 - a check says why it cannot send it; nothing to reuse
        return None


def _earlier_exercises(exercise_id: str) -> list[Exercise]:
    """The course's exercises before this one, in order (2.1 before 2.2, lesson 02's
    before lesson 04's)."""
    from . import LESSONS, exercises_of

    every = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
    return [ex for ex in every if _number(ex.id) < _number(exercise_id)]


def _number(exercise_id: str) -> tuple[int, int]:
    """(3, 2) for "3.2": how exercises are ordered ("3.2" before "3.10")."""
    lesson, number = exercise_id.split(".")
    return int(lesson), int(number)


def _names_used(answer) -> set[str]:
    """The global names an answer's code reads: a function's, its inner functions', a
    class's methods'."""
    codes = []
    if isinstance(answer, type):
        codes = [f.__code__ for f in vars(answer).values() if hasattr(f, "__code__")]
    elif hasattr(answer, "__code__"):
        codes = [answer.__code__]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


def _function_of(exercise_id: str) -> Phrase:
    """`setup()` for "2.2": the function an exercise asks for, or the exercise's number."""
    from . import LESSONS, exercises_of, lesson_of_exercise

    lesson = lesson_of_exercise(exercise_id)
    if lesson in LESSONS:
        for ex in exercises_of(lesson):
            if ex.id == exercise_id:
                return Phrase("function", name=ex.name)
    return Phrase("function_unknown", id=exercise_id)


# The exercise being graded (Exercise.grade), while it is: its checks' ranks guard its
# reference (tripwire.in_rank). A context variable, so that nothing outside a grade() sees it.
GRADING: contextvars.ContextVar[Exercise | None] = contextvars.ContextVar("grading", default=None)


def notebook_namespace() -> dict:
    """The running notebook's names (IPython's), or __main__'s outside a kernel."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is not None:
        return ip.user_ns
    import __main__

    return vars(__main__)


def in_order(*modules) -> list[Exercise]:
    """A lesson's exercises, each its module's `exercise`, in the order of their numbers
    (Exercise.id, "3.2" before "3.10"): the number is written once, in the Exercise."""
    return sorted((module.exercise for module in modules), key=lambda ex: _number(ex.id))


def numbered(exercises: list[Exercise]) -> dict[str, Exercise]:
    """Each exercise by the name a notebook calls it, `q` and its number in the lesson
    ("3.2" is `ex.q2`), taken from its id."""
    return {f"q{ex.id.split('.')[1]}": ex for ex in exercises}
