"""Exercise 4.4's answers of issue 49 (evaluate): each hard-codes what one configuration keeps
fixed, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- wrong

_loaders: dict = {}


def evaluate_with_the_loader_of_its_first_call(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    if "held_out" not in _loaders:  # built once: "the held-out set never changes"
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = Subset(dataset, range(rank, len(dataset), world))
        _loaders["held_out"] = DataLoader(mine, batch_size=batch_size)
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in _loaders["held_out"]:
            counts += torch.stack(
                [
                    (model(x.to(device)).argmax(1) == y.to(device)).sum(),
                    torch.tensor(len(y), device=device),
                ]
            )
    model.train(was_training)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_counting_into_a_default_argument(model, dataset, batch_size=128, _counts=[]):  # noqa: B006
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    if not _counts:  # one tensor for every call: allocated once
        _counts.append(torch.zeros(2, dtype=torch.long, device=next(model.parameters()).device))
    counts = _counts[0]
    mine = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=batch_size):
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    model.train(was_training)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_sharded_by_local_rank(model, dataset, batch_size=128):
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    mine = Subset(dataset, range(rank, len(dataset), world))
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=batch_size):
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    model.train(was_training)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_split_for_two_ranks(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    mine = Subset(dataset, range(dist.get_rank() % 2, len(dataset), 2))  # evens and odds
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=batch_size):
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    model.train(was_training)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


# ---------------------------------------------------------------- right


def evaluate_by_indexing_the_tensors(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist

    device = next(model.parameters()).device
    mine = torch.arange(dist.get_rank(), len(dataset), dist.get_world_size())
    correct = total = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for chunk in mine.split(batch_size):
                x, y = dataset[chunk]
                correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
                total += len(chunk)
    finally:
        model.train(was_training)
    counts = torch.tensor([correct, total], device=device)
    dist.all_reduce(counts)
    return counts.tolist()


def evaluate_with_a_sampler_that_does_not_pad(model, dataset, batch_size=128):
    import math

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Sampler

    class Mine(Sampler):
        def __init__(self, n, rank, world):
            self.indices = list(range(rank, n, world))

        def __iter__(self):
            return iter(self.indices)

        def __len__(self):
            return len(self.indices)

    rank, world = dist.get_rank(), dist.get_world_size()
    loader = DataLoader(dataset, batch_size, sampler=Mine(len(dataset), rank, world))
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.int64, device=device)
    mode = model.training
    model.eval()
    with torch.inference_mode():
        for x, y in loader:
            scores = model(x.to(device))
            counts += torch.stack(
                [
                    (scores.argmax(dim=1) == y.to(device)).sum(),
                    torch.tensor(math.prod(y.shape), device=device),
                ]
            )
    model.train(mode)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return tuple(int(c) for c in counts)


DRAWN = {
    "4.4": (
        [
            (evaluate_with_the_loader_of_its_first_call, "eval_stale"),
            (evaluate_counting_into_a_default_argument, "eval_accumulated"),
            (evaluate_sharded_by_local_rank, "eval_machines"),
            (evaluate_split_for_two_ranks, "eval_counted_extra"),
        ],
        [evaluate_by_indexing_the_tensors, evaluate_with_a_sampler_that_does_not_pad],
    ),
}
