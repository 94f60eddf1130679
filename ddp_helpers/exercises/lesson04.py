"""Exercises of lesson 04, sampler and checkpoint (`from ddp_helpers.exercises import lesson04`)."""

from __future__ import annotations

import os
import shutil
import tempfile

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "eval_hints": [
        "Every rank must count its own share, and then the ranks must add up their counts: "
        "dist.all_reduce a tensor [correct, total] so that every rank holds the totals.",
        "DistributedSampler pads the shares by repeating items when the data set does not "
        "divide by the world size: 513 items on 2 ranks become 514, and one is counted "
        "twice. For evaluation, give each rank its items without padding: rank r takes "
        "items r, r + W, r + 2W, ... up to the last one.",
        "Switch to model.eval() before the loop (dropout off, BatchNorm's running "
        "statistics used), run it under torch.no_grad(), and put back the mode the model "
        "was in (model.train(was_training)) afterwards.",
        "mine = Subset(dataset, range(rank, len(dataset), world_size)); count correct and "
        "total over DataLoader(mine, batch_size) in a tensor on the model's device, in eval "
        "mode under no_grad; model.train(was_training); dist.all_reduce(counts); return the "
        "two ints.",
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
        "It counted all {n} examples, but {got} correct where one process counts {want}."
    ),
    "eval_ok": (
        "{want} of {n} correct, exactly what one process counts: every example once, in eval "
        "mode, on {ranks} ranks; training mode restored."
    ),
    "epoch_hints": [
        "A DistributedSampler shuffles with the seed `seed + epoch`, where epoch is what "
        "set_epoch last told it. Unless you tell it, every epoch gets the same order.",
        "The epoch's order is fixed when the DataLoader starts iterating: call "
        "sampler.set_epoch(epoch) at the start of the epoch, before the loop over batches, "
        "with the loop's own epoch number (the same on every rank).",
        "for epoch in range(epochs): sampler.set_epoch(epoch), then for x, y in loader: "
        "zero_grad, mse_loss(model(x), y).backward(), step.",
    ],
    "epoch_passes": "Rank {rank} went through its data {passes} times for {epochs} epochs.",
    "epoch_same": (
        "Every epoch went through the data in the same order on rank {rank}: the sampler "
        "never heard of a new epoch."
    ),
    "epoch_late": (
        "Epoch {epoch} went through the data in epoch {previous}'s order on rank {rank}: "
        "the sampler learnt the epoch only after the epoch's pass."
    ),
    "epoch_other": (
        "Epoch {epoch} went through the data in the order of epoch {used} on rank {rank}: "
        "tell the sampler the loop's own epoch number."
    ),
    "epoch_ranks": (
        "In epoch {epoch} the ranks' shares overlap ({overlap} items on both): every rank "
        "must shuffle with the same epoch number."
    ),
    "epoch_unknown": (
        "Epoch {epoch} on rank {rank} is not in the order DistributedSampler gives for any "
        "epoch: iterate over the loader the check gives you, once per epoch."
    ),
    "epoch_ok": "Epoch e in the order of seed + e, for e = 0..{last}, on every rank.",
    "save_hints": [
        "Only rank 0 writes: the copies are identical, and several processes writing one "
        "file at the same time can corrupt it.",
        "DDP's own state_dict() prefixes every key with `module.`, and a plain model will "
        "not load it: save the state of the model inside the wrapper.",
        "After rank 0 has written, every rank waits at dist.barrier(), outside the `if`, so "
        "that no rank reads the file before it is complete. A barrier inside `if rank == 0:` "
        "hangs.",
        "if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), "
        "'optimizer': optimizer.state_dict(), 'epoch': epoch}, path); then, on every rank, "
        "dist.barrier().",
    ],
    "save_count": (
        "Both ranks wrote a checkpoint (files appeared in the folders of ranks {ranks}); "
        "one writer is enough."
    ),
    "save_not_zero": "Only rank {ranks} wrote a checkpoint; by convention rank 0 saves.",
    "save_none": "Nothing reached the disk: no rank wrote a file.",
    "save_keys": "Save a dict with 'model', 'optimizer' and 'epoch'; the keys were {keys}.",
    "save_prefix": "The saved model keys start with `module.` ({key!r}).",
    "save_strict": "A plain model could not load the saved weights: {error}",
    "save_barrier": (
        "Rank 1 went on before rank 0 had written the file (rank 0 started late on "
        "purpose): a rank that read the checkpoint now would find none."
    ),
    "save_content": "The saved {what} does not match the model's own.",
    "save_ok": (
        "Written once, by rank 0, no `module.`, with optimizer and epoch; no rank went on "
        "before the file was there."
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
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    model.train(was_training)
    dist.all_reduce(counts)  # integer counts: exact
    return int(counts[0]), int(counts[1])


def _spy_model(seed: int = 0):
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


def _evaluate_harness(evaluate, n):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        model = DDP(_spy_model())
        model.train()
        got = evaluate(model, _eval_data(n))
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError):
            got = repr(got)
        return {"got": got, "calls": model.module[0].calls, "training_after": model.training}
    finally:
        dist.destroy_process_group()


def _one_process_count(n: int) -> int:
    import torch

    model = _spy_model().eval()
    x, y = _eval_data(n).tensors
    with torch.no_grad():
        return int((model(x).argmax(1) == y).sum())


def _check_evaluate(fn, cases=((2, 513),)) -> str:
    for ranks, n in cases:
        results = run_on_ranks(_evaluate_harness, fn, n, nprocs=ranks, hang_hint=0)
        for rank, r in enumerate(results):
            if not isinstance(r["got"], tuple) or len(r["got"]) != 2:
                raise Wrong(MESSAGES["eval_shape"].format(got=r["got"], rank=rank), hint=0)
        answers = [r["got"] for r in results]
        calls = [c for r in results for c in r["calls"]]
        in_training = sum(training for training, _ in calls)
        if in_training:
            raise Wrong(
                MESSAGES["eval_train_mode"].format(calls=in_training, all=len(calls)), hint=2
            )
        if not all(r["training_after"] for r in results):
            raise Wrong(MESSAGES["eval_not_restored"], hint=2)
        rows = [sum(k for _, k in r["calls"]) for r in results]
        if all(k >= n for k in rows):
            raise Wrong(MESSAGES["eval_everything"].format(n=n, rows=rows[0]), hint=0)
        if len(set(answers)) > 1:
            raise Wrong(MESSAGES["eval_disagree"].format(got=answers), hint=0)
        correct, total = answers[0]
        padded = -(-n // ranks) * ranks
        if total != n:
            args = dict(total=total, n=n, extra=padded - n, missing=n - total)
            if total == padded:
                raise Wrong(MESSAGES["eval_padding"].format(**args), hint=1)
            if total in {len(range(r, n, ranks)) for r in range(ranks)} | {padded // ranks}:
                raise Wrong(MESSAGES["eval_share"].format(**args), hint=0)
            if total < n:
                raise Wrong(MESSAGES["eval_dropped"].format(**args), hint=1)
            raise Wrong(MESSAGES["eval_padding"].format(**args), hint=1)
        want = _one_process_count(n)
        if correct != want:
            raise Wrong(MESSAGES["eval_correct"].format(n=n, got=correct, want=want), hint=2)
    return MESSAGES["eval_ok"].format(want=want, n=n, ranks=ranks)


def _hidden_evaluate(fn) -> str:
    # Three ranks, where the sampler pads with two repeats: a world size the check never shows.
    return _check_evaluate(fn, ((3, 514),))


def train_epochs(model, loader, sampler, optimizer, epochs):
    import torch

    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


EPOCHS, ITEMS = 3, 24


def _train_epochs_harness(train_epochs):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    class OrderRecorder(DistributedSampler):
        """A DistributedSampler that remembers the order of each pass over it."""

        def __iter__(self):
            order = list(super().__iter__())
            self.orders.append(order)
            return iter(order)

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(ITEMS, 8), torch.randn(ITEMS, 1))
        sampler = OrderRecorder(data, shuffle=True, seed=0)
        sampler.orders = []
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        model = DDP(torch.nn.Linear(8, 1))
        train_epochs(model, loader, sampler, torch.optim.SGD(model.parameters(), lr=0.01), EPOCHS)
        return sampler.orders
    finally:
        dist.destroy_process_group()


def _epoch_order(rank: int, world: int, epoch: int) -> list[int]:
    """What DistributedSampler(seed=0) gives `rank` in `epoch`: its share of seed + epoch."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(ITEMS), num_replicas=world, rank=rank, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def _check_train_epochs(fn) -> str:
    orders = run_on_ranks(_train_epochs_harness, fn, nprocs=2, hang_hint=1)
    world = len(orders)
    for rank, passes in enumerate(orders):
        if len(passes) != EPOCHS:
            raise Wrong(
                MESSAGES["epoch_passes"].format(rank=rank, passes=len(passes), epochs=EPOCHS),
                hint=1,
            )
    # The order each epoch used, by the epoch whose shuffle it is (None: no epoch's).
    known = {tuple(_epoch_order(r, world, e)): (r, e) for r in range(world) for e in range(-1, 8)}
    for epoch in range(EPOCHS):
        used = [known.get(tuple(orders[rank][epoch]), (None, None)) for rank in range(world)]
        if all(u == (rank, epoch) for rank, u in enumerate(used)):
            continue
        for rank, (owner, shuffle) in enumerate(used):
            if owner != rank or shuffle is None:
                raise Wrong(MESSAGES["epoch_unknown"].format(epoch=epoch, rank=rank), hint=1)
        shuffles = {shuffle for _, shuffle in used}
        if len(shuffles) > 1:
            overlap = len(set(orders[0][epoch]) & set(orders[1][epoch]))
            raise Wrong(MESSAGES["epoch_ranks"].format(epoch=epoch, overlap=overlap), hint=1)
        rank, shuffle = 0, shuffles.pop()
        if all(known[tuple(p)][1] == 0 for p in orders[rank]):
            raise Wrong(MESSAGES["epoch_same"].format(rank=rank), hint=0)
        if shuffle == epoch - 1:
            raise Wrong(
                MESSAGES["epoch_late"].format(epoch=epoch, previous=epoch - 1, rank=rank), hint=1
            )
        raise Wrong(MESSAGES["epoch_other"].format(epoch=epoch, used=shuffle, rank=rank), hint=1)
    return MESSAGES["epoch_ok"].format(last=EPOCHS - 1)


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


def _rank_folder(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}")


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
        save_checkpoint(model, opt, 7, os.path.join(_rank_folder(folder, rank), "ckpt.pt"))
        info = {"went_on_at": time.time()}  # when this rank's save_checkpoint returned
        rank0_file = os.path.join(_rank_folder(folder, 0), "ckpt.pt")
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


def _with_folder(run, ranks: int = 2):
    folder = tempfile.mkdtemp(prefix="ddp-ckpt-check-")
    try:
        for rank in range(ranks):
            os.mkdir(_rank_folder(folder, rank))
        return run(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_save(fn) -> str:
    def run(folder):
        results = run_on_ranks(_save_harness, fn, folder, nprocs=2, hang_hint=2)
        wrote = [r for r in range(2) if os.listdir(_rank_folder(folder, r))]
        return results, wrote

    results, wrote = _with_folder(run)
    if not wrote:
        raise Wrong(MESSAGES["save_none"], hint=0)
    if len(wrote) > 1:
        raise Wrong(MESSAGES["save_count"].format(ranks=" and ".join(map(str, wrote))), hint=0)
    if wrote != [0]:
        raise Wrong(MESSAGES["save_not_zero"].format(ranks=wrote[0]), hint=0)
    if results[1]["went_on_at"] < results[0].get("written_at", 0):
        raise Wrong(MESSAGES["save_barrier"], hint=2)
    info = results[0]
    if not isinstance(info.get("keys"), list) or not {"model", "optimizer", "epoch"} <= set(
        info["keys"]
    ):
        raise Wrong(MESSAGES["save_keys"].format(keys=info.get("keys")), hint=0)
    if str(info["first_key"]).startswith("module."):
        raise Wrong(MESSAGES["save_prefix"].format(key=info["first_key"]), hint=1)
    if info["strict_error"]:
        raise Wrong(MESSAGES["save_strict"].format(error=info["strict_error"]), hint=1)
    if not info["same_model"] or not info["same_opt"] or info["epoch"] != 7:
        raise Wrong(MESSAGES["save_content"].format(what="checkpoint"), hint=0)
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
    results = _with_folder(lambda d: run_on_ranks(_load_harness, fn, d, nprocs=2, hang_hint=1))
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


q1 = Exercise(
    "4.1", "evaluate", _check_evaluate, MESSAGES["eval_hints"], evaluate, hidden=_hidden_evaluate
)
q2 = Exercise("4.2", "train_epochs", _check_train_epochs, MESSAGES["epoch_hints"], train_epochs)
q3 = Exercise("4.3", "save_checkpoint", _check_save, MESSAGES["save_hints"], save_checkpoint)
q4 = Exercise("4.4", "load_checkpoint", _check_load, MESSAGES["load_hints"], load_checkpoint)
q5 = Exercise("4.5", "quiz_answers", _check_quiz, MESSAGES["quiz_hints"], quiz_answers)
EXERCISES = [q1, q2, q3, q4, q5]


def progress() -> None:
    """Which exercises of lesson 04 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "04")
