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
        "A DistributedSampler shuffles with a seed it takes from its epoch number. Unless "
        "you tell it the epoch, every epoch gets the same order.",
        "Call sampler.set_epoch(epoch) at the start of every epoch, before you iterate "
        "over the DataLoader.",
        "Pass the loop's epoch number (0, 1, 2, ...), not a constant.",
    ],
    "epoch_same": (
        "Every epoch went through the data in the same order on rank {rank}: "
        "set_epoch was called with {calls}."
    ),
    "epoch_calls": "set_epoch was called with {calls}; for {epochs} epochs it should be {want}.",
    "epoch_passes": "Rank {rank} went through its data {passes} times for {epochs} epochs.",
    "epoch_cover": "In epoch {epoch} the ranks together did not cover the data set.",
    "epoch_ok": "set_epoch(0..{last}) on every rank; orders change per epoch; data covered.",
    "save_hints": [
        "Only rank 0 writes: the copies are identical, and several processes writing one "
        "file at the same time can corrupt it.",
        "Save model.module.state_dict(): DDP's own state_dict() prefixes every key with "
        "`module.`, and a plain model will not load it.",
        "After rank 0 saves, call dist.barrier() on every rank (outside the `if`), so no "
        "rank reads the file before it is complete. A barrier inside `if rank == 0:` hangs.",
        "Save a dict: {'model': ..., 'optimizer': optimizer.state_dict(), 'epoch': epoch}.",
    ],
    "save_count": "torch.save was called {count} times (by ranks {ranks}); once is enough.",
    "save_not_zero": "The file was written by rank {ranks}; by convention rank 0 saves.",
    "save_none": "Nothing was saved (torch.save was never called).",
    "save_keys": "Save a dict with 'model', 'optimizer' and 'epoch'; the keys were {keys}.",
    "save_prefix": (
        "The saved model keys start with `module.` ({key!r}): save model.module.state_dict()."
    ),
    "save_strict": "A plain model could not load the saved weights: {error}",
    "save_barrier": (
        "Rank 1 went on before rank 0 had finished writing the file: every rank must wait "
        "at dist.barrier() after the save."
    ),
    "save_content": "The saved {what} does not match the model's own.",
    "save_ok": "Saved once, by rank 0, no `module.`, with optimizer and epoch; then a barrier.",
    "load_hints": [
        "torch.load(path, map_location=device): without map_location, tensors go back to "
        "the device they were saved from (cuda:0 for every rank).",
        "Load the weights into model.module (the plain model inside DDP), with "
        "strict=True, and the optimizer with optimizer.load_state_dict(...).",
        "Return the epoch to start from: the saved epoch + 1.",
    ],
    "load_map": "torch.load was called without map_location on rank {rank}.",
    "load_weights": "After loading, the weights on rank {rank} differ from the checkpoint's.",
    "load_optimizer": "After loading, the optimizer state on rank {rank} is not the saved one.",
    "load_epoch": "It returned {got!r}; the checkpoint is of epoch {saved}, so resume at {want}.",
    "load_ok": "Loaded with map_location on every rank; weights, optimizer and epoch restored.",
    "quiz_hints": [
        "Reread the cells that showed each of these: the equal weights after DDP(...), the "
        "hook that all-reduces during backward(), the set_epoch picture, the rank-0 save.",
    ],
    "quiz_shape": "Return a dict with the answers to questions 1-{n}, each 'a', 'b' or 'c'.",
    "quiz_wrong": "Question {q} is not right yet: {why}",
    "quiz_ok": "All {n} answers right.",
    "quiz_why": {
        1: "what happens to rank 1's weights when DDP(model) is built?",
        2: "when do the gradients get averaged: in backward(), step() or zero_grad()?",
        3: "what does set_epoch change: the seed of the shuffle.",
        4: "the copies are identical after every step, so one writer is enough.",
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

    class SpySampler(DistributedSampler):
        """A DistributedSampler that remembers set_epoch calls and each pass's order."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.calls, self.orders = [], []

        def set_epoch(self, epoch):
            self.calls.append(epoch)
            super().set_epoch(epoch)

        def __iter__(self):
            order = list(super().__iter__())
            self.orders.append(order)
            return iter(order)

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(ITEMS, 8), torch.randn(ITEMS, 1))
        sampler = SpySampler(data, shuffle=True, seed=0)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        model = DDP(torch.nn.Linear(8, 1))
        train_epochs(model, loader, sampler, torch.optim.SGD(model.parameters(), lr=0.01), EPOCHS)
        return {"calls": sampler.calls, "orders": sampler.orders}
    finally:
        dist.destroy_process_group()


def _check_train_epochs(fn) -> str:
    results = run_on_ranks(_train_epochs_harness, fn, nprocs=2, hang_hint=0)
    want = list(range(EPOCHS))
    for rank, r in enumerate(results):
        if len(r["orders"]) != EPOCHS:
            raise Wrong(
                MESSAGES["epoch_passes"].format(rank=rank, passes=len(r["orders"]), epochs=EPOCHS),
                hint=1,
            )
        if len({tuple(o) for o in r["orders"]}) == 1:
            raise Wrong(
                MESSAGES["epoch_same"].format(rank=rank, calls=r["calls"]),
                hint=0 if not r["calls"] else 2,
            )
        if r["calls"] != want:
            raise Wrong(
                MESSAGES["epoch_calls"].format(calls=r["calls"], epochs=EPOCHS, want=want), hint=2
            )
    for epoch in range(EPOCHS):
        seen = {i for r in results for i in r["orders"][epoch]}
        if seen != set(range(ITEMS)):
            raise Wrong(MESSAGES["epoch_cover"].format(epoch=epoch), hint=1)
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


def _save_harness(save_checkpoint, folder):
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        model, opt = _trained_ddp()
        path = os.path.join(folder, "ckpt.pt")
        real_save, saves = torch.save, []

        def spy_save(obj, f, *args, **kwargs):
            saves.append(rank)
            time.sleep(0.5)  # a slow disk: a rank that does not wait will notice
            return real_save(obj, f, *args, **kwargs)

        torch.save = spy_save
        try:
            save_checkpoint(model, opt, 7, path)
        finally:
            torch.save = real_save
        info = {"saves": saves, "exists_after": os.path.exists(path)}
        dist.barrier()
        if rank == 0 and os.path.exists(path):
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
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


def _with_folder(run):
    folder = tempfile.mkdtemp(prefix="ddp-ckpt-check-")
    try:
        return run(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_save(fn) -> str:
    results = _with_folder(lambda d: run_on_ranks(_save_harness, fn, d, nprocs=2, hang_hint=2))
    savers = [r for res in results for r in res["saves"]]
    if not savers:
        raise Wrong(MESSAGES["save_none"], hint=0)
    if len(savers) > 1:
        raise Wrong(MESSAGES["save_count"].format(count=len(savers), ranks=savers), hint=0)
    if savers != [0]:
        raise Wrong(MESSAGES["save_not_zero"].format(ranks=savers[0]), hint=0)
    if not results[1]["exists_after"]:
        raise Wrong(MESSAGES["save_barrier"], hint=2)
    info = results[0]
    if not isinstance(info.get("keys"), list) or not {"model", "optimizer", "epoch"} <= set(
        info["keys"]
    ):
        raise Wrong(MESSAGES["save_keys"].format(keys=info.get("keys")), hint=3)
    if str(info["first_key"]).startswith("module."):
        raise Wrong(MESSAGES["save_prefix"].format(key=info["first_key"]), hint=1)
    if info["strict_error"]:
        raise Wrong(MESSAGES["save_strict"].format(error=info["strict_error"]), hint=1)
    if not info["same_model"] or not info["same_opt"] or info["epoch"] != 7:
        raise Wrong(MESSAGES["save_content"].format(what="checkpoint"), hint=3)
    return MESSAGES["save_ok"]


def _load_harness(load_checkpoint, folder):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        model, opt = _trained_ddp()
        path = os.path.join(folder, "ckpt.pt")
        if rank == 0:
            save_checkpoint(model, opt, 4, path)  # the reference save, with its barrier
        else:
            dist.barrier()
        saved = {k: v.clone() for k, v in model.module.state_dict().items()}
        momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
        # A fresh model and optimizer, as after a restart.
        fresh = DDP(_make_net(seed=123))
        fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
        real_load, calls = torch.load, []

        def spy_load(f, *args, **kwargs):
            calls.append(kwargs.get("map_location", args[0] if args else None))
            return real_load(f, *args, **kwargs)

        torch.load = spy_load
        try:
            resume = load_checkpoint(fresh, fresh_opt, path)
        finally:
            torch.load = real_load
        same_weights = all(torch.equal(saved[k], v) for k, v in fresh.module.state_dict().items())
        same_opt = all(
            p in fresh_opt.state and torch.equal(fresh_opt.state[p]["momentum_buffer"], m)
            for p, m in zip(fresh.parameters(), momentum, strict=True)
        )
        return {
            "map": [c is not None for c in calls],
            "weights": same_weights,
            "opt": same_opt,
            "resume": resume,
        }
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
        if not r["map"] or not all(r["map"]):
            raise Wrong(MESSAGES["load_map"].format(rank=rank), hint=0)
        if not r["weights"]:
            raise Wrong(MESSAGES["load_weights"].format(rank=rank), hint=1)
        if not r["opt"]:
            raise Wrong(MESSAGES["load_optimizer"].format(rank=rank), hint=1)
        if _as_int(r["resume"]) != 5:
            raise Wrong(MESSAGES["load_epoch"].format(got=r["resume"], saved=4, want=5), hint=2)
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
