"""Every check against its reference answer, the stub, and each learner mistake it must catch."""

from __future__ import annotations

import os

import pytest

from ddp_helpers.exercises import lesson01, lesson02, lesson03, lesson04

ALL = [*lesson01.EXERCISES, *lesson02.EXERCISES, *lesson03.EXERCISES, *lesson04.EXERCISES]

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.id)
def test_the_reference_answer_passes(exercise):
    result = exercise.evaluate(exercise.reference)
    assert result.status == "correct", str(result)
    assert result.message.startswith(f"✅ Exercise {exercise.id}: correct.")


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.id)
def test_the_stub_the_build_writes_is_not_attempted(exercise):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"exercise {exercise.id}")

    result = exercise.evaluate(stub)
    assert result.status == "not_attempted", str(result)
    assert "not attempted yet" in result.message


def expect_wrong(exercise, answer, says: str, hint: int | None):
    result = exercise.evaluate(answer)
    assert result.status == "wrong", str(result)
    assert says in result.message, result.message
    expected_hint = None if hint is None else exercise.hints[hint]
    assert result.hint == expected_hint, result.hint
    return result


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
    assert "_core.py" not in result.message


def test_progress_lists_each_exercise_and_its_status(capsys):
    lesson01.progress.__globals__["_progress"](
        lesson01.EXERCISES, "01", {"shard": lesson01.shard, "predict_all_reduce": lambda: 6}
    )
    out = capsys.readouterr().out
    assert "Lesson 01: 1 of 4 exercises pass" in out
    assert "1.2  shard" in out and "correct" in out
    assert "1.3  predict_all_reduce       wrong" in out
    assert "1.4  predict_all_gather       missing" in out


# -- lesson 01


def test_a_gpu_from_the_global_rank_is_caught():
    def by_rank():
        import torch

        return torch.device("cuda", int(os.environ["RANK"]))

    expect_wrong(lesson01.q1, by_rank, "Rank 2 is rank 0 on machine 1", hint=0)


def test_shard_in_blocks_is_caught():
    def blocks(n, rank, world_size):
        size = -(-n // world_size)
        return list(range(rank * size, min(n, (rank + 1) * size)))

    expect_wrong(lesson01.q2, blocks, "a block of consecutive items", hint=0)


def test_shard_without_padding_is_caught():
    expect_wrong(
        lesson01.q2,
        lambda n, r, w: list(range(n))[r::w],
        "every rank must get ceil(10 / 3) = 4",
        hint=1,
    )


def test_all_reduce_prediction_mistakes():
    expect_wrong(lesson01.q3, lambda: [1, 2, 3], "what each rank held before", hint=0)
    expect_wrong(lesson01.q3, lambda: 6, "one value per rank", hint=0)


def test_all_gather_prediction_mistakes():
    expect_wrong(lesson01.q4, lambda: [0, 1, 2], "every rank gets it", hint=1)
    expect_wrong(lesson01.q4, lambda: [[0], [1], [2]], "receives the ranks 0, 1, 2", hint=0)


# -- lesson 02


def test_nccl_on_a_cpu_only_box_is_caught():
    expect_wrong(lesson02.q1, lambda: "nccl", "Without CUDA, nccl fails", hint=0)


def test_nccl_with_too_few_gpus_is_caught():
    def any_gpu():
        import torch

        return "nccl" if torch.cuda.is_available() else "gloo"

    expect_wrong(lesson02.q1, any_gpu, "cannot share a GPU under nccl", hint=1)


def test_a_backend_chosen_by_world_size_is_caught_on_several_machines():
    def by_world_size():
        import torch

        enough = torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"])
        return "nccl" if torch.cuda.is_available() and enough else "gloo"

    expect_wrong(lesson02.q1, by_world_size, "WORLD_SIZE=16, LOCAL_WORLD_SIZE=8", hint=1)


def summed_gradients(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)


def test_summed_not_averaged_gradients_are_caught():
    expect_wrong(lesson02.q2, summed_gradients, "2.00 times DDP's", hint=0)


def test_gradients_left_alone_are_caught():
    expect_wrong(lesson02.q2, lambda model: None, "did not change", hint=1)


def averaged_on_rank_zero_only(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2


def test_a_collective_inside_if_rank_zero_is_named_in_the_hint():
    result = expect_wrong(lesson02.q2, averaged_on_rank_zero_only, "collective", hint=2)
    assert "`if rank == 0:`" in result.hint


# -- lesson 03


def test_params_in_sync_that_only_looks_locally_is_caught():
    expect_wrong(lesson03.q1, lambda model: True, "still returned True on rank 0", hint=0)


def rank_dependent_answer(model):
    import torch.distributed as dist

    return dist.get_rank() == 0


def test_params_in_sync_must_agree_across_ranks():
    expect_wrong(lesson03.q1, rank_dependent_answer, "The ranks disagree", hint=2)


def test_shard_batch_that_keeps_the_whole_batch_is_caught():
    expect_wrong(lesson03.q2, lambda x, y, r, w: (x, y), "trained on all 8 rows", hint=0)


def test_shard_batch_with_overlapping_parts_is_caught():
    expect_wrong(lesson03.q2, lambda x, y, r, w: (x[:4], y[:4]), "more than one rank", hint=1)


def test_shard_batch_with_mismatched_targets_is_caught():
    expect_wrong(
        lesson03.q2,
        lambda x, y, r, w: (x[r::w], y[(r + 1) % w :: w]),
        "not sliced the same way",
        hint=2,
    )


def test_summed_loss_ratio_predictions():
    expect_wrong(lesson03.q3, lambda: 2, "other way round", hint=1)
    expect_wrong(lesson03.q3, lambda: 1, "compare (G1 + G2) / 2", hint=0)


# -- lesson 04


def evaluate_with_the_padding(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    counts = torch.zeros(2, dtype=torch.long)
    model.eval()
    sampler = DistributedSampler(dataset, shuffle=False)
    with torch.no_grad():
        for x, y in DataLoader(dataset, batch_size=batch_size, sampler=sampler):
            counts += torch.tensor([(model(x).argmax(1) == y).sum(), len(y)])
    model.train()
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def test_an_evaluation_that_counts_the_padding_twice_is_caught():
    expect_wrong(lesson04.q1, evaluate_with_the_padding, "counted 514 examples", hint=1)


def train_without_set_epoch(model, loader, sampler, optimizer, epochs):
    import torch

    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


def train_with_constant_epoch(model, loader, sampler, optimizer, epochs):
    for _ in range(epochs):
        sampler.set_epoch(0)
        for x, _ in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


def test_missing_set_epoch_is_caught_by_the_spy_sampler():
    expect_wrong(lesson04.q2, train_without_set_epoch, "same order", hint=0)


def test_set_epoch_with_a_constant_is_caught():
    expect_wrong(lesson04.q2, train_with_constant_epoch, "[0, 0, 0]", hint=2)


def checkpoint_of(model, optimizer, epoch, prefixed=False):
    """What a checkpoint should hold; with prefixed, DDP's own `module.`-keyed weights."""
    weights = model.state_dict() if prefixed else model.module.state_dict()
    return {"model": weights, "optimizer": optimizer.state_dict(), "epoch": epoch}


# Each mistake below differs from the reference save_checkpoint in one way (the
# atomic temp-file write aside, which the mistakes leave out for brevity).


def save_on_every_rank(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    torch.save(checkpoint_of(model, optimizer, epoch), path)
    dist.barrier()


def save_with_prefix(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(checkpoint_of(model, optimizer, epoch, prefixed=True), path)
    dist.barrier()


def save_without_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(checkpoint_of(model, optimizer, epoch), path)


def save_with_barrier_inside_if(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(checkpoint_of(model, optimizer, epoch), path)
        dist.barrier()


def test_saving_on_every_rank_is_caught():
    expect_wrong(lesson04.q3, save_on_every_rank, "called 2 times", hint=0)


def test_module_prefix_in_saved_keys_is_caught():
    expect_wrong(lesson04.q3, save_with_prefix, "start with `module.`", hint=1)


def test_a_missing_barrier_after_saving_is_caught():
    expect_wrong(lesson04.q3, save_without_barrier, "before rank 0 had finished", hint=2)


def test_a_barrier_inside_if_rank_zero_is_named_in_the_hint():
    # Rank 1 skips the barrier and goes on, so rank 0 is left alone in a collective.
    result = expect_wrong(
        lesson04.q3, save_with_barrier_inside_if, "did not make the same collective calls", hint=2
    )
    assert "rank 1 had already returned while rank 0 waited" in result.message
    assert "inside `if rank == 0:` hangs" in result.hint


def rank_zero_waits_forever(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.barrier()  # rank 1 goes on to DDP's all_reduce: mismatched, or a hang


def test_a_hang_in_a_check_is_reported_as_wrong_with_the_collective_hint(monkeypatch):
    import ddp_helpers.exercises._core as core

    real = core.run_on_ranks
    monkeypatch.setattr(
        "ddp_helpers.exercises.lesson02.run_on_ranks",
        lambda *a, **k: real(*a, **{**k, "timeout": 5}),
    )
    result = lesson02.q2.evaluate(rank_zero_waits_forever)
    assert result.status == "wrong", str(result)
    assert "did not" in result.message and "`if rank == 0:`" in result.hint


def load_without_map_location(model, optimizer, path):
    import torch

    ckpt = torch.load(path)
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["epoch"] + 1


def load_returning_saved_epoch(model, optimizer, path):
    import torch

    ckpt = torch.load(path, map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["epoch"]


def load_weights_only(model, optimizer, path):
    import torch

    ckpt = torch.load(path, map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    return ckpt["epoch"] + 1


def test_loading_without_map_location_is_caught_by_the_torch_load_spy():
    expect_wrong(lesson04.q4, load_without_map_location, "without map_location", hint=0)


def test_resuming_at_the_saved_epoch_is_caught():
    expect_wrong(lesson04.q4, load_returning_saved_epoch, "resume at 5", hint=2)


def load_returning_a_float_epoch(model, optimizer, path):
    import torch

    ckpt = torch.load(path, map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["epoch"] + 1.5  # int() would round this to 5; range() refuses it


def test_an_epoch_that_is_not_an_int_is_caught():
    expect_wrong(lesson04.q4, load_returning_a_float_epoch, "It returned 5.5;", hint=2)


def test_forgetting_the_optimizer_state_is_caught():
    expect_wrong(lesson04.q4, load_weights_only, "optimizer state", hint=1)


def test_quiz_mistakes_are_named_by_question():
    expect_wrong(lesson04.q5, lambda: {1: "a", 2: "a", 3: "c", 4: "a"}, "Question 1", hint=0)
    expect_wrong(lesson04.q5, lambda: ["b"], "Return a dict", hint=0)
