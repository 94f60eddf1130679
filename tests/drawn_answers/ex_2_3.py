"""Exercise 2.3's answers of issue 49: each keeps what a first call did or leaves only the
ranks the notebook's run has, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 2.3 cleanup

_cleaned: list[bool] = []


def cleanup_behind_a_flag():
    import torch.distributed as dist

    if not _cleaned:  # calling destroy twice raises: do it once
        dist.destroy_process_group()
        _cleaned.append(True)


def cleanup_on_the_first_two_ranks():
    import torch.distributed as dist

    if dist.get_rank() in (0, 1):  # the notebook's two ranks
        dist.destroy_process_group()


def cleanup_where_local_rank_is_zero():
    import os

    import torch.distributed as dist

    if os.environ["LOCAL_RANK"] == "0":  # once a machine
        dist.destroy_process_group()


def cleanup_the_world_group_after_a_barrier():
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group(dist.group.WORLD)


def cleanup_every_group_there_is():
    from torch.distributed import destroy_process_group, is_initialized

    while is_initialized():
        destroy_process_group()


DRAWN = {
    "2.3": (
        [
            (cleanup_behind_a_flag, "cleanup_kept"),
            (cleanup_on_the_first_two_ranks, "cleanup_left_some"),
            (cleanup_where_local_rank_is_zero, "cleanup_left_some"),
        ],
        [cleanup_the_world_group_after_a_barrier, cleanup_every_group_there_is],
    ),
}
