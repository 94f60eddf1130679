"""The scorer (grading/worker/scorer.py): the checks it uses, the scorer run alone, and what the
worker takes from it."""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import time
import types

import pytest

from ddp_helpers.exercises import lesson01, lesson02
from ddp_helpers.exercises.answer import Answer
from ddp_helpers.exercises.lesson01 import all_gather
from ddp_helpers.exercises.lesson01.shard import shard as reference_shard
from ddp_helpers.grading.folders import WorkFolders
from ddp_helpers.grading.worker import scorer
from ddp_helpers.launcher.pickling import dumps
from ddp_helpers.procs import with_this_package
from support import SOON


def right_shard(n, rank, world_size):  # a learner's own, right answer
    total = -(-n // world_size) * world_size
    return [i % n for i in range(total)][rank::world_size]


# ---------------------------------------------------------------- the checks it uses


def test_hidden_cases_catch_what_the_visible_check_misses():
    def shard(n, rank, world_size):  # right for the world sizes the check shows, only
        return right_shard(n, rank, world_size) if world_size <= 5 else [rank]

    assert lesson01.q2.evaluate(shard).passed
    result = lesson01.q2.grade(shard)
    assert result.status == "wrong" and "grader's extra cases" in result.message
    assert lesson01.q2.grade(right_shard).passed


def test_an_answer_equal_to_everything_is_not_right():
    class Anything:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

    assert lesson02.q1.grade(lambda: Anything()).status == "wrong"


class _Everything(str):  # a str that says it equals any other
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def gpu_everything():
    return _Everything("cuda:0")


def test_a_str_equal_to_everything_is_judged_by_its_value():
    result = lesson01.q1.grade(gpu_everything)  # "cuda:0" on every rank of a machine
    assert (result.status, result.mistake) == ("wrong", "gpu_node")


def gpu_that_moves_itself():
    import os

    import torch

    os.environ["LOCAL_RANK"] = os.environ["RANK"]  # then reads it back, as the check did
    return torch.device("cuda", int(os.environ["LOCAL_RANK"]))


def test_an_answer_that_sets_local_rank_does_not_move_where_the_check_looks():
    result = lesson01.q1.grade(gpu_that_moves_itself)
    assert (result.status, result.mistake) == ("wrong", "gpu_global")


def calls_the_reference(n, rank, world_size):
    return reference_shard(n, rank, world_size)


def _rehomed():
    fn = types.FunctionType(reference_shard.__code__, {"math": __import__("math")}, "shard")
    fn.__module__ = "__main__"  # as in a notebook
    return fn


@pytest.mark.parametrize(
    "answer",
    [
        reference_shard,  # the reference itself
        functools.partial(reference_shard),
        calls_the_reference,  # a function of the notebook's that calls it
        _rehomed(),  # its code in a function of the notebook's
    ],
    ids=["itself", "partial", "calls it", "re-homed"],
)
def test_the_course_reference_however_it_got_there_is_from_course(answer):
    result = lesson01.q2.grade(answer)
    assert (result.status, result.mistake) == ("wrong", "from_course"), result.message
    assert lesson01.q2.evaluate(answer).passed  # the learner's own check says it works


def test_the_pickle_of_a_reference_names_it_without_being_loaded():
    references = scorer._references()
    assert scorer.course_global(dumps(functools.partial(reference_shard)), references)
    assert scorer.course_global(dumps(reference_shard), references)
    assert not scorer.course_global(dumps(right_shard), references)
    assert not scorer.course_global(b"not a pickle", references)
    # Memoized values that are not strings (a list) come first; the module's name is then
    # fetched from the memo by its index for the second global.
    later = dumps(([], all_gather._check_gather, reference_shard))
    assert scorer.course_global(later, references)


class _Loud:
    def __reduce__(self):  # what unpickling it would run, in whichever process loads it
        return (print, ('{"event": "done", "id": "1.2", "status": "correct"}',))


def test_an_answer_is_never_loaded_in_the_scorer(capfd):
    answer = Answer(pickled=pickle.dumps(_Loud()))
    with pytest.raises(TypeError, match="runs no answer in its own process"):
        answer()
    assert '"status": "correct"' not in capfd.readouterr().out


# ---------------------------------------------------------------- the scorer alone


def _answers(tmp_path, **answers) -> WorkFolders:
    folders = WorkFolders(str(tmp_path))
    for sub in ("box", "box/tmp", "box/score"):
        (tmp_path / sub).mkdir(exist_ok=True)
    found = {k: ("ok", dumps(v)) for k, v in answers.items()}
    (tmp_path / "box" / "answers.pkl").write_bytes(pickle.dumps(found))
    return folders


def _score(folders, limit):
    env = with_this_package(dict(os.environ, TMPDIR=folders.tmp))
    scores, events = scorer.score(folders, "01", env, limit)
    return {s.id: s for s in scores}, events


def test_an_answer_that_hangs_the_check_is_stopped_and_the_rest_still_scored(tmp_path):
    def shard(n, rank, world_size):
        while True:  # waiting, not spinning: the cores stay the other checks'
            time.sleep(0.01)

    folders = _answers(tmp_path, shard=shard, predict_all_reduce=lambda: [6, 6, 6])
    # Long enough for a fresh scorer to start the launcher and check 1.3: 2-3 s on a quiet
    # machine, past 8 s on one loaded by other jobs (load average 7 on 2 cores).
    scores, events = _score(folders, limit=15)
    assert scores["1.2"].status == "error" and "did not finish within 15 s" in scores["1.2"].message
    assert scores["1.2"].mistake == "check_timeout" and scores["1.4"].mistake == "missing"
    assert scores["1.3"].status == "correct"
    assert scores["1.4"].status == "missing"
    assert [e.kind for e in events] == ["check_timeout"]


def test_an_answer_that_ends_its_process_costs_only_itself(tmp_path):
    def predict_all_reduce():
        os._exit(9)  # on the rank the check runs it on: the scorer goes on

    folders = _answers(
        tmp_path, predict_all_reduce=predict_all_reduce, predict_all_gather=lambda: [[0, 1, 2]] * 3
    )
    scores, events = _score(folders, limit=30)
    assert (scores["1.3"].status, scores["1.3"].mistake) == ("error", "error")
    assert "exited with code 9" in scores["1.3"].message
    assert scores["1.4"].status == "correct" and scores["1.2"].status == "missing"
    assert events == []


def test_an_answer_that_forks_cannot_hold_the_scorer(tmp_path):
    def predict_all_reduce():
        if os.fork() == 0:  # a child that keeps the rank's pipes open
            time.sleep(60)
            os._exit(0)
        return [6, 6, 6]

    folders = _answers(tmp_path, predict_all_reduce=predict_all_reduce)
    started = time.monotonic()
    scores, events = _score(folders, limit=20)
    assert time.monotonic() - started < SOON
    assert scores["1.3"].status == "correct" and not events


def test_an_answers_file_the_notebook_replaced_is_not_loaded(tmp_path, capfd):
    folders = _answers(tmp_path)
    (tmp_path / "box" / "answers.pkl").write_bytes(pickle.dumps(_Loud()))
    scores, events = _score(folders, limit=30)
    assert {s.mistake for s in scores.values()} == {"unloadable"}
    assert "was not the one the grader writes" in scores["1.1"].message
    os.unlink(tmp_path / "box" / "answers.pkl")
    os.symlink("/dev/zero", tmp_path / "box" / "answers.pkl")  # endless: not read
    scores, _ = _score(folders, limit=30)
    assert {s.mistake for s in scores.values()} == {"unloadable"}


# ---------------------------------------------------------------- what the worker takes


SEAL = "5eal"  # what the worker gave the scorer on its stdin


def _lines(tmp_path, lines: list, code: int = 0, limits=30, pause: float = 0.0):
    """_read_scores over a process that writes these lines for lesson 01, then exits; it
    works `pause` seconds after each start it writes (a check that takes that long)."""
    from ddp_helpers.exercises import exercises_of

    read_fd, write_fd = os.pipe()
    text = "".join(
        line if isinstance(line, str) else f"{SEAL} {json.dumps(line)}\n" for line in lines
    )
    (tmp_path / "lines").write_text(text)
    script = (
        "import os, sys, time\n"
        "for line in open(sys.argv[1], 'rb').read().splitlines(keepends=True):\n"
        "    started = b'\"start\"' in line\n"
        f"    while line: line = line[os.write({write_fd}, line):]\n"
        f"    time.sleep({pause} if started else 0)\n"
        f"os._exit({code})"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, tmp_path / "lines"], pass_fds=(write_fd,)
    )
    os.close(write_fd)
    results: dict = {}
    asked = {ex.id: ex for ex in exercises_of("01")}
    try:
        outcome = scorer._read_scores(proc, read_fd, limits, results, asked, seal=SEAL.encode())
    finally:
        os.close(read_fd)
        proc.kill()
        proc.wait()
    return outcome, results


def test_each_exercise_gets_its_own_window(tmp_path):
    """An exercise whose check may take longer than the others (its hang detection waits
    longer: TimeBudget.check) is given that long; the others keep theirs."""
    limits = {"1.1": 0.5, "1.2": 6.0, "1.3": 0.5, "1.4": 0.5}
    slow = [{"event": "start", "id": "1.2"}, _done("1.2", mistake="shard_blocks")]
    outcome, results = _lines(tmp_path, slow, limits=limits, pause=1.5)
    assert outcome == (None, None, "") and results["1.2"]["mistake"] == "shard_blocks"
    late = [{"event": "start", "id": "1.1"}, _done("1.1", mistake="gpu_type")]
    (where, kind, text), results = _lines(tmp_path, late, limits=limits, pause=1.5)
    assert (where, kind) == ("1.1", "check_timeout") and "within 0.5 s" in text
    assert results == {}


def test_the_budget_gives_a_check_its_own_worst_case():
    """3.6's launches wait 60 s each before naming a hang: under `grade --timeout 20` its
    check still gets that, the stop and its other cases; a one-rank check, the notebook's."""
    from ddp_helpers.exercises import exercises_of
    from ddp_helpers.grading.budget import TimeBudget
    from ddp_helpers.launcher.plan import STOP

    mini = next(ex for ex in exercises_of("03") if ex.id == "3.6")
    short = TimeBudget(notebook=20)
    assert short.check(mini) == mini.worst >= mini.hang_timeout + STOP.after_timeout
    assert mini.hang_timeout == 60
    shard = next(ex for ex in exercises_of("01") if ex.id == "1.2")
    assert TimeBudget(notebook=600).check(shard) == 600
    assert short.total([mini, shard]) == 60 + 20 + 30 + mini.worst + shard.worst + 120


def _done(ex_id, **fields):
    return {"event": "done", "id": ex_id, "status": "wrong", "message": "m", **fields}


@pytest.mark.parametrize(
    "lines, why",
    [
        ([_done("1.1", mistake="gpu_type")], "out of turn"),  # no start before it
        ([{"event": "start", "id": "9.9"}], "no exercise it was asked"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", mistake="made_up")], "does not have"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", status="great")], "status"),
        (
            [{"event": "start", "id": "1.1"}, _done("1.1", status="correct", mistake=None)]
            + [{"event": "start", "id": "1.1"}],
            "out of turn",
        ),  # scored twice
        ([f"{SEAL} not json\n"], "not JSON"),
        ([f"{SEAL} " + "[" * 100_000 + "\n"], "not JSON"),  # past the recursion limit
        (["x" * (scorer.LINE_LIMIT + 10)], "over"),
        ([json.dumps(_done("1.1", status="correct", mistake=None)) + "\n"], "seal"),
        (["0000 " + json.dumps({"event": "start", "id": "1.1"}) + "\n"], "seal"),
        ([{"event": "start", "id": ["1.1"]}], "no exercise"),  # unhashable: no TypeError
        ([{"event": "start", "id": {"a": 1}}], "no exercise"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", status=["correct"])], "status of type"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", mistake={"k": 1})], "mistake of type"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", mistake="gpu_type", hidden=[1])], "hidden"),
        ([{"event": "start", "id": "1.1"}, _done("1.1", mistake="gpu_type", fields=[1])], "fields"),
        ([["start", "1.1"]], "no exercise"),
    ],
    ids=[
        "done first",
        "not asked",
        "unknown mistake",
        "bad status",
        "twice",
        "json",
        "deep json",
        "long",
        "unsealed",
        "wrong seal",
        "id a list",
        "id a dict",
        "status a list",
        "mistake a dict",
        "hidden a list",
        "fields a list",
        "a list",
    ],
)
def test_a_scorer_line_the_grader_does_not_take_stops_that_scorer(tmp_path, lines, why):
    (where, kind, text), _ = _lines(tmp_path, lines)
    assert kind == "check_bad_line" and why in text, text


def test_a_scorer_that_dies_mid_exercise_costs_that_exercise(tmp_path):
    (where, kind, text), results = _lines(
        tmp_path,
        [{"event": "start", "id": "1.1"}, _done("1.1", mistake="gpu_type", message="y" * 20000)]
        + [{"event": "start", "id": "1.2"}],
        code=9,
    )
    assert (where, kind) == ("1.2", "check_died") and "exit code 9" in text
    assert len(results["1.1"]["message"]) < scorer.MESSAGE + 40  # capped
