"""Exercise objects: check(answer), hint(), solution(), and a lesson's progress()."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import importlib
import inspect
import math
import re
import sys
import textwrap
import traceback
import types
from dataclasses import dataclass, field

from .. import i18n
from ..files import remove_tree
from ..launcher import DistributedError
from ..launcher.api import launch_plain
from ..launcher.plain import to_plain
from ..launcher.plan import STOP
from ..stubs import exercise_raised
from . import LESSONS, exercises_of, lesson_of_exercise, module_name
from .answer import Answer
from .space import Space  # noqa: F401 - re-exported
from .texts import MESSAGES, Listed, Phrase, Texts, and_list, sayer  # noqa: F401 - re-exported
from .verdicts import CheckStatus, Hidden  # noqa: F401 - Hidden: the grader's, from here too


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
    if isinstance(exc, (DistributedError, AnswerRaised)):
        return exercise_raised(exc.exc_type or "", exc.exc_message or "")
    return exercise_raised(type(exc).__name__, str(exc))


class AnswerRaised(Exception):
    """The answer raised on the rank that run_answer ran it on: what it raised, as text."""

    def __init__(self, exc_type: str, exc_message: str, traceback_text: str):
        super().__init__(f"{exc_type}: {exc_message}")
        self.exc_type, self.exc_message, self.traceback = exc_type, exc_message, traceback_text


# A frame of a traceback as text: its first line, '  File "path", line N, in name'.
_FRAME_LINE = re.compile(r'^  File "(?P<file>[^"]*)", line \d+')
_CHAINED = re.compile(
    r"\n\n(?:During handling of the above exception|The above exception)[^\n]*\n\n"
)


def _answer_traceback(text: str, limit: int = 4) -> str:
    """A rank's traceback as _short_traceback shows one: the last `limit` frames that are
    not the course's (checks, launcher), then the exception; of a chain, the last one."""
    text = _CHAINED.split(text or "")[-1]
    frames: list[list[str]] = []
    tail: list[str] = []
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            continue
        match = _FRAME_LINE.match(line)
        if match:
            frames.append([line])
            tail = []
        elif line.startswith("    ") and frames and not tail:
            frames[-1].append(line)
        else:
            tail.append(line)
    own = [f for f in frames if not _is_course_file(_FRAME_LINE.match(f[0])["file"])]
    shown = (own or frames)[-limit:]
    return "\n".join([*(line for frame in shown for line in frame), *tail]) + "\n"


# What shows the course's own frames in a check's tracebacks: `%env DDP_HELPERS_TRACEBACK=full`.
FULL_TRACEBACK = "DDP_HELPERS_TRACEBACK"


def _without_course_frames(text: str) -> str:
    """The ranks' tracebacks of a check's error without the frames of the course's own
    files (the harness that called the answer, the launcher), which are noise to a learner;
    a line at the end says how to see them. Unless DDP_HELPERS_TRACEBACK is `full`."""
    import os

    if os.environ.get(FULL_TRACEBACK) == "full":
        return text
    kept: list[str] = []
    hidden = skipping = False
    for line in text.splitlines():
        match = _FRAME_LINE.match(line)
        if match:
            skipping = _is_course_file(match["file"])
            hidden |= skipping
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    if hidden:
        kept.append(MESSAGES["course_frames_hidden"].format(variable=FULL_TRACEBACK))
    return "\n".join(kept)


def _is_course_file(path: str) -> bool:
    return any(part in path for part in ("ddp_helpers/exercises", "ddp_helpers/launcher"))


# How long a check's launch waits before it names a hang (run_on_ranks, run_answer), and how
# long the rest of an exercise's cases may run beside it: each exercise may declare its own.
# The references' checks run in 0.1-2 s here (tests/exercises/test_checks.py holds them).
HANG_TIMEOUT = 30.0
# The tests' seam: a test that wants a hang named sooner sets this (seconds), and every check
# launched meanwhile waits at most that long, whichever module runs it.
HANG_CAP: float | None = None
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
        return self._run(self._checker, answer)

    def grade(self, answer) -> Result:
        """What the grader uses: the learner's check, then the hidden cases if it passed.

        The ranks these run make the course's reference a tripwire and look for its code in
        the answer (_in_rank): an answer that is the reference, calls it or carries its code
        is `from_course`, however it got there.
        """
        grading = _GRADING.set(self)
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
            _GRADING.reset(grading)
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
        if result.status in (CheckStatus.WRONG, CheckStatus.ERROR) and _GRADING.get() is None:
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
            stub = _stub_of(exc)
            if stub is not None:
                return self._result(CheckStatus.NOT_ATTEMPTED, *self._not_attempted(stub))
            if isinstance(exc, AnswerRaised):
                text, raised = _answer_traceback(exc.traceback), exc.exc_type
            elif isinstance(exc, DistributedError):
                text, raised = _without_course_frames(exc.render()), exc.exc_type
            else:
                text, raised = _short_traceback(exc), None
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
        bound = _notebook_namespace() if namespace is None else namespace
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


def _earlier_exercises(exercise_id: str) -> list[Exercise]:
    """The course's exercises before this one, in order (2.1 before 2.2, lesson 02's
    before lesson 04's)."""

    def order(ex_id: str) -> tuple[int, int]:
        lesson, number = ex_id.split(".")
        return int(lesson), int(number)

    every = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
    return [ex for ex in every if order(ex.id) < order(exercise_id)]


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


# The exercise being graded (Exercise.grade), while it is: its checks' ranks guard its
# reference (_in_rank). A context variable, so that nothing outside a grade() sees it.
_GRADING: contextvars.ContextVar[Exercise | None] = contextvars.ContextVar("grading", default=None)
FROM_COURSE_EXIT = 93  # how a rank ends whose answer ran the course's own reference


def _launched(harness, answer, args, nprocs: int, nnodes: int, timeout: float):
    """harness(answer, *args) on N CPU ranks, each value back as plain data (launch_plain:
    the answer is the learner's code, and nothing it does runs code in this process). When
    grading, an answer found to be the course's reference is Wrong("from_course")."""
    grading = _GRADING.get()
    references = grading.reference_names() if grading is not None else []
    call = (_in_rank, references, harness, answer, *args)
    try:
        return launch_plain(*call, nprocs=nprocs, nnodes=nnodes, timeout=timeout)
    except DistributedError as exc:
        if grading is not None and any(
            f.exitcode == FROM_COURSE_EXIT for f in exc.failures.values()
        ):
            raise Wrong("from_course", name=grading.name) from None
        raise


def run_on_ranks(
    harness, answer, *args, nprocs: int = 2, nnodes: int = 1, timeout: float = HANG_TIMEOUT
):
    """Run a checker's harness, harness(answer, *args), on N CPU ranks; each rank's value
    comes back as plain data. A hang, or collectives that do not match, becomes the Wrong
    that names it ("hang", "mismatch")."""
    if HANG_CAP is not None:
        timeout = min(timeout, HANG_CAP)
    try:
        return _launched(harness, answer, args, nprocs, nnodes, timeout)
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


def run_answer(harness, answer, *args, timeout: float = HANG_TIMEOUT):
    """harness(answer, *args) on one rank, its value back as plain data: how a check runs
    an answer it could call itself, so that the learner's code never runs in the process
    that judges it. What the answer raised comes back as AnswerRaised; an answer that does
    not return within `timeout` is Wrong("endless")."""
    try:
        return _launched(harness, answer, args, 1, 1, timeout)[0]
    except DistributedError as exc:
        if exc.kind == "timeout":
            raise Wrong("endless", timeout=timeout) from None
        if exc.kind == "exception":
            raise AnswerRaised(exc.exc_type, exc.exc_message, exc.traceback) from None
        raise


def call(fn, *args):
    """A harness for run_answer: what fn(*args) returns, as plain data (to_plain)."""
    return to_plain(fn(*args))


def each_case(fn, cases) -> tuple[list, int | None]:
    """A harness for run_answer: fn(*args) for each args of `cases` in turn, as plain data,
    up to the first that raises; (what each returned, the index of the one that raised or
    None). The check runs that one again alone (run_answer(call, ...)) to show what it
    raised, after judging those before it, as it would have calling them one by one."""
    out = []
    for args in cases:
        try:
            out.append(to_plain(fn(*args)))
        except Exception:  # noqa: BLE001 - shown when the check comes to this case
            return out, len(out)
    return out, None


def answers_to(fn, cases):
    """What fn returns for each args of `cases`, in order, run on one rank (each_case); the
    first case it raises on raises AnswerRaised here, when the iteration comes to it."""
    cases = [tuple(args) for args in cases]
    out, raised = run_answer(each_case, fn, cases)
    yield from out
    if raised is not None:
        yield run_answer(call, fn, *cases[raised])  # raises again, as the answer does
        yield from answers_to(fn, cases[raised + 1 :])


def _in_rank(references, harness, answer, *args):
    """In a check's rank: harness(answer, *args), its value made plain data (to_plain: a
    learner's own object in it comes back as an Opaque). When grading (`references`: the
    exercise's reference answer), with the reference a tripwire (a call to it ends the
    rank, FROM_COURSE_EXIT, before the harness can judge) and the answer searched for the
    reference's code (re-homed into a function of its own, `types.FunctionType(ref.__code__,
    ...)`) first. A learner who reads this can still get past it; the checks are in the
    package a notebook can read (docs/instructors.md)."""
    import os

    keys: set[tuple] = set()
    for module, qualname in references:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        for fn in _functions_of(obj):
            keys |= _code_keys(fn.__code__)
            if not fn.__code__.co_freevars:  # a closure's code cannot take the tripwire's
                fn.__code__ = _tripwire.__code__
    if references and _carries(answer, keys, set(), 4):
        os._exit(FROM_COURSE_EXIT)
    return to_plain(harness(answer, *args))


def _tripwire(*args, **kwargs):
    import os

    os._exit(93)  # FROM_COURSE_EXIT: the reference's code is replaced by this one's


def _functions_of(obj) -> list:
    """The functions of a reference: itself, or a class's methods (its own and nested)."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        found = []
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)  # staticmethod, classmethod
            if isinstance(value, property):
                value = value.fget
            found += _functions_of(value) if isinstance(value, (types.FunctionType, type)) else []
        return found
    return []


def _code_keys(code: types.CodeType) -> set[tuple]:
    """Where a code object and those nested in it were written: file, line, name."""
    keys = {(code.co_filename, code.co_firstlineno, code.co_name)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            keys |= _code_keys(const)
    return keys


def _carries(obj, keys: set, seen: set, depth: int) -> bool:
    """Whether an answer holds code written where the reference was: in itself, or in a
    function it reaches (the globals it names, its closure, defaults, a class's methods, a
    partial's function), `depth` steps deep."""
    from ..launcher.pickling import names_used

    if depth < 0 or id(obj) in seen or len(seen) > 5000:
        return False
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        return bool(_code_keys(obj) & keys)
    parts: list = []
    # What the notebook defined (in __main__) is searched through; what a library defined
    # is only looked at, for code that is the reference's.
    ours = getattr(obj, "__module__", None) == "__main__"
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        parts = [code]
        if ours:
            parts += [*(obj.__defaults__ or ())]
            parts += [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
            parts += [obj.__globals__[n] for n in names_used(code) if n in obj.__globals__]
    elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        parts = [obj.__func__]
    elif isinstance(obj, functools.partial):
        parts = [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, property):
        parts = [obj.fget, obj.fset]
    elif isinstance(obj, type) and ours:
        parts = list(vars(obj).values())
    return any(_carries(part, keys, seen, depth - 1) for part in parts)


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def weights_apart(a: dict, b: dict) -> float:
    """The largest |a - b| over two state dicts: nan if any is nan (which no tolerance
    passes: compare with `not diff <= tol`), inf if their keys differ."""
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
    """A temporary folder with an empty subfolder per rank, removed afterwards (whatever the
    ranks made there: a learner's answer can nest folders past any recursion limit)."""
    import os
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        for rank in range(ranks):
            os.mkdir(rank_folder(folder, rank))
        yield folder
    finally:
        remove_tree(folder)


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
