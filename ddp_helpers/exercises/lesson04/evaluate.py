"""4.4 evaluate (Going further): accuracy counted on every rank's share, all_reduced."""

from __future__ import annotations

import copy

from ... import i18n
from ...i18n import messages
from ..devices import made_off_device
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
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying

MESSAGES = messages(
    "exercises.lesson04.evaluate",
    {
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
        "eval_machines": (
            "It counted {total} examples for a data set of {n}: each of the {machines} "
            "machines went through all of it, so every example was counted {machines} "
            "times. The shares were dealt among the ranks of one machine (LOCAL_RANK, "
            "LOCAL_WORLD_SIZE); deal them among all the ranks of the job "
            "(dist.get_rank(), dist.get_world_size())."
        ),
        "eval_machines.title": "shares dealt per machine (LOCAL_RANK, LOCAL_WORLD_SIZE)",
        "eval_stale": (
            "Called a second time in the same process with a data set of {n} examples, it "
            "counted {total}: the first call's data set, evaluated again (a loader or a "
            "share kept from the first call)."
        ),
        "eval_stale.title": "the first call's data evaluated again",
        "eval_accumulated": (
            "Called a second time in the same process with a data set of {n} examples, it "
            "counted {total}: what the first call counted ({first} examples) was still in "
            "the counts."
        ),
        "eval_accumulated.title": "counts kept from the first call",
        "hint.eval_fresh": (
            "evaluate is called again and again in one process (after every epoch): make "
            "its loader and its counts inside it, from the model and the dataset it is "
            "handed, on every call, the counts starting at zero; keep nothing in a global "
            "or a default argument."
        ),
        "eval_ok": (
            "On {ranks} ranks and on 2 machines x 2 ranks, evaluate called twice in each "
            "rank, with the check's own model (BatchNorm, dropout and a frozen parameter, "
            "trained a step before each call) and its own data sets (on 2 ranks, {cases}): "
            "exactly what one process with rank 0's model counts, every example once, the "
            "work split, in eval mode, every rank with rank 0's BatchNorm statistics; the "
            "mode it was handed in given back (training, then eval); nothing kept from the "
            "first call; the counts it sent made on the model's device. (Its counts are not "
            "the notebook's.)"
        ),
        "eval_case": "{want} of {n} examples correct",
    },
)


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
    """A classifier with dropout, BatchNorm (a buffer) and a frozen parameter (the last
    layer's bias); its first layer records every forward."""
    import torch

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = []

        def forward(self, x):
            self.calls.append((self.training, x.shape[0]))
            return x

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        Spy(),
        torch.nn.Linear(2, 32),
        # momentum 1: the running statistics are those of the last training batch, which
        # differ from rank to rank until DDP's next buffer broadcast.
        torch.nn.BatchNorm1d(32, momentum=1.0),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.5),  # in training mode it changes the predictions
        torch.nn.Linear(32, 2),
    )
    model[5].bias.requires_grad_(False)
    return model


def _eval_data(n: int):
    import torch
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, 2, generator=gen)
    return TensorDataset(x, ((x[:, 0] * x[:, 1]) > 0).long())


def _train_a_step(model, rank: int, step: int) -> None:
    """One SGD step on data of this rank's own: the ranks' BatchNorm statistics differ."""
    import torch

    gen = torch.Generator().manual_seed(100 + 10 * step + rank)
    x = torch.randn(64, 2, generator=gen) * (1 + 2 * rank) + 2 * rank
    y = ((x[:, 0] * x[:, 1]) > 0).long()
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trained, lr=0.1)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def _count_alone(module, dataset) -> int:
    """What one process counts with this module's weights and statistics, in eval mode."""
    import torch

    alone = copy.deepcopy(module).eval()
    x, y = dataset.tensors
    with torch.no_grad():
        return int((alone(x).argmax(1) == y).sum())


def _evaluate_harness(evaluate, lengths):
    """On each rank, one DDP model: for each data set length, a training step (the ranks'
    statistics part), then evaluate, handed the model in training mode the first time and
    in eval mode the second; all in this one process."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    with process_group():
        model = DDP(_spy_model())
        samplers = _count_samplers()
        calls = [
            _one_evaluation(evaluate, model, n, step, samplers) for step, n in enumerate(lengths)
        ]
        data = _eval_data(lengths[-1])
        calls[-1]["off_device"] = made_off_device(evaluate, model, data)
        return calls


def _one_evaluation(evaluate, model, n: int, step: int, samplers: list) -> dict:
    import torch.distributed as dist

    rank = dist.get_rank()
    model.train()
    _train_a_step(model, rank, step)  # the next DDP forward broadcasts rank 0's buffers
    data = _eval_data(n)
    want = _count_alone(model.module, data) if rank == 0 else None
    handed_training = step == 0  # the mode evaluate must give back
    model.train(handed_training)
    model.module[0].calls.clear()
    made = len(samplers)
    got = evaluate(model, data)
    try:
        got = tuple(int(v) for v in got)
    except (TypeError, ValueError):
        got = repr(got)
    return {
        "got": got,
        "want": want,
        "handed_training": handed_training,
        "calls": list(model.module[0].calls),
        "training_after": model.training,
        "stats": [b.tolist() for b in model.module[2].buffers()],
        "samplers": len(samplers) - made,
    }


def _count_samplers() -> list:
    """In a rank: the DistributedSamplers made from now on (evaluate's), one entry each."""
    from torch.utils.data.distributed import DistributedSampler

    made, real = [], DistributedSampler.__init__

    def init(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    DistributedSampler.__init__ = init
    return made


def _judge_counts(answers, n: int, ranks: int, machines: int, sampler: bool) -> None:
    """The total's mistake; the sampler's padding named only where a sampler was used."""
    correct, total = answers[0]
    padded = -(-n // ranks) * ranks
    if total != n:
        args = dict(total=total, n=n, extra=padded - n, missing=n - total)
        if machines > 1 and total == machines * n:
            raise Wrong("eval_machines", total=total, n=n, machines=machines)
        if total == padded and sampler:
            raise Wrong("eval_padding", **args)
        if total in {len(range(r, n, ranks)) for r in range(ranks)} | {padded // ranks}:
            raise Wrong("eval_share", **args)
        if total < n:
            raise Wrong("eval_dropped", **args)
        raise Wrong("eval_counted_extra", **{**args, "extra": total - n})


def _judge_kept(answers, n: int, first: int) -> None:
    """A second call's total that is the first call's data set, or holds its count."""
    total = answers[0][1]
    if total == first != n:
        raise Wrong("eval_stale", total=total, n=n)
    if total > n and (total - n) % first == 0:
        raise Wrong("eval_accumulated", total=total, n=n, first=first)


# (ranks, machines): two world sizes on one machine, one of them not a power of two, and 2
# machines x 2 ranks, where LOCAL_RANK is not the rank. Each rank calls evaluate twice, a
# training step before each: first handed the model in training mode (evaluate must
# restore it) on a data set the world size does not divide (the sampler would pad it), no
# rank's share one row past a batch of 128 (BatchNorm refuses a single row in training
# mode, which would hide an evaluation in training mode behind its error); then in eval mode
# (it must stay so: an answer that always ends in model.train() changes it) on one where
# rank 0's share is one row past k batches, the others' k batches exactly, so that an
# evaluation that leaves gradients on, where every DDP forward broadcasts the buffers,
# hangs there (hence the hang's hint, no_grad; a forward on rank 0 alone is a mismatch).
EVALUATE_LAYOUTS = ((2, 1), (3, 1), (4, 2))
BATCH = 128  # evaluate's default batch_size, which the check leaves as it is


def _lengths(world: int, seed: int) -> tuple[int, int]:
    """The two data sets' lengths on `world` ranks (check(): 517 and 513 on 2 ranks)."""
    k = (2, 1, 3)[seed % 3]  # batches of 128 in a share
    padded = world * (BATCH * k + 2) + world - 1  # shares of 128k + 3 and 128k + 2 rows
    uneven = world * BATCH * k + 1  # rank 0's share 128k + 1 rows: one batch more
    return padded, uneven


SPACE = Space(
    drawn={
        "world": (2, 3, 4),
        "machines": (1, 2),
        "calls": (2,),
        "steps": (2,),  # a training step before each call: the statistics part again
        "model": ("frozen", "buffer"),
        "lengths": tuple(
            sorted(
                {
                    n
                    for seed in (CHECK_SEED, *HIDDEN_SEEDS)
                    for w in (2, 3, 4)
                    for n in _lengths(w, seed)
                }
            )
        ),
        "device": ("cpu", "the default device moved off the model's (off_device)"),
    },
    why_not={
        "counts": "evaluate's one count, batch_size, sets the rows of a forward, not what it "
        "returns (an answer may forward its share at once): the check leaves the default, "
        "and draws the data set's length, which is what it counts",
        "dtypes": "what evaluate computes are counts of a few hundred examples, exact in any "
        "dtype an answer could count in; the rows it hands the model are the data set's own",
    },
)


def _check_evaluate(fn, seed: int = CHECK_SEED) -> Phrase:
    counted, off_device = [], []
    for ranks, machines in EVALUATE_LAYOUTS:
        lengths = _lengths(ranks, seed)
        with trying(ranks=ranks, machines=machines):
            runs = run_on_ranks(_evaluate_harness, fn, lengths, nprocs=ranks, nnodes=machines)
            for k, n in enumerate(lengths):
                with trying(call=k + 1, items=n):
                    results = [r[k] for r in runs]
                    _judge_call(results, n, ranks, machines, lengths[0] if k else None)
                    counted.append(Phrase("eval_case", want=results[0]["want"], n=n))
            off_device += [r[-1]["off_device"] for r in runs if r[-1]["off_device"]]
    if off_device:  # after every case: what the answer computes wrong is named first
        raise Wrong("off_device", function="evaluate", collective=off_device[0])
    worlds = [ranks for ranks, machines in EVALUATE_LAYOUTS if machines == 1]
    cases = and_list(counted[:2], groups=True)  # the 2-rank layout's, the notebook's own
    return Phrase("eval_ok", cases=cases, ranks=and_list(worlds))


def _judge_call(results, n: int, ranks: int, machines: int, first: int | None) -> None:
    """One call of evaluate on every rank: the first mistake it shows."""
    for rank, r in enumerate(results):
        if not isinstance(r["got"], tuple) or len(r["got"]) != 2:
            raise Wrong("eval_shape", got=r["got"], rank=rank)
    answers = [r["got"] for r in results]
    calls = [c for r in results for c in r["calls"]]
    in_training = sum(training for training, _ in calls)
    if in_training:
        raise Wrong("eval_train_mode", calls=in_training, all=len(calls))
    handed_training = results[0]["handed_training"]
    if any(r["training_after"] != handed_training for r in results):
        raise Wrong("eval_not_restored" if handed_training else "eval_forced_train")
    _judge_split(results, n, ranks)
    if len(set(answers)) > 1:
        raise Wrong("eval_disagree", got=answers)
    want = results[0]["want"]
    if any(r["stats"] != results[0]["stats"] for r in results):
        raise Wrong("eval_own_stats", got=answers[0][0], want=want)
    if first is not None:
        _judge_kept(answers, n, first)
    _judge_counts(answers, n, ranks, machines, any(r["samplers"] for r in results))
    if answers[0][0] != want:
        raise Wrong("eval_correct", n=n, got=answers[0][0], want=want)


def _judge_split(results, n: int, ranks: int) -> None:
    """The work split: not every rank on every row, no rank idle."""
    rows = [sum(k for _, k in r["calls"]) for r in results]
    if all(k >= n for k in rows):
        raise Wrong("eval_everything", n=n, rows=rows[0])
    idle = [rank for rank, k in enumerate(rows) if k == 0]
    if idle:
        busy = max(range(ranks), key=rows.__getitem__)
        raise Wrong("eval_idle", busy=busy, rows=rows[busy], idle=i18n.listed(idle))


exercise = Exercise(
    "4.4",
    "evaluate",
    _check_evaluate,
    evaluate,
    texts=MESSAGES,
    hints=(
        "eval_reduce",
        "eval_ddp_forward",
        "eval_no_padding",
        "eval_mode",
        "eval_fresh",
        "eval_code",
    ),
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
        "eval_machines": Mistake(hint="eval_reduce"),
        "eval_stale": Mistake(hint="eval_fresh"),
        "eval_accumulated": Mistake(hint="eval_fresh"),
        "off_device": Mistake(),
        **rank_mistakes(hang="eval_mode", mismatch="eval_ddp_forward"),
    },
    hidden=on_hidden_seeds(_check_evaluate),
    further=True,
    space=SPACE,
)
