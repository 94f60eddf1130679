"""Exercises of lesson 04, sampler and checkpoint (`from ddp_helpers.exercises import lesson04`)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from .. import i18n
from ..i18n import messages
from ..torch_compat import Reason, Touchpoint, check, warnings
from ._core import (
    Exercise,
    Mistake,
    Phrase,
    Texts,
    Wrong,
    and_list,
    call,
    process_group,
    rank_folder,
    rank_folders,
    run_answer,
    run_on_ranks,
    writers,
)
from ._core import progress as _progress
from .capstone import exercise as q1  # exercise 4.1, the capstone: a script turned into DDP
from .capstone import (  # noqa: F401 - the capstone's data and model, as ex.make_dataset
    make_dataset,
    make_loader,  # exercise 4.2's reference (Going further), the capstone's own loader
    make_model,
)
from .devices import COLLECTIVES, made_off_device

# This lesson's cells and checks wrap models in DDP: its notebook's %load_ext and the grader's
# scorer ask the launcher to expect it (launcher.expect_ddp); importing it changes nothing.
BUILDS_DDP = True

MESSAGES = messages(
    "exercises.lesson04",
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
        "hint.eval_reduce": (
            "Every rank must count its own share, and then the ranks must add up their "
            "counts: dist.all_reduce a tensor [correct, total] so that every rank holds the "
            "totals."
        ),
        "hint.eval_ddp_forward": (
            "With buffers (BatchNorm), DDP's forward is a collective: the first forward "
            "after a training step broadcasts rank 0's buffers to the other ranks. A DDP "
            "forward on rank 0 alone waits there for ranks that never come, and "
            "model.module on every rank scores with each rank's own statistics, which "
            "differ after training. So every rank evaluates its own share with the DDP "
            "model."
        ),
        "hint.eval_no_padding": (
            "DistributedSampler pads the shares by repeating items when the data set does "
            "not divide by the world size: the notebook's 513 items on 2 ranks become 514, "
            "one counted twice. For evaluation, give each rank its items without padding: "
            "rank r takes items r, r + W, r + 2W, ... up to the last one."
        ),
        "hint.eval_mode": (
            "Switch to model.eval() before the loop (dropout off, BatchNorm's running "
            "statistics used), run it under torch.no_grad() (with gradients on, every DDP "
            "forward broadcasts the buffers, and ranks with shares of unequal length then "
            "call it unequally often), and put back the mode the model was in "
            "(model.train(was_training)) afterwards."
        ),
        "hint.eval_code": (
            "mine = Subset(dataset, range(rank, len(dataset), world_size)); count correct "
            "and total over DataLoader(mine, batch_size) with model(x), in a tensor on the "
            "model's device, in eval mode under no_grad; model.train(was_training); "
            "dist.all_reduce(counts); return the two ints."
        ),
        "eval_shape": (
            "evaluate returned {got!r} on rank {rank}; return (correct, total), two ints."
        ),
        "eval_shape.title": "did not return (correct, total)",
        "eval_disagree": (
            "The ranks returned different counts ({got}): each one counted only its own "
            "share. all_reduce the counts so that every rank holds the totals."
        ),
        "eval_disagree.title": "the counts were not reduced across the ranks",
        "eval_train_mode": (
            "The model was in training mode while it evaluated (model.training was True in "
            "{calls} of {all} forward passes): dropout was still dropping units."
        ),
        "eval_train_mode.title": "evaluated in training mode",
        "eval_not_restored": (
            "After evaluate the model was left in eval mode, so training would go on with "
            "dropout switched off. Put back the mode it was in."
        ),
        "eval_not_restored.title": "training mode not restored",
        "eval_forced_train": (
            "The model came to evaluate in eval mode and left it in training mode: put "
            "back the mode it was in (was_training = model.training first, then "
            "model.train(was_training)), not always training."
        ),
        "eval_forced_train.title": "always left in training mode",
        "eval_everything": (
            "Every rank evaluated all {n} items ({rows} rows each): the work was not split."
        ),
        "eval_everything.title": "every rank evaluated all the data",
        "eval_idle": (
            "Rank {busy} evaluated {rows} rows and rank(s) {idle} none: the work was not "
            "split, the other ranks only waited."
        ),
        "eval_idle.title": "one rank did all the work",
        "eval_own_stats": (
            "The ranks scored with different BatchNorm statistics: after the check's "
            "training step each rank's running mean and variance are its own, and they were "
            "still different after evaluate ({got} correct; one process with rank 0's model "
            "counts {want})."
        ),
        "eval_own_stats.title": "each rank scored with its own BatchNorm statistics",
        "eval_padding": (
            "It counted {total} examples for a data set of {n}: DistributedSampler repeated "
            "{extra} item(s) to give every rank the same number, and they were counted "
            "twice."
        ),
        "eval_padding.title": "the sampler's padding counted twice",
        "eval_counted_extra": (
            "It counted {total} examples for a data set of {n}: {extra} more than it holds, "
            "so some examples were counted twice. Give each rank its own share, every "
            "example in exactly one."
        ),
        "eval_counted_extra.title": "some examples counted twice",
        "eval_dropped": (
            "It counted {total} examples for a data set of {n}: {missing} item(s) were never "
            "evaluated (drop_last?). Every held-out example counts once."
        ),
        "eval_dropped.title": "items never evaluated",
        "eval_share": (
            "It counted {total} examples for a data set of {n}: only one rank's share. "
            "all_reduce the counts across the ranks."
        ),
        "eval_share.title": "only one rank's share counted",
        "eval_correct": (
            "It counted all {n} examples, but {got} correct where one process with rank 0's "
            "model counts {want}."
        ),
        "eval_correct.title": "another number correct than one process counts",
        "eval_ok": (
            "On {ranks} ranks, with the check's own model (BatchNorm and dropout, trained a "
            "step first) and its own data ({cases}), exactly what one process with rank 0's "
            "model counts: every example once, the work split, in eval mode, every rank with "
            "rank 0's BatchNorm statistics; the mode it was handed in given back (training, "
            "then eval); the counts it sent made on the model's device. (Its counts are not "
            "the notebook's.)"
        ),
        "eval_case": "{want} of {n} examples correct",
        "hint.save_one_writer": (
            "Only one rank of the whole job writes: the copies are identical, and several "
            "processes writing one file at the same time can corrupt it. That is the global "
            "rank 0 (dist.get_rank()); LOCAL_RANK is 0 once on every machine."
        ),
        "hint.save_module": (
            "DDP's own state_dict() prefixes every key with `module.`, and a plain model "
            "will not load it: save the state of the model inside the wrapper."
        ),
        "hint.save_barrier": (
            "After rank 0 has written, every rank waits at dist.barrier(), outside the "
            "`if`, so that no rank reads the file before it is complete. A barrier inside "
            "`if rank == 0:` hangs."
        ),
        "hint.save_code": (
            "if dist.get_rank() == 0: torch.save({{'model': model.module.state_dict(), "
            "'optimizer': optimizer.state_dict(), 'epoch': epoch}}, path); then, on every "
            "rank, dist.barrier()."
        ),
        "save_count": "Ranks {ranks} each wrote a checkpoint; one writer is enough.",
        "save_count.title": "several ranks wrote the checkpoint",
        "save_machines": (
            "A checkpoint was written on every machine: ranks {ranks} (local rank 0 on "
            "machines 0 and 1) each wrote one. On a shared file system those are {count} "
            "writers of one file; one for the whole job is enough."
        ),
        "save_machines.title": "LOCAL_RANK 0 used where RANK 0 belongs",
        "save_not_zero": "Only rank {ranks} wrote a checkpoint; by convention rank 0 saves.",
        "save_not_zero.title": "a rank other than 0 saved",
        "save_none": "Nothing reached the disk: no rank wrote a file.",
        "save_none.title": "nothing written",
        "save_keys": "Save a dict with 'model', 'optimizer' and 'epoch'; the keys were {keys}.",
        "save_keys.title": "not a dict of model, optimizer and epoch",
        "save_whole": (
            "The checkpoint's '{what}' is the {kind} object itself, saved whole: loading it "
            "needs the class's code, and it pickles more than the tensors. Save `{call}` "
            "instead."
        ),
        "save_whole.title": "a model or optimizer saved whole, not its state_dict",
        "save_not_state": (
            "The checkpoint's '{what}' holds a {kind}, not a state_dict (a dict of "
            "tensors): save what `{call}` returns."
        ),
        "save_not_state.title": "something other than a state_dict saved",
        "save_prefix": "The saved model keys start with `module.` ({key!r}).",
        "save_prefix.title": "DDP's state_dict saved (keys start with `module.`)",
        "save_strict": "A plain model could not load the saved weights: {error}",
        "save_strict.title": "a plain model cannot load the weights",
        "save_barrier": (
            "Rank {rank} went on before rank 0 had written the file (rank 0 started late on "
            "purpose): a rank that read the checkpoint now would find none."
        ),
        "save_barrier.title": "no barrier after the save",
        "save_weights": "The checkpoint's model weights differ from the model's own.",
        "save_weights.title": "other weights than the model's",
        "save_optimizer": (
            "The checkpoint's optimizer state differs from the optimizer's own (its "
            "momentum buffers, one per parameter)."
        ),
        "save_optimizer.title": "another optimizer state than the optimizer's",
        "save_epoch": (
            "The checkpoint's epoch is {got!r}, but save_checkpoint was called with "
            "epoch={want}: save the epoch it is given (load_checkpoint adds the 1)."
        ),
        "save_epoch.title": "not the epoch it was given",
        "save_ok": (
            "Written once for the whole job, by rank 0 (on 2 ranks, and on 2 machines x 2 "
            "ranks), no `module.`, with optimizer and epoch; no rank went on before the "
            "file was there."
        ),
        "hint.load_map_location": (
            "torch.load puts every tensor back on the device it was saved from (cuda:0, "
            "when rank 0 saved from its GPU), unless map_location says where."
        ),
        "hint.load_restore": (
            "Load the weights into the plain model inside DDP, with strict=True, and the "
            "optimizer's state too; then return the epoch to start from."
        ),
        "hint.load_code": (
            "checkpoint = torch.load(path, map_location=next(model.parameters()).device); "
            "model.module.load_state_dict(checkpoint['model']); "
            "optimizer.load_state_dict(checkpoint['optimizer']); return "
            "checkpoint['epoch'] + 1."
        ),
        "load_map": (
            "The checkpoint was saved from a GPU this rank does not have; torch.load put the "
            "tensors back there and failed on rank {rank}: {error}"
        ),
        "load_map.title": "torch.load without map_location",
        # The touchpoint 4.6's check relies on (LoadDeviceText): what it is, what is lost.
        "load_device_text.what": (
            "torch.load's error text for a device this machine lacks ('deserialize object on')"
        ),
        "load_device_text.lost": (
            "the load check shows torch's own error, not its hint, for a checkpoint loaded "
            "without map_location"
        ),
        "load_weights": "After loading, the weights on rank {rank} differ from the checkpoint's.",
        "load_weights.title": "the weights not restored",
        "load_optimizer": (
            "After loading, the optimizer state on rank {rank} is not the saved one."
        ),
        "load_optimizer.title": "the optimizer state not restored",
        "load_epoch": (
            "It returned {got!r}; the checkpoint is of epoch {saved}, so resume at {want}."
        ),
        "load_epoch.title": "not the epoch to resume at",
        "load_ok": (
            "Loaded onto each rank's own device (the GPU it was saved from is not needed); "
            "weights, optimizer and epoch restored."
        ),
        "hint.quiz_reread": (
            "Reread where each of these was shown: in lesson 03's core path, the weights "
            "before and after DDP(...) and one weight's gradient on two ranks after "
            "backward(); above, how the sampler draws each epoch's order (seed + epoch); and "
            "why the copies stay identical."
        ),
        "quiz_shape": "Return a dict with the answers to questions 1-{n}, each 'a', 'b' or 'c'.",
        "quiz_shape.title": "not a dict of answers",
        "quiz_wrong": "Question {q} is not right yet. {why}",
        "quiz_wrong.title": "a wrong answer",
        # What each question is about, to think it through again; never which letter is right.
        "quiz_why_1": (
            "Think about what DDP does when it is built, before any training step, so that "
            "training can start from one model on every rank."
        ),
        "quiz_why_2": (
            "Think about which call of a training step DDP's hooks run in: the gradients "
            "are averaged as soon as they exist."
        ),
        "quiz_why_3": (
            "Think about what the sampler needs from you to shuffle differently each epoch "
            "while every rank still agrees on the shuffle."
        ),
        "quiz_why_4": "Think about how the ranks' copies of the model compare after each step.",
        "quiz_ok": "All {n} answers right.",
        "finish_first": "This cell uses your {names}: finish those exercises first.",
        "hint.gather_pad": (
            "all_gather needs a tensor of one size on every rank. First all_gather each "
            "rank's length (a one-element tensor), then pad this rank's values with zeros to "
            "the longest, all_gather those, and cut each rank's part back to its length."
        ),
        "hint.gather_every_rank": (
            "all_gather leaves the same list on every rank, in rank order: concatenate it "
            "the same way on every rank, rank 0's part first."
        ),
        "hint.gather_code": (
            "n = torch.tensor([len(values)]); lengths = [torch.zeros_like(n) for _ in "
            "range(world)]; dist.all_gather(lengths, n); padded = values.new_zeros(longest); "
            "padded[: len(values)] = values; gathered = [torch.zeros_like(padded) ...]; "
            "dist.all_gather(gathered, padded); torch.cat([g[:k] for g, k in zip(gathered, "
            "lengths)])."
        ),
        "gather_sizes": (
            "On {ranks} ranks holding {lengths} values, all_gather got tensors of {sizes} "
            "elements: it takes one size on every rank (gloo aborts a rank, or the others "
            "wait forever). Pad each rank's values to the longest."
        ),
        "gather_sizes.title": "all_gather of tensors of different sizes",
        "gather_padding": (
            "On {ranks} ranks holding {lengths} values, rank {rank} returned {got} values, "
            "not {want}: the padding is still in. Cut each rank's part back to its length."
        ),
        "gather_padding.title": "the padding kept",
        "gather_count": (
            "On {ranks} ranks holding {lengths} values, rank {rank} returned {got} values; "
            "all ranks together hold {want}."
        ),
        "gather_count.title": "not every rank's values",
        "gather_disagree": (
            "On {ranks} ranks, rank {rank} returned other values than rank 0: every rank "
            "needs the whole list (a metric computed on rank 0 alone still needs every rank "
            "in the all_gather)."
        ),
        "gather_disagree.title": "not the same result on every rank",
        "gather_order": (
            "On {ranks} ranks, the values are all there but not in rank order: rank 0's "
            "first, then rank 1's, and so on."
        ),
        "gather_order.title": "not in rank order",
        "gather_dtype": (
            "The values came back as {got}, not {want}: pad with a tensor of the values' own "
            "dtype (values.new_zeros)."
        ),
        "gather_dtype.title": "another dtype",
        "gather_not_tensor": (
            "gather_all returned a {got}, not a tensor: return one 1-D tensor of all the "
            "ranks' values (torch.cat of the gathered parts)."
        ),
        "gather_not_tensor.title": "not a tensor",
        "gather_shape": (
            "gather_all returned a tensor of shape {shape}: return one 1-D tensor of all "
            "the ranks' values, in rank order (torch.cat of the parts, each cut back to its "
            "length)."
        ),
        "gather_shape.title": "not one 1-D tensor",
        "gather_ok": (
            "On 3 ranks holding 5, 0 and 3 values and on 2 ranks holding 4 and 4, float "
            "and integer: every rank returned every rank's values, in rank order, and every "
            "tensor it sent was made on the values' device."
        ),
    },
)

# Question number -> the right letter (the questions are in lesson 04's notebook).
QUIZ = {1: "b", 2: "a", 3: "c", 4: "a"}


# ---------------------------------------------------------------- 4.2 make_loader


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


def _evaluate_harness(evaluate, n, handed_training=True):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        rank = dist.get_rank()
        model = DDP(_spy_model())
        model.train()
        _train_a_step(model, rank)  # the next DDP forward broadcasts rank 0's buffers
        data = _eval_data(n)
        want = _count_alone(model.module, data) if rank == 0 else None
        model.train(handed_training)  # the mode evaluate must give back
        model.module[0].calls.clear()
        samplers = _count_samplers()
        got = evaluate(model, data)
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError):
            got = repr(got)
        seen = {
            "got": got,
            "want": want,
            "calls": list(model.module[0].calls),
            "training_after": model.training,
            "stats": [b.tolist() for b in model.module[2].buffers()],
            "samplers": len(samplers),
        }
        return {**seen, "off_device": made_off_device(evaluate, model, data)}


def _count_samplers() -> list:
    """In a rank: the DistributedSamplers made from now on (evaluate's), one entry each."""
    from torch.utils.data.distributed import DistributedSampler

    made, real = [], DistributedSampler.__init__

    def init(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    DistributedSampler.__init__ = init
    return made


def _judge_counts(answers, n: int, ranks: int, sampler: bool) -> None:
    """The total's mistake; the sampler's padding named only where a sampler was used."""
    correct, total = answers[0]
    padded = -(-n // ranks) * ranks
    if total != n:
        args = dict(total=total, n=n, extra=padded - n, missing=n - total)
        if total == padded and sampler:
            raise Wrong("eval_padding", **args)
        if total in {len(range(r, n, ranks)) for r in range(ranks)} | {padded // ranks}:
            raise Wrong("eval_share", **args)
        if total < n:
            raise Wrong("eval_dropped", **args)
        raise Wrong("eval_counted_extra", **{**args, "extra": total - n})


# The mode the model is handed over in: training (evaluate must restore it), then eval mode
# (it must stay so: an answer that always ends in model.train() changes it).
# 517 on 2 ranks: shares of 259 and 258 rows, so no batch of 128 leaves a single row
# (BatchNorm refuses one row in training mode, which would hide the mistake behind its error).
# (ranks, items). 517 items: 3 batches on each rank. 513 (the notebook's): 3 and 2, so an
# evaluation that leaves gradients on, where every DDP forward broadcasts the buffers, hangs
# there (hence the hang's hint, no_grad; a forward on rank 0 alone is a mismatch on 517).
EVALUATE_CASES = ((2, 517, True), (2, 513, False))


def _check_evaluate(fn, cases=EVALUATE_CASES) -> Phrase:
    counted, off_device = [], []
    for ranks, n, handed_training in cases:
        results = run_on_ranks(_evaluate_harness, fn, n, handed_training, nprocs=ranks)
        for rank, r in enumerate(results):
            if not isinstance(r["got"], tuple) or len(r["got"]) != 2:
                raise Wrong("eval_shape", got=r["got"], rank=rank)
        answers = [r["got"] for r in results]
        calls = [c for r in results for c in r["calls"]]
        in_training = sum(training for training, _ in calls)
        if in_training:
            raise Wrong("eval_train_mode", calls=in_training, all=len(calls))
        if any(r["training_after"] != handed_training for r in results):
            raise Wrong("eval_not_restored" if handed_training else "eval_forced_train")
        rows = [sum(k for _, k in r["calls"]) for r in results]
        if all(k >= n for k in rows):
            raise Wrong("eval_everything", n=n, rows=rows[0])
        idle = [rank for rank, k in enumerate(rows) if k == 0]
        if idle:
            busy = max(range(ranks), key=rows.__getitem__)
            idle_ranks = i18n.listed(idle)
            raise Wrong("eval_idle", busy=busy, rows=rows[busy], idle=idle_ranks)
        if len(set(answers)) > 1:
            raise Wrong("eval_disagree", got=answers)
        want = results[0]["want"]
        if any(r["stats"] != results[0]["stats"] for r in results):
            raise Wrong("eval_own_stats", got=answers[0][0], want=want)
        _judge_counts(answers, n, ranks, any(r["samplers"] for r in results))
        if answers[0][0] != want:
            raise Wrong("eval_correct", n=n, got=answers[0][0], want=want)
        off_device += [r["off_device"] for r in results if r["off_device"]]
        counted.append(Phrase("eval_case", want=want, n=n))
    if off_device:  # after every case: what the answer computes wrong is named first
        raise Wrong("off_device", function="evaluate", collective=off_device[0])
    worlds = sorted({world for world, _, _ in cases})
    return Phrase(
        "eval_ok",
        ranks=worlds[0] if len(worlds) == 1 else and_list(worlds),
        cases=counted[0] if len(counted) == 1 else and_list(counted, groups=True),
    )


def _hidden_evaluate(fn) -> Phrase:
    # Three ranks, where the sampler pads with two repeats: a world size the check never shows.
    return _check_evaluate(fn, ((3, 514, True),))


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


# The collectives an answer may wait in: torch.distributed's that move tensors (devices.py)
# and those that move none or objects only; a check counts each rank's calls of them.
_COLLECTIVES = (*COLLECTIVES, "monitored_barrier", "gather_object", "scatter_object_list")
_SAVE_KEYS = "ddp-check-save/"  # the check's own keys in the group's store


@contextlib.contextmanager
def _collectives_counted(store, rank: int):
    """While it is open, each call this rank makes to a collective first writes how many it
    has entered (1, 2, ...) to the store, as `entered/<rank>`; the counts, here too."""
    import torch.distributed as dist

    count = [0]
    real = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}

    def counted(fn):
        def entered(*args, **kwargs):
            count[0] += 1
            store.set(f"{_SAVE_KEYS}entered/{rank}", str(count[0]))
            return fn(*args, **kwargs)

        return entered

    for name, fn in real.items():
        setattr(dist, name, counted(fn))
    try:
        yield count
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def _peers_settled(store, peers, collectives: int) -> list[int]:
    """Wait until every peer has either returned from the answer (`went_on/<rank>`) or
    entered a collective past rank 0's `collectives` so far, where it waits for rank 0
    itself; then the peers that had returned. Certain, whatever the machine's load: a peer
    in that collective cannot leave it before rank 0 calls it too, after its save."""
    import time

    def state(peer):
        if store.check([f"{_SAVE_KEYS}went_on/{peer}"]):
            return "went_on"
        key = f"{_SAVE_KEYS}entered/{peer}"
        if store.check([key]) and int(store.get(key)) > collectives:
            return "waits"
        return None

    while True:
        states = {peer: state(peer) for peer in peers}
        if None not in states.values():
            return [peer for peer, s in states.items() if s == "went_on"]
        time.sleep(0.002)  # polls the store: the peers' own record, not a guess of time


@contextlib.contextmanager
def _saves_watched(store, rank: int, world: int, info: dict):
    """The collectives counted on every rank; on rank 0, torch.save first waits for the
    peers to settle (_peers_settled) and puts the ones that had returned in info["early"]."""
    import torch

    with _collectives_counted(store, rank) as count:
        if rank != 0:
            yield
            return
        real_save = torch.save

        def watched_save(*args, **kwargs):
            if info["early"] is None:
                info["early"] = _peers_settled(store, range(1, world), count[0])
            return real_save(*args, **kwargs)

        torch.save = watched_save
        try:
            yield
        finally:
            torch.save = real_save


def _save_harness(save_checkpoint, folder, epoch):
    """Each rank saves into a folder of its own, so the file system shows who wrote. Rank
    0's torch.save first waits until each peer has returned or waits in a collective: a
    peer that returned before rank 0 wrote went on without the file (info["early"])."""
    import torch
    import torch.distributed as dist

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        model, opt = _trained_ddp()
        store = dist.distributed_c10d._get_default_store()
        info = {"early": None}  # None: rank 0's answer never called torch.save
        with _saves_watched(store, rank, world, info):
            save_checkpoint(model, opt, epoch, os.path.join(rank_folder(folder, rank), "ckpt.pt"))
        store.set(f"{_SAVE_KEYS}went_on/{rank}", "1")
        rank0_file = os.path.join(rank_folder(folder, 0), "ckpt.pt")
        dist.barrier()
        if rank == 0 and os.path.exists(rank0_file):
            ckpt = torch.load(rank0_file, map_location="cpu", weights_only=False)
            info["keys"] = sorted(ckpt) if isinstance(ckpt, dict) else type(ckpt).__name__
            not_states = [
                (what, type(ckpt[what]).__name__, hasattr(ckpt[what], "state_dict"))
                for what in ("model", "optimizer")
                if isinstance(ckpt, dict) and what in ckpt and not isinstance(ckpt[what], dict)
            ]
            if not_states:  # the module or optimizer itself, or something else: no state_dict
                info["whole"] = list(not_states[0])
            elif isinstance(ckpt, dict) and {"model", "optimizer", "epoch"} <= set(ckpt):
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


def _judge_writers(wrote: list[int], nprocs: int, nnodes: int) -> None:
    if not wrote:
        raise Wrong("save_none")
    if len(wrote) > 1:
        ranks = and_list(wrote)
        per_node = nprocs // nnodes
        if nnodes > 1 and wrote == list(range(0, nprocs, per_node)):
            raise Wrong("save_machines", ranks=ranks, count=len(wrote))
        raise Wrong("save_count", ranks=ranks)
    if wrote != [0]:
        raise Wrong("save_not_zero", ranks=wrote[0])


def _check_save(fn) -> Phrase:
    # On 2 ranks, then on 2 machines x 2 ranks (where LOCAL_RANK == 0 is two writers), each
    # at another epoch.
    for nprocs, nnodes, epoch in ((2, 1, 7), (4, 2, 3)):
        with rank_folders(nprocs, "ddp-ckpt-check-") as folder:
            results = run_on_ranks(_save_harness, fn, folder, epoch, nprocs=nprocs, nnodes=nnodes)
            wrote = writers(folder, nprocs)
        _judge_writers(wrote, nprocs, nnodes)
        if results[0]["early"]:  # a peer returned before rank 0 had written
            raise Wrong("save_barrier", rank=results[0]["early"][0])
        info = results[0]
        if "whole" in info:
            what, kind, itself = info["whole"]
            call = "model.module.state_dict()" if what == "model" else "optimizer.state_dict()"
            raise Wrong(
                "save_whole" if itself else "save_not_state", what=what, kind=kind, call=call
            )
        keys = info.get("keys")
        if not isinstance(keys, list) or not {"model", "optimizer", "epoch"} <= set(keys):
            raise Wrong("save_keys", keys=keys)
        if str(info["first_key"]).startswith("module."):
            raise Wrong("save_prefix", key=info["first_key"])
        if info["strict_error"]:
            raise Wrong("save_strict", error=info["strict_error"])
        if not info["same_model"]:
            raise Wrong("save_weights")
        if not info["same_opt"]:
            raise Wrong("save_optimizer")
        if info["epoch"] != epoch:
            raise Wrong("save_epoch", got=info["epoch"], want=epoch)
    return Phrase("save_ok")


class LoadDeviceText(Touchpoint):
    """4.6's check tells a checkpoint loaded without map_location (its tensors saved on a
    GPU this machine lacks) from the answer's other errors by torch.load's text: "Attempting
    to deserialize object on a CUDA device but ...". Without it the check shows torch's own
    error, not its hint."""

    name = "load_device_text"
    texts = MESSAGES
    MISSING_DEVICE = "deserialize object on"

    def matches(self, exc: BaseException) -> bool:
        """True for torch.load's error on a tensor saved on a device this machine lacks."""
        return isinstance(exc, RuntimeError) and self.MISSING_DEVICE in str(exc)

    def check(self) -> Reason | None:
        """Load a saved tensor onto cuda:99 with torch told there is no CUDA, then no such GPU.

        Those are the two errors a checkpoint saved on a GPU gets where that GPU is missing
        (a machine without CUDA, or with fewer GPUs). torch is told, not asked: asking the
        CUDA driver here would keep every rank forked from this process from using CUDA.
        """
        import io

        import torch

        saved = io.BytesIO()
        torch.save(torch.zeros(1), saved)
        cuda = torch.cuda
        real = cuda.is_available, cuda.device_count
        try:
            for available in (False, True):
                cuda.is_available, cuda.device_count = (lambda a=available: a), (lambda: 0)
                saved.seek(0)
                try:
                    torch.load(saved, map_location="cuda:99")
                except Exception as exc:  # noqa: BLE001 - whatever it raises is what is checked
                    if not self.matches(exc):
                        return Reason.of("other_text", said=f"{type(exc).__name__}: {exc}")
                else:
                    return Reason.of("no_error")
        finally:
            cuda.is_available, cuda.device_count = real
        return None

    @functools.cache  # noqa: B019 - one object, checked once per process
    def warn_once(self) -> None:
        """Say, once, before 4.6's first check, if torch's text is not what it relies on."""
        for line in warnings(check([self]), [self]):
            print(line, file=sys.stderr, flush=True)


LOAD_DEVICE_TEXT = LoadDeviceText()


def _saved_from_a_missing_gpu():
    """From here on, torch.save records every tensor as saved from cuda:99.

    So a checkpoint loads only with a map_location, as one saved on a GPU machine would on
    a machine without that GPU (a public torch API: torch.serialization.register_package).
    """
    from torch.serialization import register_package

    register_package(1, lambda obj: "cuda:99", lambda obj, location: None)


def _load_harness(load_checkpoint, folder, epoch):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        model, opt = _trained_ddp()
        path = os.path.join(folder, "ckpt.pt")
        if dist.get_rank() == 0:
            _saved_from_a_missing_gpu()
        save_checkpoint(model, opt, epoch, path)  # the reference save: rank 0 writes, all wait
        saved = {k: v.clone() for k, v in model.module.state_dict().items()}
        momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
        # A fresh model and optimizer, as after a restart.
        fresh = DDP(_make_net(seed=123))
        fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
        try:
            resume = load_checkpoint(fresh, fresh_opt, path)
        except Exception as exc:
            if not LOAD_DEVICE_TEXT.matches(exc):
                raise
            return {"map_error": str(exc).split(". ")[0] + "."}
        same_weights = all(torch.equal(saved[k], v) for k, v in fresh.module.state_dict().items())
        same_opt = all(
            p in fresh_opt.state and torch.equal(fresh_opt.state[p]["momentum_buffer"], m)
            for p, m in zip(fresh.parameters(), momentum, strict=True)
        )
        return {"weights": same_weights, "opt": same_opt, "resume": resume}


def _as_int(value):
    """value as an int if it is one (int, numpy or tensor integer); else None.

    5.9 or "5" is not an epoch `range()` takes; an object equal to everything is not one.
    """
    import operator

    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_load(fn) -> Phrase:
    LOAD_DEVICE_TEXT.warn_once()
    for saved in (4, 0):  # two checkpoints: a resume hard-coded to 5 is caught
        with rank_folders(2, "ddp-ckpt-check-") as folder:
            results = run_on_ranks(_load_harness, fn, folder, saved, nprocs=2)
        for rank, r in enumerate(results):
            if "map_error" in r:
                raise Wrong("load_map", rank=rank, error=r["map_error"])
            if not r["weights"]:
                raise Wrong("load_weights", rank=rank)
            if not r["opt"]:
                raise Wrong("load_optimizer", rank=rank)
            if _as_int(r["resume"]) != saved + 1:
                raise Wrong("load_epoch", got=r["resume"], saved=saved, want=saved + 1)
    return Phrase("load_ok")


def quiz_answers():
    return {1: "b", 2: "a", 3: "c", 4: "a"}


def _letter(answer) -> str:
    """'b' for 'b', 'B', 'b)', '(b)' or 'b.': an answer in the form the prompt prints it."""
    import re

    text = str(answer).strip().lower()
    found = re.fullmatch(r"\(?([a-z])[).:]?", text)
    return found.group(1) if found else text


def _check_quiz(fn) -> Phrase:
    got = run_answer(call, fn)
    if not isinstance(got, dict):
        raise Wrong("quiz_shape", n=len(QUIZ))
    for q, right in QUIZ.items():
        answer = _letter(got.get(q, got.get(str(q), "")))
        if answer != right:
            raise Wrong("quiz_wrong", q=q, why=Phrase(f"quiz_why_{q}"))
    return Phrase("quiz_ok", n=len(QUIZ))


def gather_all(values):
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    length = torch.tensor([len(values)], device=values.device)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)  # first the sizes: all_gather needs one size
    padded = values.new_zeros(max(int(n) for n in lengths))
    padded[: len(values)] = values
    gathered = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return torch.cat([part[: int(n)] for part, n in zip(gathered, lengths, strict=True)])


# (ranks, each rank's number of values, dtype): uneven with an empty share, then even.
GATHER_CASES = ((3, (5, 0, 3), "float32"), (3, (5, 0, 3), "int64"), (2, (4, 4), "float32"))


def _gather_values(rank: int, lengths, dtype: str):
    import torch

    # Every value tells where it came from: 10 x its position. The first is a real 0, so an
    # answer that drops the padding by its value (zeros) loses it.
    start = sum(lengths[:rank])
    return (torch.arange(start, start + lengths[rank]) * 10).to(getattr(torch, dtype))


class _SizesDiffer(Exception):
    """all_gather called with tensors of different sizes on different ranks."""


def _spy_on_all_gather():
    """Before each all_gather (or all_gather_into_tensor), compare the ranks' sizes:
    unequal, every rank raises alike (gloo itself would abort one rank or hang the others)."""
    import torch
    import torch.distributed as dist

    real, into = dist.all_gather, dist.all_gather_into_tensor

    def same_sizes(tensor) -> None:
        size = torch.tensor([tensor.numel()], device=tensor.device)
        sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
        real(sizes, size)
        if len({int(n) for n in sizes}) > 1:
            raise _SizesDiffer([int(n) for n in sizes])

    def all_gather(tensor_list, tensor, *args, **kwargs):
        same_sizes(tensor)
        return real(tensor_list, tensor, *args, **kwargs)

    def all_gather_into_tensor(output, tensor, *args, **kwargs):
        same_sizes(tensor)
        return into(output, tensor, *args, **kwargs)

    dist.all_gather, dist.all_gather_into_tensor = all_gather, all_gather_into_tensor

    def restore() -> None:
        dist.all_gather, dist.all_gather_into_tensor = real, into

    return restore


def _gather_harness(fn, lengths, dtype):
    import torch
    import torch.distributed as dist

    with process_group():
        restore = _spy_on_all_gather()
        try:
            got = fn(_gather_values(dist.get_rank(), lengths, dtype))
        except _SizesDiffer as exc:
            return {"sizes": exc.args[0]}
        if not isinstance(got, torch.Tensor):
            return {"returned": type(got).__name__}
        if got.dim() != 1:
            return {"shape": list(got.shape)}
        seen = {"values": got.tolist(), "dtype": str(got.dtype).removeprefix("torch.")}
        restore()  # the probe sees torch's own all_gather, with its group and timeout
        values = _gather_values(dist.get_rank(), lengths, dtype)
        return {**seen, "off_device": made_off_device(fn, values)}


def _check_gather(fn) -> Phrase:
    import torch

    off_device = []
    for ranks, lengths, dtype in GATHER_CASES:
        runs = run_on_ranks(_gather_harness, fn, lengths, dtype, nprocs=ranks, timeout=20)
        want = torch.cat([_gather_values(r, lengths, dtype) for r in range(ranks)]).tolist()
        shown = and_list(lengths)
        for run in runs:
            if "sizes" in run:
                sizes = and_list(run["sizes"])
                raise Wrong("gather_sizes", ranks=ranks, lengths=shown, sizes=sizes)
            if "returned" in run:
                raise Wrong("gather_not_tensor", got=run["returned"])
            if "shape" in run:
                raise Wrong("gather_shape", shape=tuple(run["shape"]))
        for rank, run in enumerate(runs[1:], 1):
            if run != runs[0]:
                raise Wrong("gather_disagree", ranks=ranks, rank=rank)
        got = runs[0]["values"]
        count = {"ranks": ranks, "lengths": shown, "rank": 0, "got": len(got), "want": len(want)}
        if len(got) == ranks * max(lengths) != len(want):
            raise Wrong("gather_padding", **count)
        if sorted(got) != sorted(want):
            raise Wrong("gather_count", **count)
        if got != want:
            raise Wrong("gather_order", ranks=ranks)
        if runs[0]["dtype"] != dtype:
            raise Wrong("gather_dtype", got=runs[0]["dtype"], want=dtype)
        off_device += [run["off_device"] for run in runs if run["off_device"]]
    if off_device:  # after every case: what the answer computes wrong is named first
        raise Wrong("off_device", function="gather_all", collective=off_device[0])
    return Phrase("gather_ok")


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
q3 = Exercise(
    "4.3",
    "quiz_answers",
    _check_quiz,
    quiz_answers,
    texts=MESSAGES,
    hints=("quiz_reread",),
    mistakes={
        "quiz_shape": Mistake(hint="quiz_reread"),
        "quiz_wrong": Mistake(hint="quiz_reread"),
    },
    further=True,
)
q4 = Exercise(
    "4.4",
    "evaluate",
    _check_evaluate,
    evaluate,
    texts=MESSAGES,
    hints=("eval_reduce", "eval_ddp_forward", "eval_no_padding", "eval_mode", "eval_code"),
    mistakes={
        "eval_shape": Mistake(hint="eval_reduce"),
        "eval_train_mode": Mistake(hint="eval_mode"),
        "eval_not_restored": Mistake(hint="eval_mode"),
        "eval_forced_train": Mistake(hint="eval_mode"),
        "eval_counted_extra": Mistake(hint="eval_no_padding"),
        "eval_everything": Mistake(hint="eval_reduce"),
        "eval_idle": Mistake(hint="eval_reduce"),
        "eval_disagree": Mistake(hint="eval_reduce"),
        "eval_own_stats": Mistake(hint="eval_ddp_forward"),
        "eval_padding": Mistake(hint="eval_no_padding"),
        "eval_share": Mistake(hint="eval_reduce"),
        "eval_dropped": Mistake(hint="eval_no_padding"),
        "eval_correct": Mistake(hint="eval_mode"),
        "off_device": Mistake(),
        "hang": Mistake(hint="eval_mode"),
        "mismatch": Mistake(hint="eval_ddp_forward"),
    },
    hidden=_hidden_evaluate,
    further=True,
)
q5 = Exercise(
    "4.5",
    "save_checkpoint",
    _check_save,
    save_checkpoint,
    texts=MESSAGES,
    hints=("save_one_writer", "save_module", "save_barrier", "save_code"),
    mistakes={
        "save_none": Mistake(hint="save_one_writer"),
        "save_machines": Mistake(hint="save_one_writer"),
        "save_count": Mistake(hint="save_one_writer"),
        "save_not_zero": Mistake(hint="save_one_writer"),
        "save_barrier": Mistake(hint="save_barrier"),
        "save_keys": Mistake(hint="save_one_writer"),
        "save_whole": Mistake(hint="save_one_writer"),
        "save_not_state": Mistake(hint="save_one_writer"),
        "save_prefix": Mistake(hint="save_module"),
        "save_strict": Mistake(hint="save_module"),
        "save_weights": Mistake(hint="save_one_writer"),
        "save_optimizer": Mistake(hint="save_one_writer"),
        "save_epoch": Mistake(hint="save_one_writer"),
        "hang": Mistake(hint="save_barrier"),
        "mismatch": Mistake(hint="save_barrier"),
    },
    further=True,
)
q6 = Exercise(
    "4.6",
    "load_checkpoint",
    _check_load,
    load_checkpoint,
    texts=MESSAGES,
    hints=("load_map_location", "load_restore", "load_code"),
    mistakes={
        "load_map": Mistake(hint="load_map_location"),
        "load_weights": Mistake(hint="load_restore"),
        "load_optimizer": Mistake(hint="load_restore"),
        "load_epoch": Mistake(hint="load_restore"),
        "hang": Mistake(hint="load_restore"),
        "mismatch": Mistake(hint="load_restore"),
    },
    further=True,
)
# In the notebook's order: the core path (4.1), then Going further (4.2 to 4.7).
q7 = Exercise(
    "4.7",
    "gather_all",
    _check_gather,
    gather_all,
    texts=MESSAGES,
    hints=("gather_pad", "gather_every_rank", "gather_code"),
    mistakes={
        "gather_sizes": Mistake(hint="gather_pad"),
        "gather_padding": Mistake(hint="gather_pad"),
        "gather_count": Mistake(hint="gather_every_rank"),
        "gather_disagree": Mistake(hint="gather_every_rank"),
        "gather_order": Mistake(hint="gather_every_rank"),
        "gather_dtype": Mistake(hint="gather_pad"),
        "gather_not_tensor": Mistake(hint="gather_pad"),
        "gather_shape": Mistake(hint="gather_every_rank"),
        "off_device": Mistake(),
        "hang": Mistake(hint="gather_every_rank"),
        "mismatch": Mistake(hint="gather_every_rank"),
    },
    further=True,
)
EXERCISES = [q1, q2, q3, q4, q5, q6, q7]


def finish_first(*names: str) -> None:
    """Said by a cell of lesson 04 that runs the learner's answers while one is a stub."""
    shown = and_list([f"`{name}`" for name in names])
    print(Texts(MESSAGES).text("finish_first", names=shown))


def progress() -> None:
    """Which exercises of lesson 04 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "04")
