"""Exercises of lesson 04, sampler and checkpoint (`from ddp_helpers.exercises import lesson04`)."""

from __future__ import annotations

import os

from ._core import Exercise, Wrong, rank_folder, rank_folders, run_on_ranks, writers
from ._core import progress as _progress
from .capstone import exercise as q2  # exercise 4.2, the capstone: a script turned into DDP

MESSAGES = {
    "loader_hints": [
        "A DataLoader of its own on every rank goes through the whole data set on every "
        "rank. A DistributedSampler deals each rank its share of the indices, shuffled the "
        "same way on every rank; the DataLoader takes it as its sampler.",
        "The global batch is what all the ranks together take in one step. Each rank's "
        "DataLoader takes its share of it: the global batch divided by the number of ranks "
        "of the whole job, on every machine (dist.get_world_size()).",
        "DistributedSampler(dataset) reads the rank and the world size from the process "
        "group. LOCAL_RANK and LOCAL_WORLD_SIZE count the ranks of one machine only, so a "
        "sampler built from them deals the same shares on every machine. Shuffling is the "
        "sampler's job (shuffle=True is its default); DataLoader refuses shuffle=True "
        "together with a sampler.",
        "sampler = DistributedSampler(dataset); return DataLoader(dataset, "
        "batch_size=global_batch // dist.get_world_size(), sampler=sampler).",
    ],
    "loader_type": "make_loader returned a {got}; return a DataLoader.",
    "loader_batch": (
        "Each rank took {per} rows a step: the global batch became {got} ({world} ranks x "
        "{per}), not {want}."
    ),
    "loader_everything": (
        "Every rank went through all {n} items in one epoch: the ranks trained on the same "
        "data, not on shares of it."
    ),
    "loader_machines": (
        "On 2 machines, ranks {a} and {b} (local rank {local} on machines 0 and 1) went "
        "through the same {k} items: the shares were dealt among the ranks of one machine, "
        "so every machine trained on the same data."
    ),
    "loader_overlap": (
        "Ranks {a} and {b} both went through {k} of the same items in one epoch: their "
        "shares overlap."
    ),
    "loader_missing": "No rank went through item(s) {missing} in one epoch.",
    "loader_unshuffled": (
        "Every rank went through its items in the data set's order (rank 0: {first}, ...): "
        "nothing shuffled them."
    ),
    "loader_sampler": (
        "The loader's sampler is a {name}, which has no set_epoch: the epoch loop cannot "
        "give it a new shuffle each epoch, the same on every rank."
    ),
    "loader_seed": (
        "Rank 0's items came in another order than DistributedSampler's with its default "
        "seed (0): keep the sampler's defaults, so that a run can be compared with one "
        "process on the same global batches (the capstone does)."
    ),
    "loader_same_epoch": (
        "After sampler.set_epoch(1), rank {rank} went through its items in the same order "
        "as in epoch 0."
    ),
    "loader_ok": (
        "On the check's own data set ({n} items, global batch {batch}), on 2 ranks and on "
        "2 machines x 2 ranks: each item once per epoch, no overlap between ranks, {per} "
        "rows per rank a step, shuffled, a new order after set_epoch."
    ),
    "eval_hints": [
        "Every rank must count its own share, and then the ranks must add up their counts: "
        "dist.all_reduce a tensor [correct, total] so that every rank holds the totals.",
        "With buffers (BatchNorm), DDP's forward is a collective: the first forward after a "
        "training step broadcasts rank 0's buffers to the other ranks. A DDP forward on "
        "rank 0 alone waits there for ranks that never come, and model.module on every "
        "rank scores with each rank's own statistics, which differ after training. So every "
        "rank evaluates its own share with the DDP model.",
        "DistributedSampler pads the shares by repeating items when the data set does not "
        "divide by the world size: the notebook's 513 items on 2 ranks become 514, one counted "
        "twice. For evaluation, give each rank its items without padding: rank r takes "
        "items r, r + W, r + 2W, ... up to the last one.",
        "Switch to model.eval() before the loop (dropout off, BatchNorm's running "
        "statistics used), run it under torch.no_grad() (with gradients on, every DDP "
        "forward broadcasts the buffers, and ranks with shares of unequal length then call "
        "it unequally often), and put back the mode the model was in "
        "(model.train(was_training)) afterwards.",
        "mine = Subset(dataset, range(rank, len(dataset), world_size)); count correct and "
        "total over DataLoader(mine, batch_size) with model(x), in a tensor on the model's "
        "device, in eval mode under no_grad; model.train(was_training); "
        "dist.all_reduce(counts); return the two ints.",
    ],
    "eval_shape": "evaluate returned {got!r} on rank {rank}; return (correct, total), two ints.",
    "eval_disagree": (
        "The ranks returned different counts ({got}): each one counted only its own share. "
        "all_reduce the counts so that every rank holds the totals."
    ),
    "eval_train_mode": (
        "The model was in training mode while it evaluated (model.training was True in "
        "{calls} of {all} forward passes): dropout was still dropping units."
    ),
    "eval_not_restored": (
        "After evaluate the model was left in eval mode, so training would go on with "
        "dropout switched off. Put back the mode it was in."
    ),
    "eval_everything": (
        "Every rank evaluated all {n} items ({rows} rows each): the work was not split."
    ),
    "eval_idle": (
        "Rank {busy} evaluated {rows} rows and rank(s) {idle} none: the work was not split, "
        "the other ranks only waited."
    ),
    "eval_own_stats": (
        "The ranks scored with different BatchNorm statistics: after the check's training "
        "step each rank's running mean and variance are its own, and they were still "
        "different after evaluate ({got} correct; one process with rank 0's model counts "
        "{want})."
    ),
    "eval_padding": (
        "It counted {total} examples for a data set of {n}: DistributedSampler repeated "
        "{extra} item(s) to give every rank the same number, and they were counted twice."
    ),
    "eval_dropped": (
        "It counted {total} examples for a data set of {n}: {missing} item(s) were never "
        "evaluated (drop_last?). Every held-out example counts once."
    ),
    "eval_share": (
        "It counted {total} examples for a data set of {n}: only one rank's share. "
        "all_reduce the counts across the ranks."
    ),
    "eval_correct": (
        "It counted all {n} examples, but {got} correct where one process with rank 0's "
        "model counts {want}."
    ),
    "eval_ok": (
        "{want} of {n} correct, exactly what one process with rank 0's model counts: every "
        "example once, the work split, in eval mode, on {ranks} ranks; training mode "
        "restored. (The check uses its own data set of {n} points and its own model, with "
        "BatchNorm and dropout, trained a step first: its counts are not the notebook's.)"
    ),
    "save_hints": [
        "Only one rank of the whole job writes: the copies are identical, and several "
        "processes writing one file at the same time can corrupt it. That is the global "
        "rank 0 (dist.get_rank()); LOCAL_RANK is 0 once on every machine.",
        "DDP's own state_dict() prefixes every key with `module.`, and a plain model will "
        "not load it: save the state of the model inside the wrapper.",
        "After rank 0 has written, every rank waits at dist.barrier(), outside the `if`, so "
        "that no rank reads the file before it is complete. A barrier inside `if rank == 0:` "
        "hangs.",
        "if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), "
        "'optimizer': optimizer.state_dict(), 'epoch': epoch}, path); then, on every rank, "
        "dist.barrier().",
    ],
    "save_count": "Ranks {ranks} each wrote a checkpoint; one writer is enough.",
    "save_machines": (
        "A checkpoint was written on every machine: ranks {ranks} (local rank 0 on machines "
        "0 and 1) each wrote one. On a shared file system those are {count} writers of one "
        "file; one for the whole job is enough."
    ),
    "save_not_zero": "Only rank {ranks} wrote a checkpoint; by convention rank 0 saves.",
    "save_none": "Nothing reached the disk: no rank wrote a file.",
    "save_keys": "Save a dict with 'model', 'optimizer' and 'epoch'; the keys were {keys}.",
    "save_prefix": "The saved model keys start with `module.` ({key!r}).",
    "save_strict": "A plain model could not load the saved weights: {error}",
    "save_barrier": (
        "Rank {rank} went on before rank 0 had written the file (rank 0 started late on "
        "purpose): a rank that read the checkpoint now would find none."
    ),
    "save_weights": "The checkpoint's model weights differ from the model's own.",
    "save_optimizer": (
        "The checkpoint's optimizer state differs from the optimizer's own (its momentum "
        "buffers, one per parameter)."
    ),
    "save_epoch": (
        "The checkpoint's epoch is {got!r}, but save_checkpoint was called with epoch=7: save "
        "the epoch it is given (load_checkpoint adds the 1)."
    ),
    "save_ok": (
        "Written once for the whole job, by rank 0 (on 2 ranks, and on 2 machines x 2 "
        "ranks), no `module.`, with optimizer and epoch; no rank went on before the file "
        "was there."
    ),
    "load_hints": [
        "torch.load puts every tensor back on the device it was saved from (cuda:0, when "
        "rank 0 saved from its GPU), unless map_location says where.",
        "Load the weights into the plain model inside DDP, with strict=True, and the "
        "optimizer's state too; then return the epoch to start from.",
        "checkpoint = torch.load(path, map_location=next(model.parameters()).device); "
        "model.module.load_state_dict(checkpoint['model']); "
        "optimizer.load_state_dict(checkpoint['optimizer']); return checkpoint['epoch'] + 1.",
    ],
    "load_map": (
        "The checkpoint was saved from a GPU this rank does not have; torch.load put the "
        "tensors back there and failed on rank {rank}: {error}"
    ),
    "load_weights": "After loading, the weights on rank {rank} differ from the checkpoint's.",
    "load_optimizer": "After loading, the optimizer state on rank {rank} is not the saved one.",
    "load_epoch": "It returned {got!r}; the checkpoint is of epoch {saved}, so resume at {want}.",
    "load_ok": (
        "Loaded onto each rank's own device (the GPU it was saved from is not needed); "
        "weights, optimizer and epoch restored."
    ),
    "quiz_hints": [
        "Reread the cells that showed each of these: the weights before and after DDP(...) "
        "in lesson 03, the gradient printed right after backward(), the set_epoch picture "
        "above, and why the copies stay identical.",
    ],
    "quiz_shape": "Return a dict with the answers to questions 1-{n}, each 'a', 'b' or 'c'.",
    "quiz_wrong": "Question {q} is not right yet. {why}",
    "quiz_ok": "All {n} answers right.",
    # What each question is about, to think it through again; never which letter is right.
    "quiz_why": {
        1: "Think about what DDP does when it is built, before any training step, so that "
        "training can start from one model on every rank.",
        2: "Think about which call of a training step DDP's hooks run in: the gradients are "
        "averaged as soon as they exist.",
        3: "Think about what the sampler needs from you to shuffle differently each epoch "
        "while every rank still agrees on the shuffle.",
        4: "Think about how the ranks' copies of the model compare after each step.",
    },
}

# Question number -> the right letter (the questions are in lesson 04's notebook).
QUIZ = {1: "b", 2: "a", 3: "c", 4: "a"}


# ---------------------------------------------------------------- 4.1 make_loader


def make_loader(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    per_rank = global_batch // dist.get_world_size()  # the ranks of every machine
    return DataLoader(dataset, batch_size=per_rank, sampler=DistributedSampler(dataset))


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
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    try:
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
    finally:
        dist.destroy_process_group()


def _judge_shares(shares: list[list[int]], nnodes: int) -> None:
    """One epoch's items of each rank: disjoint, together the whole data set."""
    world, n = len(shares), LOADER_ITEMS
    if all(len(set(s)) == n for s in shares):
        raise Wrong(MESSAGES["loader_everything"].format(n=n), hint=0)
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
            message = MESSAGES["loader_machines"].format(a=a, b=b, local=a % per_node, k=k)
            raise Wrong(message, hint=2)
        raise Wrong(MESSAGES["loader_overlap"].format(a=a, b=b, k=k), hint=0)
    missing = sorted(set(range(n)) - {i for s in shares for i in s})
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise Wrong(MESSAGES["loader_missing"].format(missing=shown), hint=0)


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
            raise Wrong(MESSAGES["loader_type"].format(got=r["type"]), hint=0)
    per = max((len(b) for b in results[0]["epochs"][0]), default=0)
    if per * world != LOADER_BATCH:
        args = dict(per=per, got=per * world, world=world, want=LOADER_BATCH)
        raise Wrong(MESSAGES["loader_batch"].format(**args), hint=1)
    first = [[i for b in r["epochs"][0] for i in b] for r in results]
    _judge_shares(first, nnodes)
    if all(s == sorted(s) for s in first):
        shown = ", ".join(map(str, first[0][:4]))
        raise Wrong(MESSAGES["loader_unshuffled"].format(first=shown), hint=2)
    if not results[0]["distributed"]:
        raise Wrong(MESSAGES["loader_sampler"].format(name=results[0]["sampler"]), hint=0)
    if first[0] != _default_order(0, world, epoch=0):
        raise Wrong(MESSAGES["loader_seed"], hint=2)
    for rank, r in enumerate(results):
        if len(r["epochs"]) < 2 or r["epochs"][1] == r["epochs"][0]:
            raise Wrong(MESSAGES["loader_same_epoch"].format(rank=rank), hint=2)
    _judge_shares([[i for b in r["epochs"][1] for i in b] for r in results], nnodes)
    return per


def _check_loader(fn) -> str:
    rows = []
    for nprocs, nnodes in ((2, 1), (4, 2)):
        results = run_on_ranks(_loader_harness, fn, nprocs=nprocs, nnodes=nnodes, hang_hint=0)
        rows.append(_judge_loader(results, nnodes))
    per = " and ".join(map(str, rows))
    return MESSAGES["loader_ok"].format(n=LOADER_ITEMS, batch=LOADER_BATCH, per=per)


# ---------------------------------------------------------------- 4.4 evaluate


def evaluate(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = Subset(dataset, range(rank, len(dataset), world))  # like the sampler, no padding
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.long, device=device)  # correct, total
    was_training = model.training
    model.eval()  # dropout off, BatchNorm's running statistics
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=batch_size):
            x, y = x.to(device), y.to(device)
            counts[0] += (model(x).argmax(1) == y).sum()  # the DDP model, on every rank
            counts[1] += len(y)
    model.train(was_training)
    dist.all_reduce(counts)  # integer counts: exact
    return int(counts[0]), int(counts[1])


def _spy_model(seed: int = 0):
    """A classifier with dropout and BatchNorm; its first layer records every forward."""
    import torch

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = []

        def forward(self, x):
            self.calls.append((self.training, x.shape[0]))
            return x

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        Spy(),
        torch.nn.Linear(2, 32),
        # momentum 1: the running statistics are those of the last training batch, which
        # differ from rank to rank until DDP's next buffer broadcast.
        torch.nn.BatchNorm1d(32, momentum=1.0),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.5),  # in training mode it changes the predictions
        torch.nn.Linear(32, 2),
    )


def _eval_data(n: int):
    import torch
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, 2, generator=gen)
    return TensorDataset(x, ((x[:, 0] * x[:, 1]) > 0).long())


def _train_a_step(model, rank: int) -> None:
    """One SGD step on data of this rank's own: the ranks' BatchNorm statistics differ."""
    import torch

    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 2, generator=gen) * (1 + 2 * rank) + 2 * rank
    y = ((x[:, 0] * x[:, 1]) > 0).long()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def _count_alone(module, dataset) -> int:
    """What one process counts with this module's weights and statistics, in eval mode."""
    import copy

    import torch

    alone = copy.deepcopy(module).eval()
    x, y = dataset.tensors
    with torch.no_grad():
        return int((alone(x).argmax(1) == y).sum())


def _evaluate_harness(evaluate, n):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        model = DDP(_spy_model())
        model.train()
        _train_a_step(model, rank)  # the next DDP forward broadcasts rank 0's buffers
        data = _eval_data(n)
        want = _count_alone(model.module, data) if rank == 0 else None
        model.module[0].calls.clear()
        got = evaluate(model, data)
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError):
            got = repr(got)
        return {
            "got": got,
            "want": want,
            "calls": model.module[0].calls,
            "training_after": model.training,
            "stats": [b.tolist() for b in model.module[2].buffers()],
        }
    finally:
        dist.destroy_process_group()


def _judge_counts(answers, n: int, ranks: int) -> None:
    correct, total = answers[0]
    padded = -(-n // ranks) * ranks
    if total != n:
        args = dict(total=total, n=n, extra=padded - n, missing=n - total)
        if total == padded:
            raise Wrong(MESSAGES["eval_padding"].format(**args), hint=2)
        if total in {len(range(r, n, ranks)) for r in range(ranks)} | {padded // ranks}:
            raise Wrong(MESSAGES["eval_share"].format(**args), hint=0)
        if total < n:
            raise Wrong(MESSAGES["eval_dropped"].format(**args), hint=2)
        raise Wrong(MESSAGES["eval_padding"].format(**args), hint=2)


# 517 on 2 ranks: shares of 259 and 258 rows, so no batch of 128 leaves a single row
# (BatchNorm refuses one row in training mode, which would hide the mistake behind its error).
# (ranks, items, the hint a hang names). 517 items: 3 batches on each rank. 513 (the
# notebook's): 3 and 2, so an evaluation that leaves gradients on, where every DDP forward
# broadcasts the buffers, hangs there.
EVALUATE_CASES = ((2, 517, 1), (2, 513, 3))


def _check_evaluate(fn, cases=EVALUATE_CASES) -> str:
    for ranks, n, hang_hint in cases:
        results = run_on_ranks(_evaluate_harness, fn, n, nprocs=ranks, hang_hint=hang_hint)
        for rank, r in enumerate(results):
            if not isinstance(r["got"], tuple) or len(r["got"]) != 2:
                raise Wrong(MESSAGES["eval_shape"].format(got=r["got"], rank=rank), hint=0)
        answers = [r["got"] for r in results]
        calls = [c for r in results for c in r["calls"]]
        in_training = sum(training for training, _ in calls)
        if in_training:
            raise Wrong(
                MESSAGES["eval_train_mode"].format(calls=in_training, all=len(calls)), hint=3
            )
        if not all(r["training_after"] for r in results):
            raise Wrong(MESSAGES["eval_not_restored"], hint=3)
        rows = [sum(k for _, k in r["calls"]) for r in results]
        if all(k >= n for k in rows):
            raise Wrong(MESSAGES["eval_everything"].format(n=n, rows=rows[0]), hint=0)
        idle = [rank for rank, k in enumerate(rows) if k == 0]
        if idle:
            busy = max(range(ranks), key=rows.__getitem__)
            idle_ranks = ", ".join(map(str, idle))
            args = dict(busy=busy, rows=rows[busy], idle=idle_ranks)
            raise Wrong(MESSAGES["eval_idle"].format(**args), hint=0)
        if len(set(answers)) > 1:
            raise Wrong(MESSAGES["eval_disagree"].format(got=answers), hint=0)
        want = results[0]["want"]
        if any(r["stats"] != results[0]["stats"] for r in results):
            raise Wrong(MESSAGES["eval_own_stats"].format(got=answers[0][0], want=want), hint=1)
        _judge_counts(answers, n, ranks)
        if answers[0][0] != want:
            raise Wrong(MESSAGES["eval_correct"].format(n=n, got=answers[0][0], want=want), hint=3)
    return MESSAGES["eval_ok"].format(want=want, n=n, ranks=ranks)


def _hidden_evaluate(fn) -> str:
    # Three ranks, where the sampler pads with two repeats: a world size the check never shows.
    return _check_evaluate(fn, ((3, 514, 1),))


# ---------------------------------------------------------------- 4.5 and 4.6 checkpoints


def save_checkpoint(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = {
            "model": model.module.state_dict(),  # no `module.` prefix
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
        }
        tmp = f"{path}.tmp"  # path may be a str or a pathlib.Path
        torch.save(state, tmp)  # a crash mid-write leaves the old file intact
        os.replace(tmp, path)  # atomic: readers see the old file or the new one
    dist.barrier()  # nobody reads the file before rank 0 has finished writing it


def load_checkpoint(model, optimizer, path):
    import torch

    device = next(model.parameters()).device
    checkpoint = torch.load(path, map_location=device)  # onto this rank's own device
    model.module.load_state_dict(checkpoint["model"], strict=True)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


def _make_net(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _trained_ddp():
    """A DDP model one SGD-with-momentum step in, so the optimizer has state to save."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_make_net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    opt.step()
    return model, opt


def _save_harness(save_checkpoint, folder):
    """Each rank saves into a folder of its own, so the file system shows who wrote."""
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        model, opt = _trained_ddp()
        if rank == 0:
            # Rank 0 is late, and slow to write: a rank that does not wait for its file
            # goes on long before it is there, however busy the machine.
            time.sleep(0.3)
            real_save = torch.save

            def slow_save(*args, **kwargs):
                time.sleep(0.3)
                return real_save(*args, **kwargs)

            torch.save = slow_save
        save_checkpoint(model, opt, 7, os.path.join(rank_folder(folder, rank), "ckpt.pt"))
        info = {"went_on_at": time.time()}  # when this rank's save_checkpoint returned
        rank0_file = os.path.join(rank_folder(folder, 0), "ckpt.pt")
        dist.barrier()
        if rank == 0 and os.path.exists(rank0_file):
            info["written_at"] = os.stat(rank0_file).st_mtime
            ckpt = torch.load(rank0_file, map_location="cpu", weights_only=False)
            info["keys"] = sorted(ckpt) if isinstance(ckpt, dict) else type(ckpt).__name__
            if isinstance(ckpt, dict) and {"model", "optimizer", "epoch"} <= set(ckpt):
                info["first_key"] = next(iter(ckpt["model"]), "")
                bare = _make_net()
                try:
                    bare.load_state_dict(ckpt["model"], strict=True)
                    info["strict_error"] = None
                except RuntimeError as exc:
                    info["strict_error"] = str(exc).splitlines()[0]
                info["same_model"] = all(
                    torch.equal(a, b)
                    for a, b in zip(
                        ckpt["model"].values(), model.module.state_dict().values(), strict=False
                    )
                )
                info["same_opt"] = ckpt["optimizer"]["state"].keys() == (
                    opt.state_dict()["state"].keys()
                )
                info["epoch"] = ckpt["epoch"]
        return info
    finally:
        dist.destroy_process_group()


def _judge_writers(wrote: list[int], nprocs: int, nnodes: int) -> None:
    if not wrote:
        raise Wrong(MESSAGES["save_none"], hint=0)
    if len(wrote) > 1:
        ranks = ", ".join(map(str, wrote[:-1])) + f" and {wrote[-1]}"
        per_node = nprocs // nnodes
        if nnodes > 1 and wrote == list(range(0, nprocs, per_node)):
            message = MESSAGES["save_machines"].format(ranks=ranks, count=len(wrote))
            raise Wrong(message, hint=0)
        raise Wrong(MESSAGES["save_count"].format(ranks=ranks), hint=0)
    if wrote != [0]:
        raise Wrong(MESSAGES["save_not_zero"].format(ranks=wrote[0]), hint=0)


def _check_save(fn) -> str:
    # On 2 ranks, then on 2 machines x 2 ranks: where LOCAL_RANK == 0 is two writers.
    for nprocs, nnodes in ((2, 1), (4, 2)):
        with rank_folders(nprocs, "ddp-ckpt-check-") as folder:
            results = run_on_ranks(
                _save_harness, fn, folder, nprocs=nprocs, nnodes=nnodes, hang_hint=2
            )
            wrote = writers(folder, nprocs)
        _judge_writers(wrote, nprocs, nnodes)
        written_at = results[0].get("written_at", 0)
        for rank, r in enumerate(results[1:], 1):
            if r["went_on_at"] < written_at:
                raise Wrong(MESSAGES["save_barrier"].format(rank=rank), hint=2)
        info = results[0]
        keys = info.get("keys")
        if not isinstance(keys, list) or not {"model", "optimizer", "epoch"} <= set(keys):
            raise Wrong(MESSAGES["save_keys"].format(keys=keys), hint=0)
        if str(info["first_key"]).startswith("module."):
            raise Wrong(MESSAGES["save_prefix"].format(key=info["first_key"]), hint=1)
        if info["strict_error"]:
            raise Wrong(MESSAGES["save_strict"].format(error=info["strict_error"]), hint=1)
        if not info["same_model"]:
            raise Wrong(MESSAGES["save_weights"], hint=0)
        if not info["same_opt"]:
            raise Wrong(MESSAGES["save_optimizer"], hint=0)
        if info["epoch"] != 7:
            raise Wrong(MESSAGES["save_epoch"].format(got=info["epoch"]), hint=0)
    return MESSAGES["save_ok"]


def _saved_from_a_missing_gpu():
    """From here on, torch.save records every tensor as saved from cuda:99.

    So a checkpoint loads only with a map_location, as one saved on a GPU machine would on
    a machine without that GPU (a public torch API: torch.serialization.register_package).
    """
    from torch.serialization import register_package

    register_package(1, lambda obj: "cuda:99", lambda obj, location: None)


def _load_harness(load_checkpoint, folder):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        model, opt = _trained_ddp()
        path = os.path.join(folder, "ckpt.pt")
        if dist.get_rank() == 0:
            _saved_from_a_missing_gpu()
        save_checkpoint(model, opt, 4, path)  # the reference save: rank 0 writes, all wait
        saved = {k: v.clone() for k, v in model.module.state_dict().items()}
        momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
        # A fresh model and optimizer, as after a restart.
        fresh = DDP(_make_net(seed=123))
        fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
        try:
            resume = load_checkpoint(fresh, fresh_opt, path)
        except RuntimeError as exc:
            if "deserialize object on" not in str(exc):
                raise
            return {"map_error": str(exc).split(". ")[0] + "."}
        same_weights = all(torch.equal(saved[k], v) for k, v in fresh.module.state_dict().items())
        same_opt = all(
            p in fresh_opt.state and torch.equal(fresh_opt.state[p]["momentum_buffer"], m)
            for p, m in zip(fresh.parameters(), momentum, strict=True)
        )
        return {"weights": same_weights, "opt": same_opt, "resume": resume}
    finally:
        dist.destroy_process_group()


def _as_int(value):
    """value as an int if it is one (int, numpy or tensor integer); else None.

    5.9 or "5" is not an epoch `range()` takes; an object equal to everything is not one.
    """
    import operator

    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_load(fn) -> str:
    with rank_folders(2, "ddp-ckpt-check-") as folder:
        results = run_on_ranks(_load_harness, fn, folder, nprocs=2, hang_hint=1)
    for rank, r in enumerate(results):
        if "map_error" in r:
            raise Wrong(MESSAGES["load_map"].format(rank=rank, error=r["map_error"]), hint=0)
        if not r["weights"]:
            raise Wrong(MESSAGES["load_weights"].format(rank=rank), hint=1)
        if not r["opt"]:
            raise Wrong(MESSAGES["load_optimizer"].format(rank=rank), hint=1)
        if _as_int(r["resume"]) != 5:
            raise Wrong(MESSAGES["load_epoch"].format(got=r["resume"], saved=4, want=5), hint=1)
    return MESSAGES["load_ok"]


def quiz_answers():
    return {1: "b", 2: "a", 3: "c", 4: "a"}


def _check_quiz(fn) -> str:
    got = fn()
    if not isinstance(got, dict):
        raise Wrong(MESSAGES["quiz_shape"].format(n=len(QUIZ)), hint=0)
    for q, right in QUIZ.items():
        answer = str(got.get(q, got.get(str(q), ""))).strip().lower()
        if answer != right:
            raise Wrong(MESSAGES["quiz_wrong"].format(q=q, why=MESSAGES["quiz_why"][q]), hint=0)
    return MESSAGES["quiz_ok"].format(n=len(QUIZ))


q1 = Exercise("4.1", "make_loader", _check_loader, MESSAGES["loader_hints"], make_loader)
q3 = Exercise("4.3", "quiz_answers", _check_quiz, MESSAGES["quiz_hints"], quiz_answers)
q4 = Exercise(
    "4.4", "evaluate", _check_evaluate, MESSAGES["eval_hints"], evaluate, hidden=_hidden_evaluate
)
q5 = Exercise("4.5", "save_checkpoint", _check_save, MESSAGES["save_hints"], save_checkpoint)
q6 = Exercise("4.6", "load_checkpoint", _check_load, MESSAGES["load_hints"], load_checkpoint)
# In the notebook's order: the core path (4.1 to 4.3), then Going further (4.4 to 4.6).
EXERCISES = [q1, q2, q3, q4, q5, q6]


def progress() -> None:
    """Which exercises of lesson 04 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "04")
