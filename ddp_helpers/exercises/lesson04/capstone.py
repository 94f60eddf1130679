"""Lesson 04's capstone, exercise 4.1: a one-process training script turned into DDP.

The learner's `train_ddp(epochs, path)` runs on 2 and 3 ranks and on 2 simulated machines x
2 ranks, for a number of epochs the check draws (never the notebook's), with spies on what
the recipe uses (capstone_spies.py): DDP and the training batches through its model, each
pass of a DistributedSampler and the order it gave, set_epoch, and every torch.save and
torch.load of the checkpoint's folder, by rank. Every rank is given the same path, as a job
on shared storage is, so that a rank may load what rank 0 saved. Its final weights must
equal one process's trained on the same global batches, each epoch's order that of
DistributedSampler told the epoch, and a checkpoint written after every epoch, by rank 0.
"""

from __future__ import annotations

import io
import os

from ...files import read_capped, remove_tree
from ...i18n import messages
from ..kit import (
    Exercise,
    Listed,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    rank_mistakes,
    run_on_ranks,
    weights_apart,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying
from . import capstone_spies as spies

# The script's data, model and settings, as the notebook's cell defines them. 96 items
# divide evenly among 2, 3 and 4 ranks (no sampler padding); each rank takes
# GLOBAL_BATCH // world rows a step, so that a step takes the same global batch as one
# process would: 16 rows on 2 and 4 ranks, 15 on 3 (and a last one of 6 in each epoch).
ITEMS, GLOBAL_BATCH, LR = 96, 16, 0.1
TOLERANCE = 1e-6  # float32 sums in another order: the reference measures max |dW| 6e-8
CHECKPOINT_LIMIT = 64 << 20  # bytes of a checkpoint the check reads (the lesson's: ~10 KB)
CHECKPOINT = "checkpoint.pt"  # its name in the check's folder, given to every rank
# (ranks, machines): two world sizes on one machine, one of them not a power of two, and 2
# machines x 2 ranks, where LOCAL_RANK 0 is not only rank 0.
LAYOUTS = ((2, 1), (3, 1), (4, 2))
SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "steps": (3, 5),  # epochs of training, each of 6 or 7 optimizer steps
        "counts": {"epochs": (3, 5)},
    },
    why_not={
        "calls": "train_ddp is a rank's whole job, from setup() to cleanup(): a second call "
        "in the same process would make a second default group, which torch names as the "
        'first ("0" again after destroy_process_group) and whose rendezvous then reads the '
        "first one's keys from the store; the launcher starts fresh ranks for each job",
        "dtypes": "the answer builds the script's data and model by name (make_dataset(), "
        "make_model(): float32), and converting them is no step of the recipe",
        "model": "the model is the script's own (make_model(): no buffer and no frozen "
        "parameter, as the notebook says BatchNorm would make DDP differ from one process), "
        "built by the answer by name",
        "lengths": "the data set is the script's 96 examples, built by the answer; what "
        "varies is how each world size deals it (shares of 48, 32 and 24 rows, in batches "
        "of 8, 5 and 4)",
        "device": "the device is the one the answer's own setup() returns (exercise 2.2 "
        "checks it with CUDA present and absent); the off-device probe runs an answer a "
        "second time, which train_ddp cannot be in one process (see calls)",
    },
    # The notebook trains for 4 epochs (its full run and its script's --epochs); the check
    # used to train for 2, which `range(2)` passed.
    notebook={"epochs": 4},
)

MESSAGES = messages(
    "exercises.lesson04.capstone",
    {
        "hint.recipe": (
            "Keep the script and add the recipe around it: `device = setup()` first, the "
            "model through `wrap`, a loader whose sampler is a DistributedSampler, and "
            "`cleanup()` once training is over. Every rank runs the whole function."
        ),
        "hint.epoch": (
            "DistributedSampler shuffles each epoch with the seed `seed + epoch`, where "
            "epoch is what set_epoch last told it. Tell it at the top of each epoch, before "
            "the loop over batches, with the loop's own epoch number."
        ),
        "hint.shuffle": (
            "DistributedSampler(dataset) shuffles by default, with the same seed (0) on every "
            "rank: each epoch a new order, dealt out in shares that do not overlap, the order "
            "of epoch e drawn from seed + e. Leave shuffle and seed at their defaults (the "
            "script's DataLoader shuffled too), and tell the sampler each epoch."
        ),
        "hint.batch": (
            "GLOBAL_BATCH is the batch of one optimizer step over all ranks together: each "
            "rank's loader gives it GLOBAL_BATCH // world_size examples, with "
            "DistributedSampler(dataset) as its sampler. Move each batch to `device` before "
            "the forward pass. The script's "
            "learning rate and mean loss stay as they are: DDP averages the ranks' "
            "gradients, so a step on W ranks is the step one process takes on the whole "
            "global batch."
        ),
        "hint.scale": (
            "DDP averages the ranks' gradients. With each rank's loss the mean over its "
            "GLOBAL_BATCH // world_size rows, that average is the gradient of the mean over "
            "the whole global batch: one process's step, with the script's learning rate. A "
            'summed loss (reduction="sum") makes every step GLOBAL_BATCH // world_size '
            "times as large; a learning rate multiplied by the world size, world_size times. "
            "Scaling the learning rate with the world size is a rule of thumb for a global "
            "batch that grows with the ranks; here the global batch is fixed."
        ),
        "hint.save": (
            "One process of the whole job writes the checkpoint: the one whose global rank, "
            "dist.get_rank(), is 0 (LOCAL_RANK is 0 once on every machine). Save the plain "
            "model's weights: the keys of DDP's own state_dict() start with `module.`. Put "
            "no collective (a barrier, an all_reduce) inside that `if`: the other ranks "
            "never join it, and the job hangs."
        ),
        "hint.load": (
            "A rank that loads the checkpoint rank 0 writes must wait until it is written: "
            "after rank 0's `if`, every rank calls dist.barrier(), then loads it, with "
            "map_location set to its own device."
        ),
        "hint.code": (
            "device = setup(); model = wrap(make_model(), device); dataset = "
            "make_dataset(); loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // "
            "dist.get_world_size(), sampler=DistributedSampler(dataset)); in each epoch first "
            "loader.sampler.set_epoch(epoch), then the script's loop with x, y moved to "
            "device; after the epoch, if dist.get_rank() == 0: "
            "torch.save(model.module.state_dict(), path); after the last epoch cleanup(); "
            "return model."
        ),
        "where": "{ranks} ranks on one machine",
        "where_nodes": "{nodes} machines x {per_node} ranks",
        "not_wrapped": (
            "The model was never wrapped: the gradients were not averaged, so each of the "
            "{ranks} ranks trained a copy of its own on its own share of the data."
        ),
        "not_wrapped.title": "the model never wrapped in DDP",
        "no_sampler": (
            "No DistributedSampler: every rank trained on all the data ({rows} examples an "
            "epoch on rank {rank}), so the ranks repeated each other's work."
        ),
        "no_sampler.title": "no DistributedSampler",
        "passes": (
            "train_ddp was asked for {epochs} epochs, and rank {rank} trained on its data "
            "{passes} time(s): one pass over it per epoch, as many as `epochs` says."
        ),
        "passes.title": "not one pass over the data per epoch",
        "epoch_never": (
            "set_epoch was never called: every epoch went through the data in the same "
            "order (epoch 0's)."
        ),
        "epoch_never.title": "set_epoch never called",
        "epoch_elsewhere": (
            "set_epoch was called on a DistributedSampler that the loader does not use, so "
            "the loader's own sampler went through every epoch in epoch 0's order. Tell the "
            "sampler the loader iterates: loader.sampler."
        ),
        "epoch_elsewhere.title": "set_epoch on a sampler the loader does not use",
        "epoch_late": (
            "set_epoch({epoch}) was called after epoch {epoch}'s pass over the data: an "
            "epoch's order is fixed when its pass begins, so epoch {wrong} went through the "
            "data in epoch {used}'s order."
        ),
        "epoch_late.title": "set_epoch called after the epoch's pass",
        "epoch_constant": (
            "set_epoch was called with {value} in every epoch: every epoch went through the "
            "data in the same order. Tell the sampler the loop's own epoch number."
        ),
        "epoch_constant.title": "set_epoch with the same number every epoch",
        "epoch_other": (
            "Epoch {epoch} went through the data in the order of epoch {used} on rank {rank}."
        ),
        "epoch_other.title": "an epoch in another epoch's order",
        "epoch_unshuffled": (
            "Rank {rank} went through its share in the data set's order in every epoch "
            "({first}, ...): nothing shuffled it (a DistributedSampler made with "
            "shuffle=False keeps that order, set_epoch or not)."
        ),
        "epoch_unshuffled.title": "the data never shuffled",
        "epoch_seed": (
            "In epoch {epoch} rank {rank} went through its share in an order DistributedSampler "
            "gives no epoch with its default seed (0): the sampler was given a seed of its "
            "own, or the order came from elsewhere. The check compares the run with one "
            "process on the same global batches, those of the sampler's defaults."
        ),
        "epoch_seed.title": "not the order of the sampler's default seed",
        "batch_global": (
            "Each rank took batches of {got}, the whole global batch: on {world} ranks every "
            "step averaged {total} examples, not GLOBAL_BATCH = {batch}."
        ),
        "batch_global.title": "the whole global batch on every rank",
        "batch_other": (
            "Rank {rank}'s batches held {got} examples; a step of GLOBAL_BATCH = {batch} "
            "examples on {world} ranks gives each rank {want}."
        ),
        "batch_other.title": "batches of another size than GLOBAL_BATCH // world_size",
        "no_model": "train_ddp returned {got}; return the trained model.",
        "no_model.title": "did not return the model",
        "ckpt_every_machine": (
            "A checkpoint was written on every machine: ranks {ranks} wrote one each, the "
            "rank with LOCAL_RANK 0 on each of the {nodes} machines. One writer for the "
            "whole job is enough."
        ),
        "ckpt_every_machine.title": "LOCAL_RANK 0 used where RANK 0 belongs",
        "ckpt_every_rank": (
            "A checkpoint was written on every rank ({world} writers of the same file): one "
            "writer is enough, and several writing one file at once can corrupt it."
        ),
        "ckpt_every_rank.title": "every rank wrote the checkpoint",
        "ckpt_several": "Ranks {ranks} each wrote a checkpoint; one writer is enough.",
        "ckpt_several.title": "several ranks wrote the checkpoint",
        "ckpt_not_zero": "Only rank {rank} wrote the checkpoint; by convention rank 0 saves.",
        "ckpt_not_zero.title": "a rank other than 0 saved",
        "ckpt_none": "No checkpoint was written: no rank saved a file at `path`.",
        "ckpt_none.title": "no checkpoint written",
        "ckpt_unreadable": (
            "The checkpoint at `path` is not a state_dict: torch.load gave {what}."
        ),
        "ckpt_unreadable.title": "the checkpoint is not a state_dict",
        "ckpt_load_error": "an error ({name})",
        "ckpt_a": "a {name}",
        "ckpt_prefix": (
            "The checkpoint's keys start with `module.` ({key!r}): that is the DDP wrapper's "
            "state_dict, which the plain model does not load."
        ),
        "ckpt_prefix.title": "DDP's state_dict saved (keys start with `module.`)",
        "ckpt_strict": "The plain model could not load the checkpoint: {error}",
        "ckpt_strict.title": "the plain model cannot load the checkpoint",
        "ckpt_stale": (
            "The checkpoint does not hold the final weights (max |dW| = {diff:.1e} from the "
            "model train_ddp returned): save after every epoch, the last one included."
        ),
        "ckpt_stale.title": "the checkpoint does not hold the final weights",
        "ckpt_epochs": (
            "Rank 0 saved the checkpoint after {saved} of the {epochs} epochs: none was "
            "written after epoch(s) {missing}. The script saves after every epoch, so that a "
            "job stopped midway loses one epoch's work at most."
        ),
        "ckpt_epochs.title": "not a checkpoint after every epoch",
        "ckpt_no_barrier": (
            "Rank {rank} loaded the checkpoint while rank 0 could still be writing it: no "
            "collective (a barrier) came between rank 0's torch.save and rank {rank}'s "
            "torch.load, so the load may find no file yet, half of it, or the previous "
            "epoch's (here the check let it wait for the file; on a real run it depends on "
            "timing)."
        ),
        "ckpt_no_barrier.title": "the checkpoint loaded without waiting for rank 0's save",
        "group_left": (
            "The process group was left initialised: dist.is_initialized() was still True "
            "on rank {rank} when train_ddp returned."
        ),
        "group_left.title": "the process group left initialised",
        "ranks_differ": (
            "The ranks ended with different weights (rank {rank} differs from rank 0 by up "
            "to {diff:.2e})."
        ),
        "ranks_differ.title": "the ranks ended with different weights",
        "lr_scaled": (
            "On {where}, the first step moved the weights {world} times as far as one "
            "process's first step on the same global batch, {world} being the world size: "
            "the learning rate was multiplied by it. The global batch is GLOBAL_BATCH = "
            "{batch} examples on any number of ranks, and DDP averages the ranks' gradients, "
            "so the script's LR is already the right one."
        ),
        "lr_scaled.title": "the learning rate scaled by the world size",
        "loss_summed": (
            "On {where}, the first step moved the weights {rows} times as far as one "
            "process's first step on the same global batch, {rows} being the rows of each "
            "rank's part: the loss was summed over the rows "
            '(reduction="sum"), not averaged. '
            "DDP averages the ranks' gradients, and that average is the gradient of the "
            "global batch's mean loss only when each rank's loss is the mean of its rows."
        ),
        "loss_summed.title": "a summed loss instead of the mean",
        "weights_nan": (
            "On {where}, rank {rank} ended with weights that are not finite (nan or inf): the "
            "training diverged. Steps much larger than one process's do that."
        ),
        "weights_nan.title": "the weights diverged to nan or inf",
        "weights_differ": (
            "On {where} the final weights differ from one process's trained on the same "
            "global batches by up to {diff:.2e} (allowed: {tol:g})."
        ),
        "weights_differ.title": "not the weights one process trains on the same batches",
        "ok": (
            "On {worlds} ranks and on 2 machines x 2 ranks, for {epochs} epochs, every rank "
            "ended with the weights of one process trained on the same global batches (max "
            "|dW| = {diff:.1e}; allowed {tol:g}); each epoch in the order DistributedSampler "
            "gives it; a checkpoint after every epoch, written by rank 0 alone, without "
            "`module.`; no process group left."
        ),
    },
)


def make_dataset():
    import torch
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(ITEMS, 4, generator=gen)
    return TensorDataset(x, torch.sin(x.sum(1, keepdim=True)))


def make_model():
    import torch

    torch.manual_seed(0)  # the same initial weights in every run
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_loader(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    per_rank = global_batch // dist.get_world_size()  # the ranks of every machine
    return DataLoader(dataset, batch_size=per_rank, sampler=DistributedSampler(dataset))


def train_ddp(epochs, path):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from ..lesson02.cleanup import cleanup
    from ..lesson02.setup import setup
    from ..lesson03.wrap import wrap

    device = setup()
    model = wrap(make_model(), device)
    dataset = make_dataset()
    per_rank = GLOBAL_BATCH // dist.get_world_size()  # the ranks of every machine
    loader = DataLoader(dataset, batch_size=per_rank, sampler=DistributedSampler(dataset))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:  # one writer for the whole job
            torch.save(model.module.state_dict(), path)  # the plain model's keys
    cleanup()
    return model


# ---------------------------------------------------------------- what the ranks run


def _capstone_harness(train_ddp, epochs, folder):
    """One rank: train_ddp with spies, every rank given the same checkpoint path."""
    import torch
    import torch.distributed as dist

    record = spies.new_record()
    spies.install(record, folder)
    try:
        model = train_ddp(epochs, os.path.join(folder, CHECKPOINT))
        left = dist.is_initialized()
        trained = getattr(model, "module", model)
        returned = None if isinstance(trained, torch.nn.Module) else repr(model)[:40]
        weights = spies.weights(trained) if returned is None else None
        del model, trained
        return {**record, "left_initialised": left, "weights": weights, "returned": returned}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()  # what the answer left, so the run ends cleanly


# ---------------------------------------------------------------- the parent's side


def _per_rank(world: int) -> int:
    return GLOBAL_BATCH // world


def global_batches(epoch: int, seed: int = 0, world: int = 2) -> list[list[int]]:
    """The items of each global batch of `epoch` on `world` ranks.

    DistributedSampler draws the permutation of seed + epoch; rank r takes its positions
    r, r + W, ...; its k-th batch of b = GLOBAL_BATCH // W is positions W * (k * b + j) + r:
    together, the ranks' k-th batches are the k-th block of W * b positions (the last one
    shorter where the shares do not divide by b).
    """
    import torch

    order = torch.randperm(ITEMS, generator=torch.Generator().manual_seed(seed + epoch))
    block = world * _per_rank(world)
    return [order[k : k + block].tolist() for k in range(0, ITEMS, block)]


def one_process_run(epochs: int, world: int = 2) -> tuple[dict, list[float]]:
    """The script's training in one process, on DDP's global batches on `world` ranks: the
    weights, and each epoch's mean batch loss (each batch's before its step), what the
    script logs."""
    import torch

    x, y = make_dataset().tensors
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    means = []
    for epoch in range(epochs):
        losses = []
        for batch in global_batches(epoch, world=world):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        means.append(sum(losses) / len(losses))
    return spies.weights(model), means


def one_process_weights(epochs: int, world: int = 2) -> dict:
    """The script's training in one process, on DDP's global batches."""
    return one_process_run(epochs, world)[0]


def one_process_losses(epochs: int, world: int = 2) -> list[float]:
    """Each epoch's mean batch loss of that training: what the script's rank 0 logs."""
    return one_process_run(epochs, world)[1]


def one_process_first_step(world: int = 2) -> dict:
    """What one process's first step changes in each weight: the answer's first is compared."""
    import torch

    x, y = make_dataset().tensors
    model = make_model()
    before = spies.weights(model)
    batch = global_batches(0, world=world)[0]
    torch.nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return {k: v - before[k] for k, v in spies.weights(model).items()}


def _finite(weights: dict) -> bool:
    return all(bool(v.isfinite().all()) for v in weights.values() if v.is_floating_point())


def _step_ratio(early: list[dict], first_step: dict) -> float | None:
    """How many times one process's first step the answer's first step was, when it was one
    (every weight moved by the same multiple); else None."""
    import torch

    if len(early) < 2 or not early[0].keys() == early[1].keys() == first_step.keys():
        return None
    step = torch.cat([(early[1][k] - early[0][k]).double().flatten() for k in first_step])
    want = torch.cat([first_step[k].double().flatten() for k in first_step])
    ratio = float(step @ want / (want @ want))
    off = (step - ratio * want).abs().max().item()
    return ratio if ratio > 0 and off <= 1e-3 * ratio * want.abs().max().item() else None


def _name_the_step(r: dict, first_step: dict, where, world: int) -> None:
    """Raise the mistake a first step of W or B/W times one process's shows, if it is one.

    On W ranks with B/W rows each, DDP's average of summed losses is B/W times the mean's
    gradient; a learning rate times W, W times. At W = 4, B = 16 the two are alike: the
    2-rank layout, which every draw runs first, tells them apart.
    """
    ratio = _step_ratio(r["early"], first_step)
    rows = _per_rank(world)
    named = [
        key
        for key, factor in (("lr_scaled", world), ("loss_summed", rows))
        if ratio is not None and abs(ratio - factor) <= 1e-3 * factor
    ]
    if len(named) == 1:
        raise Wrong(named[0], where=where, world=world, rows=rows, batch=GLOBAL_BATCH)


def _run_scenario(fn, ranks: int, nodes: int, epochs: int) -> tuple[list[dict], object]:
    """Each rank's record, and what the checkpoint file holds (None: no file)."""
    import tempfile

    import torch

    folder = tempfile.mkdtemp(prefix="ddp-capstone-check-")
    try:
        results = run_on_ranks(_capstone_harness, fn, epochs, folder, nprocs=ranks, nnodes=nodes)
        path, saved = os.path.join(folder, CHECKPOINT), None
        if os.path.lexists(path):
            try:  # a file the answer's ranks wrote: read as files.py reads one (no link)
                data = io.BytesIO(read_capped(path, CHECKPOINT_LIMIT))
                saved = torch.load(data, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - what the file holds is the finding
                saved = Phrase("ckpt_load_error", name=type(exc).__name__)
        return [_training_view(r) for r in results], saved
    finally:
        remove_tree(folder)  # whatever the ranks made there


def _training_view(r: dict) -> dict:
    """A rank's record with its training passes apart: the passes a training batch was
    taken in (an evaluation's pass over the same sampler is none), each batch's rows by
    pass, and every count of passes begun (at set_epoch, at a save) counted in them."""
    trained = sorted({taken for taken, _ in r["batches"] if taken >= 0})

    def begun(count: int) -> int:
        return sum(1 for taken in trained if taken < count)

    return {
        **r,
        "training": [r["passes"][i] for i in trained],
        "rows": [[rows for taken, rows in r["batches"] if taken == i] for i in trained],
        "set_epoch": [(v, begun(n), told) for v, n, told in r["set_epoch"]],
        "saves": [{**s, "passes": begun(s["passes"])} for s in r["saves"]],
        "iterated": {told for i, told in enumerate(r["iterated"]) if i in trained},
    }


def expected_order(rank: int, world: int, epoch: int) -> list[int]:
    """The share DistributedSampler, with its defaults, gives `rank` in `epoch`."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(ITEMS), num_replicas=world, rank=rank)
    sampler.set_epoch(epoch)
    return list(sampler)


def _judge_training(results: list[dict], world: int, epochs: int) -> None:
    """Wrapped, sharded, one pass an epoch, each epoch's order, the right batch: the most
    basic mistakes first."""
    if not all(r["wrapped"] for r in results):
        raise Wrong("not_wrapped", ranks=world)
    for rank, r in enumerate(results):
        if not r["training"]:
            rows = sum(rows or 0 for _, rows in r["batches"]) // epochs
            raise Wrong("no_sampler", rows=rows, rank=rank)
        if len(r["training"]) != epochs:
            raise Wrong("passes", rank=rank, passes=len(r["training"]), epochs=epochs)
    for rank, r in enumerate(results):
        _judge_orders(r, rank, world, epochs)
    for rank, r in enumerate(results):
        _judge_batches(r, rank, world)


def _judge_orders(r: dict, rank: int, world: int, epochs: int) -> None:
    """Each epoch in the order DistributedSampler's defaults give it, however the answer
    got there (set_epoch, or a sampler made each epoch with seed=epoch); else what the
    orders and the set_epoch calls show."""
    shown = range(epochs + 3)  # the epochs an order is looked up among
    used = [
        next((k for k in shown if order == expected_order(rank, world, k)), None)
        for order in r["training"]
    ]
    if used == list(range(epochs)):
        return
    wrong = next(e for e, u in enumerate(used) if u != e)
    if r["training"][wrong] == list(range(rank, ITEMS, world)):
        first = Listed(r["training"][wrong][:4])
        raise Wrong("epoch_unshuffled", rank=rank, first=first)
    if used[wrong] is None:
        raise Wrong("epoch_seed", rank=rank, epoch=wrong)
    _name_the_epochs(r, rank, used, wrong)


def _name_the_epochs(r: dict, rank: int, used: list, wrong: int) -> None:
    """Epoch `wrong` went through another epoch's order: what the set_epoch calls show."""
    told = [(value, begun) for value, begun, sampler in r["set_epoch"] if sampler in r["iterated"]]
    alike = len(set(used)) == 1
    if alike and used[0] == 0 and r["set_epoch"] and not told:
        raise Wrong("epoch_elsewhere")
    if alike and used[0] == 0 and not told:
        raise Wrong("epoch_never")
    if alike and len(told) > 1 and len({value for value, _ in told}) == 1:
        raise Wrong("epoch_constant", value=told[0][0])
    late = [value for value, begun in told if isinstance(value, int) and begun > value]
    if late:
        raise Wrong("epoch_late", epoch=late[0], wrong=wrong, used=used[wrong])
    raise Wrong("epoch_other", epoch=wrong, used=used[wrong], rank=rank)


def _judge_batches(r: dict, rank: int, world: int) -> None:
    """Each pass in batches of GLOBAL_BATCH // world rows (the last one the share's rest)."""
    want = _per_rank(world)
    share = len(r["training"][0])
    expected = [want] * (share // want) + ([share % want] if share % want else [])
    if all(rows and rows[0] == GLOBAL_BATCH for rows in r["rows"]):
        total = GLOBAL_BATCH * world
        raise Wrong("batch_global", got=GLOBAL_BATCH, world=world, total=total, batch=GLOBAL_BATCH)
    for rows in r["rows"]:
        odd = next((got for got, ok in zip(rows, expected, strict=False) if got != ok), None)
        if odd is not None:
            raise Wrong(
                "batch_other", rank=rank, got=odd, batch=GLOBAL_BATCH, world=world, want=want
            )


def _writers(results: list[dict]) -> list[int]:
    return [rank for rank, r in enumerate(results) if r["saves"]]


def _judge_checkpoint(wrote: list[int], saved, world: int, nodes: int) -> None:
    """Who wrote the checkpoint (`wrote`), and what it holds (`saved`: None for no file)."""
    per_node = world // nodes
    if not wrote and saved is None:
        raise Wrong("ckpt_none")
    if len(wrote) > 1:
        ranks = and_list(wrote)
        if nodes > 1 and wrote == list(range(0, world, per_node)):
            raise Wrong("ckpt_every_machine", ranks=ranks, nodes=nodes)
        if len(wrote) == world:
            raise Wrong("ckpt_every_rank", world=world)
        raise Wrong("ckpt_several", ranks=ranks)
    if wrote and wrote != [0]:
        raise Wrong("ckpt_not_zero", rank=wrote[0])
    if not isinstance(saved, dict) or not saved:
        what = saved if isinstance(saved, Phrase) else Phrase("ckpt_a", name=type(saved).__name__)
        raise Wrong("ckpt_unreadable", what=what)
    first = next(iter(saved))
    if str(first).startswith("module."):
        raise Wrong("ckpt_prefix", key=first)
    try:
        make_model().load_state_dict(saved, strict=True)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise Wrong("ckpt_strict", error=str(exc).splitlines()[0]) from None


def _judge_reload(results: list[dict]) -> None:
    """A rank's load of the checkpoint with no collective between it and a save of rank 0:
    the same sequence number on both (capstone_spies.py)."""
    saves = {s["seq"] for s in results[0]["saves"]} - {None}
    for rank, r in enumerate(results[1:], 1):
        if any(load["seq"] in saves for load in r["loads"]):
            raise Wrong("ckpt_no_barrier", rank=rank)


def _judge_saves(results: list[dict], epochs: int) -> None:
    """A save by rank 0 after each epoch's pass began, before the next one's: every epoch."""
    saves = results[0]["saves"]
    if not saves:
        return  # a file the spies did not see written: judged by what it holds alone
    after = {s["passes"] - 1 for s in saves}
    missing = [epoch for epoch in range(epochs) if epoch not in after]
    if missing:
        saved = epochs - len(missing)
        raise Wrong("ckpt_epochs", saved=saved, epochs=epochs, missing=and_list(missing))


def _judge_weights(results: list[dict], saved, where, world: int, reference: dict) -> float:
    """Finite, saved, alike on every rank, one process's: the final weights, judged.

    Each comparison is written `not diff <= TOLERANCE`, so that a nan fails it.
    """
    final = results[0]["weights"]
    for rank, r in enumerate(results):
        if not _finite(r["weights"]):
            _name_the_step(results[0], reference["first_step"], where, world)
            raise Wrong("weights_nan", where=where, rank=rank)
    stale = weights_apart(saved, final)
    if not stale <= TOLERANCE:
        raise Wrong("ckpt_stale", diff=stale)
    _judge_saves(results, reference["epochs"])
    for rank, r in enumerate(results[1:], 1):
        diff = weights_apart(r["weights"], final)
        if not diff <= TOLERANCE:
            raise Wrong("ranks_differ", rank=rank, diff=diff)
    diff = weights_apart(final, reference["weights"])
    if not diff <= TOLERANCE:
        _name_the_step(results[0], reference["first_step"], where, world)
        raise Wrong("weights_differ", where=where, diff=diff, tol=TOLERANCE)
    return diff


def _judge(fn, ranks: int, nodes: int, epochs: int) -> float:
    results, saved = _run_scenario(fn, ranks, nodes, epochs)
    _judge_training(results, ranks, epochs)
    for r in results:
        if r["returned"] is not None:
            raise Wrong("no_model", got=r["returned"])
    _judge_checkpoint(_writers(results), saved, ranks, nodes)
    _judge_reload(results)
    for rank, r in enumerate(results):
        if r["left_initialised"]:
            raise Wrong("group_left", rank=rank)
    where = (
        Phrase("where", ranks=ranks)
        if nodes == 1
        else Phrase("where_nodes", nodes=nodes, per_node=ranks // nodes)
    )
    reference = {
        "weights": one_process_weights(epochs, ranks),
        "first_step": one_process_first_step(ranks),
        "epochs": epochs,
    }
    return _judge_weights(results, saved, where, ranks, reference)


def _draws(seed: int) -> list[tuple[int, int, int]]:
    """(ranks, machines, epochs) of each run for this seed: check() every layout, each
    grader's draw the 2-rank one (which tells a scaled learning rate from a summed loss)
    and one other, with other epochs."""
    epochs = SPACE.drawn["counts"]["epochs"]
    layouts = LAYOUTS if seed == CHECK_SEED else (LAYOUTS[0], LAYOUTS[1 + seed % 2])
    return [
        (ranks, machines, epochs[(i + seed) % len(epochs)])
        for i, (ranks, machines) in enumerate(layouts)
    ]


def _check_train_ddp(fn, seed: int = CHECK_SEED) -> Phrase:
    diffs, draws = [], _draws(seed)
    for ranks, machines, epochs in draws:
        with trying(ranks=ranks, machines=machines, epochs=epochs):
            diffs.append(_judge(fn, ranks, machines, epochs))
    worlds = sorted({ranks for ranks, machines, _ in draws if machines == 1})
    epochs = sorted({epochs for *_, epochs in draws})
    return Phrase(
        "ok", worlds=and_list(worlds), epochs=and_list(epochs), diff=max(diffs), tol=TOLERANCE
    )


# 16 minutes of writing (17.5 with its check; the lesson says "about 18 minutes", a test
# holds it to this count). The pace rule's own rates give 15: 8 of the answer's 18 lines
# are the shown script's, copied (about 15 s a line, 2 minutes); the other 10 (setup, wrap,
# the data set, the per-rank batch, the loader with its DistributedSampler, set_epoch,
# .to(device), the rank-0 test and save of model.module, cleanup) are written, 1.3 minutes
# a line. The plain rule (1.3 minutes for every line) would count the copied lines as
# written. Outside reads put it higher: 12-18 minutes with a loader function already
# written (exercise 4.1 then; its lines, 2.6 minutes, moved here with that exercise: about
# 15-21 now), and an expert took about 20 minutes for it as it is now. 15 + 1.5 was 18 %
# under the expert's 20; 16 + 1.5 is within 15 % of both (-12.5 %, and the first read's
# midpoint, 17.6). Two answers are pasted (counted apart), two written out.
exercise = Exercise(
    "4.1",
    "train_ddp",
    _check_train_ddp,
    train_ddp,
    texts=MESSAGES,
    hints=("recipe", "epoch", "shuffle", "batch", "scale", "save", "load", "code"),
    mistakes={
        "not_wrapped": Mistake(hint="recipe"),
        "no_sampler": Mistake(hint="recipe"),
        "passes": Mistake(hint="recipe"),
        "epoch_elsewhere": Mistake(hint="epoch"),
        "epoch_never": Mistake(hint="epoch"),
        "epoch_constant": Mistake(hint="epoch"),
        "epoch_late": Mistake(hint="epoch"),
        "epoch_other": Mistake(hint="epoch"),
        "epoch_unshuffled": Mistake(hint="shuffle"),
        "epoch_seed": Mistake(hint="shuffle"),
        "batch_global": Mistake(hint="batch"),
        "batch_other": Mistake(hint="batch"),
        "no_model": Mistake(hint="recipe"),
        "ckpt_none": Mistake(hint="save"),
        "ckpt_every_machine": Mistake(hint="save"),
        "ckpt_every_rank": Mistake(hint="save"),
        "ckpt_several": Mistake(hint="save"),
        "ckpt_not_zero": Mistake(hint="save"),
        "ckpt_unreadable": Mistake(hint="save"),
        "ckpt_prefix": Mistake(hint="save"),
        "ckpt_strict": Mistake(hint="save"),
        "group_left": Mistake(hint="recipe"),
        "ckpt_stale": Mistake(hint="save"),
        "ckpt_epochs": Mistake(hint="save"),
        "ckpt_no_barrier": Mistake(hint="load"),
        "ranks_differ": Mistake(hint="recipe"),
        "weights_differ": Mistake(hint="batch"),
        "lr_scaled": Mistake(hint="scale"),
        "loss_summed": Mistake(hint="scale"),
        "weights_nan": Mistake(hint="scale"),
        # The usual hang: a collective inside `if rank == 0:`.
        **rank_mistakes(hint="save"),
    },
    minutes=16,
    hidden=on_hidden_seeds(_check_train_ddp),
    space=SPACE,
)
