"""Exercise 4.2's answers of issue 49 (make_loader): each hard-codes what one configuration
keeps fixed, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- wrong


def loader_with_the_notebooks_global_batch(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    GLOBAL_BATCH = 16  # the capstone's, as the notebook defines it
    per_rank = GLOBAL_BATCH // dist.get_world_size()
    return DataLoader(dataset, batch_size=per_rank, sampler=DistributedSampler(dataset))


def loader_for_two_ranks(dataset, global_batch):
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    return DataLoader(dataset, batch_size=global_batch // 2, sampler=DistributedSampler(dataset))


_sampler = None


def loader_with_the_first_calls_sampler(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    global _sampler
    if _sampler is None:  # made once, "to keep its epoch"
        _sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=global_batch // dist.get_world_size(), sampler=_sampler)


def loader_kept_in_a_default_argument(dataset, global_batch, _made={}):  # noqa: B006
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    if "loader" not in _made:
        per_rank = global_batch // dist.get_world_size()
        _made["loader"] = DataLoader(
            dataset, batch_size=per_rank, sampler=DistributedSampler(dataset)
        )
    return _made["loader"]


# ---------------------------------------------------------------- right


def loader_with_every_option_spelled_out(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    world, rank = dist.get_world_size(), dist.get_rank()
    sampler = DistributedSampler(
        dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=False
    )
    return DataLoader(dataset, batch_size=global_batch // world, shuffle=False, sampler=sampler)


def loader_checking_that_the_batch_divides(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils import data

    per_rank, rest = divmod(global_batch, dist.get_world_size())
    if rest:
        raise ValueError(f"a global batch of {global_batch} does not divide among the ranks")
    return data.DataLoader(dataset, per_rank, sampler=data.DistributedSampler(dataset))


DRAWN = {
    "4.2": (
        [
            (loader_with_the_notebooks_global_batch, "loader_batch"),
            (loader_for_two_ranks, "loader_batch"),
            (loader_with_the_first_calls_sampler, "loader_stale"),
            (loader_kept_in_a_default_argument, "loader_stale"),
        ],
        [loader_with_every_option_spelled_out, loader_checking_that_the_batch_divides],
    ),
}
