"""What the tests of lesson 05's own cases share: the holds tests/exercises/test_answers.py
puts on a verdict (assert_named, assert_japanese), for a case built by hand or judged from
a record."""

from __future__ import annotations

import importlib.util
import sys
import time

from ja_guard import english_in_japanese

from ddp_helpers import i18n
from support import ROOT


def assert_wrong_named(ex, answer, key: str, monkeypatch, launches=None) -> None:
    """The grader's verdict on a wrong answer names `key`, in English and in Japanese. A hang
    is found sooner than at the check's own limit: `launches`, the module whose
    run_on_ranks the check calls, is given HANG_HERE seconds."""
    if key == "hang":
        real = launches.run_on_ranks
        shorter = lambda *a, **k: real(*a, **{**k, "timeout": HANG_HERE})  # noqa: E731
        monkeypatch.setattr(launches, "run_on_ranks", shorter)
    result = ex.grade(answer)
    assert_named(ex, result, key)
    assert_japanese(result)


def assert_right_passes(ex, answer) -> None:
    """A right answer passes, the grader's extra cases included; its words hold in Japanese."""
    result = ex.grade(answer)
    assert result.passed, str(result)
    assert_japanese(result)


def assert_judged(ex, judge, key: str) -> None:
    """A mistake no answer can reach first, named from a record its judge is given."""
    result = ex._run(lambda answer: judge(), None)
    assert_named(ex, result, key)
    assert_japanese(result)


HANG_HERE = 10  # s: a hang named sooner than the checks' 30 (a launch takes 1-3 s here)


def assert_named(ex, result, key: str) -> None:
    """As test_answers.assert_named: the key, its message in what is shown, a title without
    fields, the hint the mistake names (never the last, which may show the answer)."""
    assert (result.status, result.mistake) == ("wrong", key), str(result)
    shown = str(result)
    message = ex.texts.text(key, **result.fields)
    assert message.strip() and message in shown, f"{key}: {message!r} is not in: {shown}"
    title = ex.texts.template(f"{key}.title")
    assert title.strip() and not i18n.fields(title) and result.title == title
    hint = ex.mistakes[key].hint if key in ex.mistakes else None
    assert result.hint_name == hint
    if hint is not None:
        assert result.hint == ex.hints[hint] and result.hint in shown
    if len(ex.hints) > 1:
        assert result.hint != list(ex.hints.values())[-1], result.hint


def assert_japanese(result) -> None:
    """As test_answers.assert_japanese: shown in Japanese, no English the guard forbids."""
    with i18n.using("ja"):
        shown = [result.message, result.hint or "", result.title or ""]
    problems = [
        f"{found}: {line}"
        for text in shown
        for line in text.splitlines()
        if (found := english_in_japanese(line))
    ]
    assert problems == [], "\n".join(problems)


def _test_spaces():
    """tests/exercises/test_spaces.py as a module (its directory is not on the path here, nor
    in the ranks: the answer it watches travels by value, as a notebook's does)."""
    import cloudpickle

    name = "test_spaces"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "tests" / "exercises" / "test_spaces.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(sys.modules[name])
    return sys.modules[name]


def assert_space_by_its_rules(ex) -> None:
    """test_spaces.test_each_exercise_declares_every_axis_by_its_rule, on one exercise."""
    _test_spaces().test_each_exercise_declares_every_axis_by_its_rule(ex)


def assert_space_seen_drawn(ex, tmp_path) -> None:
    """test_spaces.test_what_an_exercise_draws_is_seen_drawn, on one exercise."""
    _test_spaces().test_what_an_exercise_draws_is_seen_drawn(ex, tmp_path)


def assert_declared_time(ex) -> None:
    """As test_checks.test_a_check_stays_within_what_its_exercise_declares: every launch
    waits at most the declared hang timeout, and the reference's check and hidden cases
    take at most a fifth of the declared run time (after a warm-up launch, as in a
    notebook after its first cell)."""
    from ddp_helpers import launch
    from ddp_helpers.exercises import _core
    from ddp_helpers.launcher import client

    client.expect_ddp()
    launch(_nothing, nprocs=1)
    launches = []
    real = _core._launched

    def watched(harness, answer, args, nprocs, nnodes, timeout):
        launches.append(timeout)
        return real(harness, answer, args, nprocs, nnodes, timeout)

    _core._launched = watched
    try:
        started = time.monotonic()
        assert ex.evaluate(ex.reference).passed
        assert ex._run(ex._hidden, ex.reference).passed
        took = time.monotonic() - started
    finally:
        _core._launched = real
    assert launches and max(launches) <= ex.hang_timeout, (launches, ex.hang_timeout)
    assert took <= ex.run_time / 5, took


def _nothing():
    return None
