"""4.2 make_loader (Going further): a DistributedSampler's DataLoader, each item once per epoch."""

from __future__ import annotations

from ... import i18n
from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    process_group,
    run_on_ranks,
)
from ..capstone import make_loader  # 4.2's reference: the capstone's own loader

MESSAGES = messages(
    "exercises.lesson04.loader",
    {
        "hint.loader_sampler": (
            "A DataLoader of its own on every rank goes through the whole data set on every "
            "rank. A DistributedSampler deals each rank its share of the indices, shuffled "
            "the same way on every rank; the DataLoader takes it as its sampler."
        ),
        "hint.loader_batch": (
            "The global batch is what all the ranks together take in one step. Each rank's "
            "DataLoader takes its share of it: the global batch divided by the number of "
            "ranks of the whole job, on every machine (dist.get_world_size())."
        ),
        "hint.loader_defaults": (
            "DistributedSampler(dataset) reads the rank and the world size from the process "
            "group. LOCAL_RANK and LOCAL_WORLD_SIZE count the ranks of one machine only, so "
            "a sampler built from them deals the same shares on every machine. Shuffling is "
            "the sampler's job (shuffle=True is its default); DataLoader refuses "
            "shuffle=True together with a sampler."
        ),
        "hint.loader_code": (
            "sampler = DistributedSampler(dataset); return DataLoader(dataset, "
            "batch_size=global_batch // dist.get_world_size(), sampler=sampler)."
        ),
        "loader_type": "make_loader returned a {got}; return a DataLoader.",
        "loader_type.title": "did not return a DataLoader",
        "loader_batch": (
            "Each rank took {per} rows a step: the global batch became {got} ({world} ranks "
            "x {per}), not {want}."
        ),
        "loader_batch.title": "the global batch not divided among the ranks",
        "loader_everything": (
            "Every rank went through all {n} items in one epoch: the ranks trained on the "
            "same data, not on shares of it."
        ),
        "loader_everything.title": "every rank went through all the data",
        "loader_machines": (
            "On 2 machines, ranks {a} and {b} (local rank {local} on machines 0 and 1) went "
            "through the same {k} items: the shares were dealt among the ranks of one "
            "machine, so every machine trained on the same data."
        ),
        "loader_machines.title": "shares dealt per machine (LOCAL_RANK, LOCAL_WORLD_SIZE)",
        "loader_overlap": (
            "Ranks {a} and {b} both went through {k} of the same items in one epoch: their "
            "shares overlap."
        ),
        "loader_overlap.title": "the ranks' shares overlap",
        "loader_missing": "No rank went through item(s) {missing} in one epoch.",
        "loader_missing.title": "items no rank went through",
        "loader_unshuffled": (
            "Every rank went through its items in the data set's order (rank 0: {first}, "
            "...): nothing shuffled them."
        ),
        "loader_unshuffled.title": "not shuffled",
        "loader_sampler": (
            "The loader's sampler is a {name}, which has no set_epoch: the epoch loop cannot "
            "give it a new shuffle each epoch, the same on every rank."
        ),
        "loader_sampler.title": "a sampler without set_epoch",
        "loader_seed": (
            "Rank 0's items came in another order than DistributedSampler's with its "
            "default seed (0): keep the sampler's defaults, so that a run can be compared "
            "with one process on the same global batches (the capstone does)."
        ),
        "loader_seed.title": "not the sampler's default seed",
        "loader_same_epoch": (
            "After sampler.set_epoch(1), rank {rank} went through its items in the same "
            "order as in epoch 0."
        ),
        "loader_same_epoch.title": "the same order after set_epoch",
        "loader_ok": (
            "On the check's own data set ({n} items, global batch {batch}), on 2 ranks and "
            "on 2 machines x 2 ranks: each item once per epoch, no overlap between ranks, "
            "{single} rows per rank a step on 2 ranks and {multi} on 2 machines x 2 ranks, "
            "shuffled, a new order after set_epoch."
        ),
    },
)


LOADER_ITEMS, LOADER_BATCH = 64, 16


def _items_by_batch(loader) -> list[list[int]]:
    """The item numbers of each batch of one pass (the check's data set: x = item number)."""
    batches = []
    for batch in loader:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        batches.append([int(i) for i in x.reshape(-1).tolist()])
    return batches


def _loader_harness(make_loader):
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    with process_group():  # no collective below, and none needed before leaving
        data = TensorDataset(torch.arange(LOADER_ITEMS), torch.zeros(LOADER_ITEMS))
        loader = make_loader(data, LOADER_BATCH)
        if not isinstance(loader, DataLoader):
            return {"type": type(loader).__name__}
        sampler = loader.sampler
        info = {"type": "DataLoader", "sampler": type(sampler).__name__}
        info["distributed"] = isinstance(sampler, DistributedSampler)
        info["epochs"] = [_items_by_batch(loader)]
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(1)
            info["epochs"].append(_items_by_batch(loader))
        return info


def _judge_shares(shares: list[list[int]], nnodes: int) -> None:
    """One epoch's items of each rank: disjoint, together the whole data set."""
    world, n = len(shares), LOADER_ITEMS
    if all(len(set(s)) == n for s in shares):
        raise Wrong("loader_everything", n=n)
    per_node = world // nnodes
    overlaps = [
        (a, b, len(set(shares[a]) & set(shares[b])))
        for a in range(world)
        for b in range(a + 1, world)
        if set(shares[a]) & set(shares[b])
    ]
    if overlaps:
        a, b, k = overlaps[0]
        across = all(x // per_node != y // per_node for x, y, _ in overlaps)
        if nnodes > 1 and across and a % per_node == b % per_node:
            raise Wrong("loader_machines", a=a, b=b, local=a % per_node, k=k)
        raise Wrong("loader_overlap", a=a, b=b, k=k)
    missing = sorted(set(range(n)) - {i for s in shares for i in s})
    if missing:
        shown = i18n.listed(missing[:8] + (["..."] if len(missing) > 8 else []))
        raise Wrong("loader_missing", missing=shown)


def _default_order(rank: int, world: int, epoch: int) -> list[int]:
    """The items DistributedSampler, with its defaults, gives `rank` in `epoch`."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(LOADER_ITEMS), num_replicas=world, rank=rank)
    sampler.set_epoch(epoch)
    return list(sampler)


def _judge_loader(results, nnodes: int) -> int:
    """Raise Wrong for the first thing a run shows wrong; return the rows per rank a step."""
    world = len(results)
    for r in results:
        if r["type"] != "DataLoader":
            raise Wrong("loader_type", got=r["type"])
    per = max((len(b) for b in results[0]["epochs"][0]), default=0)
    if per * world != LOADER_BATCH:
        args = dict(per=per, got=per * world, world=world, want=LOADER_BATCH)
        raise Wrong("loader_batch", **args)
    first = [[i for b in r["epochs"][0] for i in b] for r in results]
    _judge_shares(first, nnodes)
    if all(s == sorted(s) for s in first):
        shown = i18n.listed(first[0][:4])
        raise Wrong("loader_unshuffled", first=shown)
    if not results[0]["distributed"]:
        raise Wrong("loader_sampler", name=results[0]["sampler"])
    if first[0] != _default_order(0, world, epoch=0):
        raise Wrong("loader_seed")
    for rank, r in enumerate(results):
        if len(r["epochs"]) < 2 or r["epochs"][1] == r["epochs"][0]:
            raise Wrong("loader_same_epoch", rank=rank)
    _judge_shares([[i for b in r["epochs"][1] for i in b] for r in results], nnodes)
    return per


def _check_loader(fn) -> Phrase:
    rows = []
    for nprocs, nnodes in ((2, 1), (4, 2)):
        results = run_on_ranks(_loader_harness, fn, nprocs=nprocs, nnodes=nnodes)
        rows.append(_judge_loader(results, nnodes))
    single, multi = rows
    return Phrase("loader_ok", n=LOADER_ITEMS, batch=LOADER_BATCH, single=single, multi=multi)


q2 = Exercise(
    "4.2",
    "make_loader",
    _check_loader,
    make_loader,
    texts=MESSAGES,
    hints=("loader_sampler", "loader_batch", "loader_defaults", "loader_code"),
    mistakes={
        "loader_type": Mistake(hint="loader_sampler"),
        "loader_batch": Mistake(hint="loader_batch"),
        "loader_everything": Mistake(hint="loader_sampler"),
        "loader_machines": Mistake(hint="loader_defaults"),
        "loader_overlap": Mistake(hint="loader_sampler"),
        "loader_missing": Mistake(hint="loader_sampler"),
        "loader_unshuffled": Mistake(hint="loader_defaults"),
        "loader_sampler": Mistake(hint="loader_sampler"),
        "loader_seed": Mistake(hint="loader_defaults"),
        "loader_same_epoch": Mistake(hint="loader_defaults"),
        "hang": Mistake(hint="loader_sampler"),
        "mismatch": Mistake(hint="loader_sampler"),
    },
    further=True,
)
