"""Claims the lessons make about DistributedDataParallel, shown on the pinned torch.

Most tests run DDP on gloo ranks (the course's launcher: see UNDER_LAUNCHER for why it
cannot change their results) and assert the behaviour a lesson states; docs/claims.md
names the cell of each claim and its test here. A test that fails on another torch
release (make compat) means that lesson's sentence no longer holds there.
"""

from __future__ import annotations

import pytest
from claims_support import same_on_every_rank

from ddp_helpers import launch

# These tests run DDP under the course's launcher (`launch`). What they assert is decided by
# DDP itself inside forward and backward; the launcher's settings act elsewhere: its init
# barrier before DDP is built, its kept groups and os._exit after the function returns,
# and one OpenMP thread and the loopback interface change neither which buckets,
# all-reduces and broadcasts DDP makes nor (compared within one process) its arithmetic.
# The expert read re-ran the reducer, buckets, no_sync and unused-parameter findings with
# torch.multiprocessing.spawn and found the same.
UNDER_LAUNCHER = pytest.mark.under_launcher(
    "DDP's reducer decides it inside forward/backward; the launcher acts at init and exit"
)


def _counting_hook(calls: list):
    """A communication hook that counts the buckets it all-reduces, and averages them as
    DDP's own does (divide, then sum)."""
    import torch.distributed as dist

    def hook(state, bucket):
        calls.append(bucket.index())
        future = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True)
        return future.get_future().then(lambda f: f.value()[0])

    return hook


def _all_reduces_with_no_sync(around: str) -> int | tuple[int, bool]:
    """All-reduces of one step with `no_sync()` around its forward, or its backward only;
    or ("accumulate") of a micro-batch inside `no_sync()` then one outside, with whether
    the gradient is then the ranks' average of the two micro-batches' summed gradients."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model, calls = DDP(torch.nn.Linear(4, 2)), []
    model.register_comm_hook(None, _counting_hook(calls))
    x = torch.randn(3, 4)
    if around == "accumulate":
        torch.manual_seed(dist.get_rank() + 1)
        xs = [torch.randn(3, 4) for _ in range(2)]
        with model.no_sync():
            model(xs[0]).sum().backward()
        model(xs[1]).sum().backward()
        local = torch.nn.Linear(4, 2)
        local.load_state_dict(model.module.state_dict())
        for x in xs:
            local(x).sum().backward()
        mean = local.weight.grad.clone()
        dist.all_reduce(mean)
        mean /= dist.get_world_size()
        averaged = torch.allclose(model.module.weight.grad, mean, atol=1e-6)
        dist.destroy_process_group()
        return len(calls), averaged
    if around == "forward":
        with model.no_sync():
            loss = model(x).sum()
        loss.backward()
    else:
        loss = model(x).sum()
        with model.no_sync():
            loss.backward()
    dist.destroy_process_group()
    return len(calls)


@UNDER_LAUNCHER
def test_no_sync_is_decided_at_forward_time():
    # 03-35, 03-37: the forward inside no_sync() is what skips the all-reduce; a backward
    # inside it, after a forward outside, all-reduces all the same.
    assert list(launch(_all_reduces_with_no_sync, "forward", nprocs=2)) == [0, 0]
    assert list(launch(_all_reduces_with_no_sync, "backward", nprocs=2)) == [1, 1]
    # A micro-batch inside, the next outside: one all-reduce, of the sum, averaged.
    assert list(launch(_all_reduces_with_no_sync, "accumulate", nprocs=2)) == [(1, True)] * 2


def _reducer_arithmetic(config: str, steps: int = 3) -> list[str]:
    """Each step, whether DDP's averaged gradients equal, bit for bit, those of a hook that
    multiplies each bucket by 1 / world size, or of one that divides it by world size (the
    two differ in the last bit on 3 ranks), from the same weights and data."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()

    def model(scale: str | None):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        kwargs = {"gradient_as_bucket_view": config.startswith("bucket_view")}
        if config == "batched_grad_copy":
            kwargs["batched_grad_copy"] = True
        ddp = DDP(net, **kwargs)
        if scale is not None:

            def hook(state, bucket, scale=scale):
                buf = bucket.buffer()
                buf.mul_(1 / world) if scale == "multiply" else buf.div_(world)
                return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

            ddp.register_comm_hook(None, hook)
        return ddp

    models = {"ddp": model(None), "multiply": model("multiply"), "divide": model("divide")}
    torch.manual_seed(rank + 1)
    found = []
    for _ in range(steps):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        for ddp in models.values():
            for p in ddp.parameters():  # zero_grad(set_to_none=...), as the config says
                if p.grad is not None and config == "bucket_view_zeroed":
                    p.grad.zero_()
                else:
                    p.grad = None
            torch.nn.functional.mse_loss(ddp(x), y).backward()
        grads = {k: [p.grad for p in m.parameters()] for k, m in models.items()}
        same = [
            k
            for k in ("multiply", "divide")
            if all(torch.equal(a, b) for a, b in zip(grads["ddp"], grads[k], strict=True))
        ]
        found.append(same[0] if len(same) == 1 else "neither")
    dist.destroy_process_group()
    return found


@UNDER_LAUNCHER
@pytest.mark.parametrize(
    "config, steps",
    [
        ("default", ["multiply"] * 3),
        ("bucket_view", ["multiply"] * 3),  # .grad set to None each step: no view kept
        ("bucket_view_zeroed", ["multiply", "divide", "divide"]),  # .grad a bucket's view
        ("batched_grad_copy", ["divide"] * 3),
    ],
)
def test_the_reducer_multiplies_by_one_over_world_size_unless_grads_are_views(config, steps):
    # 03-27, 03-61 (3.6), mini_ddp's mini_divided: the reducer multiplies a gradient copied
    # into its bucket by 1 / world size; it divides the bucket where .grad is a view into
    # it (gradient_as_bucket_view=True, and .grad kept by zero_grad(set_to_none=False): from
    # the second step) and with batched_grad_copy=True.
    assert launch(_reducer_arithmetic, config, nprocs=3)[0] == steps


def _bucket_layouts(bucket_cap_mb) -> list[list[list[str]]]:
    """The buckets of DDP's first two steps, each a list of parameter names, for a model
    that uses its modules in the reverse of the order it registers them."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    class LastRegisteredFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.late = torch.nn.Linear(512, 512)  # registered first, used last: 1 MiB + bias
            self.early = torch.nn.Linear(512, 512)

        def forward(self, x):
            return self.late(torch.tanh(self.early(x)))

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = LastRegisteredFirst()
    names = {id(p): n for n, p in net.named_parameters()}
    kwargs = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    model, seen = DDP(net, **kwargs), []
    hook = _counting_hook([])

    def recording(state, bucket):
        seen.append((bucket.index(), [names[id(p)] for p in bucket.parameters()]))
        return hook(state, bucket)

    model.register_comm_hook(None, recording)
    layouts = []
    for _ in range(2):
        seen.clear()
        model(torch.randn(4, 512)).sum().backward()
        layouts.append([params for _, params in sorted(seen)])
    dist.destroy_process_group()
    return layouts


@UNDER_LAUNCHER
def test_step_one_has_one_bucket_then_buckets_follow_the_order_gradients_were_ready():
    # 03-30, 03-31, 03-61: the first step uses one bucket (nothing to overlap); from the
    # second, buckets are rebuilt in the order step 1 produced the gradients (here `late`
    # first, though registered first: not the reverse of parameters()), the first one
    # closed at 1 MiB when bucket_cap_mb is not given.
    first, second = launch(_bucket_layouts, None, nprocs=2)[0]
    assert first == [["late.weight", "late.bias", "early.weight", "early.bias"]]
    assert second == [["late.bias", "late.weight"], ["early.bias", "early.weight"]]
    _, given = launch(_bucket_layouts, 25, nprocs=2)[0]
    assert given == [["late.bias", "late.weight", "early.bias", "early.weight"]]  # 25 MiB


def _buckets_of_the_lessons_model(setting: str | None, steps: int = 3) -> dict:
    """For 03-30's model (8 x Linear(1024, 1024) and a Linear(1024, 256): 33 MiB), wrapped
    with DDP's defaults or with `setting` (a keyword set to True): the size of each bucket
    (MiB) at each step, the parameters of bucket 0, and, for each bucket's hook, how many
    parameters had no gradient yet (zero_grad set them to None): the backward still
    running while that bucket's all_reduce starts."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
    net.append(torch.nn.Linear(1024, 256))
    order = {id(p): i for i, p in enumerate(net.parameters())}
    model = DDP(net, **({} if setting is None else {setting: True}))
    hook, sizes, first, pending = _counting_hook([]), [], [], []

    def recording(state, bucket):
        sizes[-1].append((bucket.index(), round(bucket.buffer().numel() * 4 / 2**20, 2)))
        if bucket.index() == 0:
            first.append(sorted(order[id(p)] for p in bucket.parameters()))
        pending[-1].append(sum(p.grad is None for p in net.parameters()))
        return hook(state, bucket)

    model.register_comm_hook(None, recording)
    for _ in range(steps):
        sizes.append([])
        pending.append([])
        model.zero_grad(set_to_none=True)
        model(torch.randn(2, 1024)).sum().backward()
    dist.destroy_process_group()
    shown = [[size for _, size in sorted(step)] for step in sizes]
    return {"sizes": shown, "bucket0": first, "pending": pending, "count": len(order)}


@UNDER_LAUNCHER
def test_on_the_lessons_model_buckets_close_past_25_mib_and_start_before_backward_ends():
    # 03-13, 03-34, 03-85: the first step reduces all 33 MiB in one bucket, after the whole
    # backward; from the second, bucket 0 (the last layer) closes at 1 MiB and the next at
    # the first gradient past 25 MiB (a gradient is never split), rebuilt once (step 3 as
    # step 2); and bucket 0's all_reduce starts while backward() still has 16 of the 18
    # gradients to compute.
    found = launch(_buckets_of_the_lessons_model, None, nprocs=2)[0]
    assert found["sizes"][0] == [33.03]
    assert found["pending"][0] == [0]  # step 1: after the whole backward
    assert found["sizes"][1] == found["sizes"][2] == [1.0, 28.03, 4.0]
    assert found["bucket0"][1] == found["bucket0"][2]  # rebuilt once: step 3 as step 2
    assert 28.03 - 4.0 < 25 < 28.03  # the bucket took the gradient that crossed 25 MiB
    assert all(step[0] == 16 for step in found["pending"][1:])  # gradients still to come
    assert found["bucket0"][1] == [16, 17]  # the last layer's weight and bias


@UNDER_LAUNCHER
def test_with_find_unused_parameters_bucket_zero_holds_the_last_parameters():
    # 03-34: find_unused_parameters=True lays the buckets out at wrapping, from
    # model.parameters() reversed (the last parameters in bucket 0), and keeps them.
    found = launch(_buckets_of_the_lessons_model, "find_unused_parameters", nprocs=2)[0]
    assert found["sizes"] == [[1.0, 28.03, 4.0]] * 3
    last = found["bucket0"][0]
    assert last == list(range(found["count"] - len(last), found["count"])), last
    assert found["bucket0"] == [last] * 3


@UNDER_LAUNCHER
def test_with_static_graph_the_first_two_steps_use_one_bucket_and_the_third_rebuilds():
    # 03-13, 03-34: "the first step puts every gradient in one bucket" is DDP's defaults;
    # with static_graph=True the first two steps use the one bucket, the buckets are
    # rebuilt at the third (as the defaults' second step lays them out), and kept.
    found = launch(_buckets_of_the_lessons_model, "static_graph", 4, nprocs=2)[0]
    assert found["sizes"] == [[33.03], [33.03], [1.0, 28.03, 4.0], [1.0, 28.03, 4.0]]
    assert found["bucket0"][2] == found["bucket0"][3] == [16, 17]


def _unused_parameter_steps() -> dict:
    """A model with a parameter no forward uses (`head`): whether step 1 averaged the used
    one's gradient, then what step 2 does."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.body(x).sum()  # head is never used

    torch.manual_seed(0)
    model = DDP(Unused())
    torch.manual_seed(rank + 1)
    model(torch.randn(2, 4)).backward()
    found = {"step1_averaged": same_on_every_rank(model.module.body.weight.grad)}
    try:
        model(torch.randn(2, 4)).backward()
        found["step2"] = "ran"
    except RuntimeError as exc:
        found["step2"] = "raised" if "finished reduction in the prior" in str(exc) else str(exc)
    dist.destroy_process_group()
    return found


@UNDER_LAUNCHER
def test_an_unused_parameter_leaves_step_one_unaveraged_and_step_two_raises():
    # 03-43: with a parameter no forward uses (find_unused_parameters=False), step 1
    # silently does not average (its bucket never completes), and step 2's forward raises.
    for found in launch(_unused_parameter_steps, nprocs=2, timeout=60):
        assert found == {"step1_averaged": False, "step2": "raised"}


def _buffers_after_forwards(sync: bool) -> list[bool]:
    """Whether BatchNorm's running mean is equal on both ranks after each of: a training
    forward and backward on different data, a no_grad forward, then (after rank 1 moves
    its own statistics) another no_grad forward, then two training forwards of one batch
    that both ranks share."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    kwargs = {} if sync else {"forward_sync_buffers": False}
    model = DDP(net, **kwargs)

    def equal() -> bool:
        return same_on_every_rank(model.module[1].running_mean)

    torch.manual_seed(rank + 1)
    model(torch.randn(8, 3) * (rank + 1)).sum().backward()
    found = [equal()]
    model.eval()
    with torch.no_grad():
        model(torch.randn(8, 3))  # broadcast first: the last forward had gradients
        found.append(equal())
        if rank == 1:
            model.module[1].running_mean.add_(1.0)
        model(torch.randn(8, 3))  # none: the last forward ran without gradients
        found.append(equal())
    model.train()
    torch.manual_seed(0)
    same = torch.randn(8, 3)  # the same batch on both ranks: equal after, if equal before
    model(same).sum().backward()  # none: the last forward ran without gradients
    found.append(equal())
    model(same).sum().backward()  # rank 0's first: the last forward had gradients
    found.append(equal())
    dist.destroy_process_group()
    return found


@UNDER_LAUNCHER
def test_buffers_are_broadcast_before_a_forward_that_follows_one_with_gradients():
    # 03-18, 03-32...03-39, 03-54, 04-40...04-45: nothing averages buffers; rank 0's are
    # broadcast before a forward when the previous one ran with gradients (outside
    # no_sync); not after a forward without them (the first training forward after
    # evaluation included); never with forward_sync_buffers=False.
    found = launch(_buffers_after_forwards, True, nprocs=2)[0]
    assert found == [False, True, False, False, True]
    assert launch(_buffers_after_forwards, False, nprocs=2)[0] == [False] * 5


def test_float16_rounds_a_small_gradient_to_zero_where_bfloat16_keeps_it():
    # 03-64: float16 (unlike bfloat16) needs a GradScaler: a gradient of 1e-8 underflows
    # to zero in float16 (smallest normal 6.1e-5, subnormal 6e-8); bfloat16 has float32's
    # exponent range; scaled by 2**16 (GradScaler's default start), float16 keeps it.
    import torch

    small = torch.tensor(1e-8)
    assert small.half().item() == 0.0
    assert small.bfloat16().item() != 0.0
    assert torch.finfo(torch.bfloat16).tiny == torch.finfo(torch.float32).tiny
    assert (small * 2.0**16).half().item() != 0.0
    assert torch.amp.GradScaler("cpu").get_scale() == 2.0**16


def test_layernorm_and_groupnorm_normalise_each_example_alone_batchnorm_does_not():
    # 03-43: LayerNorm and GroupNorm look at one example at a time: a batch's output is its
    # examples' outputs, each normalised alone; BatchNorm's (training) is not.
    import torch

    torch.manual_seed(0)
    x = torch.randn(6, 4, 5) * torch.arange(1.0, 7.0).view(6, 1, 1)
    for norm in (torch.nn.LayerNorm([4, 5]), torch.nn.GroupNorm(2, 4), torch.nn.BatchNorm1d(4)):
        alone = torch.cat([norm(x[i : i + 1]) for i in range(len(x))])
        per_example = torch.allclose(norm(x), alone, atol=1e-6)
        assert per_example is (not isinstance(norm, torch.nn.BatchNorm1d)), norm
