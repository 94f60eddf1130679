"""A check's error shows the learner's frames and torch's, not the course's own harness
and launcher (a line says how to see them: DDP_HELPERS_TRACEBACK=full)."""

from __future__ import annotations

from ddp_helpers.exercises import lesson04


def shuffled_and_sampled(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    per_rank = global_batch // dist.get_world_size()
    return DataLoader(
        dataset, batch_size=per_rank, shuffle=True, sampler=DistributedSampler(dataset)
    )


def test_a_checks_error_leaves_the_courses_frames_out_and_says_how_to_see_them(monkeypatch):
    monkeypatch.delenv("DDP_HELPERS_TRACEBACK", raising=False)
    message = lesson04.q2.evaluate(shuffled_and_sampled).message
    assert "in shuffled_and_sampled" in message  # the learner's frame
    assert "torch/utils/data/dataloader.py" in message  # where torch refused it
    assert "ValueError: sampler option is mutually exclusive with shuffle" in message
    assert "ddp_helpers/exercises" not in message and "ddp_helpers/launcher" not in message
    assert message.rstrip().endswith("`%env DDP_HELPERS_TRACEBACK=full` shows them.)")


def test_with_the_full_traceback_asked_for_the_courses_frames_are_there(monkeypatch):
    monkeypatch.setenv("DDP_HELPERS_TRACEBACK", "full")
    message = lesson04.q2.evaluate(shuffled_and_sampled).message
    assert "ddp_helpers/exercises/lesson04/loader.py" in message
    assert "in shuffled_and_sampled" in message
    assert "shows them" not in message
