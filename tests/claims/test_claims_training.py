"""Claims the lessons make about training under DDP (buffers, hooks, normalisation, mixed
precision, uneven data, Join, evaluation), shown on gloo ranks with the pinned torch.
docs/claims.md names each claim's cell and its test here."""

from __future__ import annotations

import pytest
from claims_support import same_on_every_rank

from ddp_helpers import DistributedError, launch

# Tests under the course's launcher (`launch`) where its settings cannot change the result:
# they act at init (a store barrier) and at exit (kept groups, os._exit), not between.
UNDER_LAUNCHER = pytest.mark.under_launcher(
    "DDP decides it inside forward/backward (a hang: until launch's timeout); "
    "the launcher acts at init and exit"
)


def _against_one_process(norm: str, steps: int = 20) -> dict:
    """2 ranks of 4 rows each against one process on the 8 rows, a mean loss, SGD; rank
    1's rows come from elsewhere (shifted by 3), so their statistics differ from rank 0's."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def net():
        torch.manual_seed(0)
        layer = getattr(torch.nn, norm)(8)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), layer, torch.nn.Linear(8, 1))

    model, alone = DDP(net()), net()
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, alone)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 1, generator=gen)
        x[1::2] += 3.0
        for m, opt, (xs, ys) in (
            (model, opts[0], (x[rank::2], y[rank::2])),
            (alone, opts[1], (x, y)),
        ):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xs), ys).backward()
            opt.step()
    diff = max(
        (a - b).abs().max().item()
        for a, b in zip(model.module.parameters(), alone.parameters(), strict=True)
    )
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    ranks_equal = same_on_every_rank(mine)
    dist.destroy_process_group()
    return {"diff": diff, "ranks_equal": ranks_equal}


@pytest.mark.under_launcher(
    "DDP's arithmetic in forward and backward, against one process in the same rank; the "
    "launcher acts at init's end and at exit, and one OpenMP thread changes both sides "
    "alike"
)
def test_ddp_trains_like_one_process_on_the_whole_batch_to_rounding():
    # 03-50, 03-52, 03-43: with a mean loss and equal, disjoint shares, DDP on 2 ranks
    # equals one process on the global batch to 1e-6 (sums in another order), the ranks
    # bit for bit; LayerNorm, per example, needs nothing.
    for got in launch(_against_one_process, "LayerNorm", nprocs=2):
        assert 0 < got["diff"] <= 1e-6 and got["ranks_equal"], got  # not bit for bit


@pytest.mark.under_launcher(
    "DDP's arithmetic in forward and backward, against one process in the same rank; the "
    "launcher acts at init's end and at exit, and one OpenMP thread changes both sides "
    "alike"
)
def test_batchnorm_under_ddp_normalises_with_each_ranks_own_batch():
    # 03-41: BatchNorm's statistics are the rank's B/N rows, not the global batch's, so
    # DDP's gradients are not one process's.
    for got in launch(_against_one_process, "BatchNorm1d", nprocs=2):
        assert got["diff"] > 1e-3 and got["ranks_equal"], got


def _halving_hook(note):
    """A comm hook for 2 ranks that calls note(bucket), then averages it as DDP does."""
    import torch.distributed as dist

    def hook(state, bucket):
        note(bucket)
        future = dist.all_reduce(bucket.buffer().div_(2), async_op=True).get_future()
        return future.then(lambda f: f.value()[0])

    return hook


def _hooks_and_views() -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def model(**kwargs):
        torch.manual_seed(0)
        return DDP(torch.nn.Linear(3, 1), **kwargs)

    summing, buffers = model(), []

    def sum_only(state, bucket):  # no division: a hook takes over the whole reduction
        return (
            dist.all_reduce(bucket.buffer(), async_op=True)
            .get_future()
            .then(lambda f: f.value()[0])
        )

    summing.register_comm_hook(None, sum_only)
    viewed = model(gradient_as_bucket_view=True)

    viewed.register_comm_hook(None, _halving_hook(lambda bucket: buffers.append(bucket.buffer())))
    x = torch.full((2, 3), float(rank + 1))
    for m in (summing, viewed):
        m(x).sum().backward()
    grad = summing.module.weight.grad.clone()
    local = torch.full((1, 3), 2.0 * (rank + 1))  # this rank's own gradient
    total = local.clone()
    dist.all_reduce(total)
    views = []
    for _ in range(2):  # from the second backward on, .grad lives in the bucket
        viewed.zero_grad(set_to_none=False)
        buffers.clear()
        viewed(x).sum().backward()
        flat = buffers[0]
        start = flat.data_ptr()
        end = start + flat.numel() * flat.element_size()
        views.append(all(start <= p.grad.data_ptr() < end for p in viewed.parameters()))
    dist.destroy_process_group()
    return {"summed": torch.equal(grad, total), "views": views}


@pytest.mark.under_launcher(
    "DDP's arithmetic in forward and backward, against one process in the same rank; the "
    "launcher acts at init's end and at exit, and one OpenMP thread changes both sides "
    "alike"
)
def test_a_hook_replaces_ddps_averaging_and_bucket_views_hold_the_gradients():
    # 03-30, 03-85: with a communication hook DDP no longer divides (a hook that only sums
    # leaves the sum); with gradient_as_bucket_view=True, .grad is a view into its bucket.
    for got in launch(_hooks_and_views, nprocs=2):
        assert got == {"summed": True, "views": [True, True]}


def _buffers_after_no_sync() -> list[bool]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)))

    def equal() -> bool:
        return same_on_every_rank(model.module[1].running_mean)

    torch.manual_seed(rank + 1)
    with model.no_sync():  # a training forward inside no_sync: as if without gradients
        model(torch.randn(8, 3) * (rank + 1)).sum().backward()
    found = [equal()]
    model.eval()
    with torch.no_grad():
        model(torch.randn(8, 3))  # no broadcast: the last forward was inside no_sync
    found.append(equal())
    dist.destroy_process_group()
    return found


@UNDER_LAUNCHER
def test_a_forward_inside_no_sync_counts_as_one_without_gradients_for_buffers():
    # 03-37: after a forward inside no_sync(), the next forward broadcasts no buffers.
    assert launch(_buffers_after_no_sync, nprocs=2)[0] == [False, False]


def _buffers_at_wrapping(option: str) -> dict:
    import warnings

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    net = torch.nn.BatchNorm1d(2)
    net.running_mean.fill_(float(dist.get_rank()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = DDP(net, **{option: False})
    equal = same_on_every_rank(model.module.running_mean)
    dist.destroy_process_group()
    return {
        "equal": equal,
        "future_warning": any(issubclass(w.category, FutureWarning) for w in caught),
    }


@UNDER_LAUNCHER
def test_broadcast_buffers_false_is_deprecated_and_skips_the_buffers_at_wrapping_too():
    # 03-18: broadcast_buffers=False (deprecated in 2.13: a FutureWarning) skips the
    # buffers at wrapping as well; forward_sync_buffers=False still syncs them there.
    old = launch(_buffers_at_wrapping, "broadcast_buffers", nprocs=2)[0]
    new = launch(_buffers_at_wrapping, "forward_sync_buffers", nprocs=2)[0]
    assert old == {"equal": False, "future_warning": True}
    assert new == {"equal": True, "future_warning": False}


def _precision_clipping_and_scaler() -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 2))
    x = torch.randn(3, 4) * (rank + 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    dtypes = {str(p.dtype) for p in model.parameters()} | {
        str(p.grad.dtype) for p in model.parameters()
    }
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).reshape(1)
    norms = [torch.zeros_like(norm) for _ in range(2)]
    dist.all_gather(norms, norm)
    scaler = torch.amp.GradScaler("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    scaler.scale(model(x).sum()).backward()
    next(model.parameters()).grad[0, 0] = float("inf")  # a gradient that overflowed
    scaler.step(opt)
    scaler.update()
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    dist.destroy_process_group()
    return {
        "dtypes": sorted(dtypes),
        "same_norm": torch.equal(norms[0], norms[1]),
        "skipped": unchanged,
    }


@pytest.mark.under_launcher(
    "DDP's arithmetic in forward and backward, against one process in the same rank; the "
    "launcher acts at init's end and at exit, and one OpenMP thread changes both sides "
    "alike"
)
def test_autocast_keeps_float32_gradients_clipping_agrees_and_the_scaler_skips_inf():
    # 03-62, 03-64: under autocast parameters and their gradients stay float32 (what DDP
    # reduces); after DDP's backward every rank clips by the same norm; GradScaler.step
    # skips the optimizer's step when a gradient is inf or NaN.
    for got in launch(_precision_clipping_and_scaler, nprocs=2):
        assert got == {"dtypes": ["torch.float32"], "same_norm": True, "skipped": True}


def _avg_in_float16() -> list:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    averaged = torch.tensor([60000.0], dtype=torch.float16)
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)  # a sum, then a division
    divided_first = torch.tensor([60000.0], dtype=torch.float16) / dist.get_world_size()
    dist.all_reduce(divided_first)  # DDP's way: divide, then sum
    dist.destroy_process_group()
    return [averaged.item(), divided_first.item()]


@pytest.mark.under_launcher(
    "a collective's values in float16; the launcher acts at init's end and at exit"
)
def test_gloo_avg_sums_first_so_float16_overflows_where_dividing_first_does_not():
    # 02-42: gloo's AVG is a sum and then a division; DDP divides before it sums, which
    # keeps a sum of low-precision gradients from overflowing (float16 holds up to 65504).
    averaged, divided_first = launch(_avg_in_float16, nprocs=2)[0]
    assert averaged == float("inf") and divided_first == 60000.0


def _unused_found() -> str:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")

    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.aux_head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.body(x).sum()

    found = {}
    for flag in (False, True):
        torch.manual_seed(0)
        model = DDP(Unused(), find_unused_parameters=flag)
        try:
            for _ in range(2):
                model(torch.randn(2, 4)).backward()
            found[flag] = "trained"
        except RuntimeError as exc:
            found[flag] = "names aux_head" if "aux_head" in str(exc) else "raised"
    dist.destroy_process_group()
    return found


@pytest.mark.under_launcher(
    "the INFO message DDP raises in backward, and a run that trains; a plain-process test"
    " beside it (test_claims_basics) shows the message too"
)
def test_debug_info_names_the_unused_parameter_and_find_unused_parameters_trains(monkeypatch):
    # 02-29, 03-39: with TORCH_DISTRIBUTED_DEBUG=INFO, DDP's error names the parameter that
    # got no gradient; with find_unused_parameters=True the model trains.
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "INFO")
    for got in launch(_unused_found, nprocs=2):
        assert got == {False: "names aux_head", True: "trained"}


def _bucket_layouts_found_unused() -> list:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512))
    model, seen = DDP(net, find_unused_parameters=True), []

    model.register_comm_hook(None, _halving_hook(lambda bucket: seen.append(bucket.index())))
    layouts = []
    for _ in range(2):
        seen.clear()
        model(torch.randn(4, 512)).sum().backward()
        layouts.append(sorted(seen))
    dist.destroy_process_group()
    return layouts


@pytest.mark.under_launcher(
    "DDP lays its buckets out at construction and in backward; the launcher acts at "
    "init's end and at exit"
)
def test_with_find_unused_parameters_the_buckets_are_laid_out_at_wrapping_and_kept():
    # 03-34: with find_unused_parameters=True the buckets are laid out when DDP wraps the
    # model (several from the first step on) and never rebuilt.
    first, second = launch(_bucket_layouts_found_unused, nprocs=2)[0]
    assert first == second and len(first) > 1


def _uneven_steps(join: bool):
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = model.module.weight.detach().clone()
    batches = [torch.ones(1, 2)] * (3 if rank == 0 else 2)  # rank 0 has one batch more
    with Join([model]) if join else contextlib.nullcontext():
        for x in batches:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    if not join:
        dist.barrier()
    weight = model.module.weight.detach().clone()
    same = same_on_every_rank(weight)
    dist.destroy_process_group()
    # Each step's gradient is 1 for every weight; the third step's is averaged with a
    # joined rank's zero and divided by 2, the world size Join started with.
    moved = ((start - weight) / 0.1).flatten().tolist()
    return same, [round(m, 5) for m in moved]


@UNDER_LAUNCHER
def test_uneven_batches_hang_and_join_lets_every_rank_finish_with_the_same_model():
    # 04-e6, 04-e8: the rank with one batch more waits in its all-reduce for ranks that have
    # moved on; under Join the others shadow its all-reduces (zero gradients, still divided
    # by the world size the loop started with) and every rank ends with the same model.
    with pytest.raises(DistributedError) as caught:
        launch(_uneven_steps, False, nprocs=2, timeout=4)
    assert caught.value.kind == "timeout"
    for same, moved in launch(_uneven_steps, True, nprocs=2, timeout=60):
        assert same and moved == [2.5, 2.5]  # 1 + 1 + (1 + 0) / 2


def _evaluate_on_rank_zero(module: bool) -> str:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)))
    model(torch.randn(4, 2)).sum().backward()  # a training step's forward and backward
    if dist.get_rank() == 0:
        with torch.no_grad():
            (model.module if module else model).eval()(torch.randn(4, 2))
    dist.barrier()
    dist.destroy_process_group()
    return "done"


@UNDER_LAUNCHER
def test_rank_zero_alone_evaluating_the_ddp_model_after_training_hangs_its_module_does_not():
    # 04-30, 04-32: rank 0's first evaluation forward broadcasts its buffers, and waits there
    # for ranks already at the barrier; model.module runs no collective.
    with pytest.raises(DistributedError) as caught:
        launch(_evaluate_on_rank_zero, False, nprocs=2, timeout=4)
    assert caught.value.kind == "timeout"
    assert list(launch(_evaluate_on_rank_zero, True, nprocs=2, timeout=60)) == ["done", "done"]


def test_no_grad_keeps_no_activations_for_a_backward():
    # 04-07: what torch.no_grad() saves in an evaluation is the autograd graph: a forward
    # under it keeps none of the tensors a backward would need; with gradients it does.
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def kept_by_a_forward(grad: bool) -> int:
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            with torch.set_grad_enabled(grad):
                net(torch.randn(4, 8))
        return len(kept)

    assert kept_by_a_forward(False) == 0 < kept_by_a_forward(True)


def test_a_resume_without_the_optimizers_state_steps_differently():
    # 04-14: SGD with momentum, resumed after 2 steps: with optimizer.state_dict() restored
    # the third step is the uninterrupted run's; with a fresh optimizer it differs.
    import copy

    import torch

    torch.manual_seed(0)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def step(net, opt):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    net = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        step(net, opt)
    saved = copy.deepcopy({"model": net.state_dict(), "optimizer": opt.state_dict()})
    step(net, opt)
    third = net.weight.detach().clone()
    for restore in (True, False):
        again = torch.nn.Linear(3, 1)
        again.load_state_dict(saved["model"])
        opt = torch.optim.SGD(again.parameters(), lr=0.1, momentum=0.9)
        if restore:
            opt.load_state_dict(saved["optimizer"])
        step(again, opt)
        assert torch.equal(again.weight.detach(), third) == restore
