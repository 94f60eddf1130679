"""4.2 make_loader (Going further): a DistributedSampler's DataLoader, each item once per epoch."""

from __future__ import annotations

from ... import i18n
from ...i18n import messages
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_mistakes,
    run_on_ranks,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying
from .capstone import make_loader  # 4.2's reference: the capstone's own loader

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
        "loader_stale": (
            "The loader of this call went through a data set of {got} items, where the one "
            "it was given holds {n}: what the first call made (a sampler, a loader) was used "
            "again. Make the sampler and the loader from the dataset each call is given."
        ),
        "loader_stale.title": "a sampler or loader kept from the first call",
        "hint.loader_fresh": (
            "make_loader is called once for each data set: build the DistributedSampler and "
            "the DataLoader inside it, from its own arguments, every time; keep nothing from "
            "one call to the next (a global, a default argument)."
        ),
        "tried_global_batch": "global batch {v}",
        "loader_ok": (
            "On the check's own data sets ({lengths} items, global batches {batches}), on "
            "{worlds} ranks and on 2 machines x 2 ranks, make_loader called twice in each "
            "rank: each item once per epoch, no overlap between ranks, each rank's part of "
            "the global batch a step, shuffled, a new order after set_epoch."
        ),
    },
)


# (ranks, machines): two world sizes on one machine, one of them not a power of two, and 2
# machines x 2 ranks, where LOCAL_RANK is not the rank. Each rank calls make_loader twice,
# with other data sets and global batches, all of them dividing among 2, 3 and 4 ranks (a
# padded share is the sampler's, not the answer's, to get right).
LOADER_LAYOUTS = ((2, 1), (3, 1), (4, 2))
SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "calls": (2,),
        "steps": (2,),  # two epochs of each loader, set_epoch(1) between them
        "counts": {"global_batch": (12, 24)},
        # The data sets' items: each divides by every global batch drawn, so that every
        # rank's share is whole batches (a DataLoader's drop_last then drops nothing).
        "lengths": (72, 120),
    },
    why_not={
        "dtypes": "make_loader deals indices and never reads a value: the check's items "
        "carry their own numbers (int64) only to be told apart",
        "model": "make_loader takes no model",
        "device": "a loader yields the data set's own tensors; moving a batch to the device "
        "is the training loop's step, and make_loader makes no tensor and calls no collective",
    },
    # The capstone's GLOBAL_BATCH, which an answer that ignores its argument would use.
    notebook={"global_batch": 16},
)


def _calls(seed: int) -> list[tuple[int, int]]:
    """(items, global batch) of each of the two calls in one rank, for this seed."""
    lengths, batches = SPACE.values("lengths"), SPACE.drawn["counts"]["global_batch"]
    return [(lengths[(seed + k) % 2], batches[(seed // 2 + k) % 2]) for k in range(2)]


def _items_by_batch(loader) -> list[list[int]]:
    """The item numbers of each batch of one pass (the check's data set: x = item number)."""
    batches = []
    for batch in loader:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        batches.append([int(i) for i in x.reshape(-1).tolist()])
    return batches


def _loader_harness(make_loader, calls):
    """On each rank: make_loader called once per (items, global batch), in this one
    process; what each loader dealt, in two epochs."""
    with process_group():  # no collective below, and none needed before leaving
        return [_one_loader(make_loader, n, batch) for n, batch in calls]


def _one_loader(make_loader, n: int, batch: int) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    data = TensorDataset(torch.arange(n), torch.zeros(n))
    loader = make_loader(data, batch)
    if not isinstance(loader, DataLoader):
        return {"type": type(loader).__name__}
    sampler = loader.sampler
    info = {"type": "DataLoader", "sampler": type(sampler).__name__}
    info["distributed"] = isinstance(sampler, DistributedSampler)
    # The data set it deals: the one given, or one a first call left behind.
    info["dealt"] = len(getattr(sampler, "dataset", None) or loader.dataset)
    info["epochs"] = [_items_by_batch(loader)]
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(1)
        info["epochs"].append(_items_by_batch(loader))
    return info


def _judge_shares(shares: list[list[int]], nnodes: int, n: int) -> None:
    """One epoch's items of each rank: disjoint, together the whole data set of n."""
    world = len(shares)
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


def _default_order(rank: int, world: int, epoch: int, n: int) -> list[int]:
    """The items DistributedSampler, with its defaults, gives `rank` in `epoch`."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank)
    sampler.set_epoch(epoch)
    return list(sampler)


def _judge_loader(results, nnodes: int, n: int, batch: int) -> int:
    """Raise Wrong for the first thing a call shows wrong; return the rows per rank a step."""
    world = len(results)
    for r in results:
        if r["type"] != "DataLoader":
            raise Wrong("loader_type", got=r["type"])
    stale = next((r["dealt"] for r in results if r["dealt"] != n), None)
    if stale is not None:
        raise Wrong("loader_stale", got=stale, n=n)
    per = max((len(b) for b in results[0]["epochs"][0]), default=0)
    if per * world != batch:
        raise Wrong("loader_batch", per=per, got=per * world, world=world, want=batch)
    first = [[i for b in r["epochs"][0] for i in b] for r in results]
    _judge_shares(first, nnodes, n)
    if all(s == sorted(s) for s in first):
        raise Wrong("loader_unshuffled", first=i18n.listed(first[0][:4]))
    if not results[0]["distributed"]:
        raise Wrong("loader_sampler", name=results[0]["sampler"])
    if first[0] != _default_order(0, world, 0, n):
        raise Wrong("loader_seed")
    for rank, r in enumerate(results):
        if len(r["epochs"]) < 2 or r["epochs"][1] == r["epochs"][0]:
            raise Wrong("loader_same_epoch", rank=rank)
    _judge_shares([[i for b in r["epochs"][1] for i in b] for r in results], nnodes, n)
    return per


def _check_loader(fn, seed: int = CHECK_SEED) -> Phrase:
    calls = _calls(seed)
    for nprocs, nnodes in LOADER_LAYOUTS:
        with trying(ranks=nprocs, machines=nnodes):
            runs = run_on_ranks(_loader_harness, fn, calls, nprocs=nprocs, nnodes=nnodes)
            for k, (n, batch) in enumerate(calls):
                with trying(call=k + 1, items=n, global_batch=batch):
                    _judge_loader([r[k] for r in runs], nnodes, n, batch)
    worlds = sorted({nprocs for nprocs, nnodes in LOADER_LAYOUTS if nnodes == 1})
    return Phrase(
        "loader_ok",
        lengths=and_list([n for n, _ in calls]),
        batches=and_list([batch for _, batch in calls]),
        worlds=and_list(worlds),
    )


exercise = Exercise(
    "4.2",
    "make_loader",
    _check_loader,
    make_loader,
    texts=MESSAGES,
    hints=("loader_sampler", "loader_batch", "loader_defaults", "loader_fresh", "loader_code"),
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
        "loader_stale": Mistake(hint="loader_fresh"),
        **rank_mistakes(hint="loader_sampler"),
    },
    further=True,
    hidden=on_hidden_seeds(_check_loader),
    space=SPACE,
)
