"""The exercise machinery: hints, solutions, progress, a crashing or hanging answer.

That every reference passes its check is proven by the solution notebooks under nbval
(each check cell must print "correct", and test_answers.py proves each reference is the
notebook's own solution); that every stub is "not attempted", by the untouched lessons
run in JupyterLab (test_browser.py); every learner mistake and other right answer, by the sweep.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re

import pytest

from ddp_helpers import i18n
from ddp_helpers.exercises import LESSONS, exercises_of, lesson01, lesson03
from ddp_helpers.exercises.kit import RANK_MISTAKES, Exercise, Mistake, Phrase, Wrong, hang_limit
from kernel_utils import run_cells, stream_text


def test_hints_come_in_order_and_stop_at_the_last(capsys):
    ex = lesson01.q1
    ex._next_hint = 0
    for _ in range(len(ex.hints) + 1):
        ex.hint()
    out = capsys.readouterr().out
    assert out.index("Hint 1 of 3") < out.index("Hint 2 of 3") < out.index("Hint 3 of 3")
    assert out.count("Hint 3 of 3") == 2 and "last hint" in out


def test_solution_shows_the_reference_code(capsys):
    lesson01.q2.solution()
    assert "padded[rank::world_size]" in capsys.readouterr().out


def test_a_crashing_answer_is_an_error_with_a_short_traceback():
    def broken(n, rank, world_size):
        return [i for i in range(n)][rank] / 0

    result = lesson01.q2.evaluate(broken)
    assert result.status == "error"
    assert "ZeroDivisionError" in result.message and "in broken" in result.message
    assert "ddp_helpers/exercises" not in result.message  # the check's own frames


def test_progress_lists_each_exercise_of_the_notebook_and_its_status():
    *_, outputs = run_cells(
        "from ddp_helpers.exercises import lesson01 as ex\n"
        "from ddp_helpers.exercises.lesson01.shard import shard",
        "def predict_all_reduce():\n"
        "    return 6\n"
        "\n"
        "\n"
        "def predict_all_gather():\n"
        '    raise NotImplementedError("exercise 1.4")',
        "ex.progress()",
    )
    assert stream_text(outputs) == (
        "Lesson 01: 1 of 4 exercises pass\n"
        "  1.1  gpu_for_this_rank        missing\n"
        "  1.2  shard                    correct\n"
        "  1.3  predict_all_reduce       wrong\n"
        "  1.4  predict_all_gather       not attempted\n"
    )


def test_progress_shows_the_core_path_apart_from_going_further():
    *_, outputs = run_cells(
        "from ddp_helpers.exercises import lesson04 as ex\n"
        "from ddp_helpers.exercises.lesson04.loader import make_loader\n"
        "from ddp_helpers.exercises.lesson04.quiz import quiz_answers\n"
        "from ddp_helpers.exercises.lesson04.save import save_checkpoint",
        "ex.progress()",
    )
    assert stream_text(outputs) == (
        "Lesson 04: 0 of 1 exercises of the core path pass\n"
        "  4.1  train_ddp                missing\n"
        "Going further (optional): 3 of 6 pass\n"
        "  4.2  make_loader              correct\n"
        "  4.3  quiz_answers             correct\n"
        "  4.4  evaluate                 not started (optional)\n"
        "  4.5  save_checkpoint          correct\n"
        "  4.6  load_checkpoint          not started (optional)\n"
        "  4.7  gather_all               not started (optional)\n"
    )


def test_progress_at_the_end_of_the_core_path_names_the_exercises_still_ahead():
    *_, outputs = run_cells(
        "from ddp_helpers.exercises import lesson04 as ex",
        "ex.progress()",
    )
    assert stream_text(outputs).splitlines()[-1] == (
        "Going further (optional): exercises 4.2, 4.3, 4.4, 4.5, 4.6 and 4.7 below, not started"
    )


def rank_zero_waits_forever(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.barrier()  # rank 1 goes on to DDP's all_reduce: mismatched, or a hang


def test_a_hang_in_a_check_is_reported_as_wrong_with_the_collective_hint():
    with hang_limit(2):
        result = lesson03.q2.evaluate(rank_zero_waits_forever)
    assert result.status == "wrong", str(result)
    assert result.mistake in RANK_MISTAKES and result.hint_name == "avg_same_calls"
    assert "did not" in result.message and "`if rank == 0:`" in result.hint


# ---------------------------------------------------------------- mistakes as data

TEXTS = {
    "hint.first": "first",
    "hint.second": "second, with {{braces}}",
    "too_big": "{got} is too big.",
    "too_big.title": "too big",
    "ok": "fine",
}


def _exercise(texts=None, hints=("first", "second"), mistakes=None):
    def check(answer):
        # A check holds an answer for its ranks only (exercises.answer.Answer); this one is a
        # number of the test's own, read as it is: no learner's code to keep out of here.
        if answer.obj > 1:
            raise Wrong("too_big", got=answer.obj)
        return Phrase("ok")

    mistakes = {"too_big": Mistake(hint="second")} if mistakes is None else mistakes
    return Exercise("9.1", "answer", check, 0, texts=texts or TEXTS, hints=hints, mistakes=mistakes)


def test_a_check_names_its_mistake_by_key_and_the_text_comes_from_the_table():
    result = _exercise().evaluate(5)
    assert (result.mistake, result.fields, result.hint_name) == ("too_big", {"got": 5}, "second")
    assert str(result) == "❌ Exercise 9.1: not yet. 5 is too big.\n💡 second, with {braces}"
    assert result.title == "too big"
    assert _exercise().evaluate(0).message == "✅ Exercise 9.1: correct. fine"


@pytest.mark.parametrize(
    ("texts", "hints", "mistakes", "missing"),
    [
        ({k: v for k, v in TEXTS.items() if k != "too_big"}, None, None, "too_big"),
        ({k: v for k, v in TEXTS.items() if k != "too_big.title"}, None, None, "too_big.title"),
        ({k: v for k, v in TEXTS.items() if k != "hint.first"}, None, None, "hint.first"),
        (None, ("first",), None, "hint.second (among the hints of exercise 9.1)"),
        (None, None, {"too_big": Mistake(hint="third")}, "hint.third"),
        (None, None, {"hang": Mistake(hint="nowhere")}, "hint.nowhere"),
    ],
    ids=["message", "title", "hint", "hint-not-its-own", "no-such-hint", "rank-mistake-hint"],
)
def test_a_mistake_or_hint_without_its_text_fails_when_the_exercise_is_made(
    texts, hints, mistakes, missing
):
    with pytest.raises(LookupError, match=f"exercise 9.1 has no text for: .*{re.escape(missing)}"):
        _exercise(texts, hints or ("first", "second"), mistakes)


def test_a_lessons_module_without_a_mistakes_title_fails_at_import(monkeypatch):
    # lesson01's 1.1 as it would be with one title deleted from its MESSAGES, imported afresh.
    from ddp_helpers.exercises.lesson01 import gpu

    source = inspect.getsource(gpu)
    title = '        "gpu_global.title": "RANK used where LOCAL_RANK belongs",\n'
    assert title in source
    spec = importlib.util.spec_from_loader(gpu.__name__, loader=None)
    broken = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(i18n, "REGISTRY", dict(i18n.REGISTRY))  # it registers its table
    with pytest.raises(LookupError, match="exercise 1.1 has no text for: gpu_global.title"):
        exec(compile(source.replace(title, ""), gpu.__file__, "exec"), broken.__dict__)


def test_a_check_raising_a_mistake_it_does_not_declare_is_the_checks_bug():
    ex = _exercise(mistakes={})
    with pytest.raises(LookupError, match="exercise 9.1 does not declare mistake 'too_big'"):
        ex.evaluate(5)


def test_hints_are_shown_in_the_order_they_are_named(capsys):
    ex = _exercise(hints=("second", "first"))
    assert list(ex.hints) == ["second", "first"]
    ex.hint()
    ex.hint()
    out = capsys.readouterr().out
    assert out.index("Hint 1 of 2 for exercise 9.1: second") < out.index(
        "Hint 2 of 2 for exercise 9.1: first"
    )


def test_a_result_is_made_into_text_when_shown_in_the_language_of_that_moment(monkeypatch):
    ja = {
        "exercises.core": {"wrong": "❌ 演習 {id}: まだです。{detail}"},
        "exercises.lesson01.all_reduce": {"reduce_local": "{got} は呼び出し前の値です。"},
    }
    monkeypatch.setattr(i18n, "catalog", lambda language: ja if language == "ja" else {})
    result = lesson01.q3.evaluate(lambda: [1, 2, 3])  # checked in English
    assert result.message.startswith("❌ Exercise 1.3: not yet. [1, 2, 3] is what each rank")
    with i18n.using("ja"):
        assert result.message == "❌ 演習 1.3: まだです。[1, 2, 3] は呼び出し前の値です。"
        assert result.title == "what the ranks held before the all_reduce"  # not translated


def _raised_keys(module) -> set[str]:
    """The keys a module's checks raise by name: Wrong("key", ...) and wrong("key", ...)."""
    calls = [n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Call)]
    return {
        call.args[0].value
        for call in calls
        if getattr(call.func, "id", getattr(call.func, "attr", None)) in ("Wrong", "wrong")
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }


def _named_in_data(module) -> set[str]:
    """The strings a module holds outside its Exercise(...) declarations and its messages."""
    tree = ast.parse(inspect.getsource(module))
    declarations = {
        id(node)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("Exercise", "messages")
        for node in ast.walk(call)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in declarations
    }


def _checker_modules() -> dict[str, list]:
    """Each module that holds checks (a lesson's, one exercise's, the capstone's) and the
    exercises whose checker it holds."""
    found: dict[str, list] = {}
    for lesson in LESSONS:
        for ex in exercises_of(lesson):
            found.setdefault(ex._checker.__module__, []).append(ex)
    return found


@pytest.mark.parametrize("name", sorted(_checker_modules()))
def test_every_mistake_a_check_raises_is_declared_by_an_exercise_of_its_module(name):
    module = importlib.import_module(name)
    declared = {key for ex in _checker_modules()[name] for key in ex.mistakes}
    raised = _raised_keys(module)
    assert raised <= declared | set(RANK_MISTAKES), raised - declared
    # ... and every mistake it declares is raised by name there, or named in its data (a
    # table of cases and the mistake each one catches): none is declared in vain.
    unnamed = declared - set(RANK_MISTAKES) - raised - _named_in_data(module)
    assert not unnamed, unnamed


def test_lesson_03s_setup_warns_when_cuda_is_there_but_the_rule_picks_gloo(monkeypatch):
    # One GPU per task (CUDA_VISIBLE_DEVICES per rank, SLURM's --gpus-per-task=1): CUDA is
    # available, yet each rank sees fewer GPUs than its machine runs ranks.
    import warnings

    import torch
    import torch.distributed as dist

    from ddp_helpers.exercises import lesson03

    joined = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend: joined.append(backend))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.warns(UserWarning, match=r"sees 1 GPU\(s\) for the 2 ranks") as seen:
        assert lesson03.setup() == torch.device("cpu")
    assert "--gpus-per-task=1" in str(seen[0].message) and joined == ["gloo"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a machine without CUDA: gloo, and nothing to say
        assert lesson03.setup() == torch.device("cpu")
    assert joined == ["gloo", "gloo"]


def test_lesson_05_names_the_oldest_torch_it_is_checked_on_and_says_so_below_it():
    # make compat: every check correct on torch 2.12.1 and later; on 2.8.0 a right answer to
    # 5.4 and 5.5 fails. Lessons 01-04 keep pyproject's floor (2.8).
    from ddp_helpers.exercises import lesson05

    assert lesson05.OLDEST_TORCH == (2, 12)
    for checked in ("2.12.1", "2.13.0", "2.15.0", "3.0.0"):
        assert lesson05.torch_note(checked) is None, checked
    note = lesson05.torch_note("2.8.0")
    assert "checked on torch 2.12 and later" in note and "torch 2.8.0" in note
    assert "(5.4, 5.5)" in note and "Lessons 01 to 04 are checked on torch 2.8" in note
    with i18n.using("ja"):
        assert "torch 2.12 以降" in lesson05.torch_note("2.11.0")


def test_exercise_1_2s_shares_are_distributedsamplers_on_every_case_its_checks_draw():
    # The check computes its shares without torch (a lesson 01 scorer never imports it) and
    # says they are DistributedSampler's: here they are, on check()'s and the grader's cases.
    from torch.utils.data.distributed import DistributedSampler

    from ddp_helpers.exercises.lesson01 import shard
    from ddp_helpers.exercises.space import CHECK_SEED, HIDDEN_SEEDS

    cases = [case for seed in (CHECK_SEED, *HIDDEN_SEEDS) for case in shard._grid(seed)]
    assert len(cases) > 40  # 43: every world size 1 to 9, five n each
    for n, w in cases:
        for rank in range(w):
            torch_share = DistributedSampler(range(n), num_replicas=w, rank=rank, shuffle=False)
            assert shard._reference_shard(n, rank, w) == list(torch_share), (n, rank, w)


def _shard_by_counting(n, rank, world_size):
    per_rank = (n + world_size - 1) // world_size
    return [(rank + k * world_size) % n for k in range(per_rank)]


def _shard_by_slicing(n, rank, world_size):
    total = -(-n // world_size) * world_size
    return [i % n for i in range(total)][rank::world_size]


def test_progress_shows_a_pass_again_for_the_same_answer_and_checks_any_other(monkeypatch):
    # The learner's check() ran it; progress() at the lesson's end shows that pass without
    # launching again: the same answer, pickled as its ranks receive it, draws the same cases.
    from ddp_helpers.exercises import progress, running
    from ddp_helpers.exercises.verdicts import CheckStatus

    shard = next(e for e in exercises_of("01") if e.id == "1.2")
    assert shard.evaluate(_shard_by_counting).status is CheckStatus.CORRECT
    launched = []

    def no_launch(*args, **kwargs):
        launched.append(args)
        raise RuntimeError("no launch in this test")

    monkeypatch.setattr(running, "launch_plain", no_launch)
    namespace = {"shard": _shard_by_counting}
    (again,) = progress.evaluate_all([shard], namespace)
    assert (again.status, launched) == (CheckStatus.CORRECT, [])
    # Another answer (right too) is checked: here the launch it asks for is refused.
    (other,) = progress.evaluate_all([shard], {"shard": _shard_by_slicing})
    assert other.status is CheckStatus.ERROR and len(launched) == 1
    # A wrong answer is never shown as the pass of another.
    assert shard.evaluate_unless_passed(lambda n, rank, world_size: []).status is not (
        CheckStatus.CORRECT
    )
