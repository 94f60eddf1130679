"""More claims of the lessons, about the process group, DDP and the sampler: the ones a
few lines show, on gloo ranks or in this process. Where the course's launcher could change
what torch does (its store, its init barrier, its debug level, its kept groups), the ranks
are plain processes (claims_support.plain_job, as torchrun starts them); the launcher runs
only what its settings cannot touch: a collective's values, DDP's arithmetic, an error
raised before anything connects (each such test is marked under_launcher, with why).
docs/claims.md names each claim's cell and its test here."""

from __future__ import annotations

import json
import math
import os
import re
import socket

import pytest
from claims_support import plain_job

from ddp_helpers import DistributedError, launch


def _collectives() -> dict:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    summed = torch.tensor([float(rank + 1)])
    dist.all_reduce(summed)  # the default op
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    sent = torch.full((3,), float(rank))
    dist.broadcast(sent, src=0)
    dist.destroy_process_group()
    return {
        "sum": summed.item(),
        "gathered": [t.item() for t in gathered],
        "broadcast": sent.tolist(),
        "initialized_after_destroy": dist.is_initialized(),
    }


@pytest.mark.under_launcher(
    "a collective's values; guards=False, so destroy_process_group() is torch's own; "
    "one OpenMP thread and the loopback interface change no value"
)
def test_all_reduce_sums_all_gather_orders_broadcast_copies_and_destroy_ends_the_group():
    # 01-19, 02-14, 02-07: all_reduce sums by default and leaves the sum on every rank;
    # all_gather gives every rank every rank's tensor, in rank order; broadcast copies the
    # source's; after destroy_process_group() there is no group. Without the launcher's
    # guards (guards=False): destroy_process_group() is torch's own, and frees the group.
    for got in launch(_collectives, nprocs=3, guards=False, timeout=60):
        assert got == {
            "sum": 6.0,
            "gathered": [0.0, 1.0, 2.0],
            "broadcast": [0.0] * 3,
            "initialized_after_destroy": False,
        }


# Plain processes, as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
# torch's own env:// rendezvous and store, no launcher between. Each rank writes what it
# saw to OUT.RANK.
ENV_RENDEZVOUS = """\
import json
import os
import sys

import psutil
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

dist.init_process_group()  # no init_method (env://), no backend
port = int(os.environ["MASTER_PORT"])
me = psutil.Process()
connections = getattr(me, "net_connections", None) or me.connections  # psutil 5.9: the latter
listens = any(
    c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in connections("inet")
)
seen = {
    "master_addr": os.environ["MASTER_ADDR"],
    "listens_on_master_port": listens,
    "store_timeout_s": c10d._get_default_store().timeout.total_seconds(),
    "get_backend": dist.get_backend(),
    "backend_config": str(dist.get_backend_config()),
}
dist.barrier()
dist.destroy_process_group()
seen["initialized_after_destroy"] = dist.is_initialized()
with open(f"{sys.argv[1]}.{os.environ['RANK']}", "w") as f:
    json.dump(seen, f)
"""


def _plain_ranks(tmp_path, script: str, nprocs: int = 2, limit: float = 60.0) -> tuple:
    """(plain_job's outcome, what each rank wrote to OUT.RANK: None if nothing)."""
    path, out = tmp_path / "job.py", tmp_path / "out"
    path.write_text(script)
    outcome = plain_job(path, nprocs=nprocs, limit=limit, args=(str(out),))
    seen = []
    for rank in range(nprocs):
        written = out.with_name(f"out.{rank}")
        seen.append(json.loads(written.read_text()) if written.exists() else None)
    return outcome, seen


def test_env_rendezvous_rank_zero_serves_the_store_the_others_connect(tmp_path):
    # 01-05, 02-06, 02-23, 02-29, 02-31: with no init_method, init_process_group reads the
    # environment (env://): rank 0 serves the store at MASTER_ADDR:MASTER_PORT, the others
    # connect to it; its timeout is 30 minutes for a bare init_process_group(), which takes
    # gloo on a machine without an accelerator while get_backend() says "undefined".
    outcome, seen = _plain_ranks(tmp_path, ENV_RENDEZVOUS)
    assert outcome == "clean", outcome
    common = {
        "master_addr": "127.0.0.1",
        "store_timeout_s": 1800.0,
        "get_backend": "undefined",
        "backend_config": "cpu:gloo",
        "initialized_after_destroy": False,
    }
    assert seen == [
        {**common, "listens_on_master_port": True},
        {**common, "listens_on_master_port": False},
    ]


def _ddp_at_construction_and_backward() -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # a different start on every rank
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    net[1].running_mean.fill_(float(rank + 1))
    model = DDP(net)
    state = {k: v.clone() for k, v in model.module.state_dict().items()}
    x = torch.full((4, 3), float(rank + 1))
    torch.nn.functional.mse_loss(model(x), torch.zeros(4, 2)).backward()
    grad = model.module[0].weight.grad.clone()
    local = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    local.load_state_dict(state)
    torch.nn.functional.mse_loss(local(x), torch.zeros(4, 2)).backward()
    mean = local[0].weight.grad.clone()
    dist.all_reduce(mean)
    mean /= world
    states = [None] * world
    dist.all_gather_object(states, {k: v.tolist() for k, v in state.items()})
    same = [p is q for p, q in zip(model.parameters(), model.module.parameters(), strict=True)]
    dist.destroy_process_group()
    return {
        "same_start": all(s == states[0] for s in states),
        "averaged": bool(torch.allclose(grad, mean, atol=1e-6)),
        "same_parameter_objects": all(same),
        "keys": sorted(model.state_dict())[:2],
    }


@pytest.mark.under_launcher(
    "DDP decides its broadcast and its averaged gradients at construction and in backward; "
    "the launcher acts at init's end and at exit"
)
def test_ddp_broadcasts_rank_zeros_parameters_and_buffers_then_averages_the_gradients():
    # 02-16, 03-10, 03-62, d84bc519: DDP(model) gives every rank rank 0's parameters and
    # buffers; backward() leaves each rank the mean of the ranks' gradients; the wrapper's
    # parameters are the module's own tensors; its state_dict keys start with "module.".
    for got in launch(_ddp_at_construction_and_backward, nprocs=2):
        assert got == {
            "same_start": True,
            "averaged": True,
            "same_parameter_objects": True,
            "keys": ["module.0.bias", "module.0.weight"],
        }


def _ddp_misuses() -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    found = {}
    for name, make in {
        "device_ids_on_cpu": lambda: DDP(torch.nn.Linear(2, 2), device_ids=[0]),
        "init_twice": lambda: dist.init_process_group("gloo"),
        "sync_batchnorm_on_cpu": lambda: DDP(
            torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(2))
        ),
        "avg_of_integers": lambda: dist.all_reduce(torch.tensor([10]), op=dist.ReduceOp.AVG),
    }.items():
        try:
            make()
            found[name] = "ran"
        except Exception as exc:  # noqa: BLE001 - which one is the finding
            found[name] = type(exc).__name__
    net = torch.nn.Linear(2, 2)
    net.class_names = ["a", "b"]
    try:
        DDP(net).class_names  # noqa: B018
        found["attribute_through_wrapper"] = "found"
    except AttributeError:
        found["attribute_through_wrapper"] = "AttributeError"
    bare = torch.nn.Linear(2, 2)
    try:
        bare.load_state_dict(DDP(torch.nn.Linear(2, 2)).state_dict())
        found["strict_load_of_module_keys"] = "ran"
    except RuntimeError:
        found["strict_load_of_module_keys"] = "RuntimeError"
    dist.destroy_process_group()
    return found


@pytest.mark.under_launcher(
    "each refusal is a check inside the call itself, raised before any exchange"
)
def test_ddp_and_the_group_refuse_what_the_lessons_say_they_refuse():
    # 03-05, 02-33, 03-43, 02-40, 04-e2, d84bc519: device_ids for a CPU module; a second
    # init_process_group; SyncBatchNorm on CPU under DDP; AVG of integers on gloo; an
    # attribute of the module through the wrapper; a "module."-prefixed state_dict loaded
    # strictly into the bare model.
    for got in launch(_ddp_misuses, nprocs=2):
        assert got == {
            "device_ids_on_cpu": "ValueError",
            "init_twice": "ValueError",
            "sync_batchnorm_on_cpu": "ValueError",
            "avg_of_integers": "RuntimeError",
            "attribute_through_wrapper": "AttributeError",
            "strict_load_of_module_keys": "RuntimeError",
        }


def _shapes_differ() -> str:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    DDP(torch.nn.Linear(4 + dist.get_rank(), 1))
    return "built"


@pytest.mark.under_launcher(
    "DDP's shape check runs in its constructor; the launcher acts at init's end and at exit"
)
def test_ddp_checks_at_construction_that_every_rank_has_the_same_shapes():
    # 03-85: a model whose parameters differ in shape across ranks fails at DDP(...).
    with pytest.raises(DistributedError) as caught:
        launch(_shapes_differ, nprocs=2, timeout=60)
    assert caught.value.exc_type == "RuntimeError"


def _after_wrapping_nothing_rechecks() -> bool:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(3, 1))
    if dist.get_rank() == 1:
        with torch.no_grad():
            model.module.weight.add_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    weights = [torch.zeros_like(model.module.weight) for _ in range(2)]
    dist.all_gather(weights, model.module.weight.detach())
    dist.destroy_process_group()
    return torch.equal(weights[0], weights[1])


@pytest.mark.under_launcher(
    "what DDP does (or not) in forward and backward; the launcher acts at init's end and at exit"
)
def test_ddp_never_checks_again_that_the_ranks_weights_agree():
    # 03-10: after construction, a rank whose weights drift keeps them: no error, no fix.
    assert list(launch(_after_wrapping_nothing_rechecks, nprocs=2)) == [False, False]


# Rank 1 never calls init_process_group (busy until rank 0 has written what it saw);
# rank 0's rendezvous, with a 2 s timeout, on torch's own store (which waits for workers).
NEVER_ARRIVES = """\
import json
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

out = f"{sys.argv[1]}.{os.environ['RANK']}"
if os.environ["RANK"] == "1":
    until = time.monotonic() + 30
    while not os.path.exists(f"{sys.argv[1]}.0") and time.monotonic() < until:
        time.sleep(0.1)
    os._exit(0)
started = time.monotonic()
try:
    dist.init_process_group("gloo", timeout=timedelta(seconds=2))
    said = "joined"
except Exception:  # that it fails, and when, is the finding
    said = time.monotonic() - started
with open(out, "w") as f:
    json.dump(said, f)
os._exit(0)
"""


def test_a_rank_that_never_arrives_ends_the_rendezvous_at_the_timeout(tmp_path):
    # 02-23: rank 0 waits at the rendezvous until its timeout (2 s here), then fails.
    # Plain processes: torch's own store, no init barrier of the launcher's.
    # Failed, after the timeout and well before twice it (torch's store looks again at
    # intervals of its own, so not at 2.0 s sharp).
    outcome, seen = _plain_ranks(tmp_path, NEVER_ARRIVES)
    assert isinstance(seen[0], float) and 2.0 <= seen[0] < 4.0, (outcome, seen)


# TORCH_DISTRIBUTED_DEBUG=DETAIL set before torch is imported, as under torchrun. MODE
# "mismatch": rank 0 all-reduces while rank 1 enters a barrier; "absent": rank 1 calls no
# collective at all (busy until rank 0 is done). Rank 0 writes how long its collective
# took and what it raised; the group's timeout is 4 s.
DETAIL = """\
import json
import os
import sys
import time
from datetime import timedelta

os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
import torch
import torch.distributed as dist

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=timedelta(seconds=4))
started = time.monotonic()
try:
    if rank == 0:
        dist.all_reduce(torch.ones(3))
    elif mode == "mismatch":
        dist.barrier()
    else:
        until = time.monotonic() + 30
        while not os.path.exists(f"{out}.0") and time.monotonic() < until:
            time.sleep(0.1)
    said = "no error"
except Exception as exc:  # which error, and when, is the finding
    said = f"{type(exc).__name__}: {exc}"
with open(f"{out}.{rank}", "w") as f:
    json.dump({"seconds": time.monotonic() - started, "said": said}, f)
os._exit(0)
"""


def _detail_job(tmp_path, mode: str) -> dict:
    path, out = tmp_path / f"{mode}.py", tmp_path / mode
    path.write_text(DETAIL)
    outcome = plain_job(path, limit=60, args=(str(out), mode))
    written = out.with_name(f"{mode}.0")
    assert written.exists(), outcome
    return json.loads(written.read_text())


def test_detail_debug_names_a_collective_mismatch_at_once(tmp_path):
    # 02-25, 02-29: with TORCH_DISTRIBUTED_DEBUG=DETAIL (set before torch is imported), a
    # rank calling another collective than its peers fails at once (well inside the group's
    # 4 s timeout), naming each rank's operation. Plain processes, as under torchrun.
    rank0 = _detail_job(tmp_path, "mismatch")
    assert rank0["seconds"] < 3.0, rank0
    said = rank0["said"]
    assert said.startswith("RuntimeError: Detected mismatch between collectives"), rank0
    # Each rank's operation (rank 1's barrier is a REDUCE inside gloo), rank 0's shape.
    assert re.search(r"Rank 0 is running collective: .*OpType=ALLREDUCE, TensorShape=\[3\]", said)
    assert re.search(r"but Rank 1 is running collective: .*OpType=\w+", said), said


def test_detail_debug_still_waits_for_a_rank_that_calls_no_collective_until_the_timeout(
    tmp_path,
):
    # 02-25: DETAIL's check compares the collectives the ranks call; a rank that calls none
    # leaves the others waiting until the group's timeout (4 s here), as without DETAIL.
    rank0 = _detail_job(tmp_path, "absent")
    assert rank0["said"] != "no error" and rank0["seconds"] >= 3.5, rank0


# TORCH_DISTRIBUTED_DEBUG=INFO set before torch is imported, as under torchrun: a DDP
# model whose aux_head gets no gradient, trained two steps without find_unused_parameters.
INFO_UNUSED = """\
import json
import os
import sys

os.environ["TORCH_DISTRIBUTED_DEBUG"] = "INFO"
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class WithAHead(torch.nn.Linear):  # Linear's forward: the head is never used
    def __init__(self):
        super().__init__(4, 4)
        self.aux_head = torch.nn.Linear(4, 1)


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(WithAHead())
try:
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
    said = "trained"
except RuntimeError as exc:
    said = str(exc)
with open(f"{sys.argv[1]}.{os.environ['RANK']}", "w") as f:
    json.dump(said, f)
os._exit(0)
"""


def test_debug_info_set_before_the_ranks_start_names_the_unused_parameter(tmp_path):
    # 02-29: TORCH_DISTRIBUTED_DEBUG=INFO works with DDP (no crash, unlike DETAIL) and makes
    # its error name the parameter that got no gradient. Plain processes, as under torchrun.
    outcome, seen = _plain_ranks(tmp_path, INFO_UNUSED)
    for said in seen:
        assert said is not None and "aux_head.weight" in said, (outcome, said)


@pytest.mark.parametrize("gpus", [1, 8])
def test_the_automatic_choice_reads_the_accelerators_kind_and_registers_nccl_alone(
    monkeypatch, gpus
):
    # 02-31: with no backend named, BackendConfig asks which kind of accelerator the machine
    # has (not how many GPUs) and registers that kind's backend alone: on a CUDA machine,
    # cuda:nccl and nothing for the CPU; "cpu:gloo,cuda:nccl" registers both.
    import torch
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    # A CUDA machine, as each release asks for it: torch._C._get_accelerator (2.13),
    # torch.accelerator.current_accelerator(check_available=True) (2.15).
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))
    if hasattr(torch, "accelerator"):
        cuda = lambda check_available=False: torch.device("cuda")  # noqa: E731
        monkeypatch.setattr(torch.accelerator, "current_accelerator", cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert str(BackendConfig(Backend(Backend.UNDEFINED))) == "cuda:nccl"
    assert str(BackendConfig(Backend("cpu:gloo,cuda:nccl"))) == "cpu:gloo,cuda:nccl"


def _nccl_here() -> str:
    import torch.distributed as dist

    try:
        dist.init_process_group("nccl")
    except (RuntimeError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return "initialised"


@pytest.mark.under_launcher(
    "raised inside init_process_group before anything connects (distributed_c10d.py:2181)"
)
def test_nccl_on_a_machine_without_a_gpu_is_refused_at_init_with_the_builds_reason():
    # 02-21: a CPU-only build of torch (the lock's) says NCCL is not built in; a CUDA build
    # on a machine without a GPU (make compat's builds, here) says a GPU is missing, in
    # words that changed: "no GPUs found" (2.12), "requires at least one CUDA device"
    # (2.15).
    import torch

    said = launch(_nccl_here, nprocs=1)[0]
    if torch.version.cuda is None:
        assert said.startswith("RuntimeError") and "have NCCL built in" in said, said
    else:
        assert not torch.cuda.is_available(), "the claim is about a machine without a GPU"
        assert "no GPUs found" in said or "requires at least one CUDA device" in said, said


def test_a_store_on_a_taken_port_fails_at_once():
    # 02-35: a TCPStore asked to serve on a port already in use fails (nothing waits).
    from torch.distributed import TCPStore

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(Exception, match="already in use"):
            TCPStore("127.0.0.1", taken.getsockname()[1], 1, is_master=True, wait_for_workers=False)


def test_a_cuda_device_is_only_a_name_without_a_gpu():
    # 01-09: torch.device("cuda", 1) is made on a machine without any GPU.
    import torch

    assert not torch.cuda.is_available()
    assert torch.device("cuda", 1).index == 1


def test_the_sampler_shuffles_by_default_pads_shuffled_shares_and_drops_on_request():
    # 04-e2, 04-e6, 04-24d, 04-24e, 04-53, 04-07: shuffle=True by default; every rank as
    # many items; shuffled padding repeats that epoch's first items (4 and 1 for seed 0, 10
    # items on 3 ranks); drop_last cuts instead; 513 items on 2 ranks: 257 each, item 0
    # twice (at most W - 1 items counted twice in an evaluation).
    import torch
    from torch.utils.data.distributed import DistributedSampler

    assert DistributedSampler(range(10), 1, 0).shuffle is True
    for n in range(1, 40):
        for w in range(1, 6):
            sizes = {len(list(DistributedSampler(range(n), w, r))) for r in range(w)}
            assert sizes == {math.ceil(n / w)}
    shares = [list(DistributedSampler(range(10), 3, r)) for r in range(3)]
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist()
    assert order[:2] == [4, 1] and sorted(sum(shares, [])) == sorted(order + [4, 1])
    dropped = [list(DistributedSampler(range(10), 3, r, False, drop_last=True)) for r in range(3)]
    assert [len(s) for s in dropped] == [3, 3, 3] and 9 not in sum(dropped, [])
    halves = [list(DistributedSampler(range(513), 2, r, shuffle=False)) for r in range(2)]
    assert [len(h) for h in halves] == [257, 257] and sum(halves, []).count(0) == 2


def test_a_dataloader_takes_a_sampler_or_shuffle_not_both():
    # 04-24c: DataLoader(..., shuffle=True, sampler=...) raises ValueError.
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    data = list(range(8))
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(data, shuffle=True, sampler=DistributedSampler(data, 2, 0))


def test_set_epoch_reproduces_an_epochs_order_in_a_fresh_sampler():
    # 04-29: a restarted job's new sampler, told the epoch, draws that epoch's order.
    from torch.utils.data.distributed import DistributedSampler

    first = DistributedSampler(range(20), 2, 1)
    orders = []
    for epoch in range(3):
        first.set_epoch(epoch)
        orders.append(list(first))
    fresh = DistributedSampler(range(20), 2, 1)
    fresh.set_epoch(2)
    assert list(fresh) == orders[2] != orders[1]


def test_eval_no_grad_dropout_and_momentum_behave_as_the_lessons_say():
    # 04-07, 04-14, 04-25: eval() makes dropout the identity and BatchNorm use its running
    # statistics; no_grad() records no graph; dropout draws from the global generator (the
    # same seed, the same masks); SGD's momentum buffers are in optimizer.state_dict().
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3), torch.nn.Dropout())
    net[1].running_mean.fill_(1.0)
    x = torch.randn(5, 3)
    net.eval()
    with torch.no_grad():
        out = net(x)
    want = (net[0](x) - 1.0) / torch.sqrt(net[1].running_var + net[1].eps)
    assert out.grad_fn is None and not out.requires_grad
    assert torch.allclose(out.detach(), want * net[1].weight + net[1].bias, atol=1e-6)
    drop = torch.nn.Dropout()
    masks = []
    for _ in range(2):
        torch.manual_seed(7)
        masks.append(drop(torch.ones(20)))
    assert torch.equal(masks[0], masks[1])
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net.train()
    net(x).sum().backward()
    opt.step()
    assert all("momentum_buffer" in s for s in opt.state_dict()["state"].values())


def test_a_post_accumulate_grad_hook_sees_the_finished_gradient():
    # 03-80: register_post_accumulate_grad_hook runs once .grad holds the whole gradient.
    import torch

    p = torch.nn.Parameter(torch.ones(3))
    seen = []
    p.register_post_accumulate_grad_hook(lambda q: seen.append(q.grad.clone()))
    (p * 2).sum().backward()
    assert len(seen) == 1 and torch.equal(seen[0], p.grad)


@pytest.mark.under_launcher("SyncBatchNorm's refusal on CPU is a check in its forward")
def test_sync_batchnorm_replaces_every_batchnorm_and_needs_a_gpu_to_train():
    # 03-43: convert_sync_batchnorm replaces each BatchNorm; with a group on CPU, a training
    # forward of SyncBatchNorm raises, an evaluation forward runs.
    import torch

    net = torch.nn.Sequential(
        torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)
    )
    synced = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)
    kinds = [type(m).__name__ for m in synced]
    assert kinds == ["SyncBatchNorm", "Linear", "SyncBatchNorm"]
    assert launch(_sync_batchnorm_forwards, nprocs=2)[0] == ["ValueError", "ran"]


def _sync_batchnorm_forwards() -> list:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    norm = torch.nn.SyncBatchNorm(2)
    found = []
    for train in (True, False):
        norm.train(train)
        try:
            norm(torch.randn(4, 2))
            found.append("ran")
        except ValueError:
            found.append("ValueError")
    dist.destroy_process_group()
    return found


def test_cuda_visible_devices_is_what_a_rank_counts_its_gpus_from():
    # 02-43: a scheduler that gives each task one GPU (CUDA_VISIBLE_DEVICES=3 for this task)
    # leaves torch one device to count, whatever the machine holds.
    import subprocess
    import sys

    probe = "import torch.cuda as c; print(c._parse_visible_devices())"
    for visible, seen in (("3", "[3]"), ("0,1,2,3", "[0, 1, 2, 3]")):
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "CUDA_VISIBLE_DEVICES": visible},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert out == seen, (visible, out)
