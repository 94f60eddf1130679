"""Lesson 04's capstone (exercise 4.1, `train_ddp`): the check, its proof, its answers.

The learner answers below run through the sweep in tests/exercises/test_answers.py (SWEEP["4.1"]):
each real mistake must be named by its own message, each other right answer must pass.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap

import cloudpickle
import nbformat
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_helpers.exercises.kit import hang_limit, weights_apart
from ddp_helpers.exercises.lesson02.cleanup import cleanup
from ddp_helpers.exercises.lesson02.setup import setup
from ddp_helpers.exercises.lesson03.wrap import wrap
from ddp_helpers.exercises.lesson04 import capstone, make_loader
from ddp_helpers.exercises.lesson04.capstone import GLOBAL_BATCH, LR, make_dataset, make_model
from support import ROOT

# The answers travel to the ranks by value, as a notebook's do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"


def _steps(model, loader, optimizer, device, reduction="mean"):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y, reduction=reduction).backward()
        optimizer.step()


# ---------------------------------------------------------------- wrong answers


def never_wrapped(epochs, path):
    device = setup()
    model = make_model().to(device)  # no DDP: each rank trains alone
    loader = make_loader(make_dataset(), GLOBAL_BATCH)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _steps(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), path)
    cleanup()
    return model


def no_sampler(epochs, path):
    device = setup()
    model = wrap(make_model(), device)
    data = make_dataset()
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // dist.get_world_size(), shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(epochs):
        _steps(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def _converted(
    epochs,
    path,
    set_epoch="top",
    save="rank0",
    batch=None,
    lr=LR,
    end=True,
    forward=None,
    reduction="mean",
    momentum=0.0,
):
    """The conversion with one step done some way: the mistakes below differ in one step."""
    device = setup()
    model = wrap(make_model(), device)
    data = make_dataset()
    if batch is None:
        loader = make_loader(data, GLOBAL_BATCH)
    else:
        loader = DataLoader(data, batch_size=batch, sampler=DistributedSampler(data))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for epoch in range(epochs):
        if set_epoch == "top":
            loader.sampler.set_epoch(epoch)
        elif set_epoch == "constant":
            loader.sampler.set_epoch(0)
        elif set_epoch == "from_one":  # epochs counted 1, 2, ...
            loader.sampler.set_epoch(epoch + 1)
        elif set_epoch == "elsewhere":  # a second sampler: make_loader made its own
            DistributedSampler(data).set_epoch(epoch)
        if save == "before":
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), path)
        net = model.module if forward == "module" else model
        _steps(net, loader, optimizer, device, reduction)
        if forward == "and_a_loss_pass":  # the epoch's loss, in a second pass over the data
            with torch.no_grad():
                for x, y in loader:
                    torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        if set_epoch == "after":
            loader.sampler.set_epoch(epoch)
        _save(model, path, save)
    if end:
        cleanup()
    return model


def _save(model, path, how):
    """The checkpoint saved one way or another (`_converted`'s `save`)."""
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    writes = {
        "rank0": rank == 0,
        "local0": local == 0,
        "every": True,
        "last": rank == world - 1,
    }.get(how, rank == 0)
    saved = {
        "prefix": lambda: model.state_dict(),
        "module": lambda: model.module,  # the whole model object
        "dict": lambda: {"model": model.module.state_dict()},
    }.get(how, lambda: model.module.state_dict())
    if how not in (None, "before") and writes:
        torch.save(saved(), path)


def without_set_epoch(epochs, path):
    return _converted(epochs, path, set_epoch=None)


def set_epoch_after_the_pass(epochs, path):
    return _converted(epochs, path, set_epoch="after")


def set_epoch_with_a_constant(epochs, path):
    return _converted(epochs, path, set_epoch="constant")


def set_epoch_on_a_sampler_the_loader_does_not_use(epochs, path):
    return _converted(epochs, path, set_epoch="elsewhere")


def global_batch_on_every_rank(epochs, path):
    return _converted(epochs, path, batch=GLOBAL_BATCH)


def saved_where_local_rank_is_zero(epochs, path):
    return _converted(epochs, path, save="local0")


def saved_on_every_rank(epochs, path):
    return _converted(epochs, path, save="every")


def never_saved(epochs, path):
    return _converted(epochs, path, save=None)


def saved_with_the_prefix(epochs, path):
    return _converted(epochs, path, save="prefix")


def saved_on_the_last_rank(epochs, path):
    return _converted(epochs, path, save="last")


def saved_the_model_object(epochs, path):
    return _converted(epochs, path, save="module")


def saved_a_dict_around_the_weights(epochs, path):
    return _converted(epochs, path, save="dict")


def set_epoch_counting_from_one(epochs, path):
    return _converted(epochs, path, set_epoch="from_one")


def batches_for_the_ranks_of_one_machine(epochs, path):
    return _converted(epochs, path, batch=GLOBAL_BATCH // int(os.environ["LOCAL_WORLD_SIZE"]))


def forward_through_the_inner_model(epochs, path):
    return _converted(epochs, path, forward="module")  # DDP's hooks never run


def a_second_pass_for_the_loss(epochs, path):
    # Right: an evaluation's pass under no_grad trains nothing (issue 49: only training
    # batches and their passes count).
    return _converted(epochs, path, forward="and_a_loss_pass")


def saved_before_each_epoch(epochs, path):
    return _converted(epochs, path, save="before")


def group_left_initialised(epochs, path):
    return _converted(epochs, path, end=False)


def returning_nothing(epochs, path):
    _converted(epochs, path)


def lr_scaled_by_the_world_size(epochs, path):
    return _converted(epochs, path, lr=LR * int(os.environ["WORLD_SIZE"]))


def loss_summed_over_the_rows(epochs, path):
    return _converted(epochs, path, reduction="sum")  # a step 8 times one process's on 2 ranks


def a_learning_rate_a_hundred_times_too_large(epochs, path):
    return _converted(epochs, path, lr=LR * 100)  # diverges: the weights end as nan


def momentum_added_to_the_optimizer(epochs, path):
    return _converted(epochs, path, momentum=0.9)  # the first step alike, the later ones not


def barrier_inside_the_rank_zero_save(epochs, path):
    device = setup()
    model = wrap(make_model(), device)
    loader = make_loader(make_dataset(), GLOBAL_BATCH)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _steps(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
            dist.barrier()  # rank 1 is in the next epoch's all_reduce: never joins
    cleanup()
    return model


def loss_reduced_on_rank_zero_only(epochs, path):
    device = setup()
    model = wrap(make_model(), device)
    data = make_dataset()
    per_rank = GLOBAL_BATCH // dist.get_world_size()
    loader = DataLoader(data, per_rank, sampler=DistributedSampler(data))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:  # the log line's loss, reduced where only rank 0 goes
            dist.all_reduce(loss.detach())
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


# ---------------------------------------------------------------- right answers


def _save_on_rank_zero(model, path):
    if int(os.environ["RANK"]) == 0:
        torch.save(model.module.state_dict(), path)


def sampler_in_a_variable_and_a_save_helper(epochs, path):
    device = setup()
    net = wrap(make_model(), device)
    loader = make_loader(make_dataset(), GLOBAL_BATCH)
    sampler = loader.sampler
    criterion = torch.nn.MSELoss()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            opt.zero_grad()
            criterion(net(inputs.to(device)), targets.to(device)).backward()
            opt.step()
        _save_on_rank_zero(net, path)
    cleanup()
    return net


def own_sampler_and_a_while_loop(epochs, path):
    from torch.distributed import destroy_process_group, get_rank, get_world_size
    from torch.nn.parallel import DistributedDataParallel

    device = setup()
    model = DistributedDataParallel(make_model().to(device))
    data = make_dataset()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // get_world_size(), sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    epoch = 0
    while epoch < epochs:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if get_rank() == 0:
            torch.save({k: v.cpu() for k, v in model.module.state_dict().items()}, path)
        epoch += 1
    plain = model.module
    destroy_process_group()
    return plain


def loader_inline_and_the_loss_logged_from_every_rank(epochs, path):
    device = setup()
    model = wrap(make_model(), device)
    dataset = make_dataset()
    per_rank = GLOBAL_BATCH // dist.get_world_size()
    loader = DataLoader(dataset, batch_size=per_rank, sampler=DistributedSampler(dataset))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)  # the epoch's summed loss and its rows
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            rows = torch.tensor(float(len(y)), device=device)
            total += torch.stack([loss.detach() * rows, rows])
        dist.all_reduce(total)  # every rank, outside the `if`
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {total[0].item() / total[1].item():.4f}")
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


# exercise 4.1 in the sweep of tests/exercises/test_answers.py: (wrong answers with the mistake each
# must be named by, right answers)
SWEEP_4_1 = (
    [
        (never_wrapped, "not_wrapped"),
        (no_sampler, "no_sampler"),
        (without_set_epoch, "epoch_never"),
        (set_epoch_after_the_pass, "epoch_late"),
        (set_epoch_with_a_constant, "epoch_constant"),
        (set_epoch_counting_from_one, "epoch_other"),
        (set_epoch_on_a_sampler_the_loader_does_not_use, "epoch_elsewhere"),
        (global_batch_on_every_rank, "batch_global"),
        (batches_for_the_ranks_of_one_machine, "batch_other"),
        (saved_where_local_rank_is_zero, "ckpt_every_machine"),
        (saved_on_every_rank, "ckpt_every_rank"),
        (saved_on_the_last_rank, "ckpt_not_zero"),
        (never_saved, "ckpt_none"),
        (saved_the_model_object, "ckpt_unreadable"),
        (saved_with_the_prefix, "ckpt_prefix"),
        (saved_a_dict_around_the_weights, "ckpt_strict"),
        (saved_before_each_epoch, "ckpt_stale"),
        (group_left_initialised, "group_left"),
        (returning_nothing, "no_model"),
        (forward_through_the_inner_model, "ranks_differ"),
        (lr_scaled_by_the_world_size, "lr_scaled"),
        (loss_summed_over_the_rows, "loss_summed"),
        (a_learning_rate_a_hundred_times_too_large, "weights_nan"),
        (momentum_added_to_the_optimizer, "weights_differ"),
    ],
    [
        sampler_in_a_variable_and_a_save_helper,
        own_sampler_and_a_while_loop,
        loader_inline_and_the_loss_logged_from_every_rank,
        a_second_pass_for_the_loss,
    ],
)


# ---------------------------------------------------------------- the proof behind the check


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("epoch", [0, 1])
def test_the_ranks_kth_batches_together_are_the_kth_block_of_the_samplers_permutation(world, epoch):
    data = make_dataset()
    batches = []
    for rank in range(world):
        sampler = DistributedSampler(data, num_replicas=world, rank=rank)  # as make_loader
        sampler.set_epoch(epoch)
        batches.append(list(DataLoader(range(len(data)), GLOBAL_BATCH // world, sampler=sampler)))
        assert list(sampler) == capstone.expected_order(rank, world, epoch)
    blocks = capstone.global_batches(epoch, world=world)
    assert all(len(b) == len(blocks) for b in batches)  # as many steps on every rank
    for k, block in enumerate(blocks):
        parts = [b[k].tolist() for b in batches]
        assert len({len(p) for p in parts}) == 1  # equal parts: the mean of means is the mean
        assert sorted(i for p in parts for i in p) == sorted(block)


def test_the_reference_passes_and_says_how_close_it_came():
    result = capstone.exercise.evaluate(capstone.train_ddp)
    assert result.status == "correct", str(result)
    assert "max |dW| = " in result.message and "allowed 1e-06" in result.message


@pytest.mark.parametrize(
    "answer", [barrier_inside_the_rank_zero_save, loss_reduced_on_rank_zero_only]
)
def test_a_collective_inside_the_rank_zero_save_is_a_hang_with_the_save_hint(answer):
    with hang_limit(3):
        result = capstone.exercise.evaluate(answer)
    assert result.status == "wrong", str(result)
    assert result.mistake in ("hang", "mismatch") and result.hint_name == "save"
    assert "did not" in result.message and "inside that `if`" in result.hint


def test_a_pasted_function_still_a_stub_says_to_paste_it_from_its_lesson():
    def calls_the_unpasted_setup(epochs, path):
        raise NotImplementedError("exercise 2.2")

    result = capstone.exercise.evaluate(calls_the_unpasted_setup)
    assert result.status == "not_attempted", str(result)
    assert result.mistake == "not_attempted_pasted"
    assert "`setup()`" in result.message and "lesson 02" in result.message
    assert "paste" in result.message.lower()


# ---------------------------------------------------------------- one source with the notebook


def _notebook_source() -> str:
    nb = nbformat.read(SOLUTION, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def _definitions(source: str, names: set[str]) -> dict[str, str]:
    found = {}
    for node in ast.parse(textwrap.dedent(source)).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            body = [n for n in node.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
            found[node.name] = ast.dump(ast.Module(body, []))
    return found


def test_the_check_trains_the_notebooks_data_and_model_with_its_settings():
    # The check replays the notebook's script in one process: same data, model, batch, lr.
    source = "\n".join(
        line for line in _notebook_source().splitlines() if not line.lstrip().startswith("%")
    )
    namespace: dict = {}
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) in {"GLOBAL_BATCH", "LR", "ITEMS"}
            for t in ast.walk(node.targets[0])
        ):
            exec(compile(ast.Module([node], []), "<cell>", "exec"), namespace)
    assert (namespace["ITEMS"], namespace["GLOBAL_BATCH"], namespace["LR"]) == (
        capstone.ITEMS,
        capstone.GLOBAL_BATCH,
        capstone.LR,
    )
    names = {"make_dataset", "make_model"}
    assert _definitions(source, names) == _definitions(inspect.getsource(capstone), names)


def test_the_pasted_answers_are_those_of_their_exercises():
    # The paste cell holds the earlier lessons' answers, as the learner's own notebooks do.
    from ddp_helpers.exercises import exercises_of

    nb = nbformat.read(SOLUTION, as_version=4)
    (cell,) = [c.source for c in nb.cells if "# BEGIN SOLUTION (from exercise" in c.source]
    pasted = re.findall(r"def (\w+)\(.*\n\s*# BEGIN SOLUTION \(from exercise (\d+\.\d+)\)", cell)
    assert [exercise for _, exercise in pasted] == ["2.1", "2.2"]
    # The one-line answers of 2.3 and 3.1 are written out in the same cell, as given.
    for name, exercise in [*pasted, ("cleanup", "2.3"), ("wrap", "3.1")]:
        (ex,) = [e for e in exercises_of(exercise.split(".")[0].zfill(2)) if e.id == exercise]
        assert ex.name == name
        notebook = _definitions(cell, {name})
        assert notebook == _definitions(inspect.getsource(ex.reference), {name}), name


# ---------------------------------------------------------------- the weights, judged


def test_a_nan_in_any_weight_fails_every_comparison():
    # `nan > tolerance` is False: a comparison that asks that would pass a diverged run.
    import math

    good = {"a": torch.zeros(3), "b": torch.ones(2)}
    for key in good:
        bad = {**good, key: torch.tensor([0.0, math.nan, 1.0])[: len(good[key])]}
        assert math.isnan(weights_apart(good, bad)), key
        assert math.isnan(weights_apart(bad, good)), key
        assert not capstone._finite(bad)
    assert weights_apart(good, good) == 0.0 and capstone._finite(good)


@pytest.mark.parametrize(
    ("world", "factor", "named"),
    [(2, 2, "lr_scaled"), (2, 8, "loss_summed"), (4, 2, None), (4, 4, None), (2, 1, None)],
)
def test_a_first_step_w_or_b_over_w_times_one_process_is_named(world, factor, named):
    # On 4 ranks of 4 rows each both mistakes make the step 4 times one process's: only the
    # 2-rank scenario (run first) tells them apart, so on 4 neither is named.
    from ddp_helpers.exercises.kit import Wrong

    first = capstone.one_process_first_step()
    before = capstone.spies.weights(make_model())
    early = [before, {k: v + factor * first[k] for k, v in before.items()}]
    try:
        capstone._name_the_step({"early": early}, first, "here", world)
    except Wrong as wrong:
        assert wrong.key == named
    else:
        assert named is None
