"""The learner-answer sweep: real mistakes must not pass, and right answers written
differently from the reference must. Plus: one source for every reference answer.

Each wrong answer is a mistake learners make (COURSE.md's table, the forums, a loop
tried by hand); each must get the message that names it. Each right answer differs from
the reference in algorithm, import style or the API it reads.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap

import cloudpickle
import nbformat
import pytest
from test_capstone import SWEEP_4_2

from conftest import ROOT
from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name

pytestmark = pytest.mark.usefixtures("no_leftovers")

# The answers travel to the ranks by value, as a notebook's do: a rank that had to import
# this module (and pytest with it) would spend seconds on it.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ALL = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
BY_ID = {ex.id: ex for ex in ALL}


# ---------------------------------------------------------------- one source


def _function_ast(source: str, name: str) -> str:
    """The function `name` in source, as an AST dump without its imports and docstring."""
    tree = ast.parse(textwrap.dedent(source))
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    body = [n for n in fn.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    fn.body = body
    fn.decorator_list = []
    return ast.dump(fn, include_attributes=False)


def _solution_cell(lesson: str, name: str) -> str:
    nb = nbformat.read(ROOT / "solutions" / notebook_name(lesson), as_version=4)
    cells = [
        c.source
        for c in nb.cells
        if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source and f"def {name}(" in c.source
    ]
    assert len(cells) == 1, f"{name}: {len(cells)} solution cells define it"
    return cells[0]


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.id)
def test_the_reference_is_the_notebooks_solution_code(exercise):
    # The check's reference and the notebook's solution are one answer: a fix in one place
    # that misses the other fails here. (Imports inside the module's copy are its context.)
    lesson = exercise.id.split(".")[0].zfill(2)
    notebook = _function_ast(_solution_cell(lesson, exercise.name), exercise.name)
    module = _function_ast(inspect.getsource(exercise.reference), exercise.name)
    assert notebook == module, f"solutions/{notebook_name(lesson)} and the module differ"


# ---------------------------------------------------------------- answers, lesson 01


def gpu_from_the_global_rank():
    import torch

    return torch.device("cuda", int(os.environ["RANK"]))


def gpu_from_the_machine_number():
    return f"cuda:{os.environ['GROUP_RANK']}"


def gpu_without_a_number():
    return "cuda"


def gpu_as_a_string():
    return f"cuda:{os.environ['LOCAL_RANK']}"


def gpu_from_rank_modulo_ranks_per_machine():
    import torch

    local = int(os.environ["RANK"]) % int(os.environ["LOCAL_WORLD_SIZE"])
    return torch.device(f"cuda:{local}")


def shard_in_blocks(n, rank, world_size):
    size = -(-n // world_size)
    return list(range(rank * size, min(n, (rank + 1) * size)))


def shard_without_padding(n, rank, world_size):
    return list(range(n))[rank::world_size]


def shard_padded_from_the_end(n, rank, world_size):
    total = -(-n // world_size) * world_size
    padded = list(range(n)) + [n - 1] * (total - n)
    return padded[rank::world_size]


def shard_with_the_sampler_itself(n, rank, world_size):
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))


def shard_by_counting(n, rank, world_size):
    per_rank = (n + world_size - 1) // world_size
    return [(rank + k * world_size) % n for k in range(per_rank)]


# ---------------------------------------------------------------- lesson 02


def backend_by_world_size():
    import torch

    enough = torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"])
    return "nccl" if torch.cuda.is_available() and enough else "gloo"


def backend_nccl_with_any_gpu():
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def backend_always_nccl():
    return "nccl"


def backend_as_an_enum():
    import torch
    import torch.distributed as dist

    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return dist.Backend.NCCL if torch.cuda.device_count() >= ranks_here else dist.Backend.GLOO


def backend_from_a_table():
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {True: "nccl", False: "gloo"}[gpus >= int(os.environ["LOCAL_WORLD_SIZE"])]


def setup_gpu_from_the_global_rank():
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_nccl_without_device_id():
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        dist.init_process_group("gloo")
        return torch.device("cpu")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")  # the tutorials' line
    return torch.device("cuda", local_rank)


def setup_never_pinned():
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=device)  # binds the group, not the process
    return device


def setup_always_gloo():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return torch.device("cpu")


def setup_returning_nothing():
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        dist.init_process_group("gloo")
        return
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)


def setup_telling_the_local_rank_as_rank():
    import torch
    import torch.distributed as dist

    local_rank, ranks_here = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < ranks_here:
        dist.init_process_group("gloo", rank=local_rank, world_size=ranks_here)
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", rank=local_rank, world_size=ranks_here, device_id=device)
    return device


def setup_with_numbers_and_keywords():
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= int(os.environ["LOCAL_WORLD_SIZE"]):
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl", device_id=local_rank)
        return torch.device(f"cuda:{local_rank}")
    dist.init_process_group(backend="gloo")
    return torch.device("cpu")


def setup_letting_torch_name_the_backend():
    import torch
    from torch.distributed import barrier, get_rank, get_world_size, init_process_group

    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])
    nccl = torch.cuda.is_available() and torch.cuda.device_count() >= ranks_here
    if nccl:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        init_process_group(device_id=device)  # no backend: torch takes CUDA's, nccl
    else:
        device = torch.device("cpu")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        init_process_group("gloo", rank=rank, world_size=world)
    if not 0 <= get_rank() < get_world_size():
        raise RuntimeError("not in the group")
    barrier()
    return device


def cleanup_forgotten():
    pass


def cleanup_on_rank_zero_only():
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.destroy_process_group()


def cleanup_with_a_barrier_instead():
    import torch.distributed as dist

    dist.barrier()  # everybody is done ... but nobody leaves


def cleanup_after_a_barrier():
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def cleanup_only_if_initialised():
    from torch.distributed import destroy_process_group, is_initialized

    if is_initialized():
        destroy_process_group()


def gradients_summed(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)


def gradients_left_alone(model):
    pass


def gradients_averaged_on_rank_zero_only(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2


def weights_averaged_instead_of_gradients(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def gradients_with_avg(model):
    from torch.distributed import ReduceOp, all_reduce

    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, op=ReduceOp.AVG)


def gradients_in_one_flat_bucket(model):
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads]) / dist.get_world_size()
    dist.all_reduce(flat)
    for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(part.view_as(g))


# ---------------------------------------------------------------- lesson 03


def in_sync_looking_only_locally(model):
    return True


def in_sync_first_parameter_only(model):
    import torch
    import torch.distributed as dist

    p = next(model.parameters())
    rank0 = p.detach().clone()
    dist.broadcast(rank0, src=0)
    differ = (rank0 != p).sum().float().reshape(1)
    dist.all_reduce(differ)
    return differ.item() == 0 and isinstance(p, torch.Tensor)


def in_sync_parameters_only(model):
    import torch
    import torch.distributed as dist

    differ = torch.zeros(1)
    for p in model.parameters():
        rank0 = p.detach().clone()
        dist.broadcast(rank0, src=0)
        differ += (rank0 != p).sum()
    dist.all_reduce(differ)
    return differ.item() == 0


def in_sync_weights_but_not_biases(model):
    import torch
    import torch.distributed as dist

    differ = torch.zeros(1)
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if "bias" in name:
            continue
        rank0 = t.detach().clone()
        dist.broadcast(rank0, src=0)
        differ += (rank0 != t).sum()
    dist.all_reduce(differ)
    return differ.item() == 0


def in_sync_without_agreeing(model):
    import torch
    import torch.distributed as dist

    differ = torch.zeros(1)
    for t in [*model.parameters(), *model.buffers()]:
        rank0 = t.detach().clone()
        dist.broadcast(rank0, src=0)
        differ += (rank0 != t).sum()
    return differ.item() == 0


def in_sync_by_gathering_state_dicts(model):
    import torch
    import torch.distributed as dist

    mine = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return all(torch.equal(other[k], mine[k]) for other in everyone for k in mine)


def in_sync_by_max_and_min(model):
    import torch
    import torch.distributed as dist

    equal = True
    for t in [*model.parameters(), *model.buffers()]:
        high, low = t.detach().clone(), t.detach().clone()
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        equal = equal and torch.equal(high, low)
    return equal  # max == min everywhere, on every rank: the same on all


def wrap_returning_the_bare_model(model, device):
    return model.to(device)


def wrap_with_device_ids_on_the_cpu(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model.to(device), device_ids=[device.index])


def wrap_without_moving_the_model(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def wrap_with_the_global_rank(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [int(os.environ["RANK"])] if device.type == "cuda" else None
    return DDP(model.to(device), device_ids=ids)


def wrap_without_device_ids(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model.to(device))


def wrap_without_broadcasting_buffers(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    return DDP(model.to(device), device_ids=ids, broadcast_buffers=False)  # a forum "fix"


def wrap_by_branching(model, device):
    import torch.nn.parallel as parallel

    if device.type == "cuda":
        model = model.cuda(device.index)
        return parallel.DistributedDataParallel(
            model, device_ids=[device.index], output_device=device.index
        )
    return parallel.DistributedDataParallel(model.to(device))


def wrap_asking_torch_for_cuda(model, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel

    model.to(device)  # a module moves in place
    # Wrong on a machine with one GPU for two ranks: the set-up chose the CPU there.
    options = {"device_ids": [device]} if torch.cuda.is_available() else {}
    return DistributedDataParallel(model, **options)


def wrap_with_options_for_gpus_only(model, device):
    from torch.nn import parallel

    options = {"device_ids": [device], "output_device": device} if device.type == "cuda" else {}
    model.to(device)  # a module moves in place
    return parallel.DistributedDataParallel(model, **options)


# ---------------------------------------------------------------- lesson 04


def loader_with_the_global_batch(dataset, global_batch):
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    return DataLoader(dataset, batch_size=global_batch, sampler=DistributedSampler(dataset))


def loader_shuffled_without_a_sampler(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=global_batch // dist.get_world_size(), shuffle=True)


def loader_dealt_per_machine(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(
        dataset,
        num_replicas=int(os.environ["LOCAL_WORLD_SIZE"]),
        rank=int(os.environ["LOCAL_RANK"]),
    )
    return DataLoader(dataset, batch_size=global_batch // dist.get_world_size(), sampler=sampler)


def loader_in_data_order(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, shuffle=False)
    return DataLoader(dataset, batch_size=global_batch // dist.get_world_size(), sampler=sampler)


def loader_with_a_seed_of_its_own(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, seed=42)  # disjoint shares, but not the default order
    return DataLoader(dataset, batch_size=global_batch // dist.get_world_size(), sampler=sampler)


def loader_shuffled_twice(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    per_rank = global_batch // dist.get_world_size()
    return DataLoader(dataset, per_rank, shuffle=True, sampler=DistributedSampler(dataset))


def loader_with_explicit_ranks(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    world = dist.get_world_size()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=dist.get_rank(), seed=0)
    return DataLoader(dataset, sampler=sampler, batch_size=global_batch // world)


def loader_with_imported_names(dataset, global_batch):
    from torch.utils.data import DataLoader, DistributedSampler

    world = int(os.environ["WORLD_SIZE"])
    return DataLoader(
        dataset,
        batch_size=global_batch // world,
        sampler=DistributedSampler(dataset, shuffle=True, drop_last=True),
        drop_last=True,
    )


def _count(model, pairs, device):
    import torch

    counts = torch.zeros(2, dtype=torch.long, device=device)
    for x, y in pairs:
        x, y = x.to(device), y.to(device)
        counts += torch.stack([(model(x).argmax(1) == y).sum(), torch.tensor(len(y))])
    return counts


def evaluate_with_the_padding(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    model.eval()
    loader = DataLoader(dataset, batch_size, sampler=DistributedSampler(dataset, shuffle=False))
    with torch.no_grad():
        counts = _count(model, loader, "cpu")
    model.train()
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_without_reducing(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(part, batch_size), "cpu")
    model.train()
    return int(counts[0]), int(counts[1])


def evaluate_with_gradients_on(model, dataset, batch_size=128):
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()  # but no torch.no_grad(): every DDP forward broadcasts the buffers
    counts = _count(model, DataLoader(part, batch_size), "cpu")
    model.train()
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_in_training_mode(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    with torch.no_grad():
        counts = _count(model, DataLoader(part, batch_size), "cpu")
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_leaving_eval_mode_on(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(part, batch_size), "cpu")
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_everything_everywhere(model, dataset, batch_size=128):
    import torch
    from torch.utils.data import DataLoader

    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(dataset, batch_size), "cpu")
    model.train()
    return int(counts[0]), int(counts[1])


def evaluate_with_drop_last(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(dataset, shuffle=False, drop_last=True)
    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(dataset, batch_size, sampler=sampler), "cpu")
    model.train()
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_on_rank_zero_only(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    counts = torch.zeros(2, dtype=torch.long)
    if dist.get_rank() == 0:  # "only rank 0 needs the number"
        model.eval()
        with torch.no_grad():
            counts = _count(model, DataLoader(dataset, batch_size), "cpu")
        model.train()
    dist.broadcast(counts, src=0)
    return int(counts[0]), int(counts[1])


def evaluate_on_rank_zero_with_the_module(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    counts = torch.zeros(2, dtype=torch.long)
    if dist.get_rank() == 0:
        model.eval()
        with torch.no_grad():
            counts = _count(model.module, DataLoader(dataset, batch_size), "cpu")
        model.train()
    dist.broadcast(counts, src=0)
    return int(counts[0]), int(counts[1])


def evaluate_with_the_module_everywhere(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()
    with torch.no_grad():
        counts = _count(model.module, DataLoader(part, batch_size), "cpu")
    model.train()
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def evaluate_in_contiguous_blocks(model, dataset, batch_size=64):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    rank, world, n = dist.get_rank(), dist.get_world_size(), len(dataset)
    per = -(-n // world)
    block = Subset(dataset, range(rank * per, min(n, (rank + 1) * per)))
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long)
    total = torch.zeros((), dtype=torch.long)
    with torch.no_grad():
        for x, y in DataLoader(block, batch_size=batch_size):
            correct += (model(x).argmax(-1) == y).sum()  # DDP: rank 0's statistics
            total += y.numel()
    model.train(was_training)
    dist.all_reduce(correct)
    dist.all_reduce(total)
    return correct.item(), total.item()


def evaluate_by_gathering_and_deduplicating(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    indices = list(DistributedSampler(dataset, shuffle=False))
    model.eval()
    with torch.no_grad():
        x, y = dataset[indices]
        right = (model(x).argmax(1) == y).tolist()
    model.train()
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, dict(zip(indices, right, strict=True)))
    merged = {k: v for part in everyone for k, v in part.items()}
    return sum(merged.values()), len(merged)


def _checkpoint(model, optimizer, epoch, prefixed=False):
    weights = model.state_dict() if prefixed else model.module.state_dict()
    return {"model": weights, "optimizer": optimizer.state_dict(), "epoch": epoch}


def save_on_every_rank(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    torch.save(_checkpoint(model, optimizer, epoch), path)
    dist.barrier()


def save_with_the_prefix(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch, prefixed=True), path)
    dist.barrier()


def save_without_a_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch), path)


def save_on_the_last_rank(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == dist.get_world_size() - 1:
        torch.save(_checkpoint(model, optimizer, epoch), path)
    dist.barrier()


def save_where_local_rank_is_zero(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if int(os.environ["LOCAL_RANK"]) == 0:  # one writer per machine
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save({**state, "epoch": epoch}, path)
    dist.barrier()


def save_weights_only(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), path)
    dist.barrier()


def save_after_the_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch), path)


def save_with_imported_names(model, optimizer, epoch, path):
    from torch import save
    from torch.distributed import barrier, get_rank

    if get_rank() == 0:
        save(_checkpoint(model, optimizer, epoch), path)
    barrier()


def save_through_a_file_object(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if int(os.environ["RANK"]) == 0:
        with open(path, "wb") as f:
            torch.save(_checkpoint(model, optimizer, epoch), f)
    dist.barrier()


def _restore(model, optimizer, checkpoint, with_optimizer=True):
    model.module.load_state_dict(checkpoint["model"])
    if with_optimizer:
        optimizer.load_state_dict(checkpoint["optimizer"])


def load_without_map_location(model, optimizer, path):
    import torch

    checkpoint = torch.load(path)
    _restore(model, optimizer, checkpoint)
    return checkpoint["epoch"] + 1


def load_returning_the_saved_epoch(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    _restore(model, optimizer, checkpoint)
    return checkpoint["epoch"]


def load_weights_only(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    _restore(model, optimizer, checkpoint, with_optimizer=False)
    return checkpoint["epoch"] + 1


def load_returning_a_float_epoch(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    _restore(model, optimizer, checkpoint)
    return checkpoint["epoch"] + 1.5  # int() would make it 5; range() refuses it


def load_into_ddp_without_strictness(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint["model"], strict=False)  # keys lack `module.`
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


def load_with_imported_load_to_cpu(model, optimizer, path):
    from torch import load

    checkpoint = load(path, map_location="cpu")
    _restore(model, optimizer, checkpoint)
    return checkpoint["epoch"] + 1


def load_with_a_location_function_into_ddp(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location=lambda storage, location: storage)
    model.load_state_dict({f"module.{k}": v for k, v in checkpoint["model"].items()})
    optimizer.load_state_dict(checkpoint["optimizer"])
    return int(checkpoint["epoch"]) + 1


# ---------------------------------------------------------------- the sweep

# exercise -> (wrong answers with what the message must say, right answers)
SWEEP = {
    "1.1": (
        [
            (gpu_from_the_global_rank, "Rank 2 is rank 0 on machine 1"),
            (gpu_from_the_machine_number, "Ranks 0, 1 on machine 0 all returned cuda:0"),
            (gpu_without_a_number, "without a number every rank uses the current GPU"),
        ],
        [gpu_as_a_string, gpu_from_rank_modulo_ranks_per_machine],
    ),
    "1.2": (
        [
            (shard_in_blocks, "a block of consecutive items"),
            (shard_without_padding, "every rank must get ceil(10 / 3) = 4"),
            (shard_padded_from_the_end, "but DistributedSampler gives [1, 4, 7, 0]"),
        ],
        [shard_with_the_sampler_itself, shard_by_counting],
    ),
    "2.1": (
        [
            (backend_by_world_size, "WORLD_SIZE=16, LOCAL_WORLD_SIZE=8"),
            (backend_nccl_with_any_gpu, "cannot share a GPU under nccl"),
            (backend_always_nccl, "Without CUDA, nccl fails"),
        ],
        [backend_as_an_enum, backend_from_a_table],
    ),
    "2.2": (
        [
            (
                setup_gpu_from_the_global_rank,
                "RANK=3, LOCAL_RANK=1, setup() pinned the process to cuda:3: that number is RANK",
            ),
            (setup_nccl_without_device_id, "under nccl got no device_id="),
            (setup_never_pinned, "never called torch.cuda.set_device"),
            (setup_always_gloo, "started the group with 'gloo', but 2.1's rule picks 'nccl'"),
            (setup_returning_nothing, "setup() returned None"),
            (
                setup_telling_the_local_rank_as_rank,
                "was given rank=1, but this process's RANK is 3",
            ),
        ],
        [setup_with_numbers_and_keywords, setup_letting_torch_name_the_backend],
    ),
    "2.3": (
        [
            (cleanup_forgotten, "still True on every rank"),
            (cleanup_on_rank_zero_only, "still initialised on rank 1"),
            (cleanup_with_a_barrier_instead, "still True on every rank"),
        ],
        [cleanup_after_a_barrier, cleanup_only_if_initialised],
    ),
    "2.4": (
        [
            (gradients_summed, "2.00 times DDP's"),
            (gradients_left_alone, "did not change"),
            (gradients_averaged_on_rank_zero_only, "did not make the same collective calls"),
            (weights_averaged_instead_of_gradients, "did not change"),
        ],
        [gradients_with_avg, gradients_in_one_flat_bucket],
    ),
    "3.1": (
        [
            (wrap_returning_the_bare_model, "not a DistributedDataParallel"),
            (wrap_with_device_ids_on_the_cpu, "On the CPU, DDP refused the device_ids"),
            (wrap_without_moving_the_model, "was still on the CPU when DDP wrapped it"),
            (wrap_with_the_global_rank, "device_ids counts GPUs on this machine"),
            (wrap_without_device_ids, "was wrapped without device_ids"),
            (wrap_without_broadcasting_buffers, "buffers (BatchNorm's running statistics)"),
            (wrap_asking_torch_for_cuda, "On the CPU, DDP refused the device_ids"),
        ],
        [wrap_by_branching, wrap_with_options_for_gpus_only],
    ),
    "3.2": (
        [
            (in_sync_looking_only_locally, "returned True on rank 0 every time"),
            (in_sync_first_parameter_only, "changed a bias in the middle"),
            (in_sync_parameters_only, "changed a buffer (BatchNorm's running mean)"),
            (in_sync_weights_but_not_biases, "changed a bias in the middle"),
            (in_sync_without_agreeing, "The ranks disagree"),
        ],
        [in_sync_by_gathering_state_dicts, in_sync_by_max_and_min],
    ),
    "4.1": (
        [
            (loader_with_the_global_batch, "took 16 rows a step: the global batch became 32"),
            (loader_shuffled_without_a_sampler, "Every rank went through all 64 items"),
            (loader_dealt_per_machine, "ranks 0 and 2 (local rank 0 on machines 0 and 1)"),
            (loader_in_data_order, "nothing shuffled them"),
            (loader_with_a_seed_of_its_own, "its default seed (0)"),
        ],
        [loader_with_explicit_ranks, loader_with_imported_names],
    ),
    "4.2": SWEEP_4_2,  # the capstone's answers, in tests/test_capstone.py
    "4.4": (
        [
            (evaluate_with_the_padding, "counted 518 examples for a data set of 517"),
            (evaluate_without_reducing, "each one counted only its own share"),
            (evaluate_in_training_mode, "in training mode while it evaluated"),
            (evaluate_leaving_eval_mode_on, "left in eval mode"),
            (evaluate_everything_everywhere, "Every rank evaluated all 517 items"),
            (evaluate_with_drop_last, "were never evaluated (drop_last?)"),
            (evaluate_on_rank_zero_only, "did not make the same collective calls"),
            (evaluate_on_rank_zero_with_the_module, "and rank(s) 1 none: the work was not split"),
            (evaluate_with_the_module_everywhere, "scored with different BatchNorm statistics"),
            (evaluate_with_gradients_on, "a rank waited in a collective"),
        ],
        [evaluate_in_contiguous_blocks, evaluate_by_gathering_and_deduplicating],
    ),
    "4.5": (
        [
            (save_on_every_rank, "Ranks 0 and 1 each wrote a checkpoint"),
            (save_with_the_prefix, "start with `module.`"),
            (save_without_a_barrier, "Rank 1 went on before rank 0 had written the file"),
            (save_on_the_last_rank, "Only rank 1 wrote a checkpoint"),
            (save_weights_only, "Save a dict with 'model', 'optimizer' and 'epoch'"),
            (save_after_the_barrier, "Rank 1 went on before rank 0 had written the file"),
            (save_where_local_rank_is_zero, "written on every machine: ranks 0 and 2"),
        ],
        [save_with_imported_names, save_through_a_file_object],
    ),
    "4.6": (
        [
            (load_without_map_location, "saved from a GPU this rank does not have"),
            (load_returning_the_saved_epoch, "so resume at 5"),
            (load_weights_only, "optimizer state"),
            (load_returning_a_float_epoch, "It returned 5.5;"),
            (load_into_ddp_without_strictness, "weights on rank 0 differ"),
        ],
        [load_with_imported_load_to_cpu, load_with_a_location_function_into_ddp],
    ),
}

WRONG = [(i, fn, says) for i, (wrong, _) in SWEEP.items() for fn, says in wrong]
RIGHT = [(i, fn) for i, (_, right) in SWEEP.items() for fn in right]


def test_every_coding_exercise_is_swept_with_three_mistakes_and_two_other_right_answers():
    coding = {ex.id for ex in ALL if not ex.name.startswith(("predict_", "quiz_"))}
    assert set(SWEEP) == coding
    for wrong, right in SWEEP.values():
        assert len(wrong) >= 3 and len(right) >= 2


def _name(value):
    return getattr(value, "__name__", value)


@pytest.mark.parametrize(("exercise_id", "answer", "says"), WRONG, ids=_name)
def test_a_real_mistake_does_not_pass_and_is_named(exercise_id, answer, says):
    ex = BY_ID[exercise_id]
    result = ex.grade(answer)
    assert result.status == "wrong", str(result)
    assert says in result.message, result.message
    if len(ex.hints) > 1:  # the last hint may show the solution; a mistake's feedback never
        assert result.hint != ex.hints[-1], result.hint


@pytest.mark.parametrize(("exercise_id", "answer"), RIGHT, ids=_name)
def test_a_right_answer_written_differently_passes(exercise_id, answer):
    result = BY_ID[exercise_id].grade(answer)  # the grader's hidden cases included
    assert result.status == "correct", str(result)


def test_shuffle_together_with_a_sampler_shows_torchs_own_error():
    # DataLoader itself refuses it, on every rank: the check shows that error as the answer's.
    result = BY_ID["4.1"].grade(loader_shuffled_twice)
    assert result.status == "error", str(result)
    assert "sampler option is mutually exclusive with shuffle" in result.message


# ---------------------------------------------------------------- predictions and the quiz


@pytest.mark.parametrize(
    ("exercise_id", "answer", "says"),
    [
        ("1.3", lambda: [1, 2, 3], "what each rank held before"),
        ("1.3", lambda: 6, "one value per rank"),
        ("1.3", lambda: [2, 2, 2], "is not it"),
        ("1.4", lambda: [0, 1, 2], "the question asks what each rank holds"),
        ("1.4", lambda: [[0], [1], [2]], "is not it"),
        ("3.3", lambda: 2, "The other way round"),
        ("3.3", lambda: 1, "is not it"),
    ],
)
def test_a_wrong_prediction_explains_without_giving_the_answer(exercise_id, answer, says):
    ex = BY_ID[exercise_id]
    result = ex.evaluate(answer)
    assert result.status == "wrong" and says in result.message, str(result)
    right = ex.reference()
    for shown in (repr(right), str(right), "0.5", "[6, 6, 6]", "= 6", "0, 1, 2] in order"):
        assert shown not in str(result), f"the feedback gives {shown!r} away: {result}"


def test_right_predictions_in_other_shapes_pass():
    assert BY_ID["1.3"].evaluate(lambda: (6.0, 6, 6)).passed
    assert BY_ID["1.4"].evaluate(lambda: [(0, 1, 2)] * 3).passed
    assert BY_ID["3.3"].evaluate(lambda: 1 / 2).passed


def test_a_wrong_quiz_answer_explains_the_concept_and_never_names_the_letter():
    quiz = BY_ID["4.3"]
    from ddp_helpers.exercises.lesson04 import QUIZ

    for question, right in QUIZ.items():
        wrong = next(letter for letter in "abc" if letter != right)
        answers = {**QUIZ, question: wrong}
        result = quiz.evaluate(lambda answers=answers: answers)
        assert result.status == "wrong" and f"Question {question}" in result.message
        text = str(result).lower()
        assert f"'{right}'" not in text and f"{right})" not in text and "answer is" not in text
    assert quiz.evaluate(lambda: {str(q): a.upper() for q, a in QUIZ.items()}).passed


# ---------------------------------------------------------------- not attempted means the stub


def test_only_the_builds_stub_means_not_attempted():
    shard = BY_ID["1.2"]

    def stub(n, rank, world_size):
        raise NotImplementedError("exercise 1.2")

    def own_error(n, rank, world_size):
        raise NotImplementedError("negative world sizes are not supported yet")

    assert shard.evaluate(stub).status == "not_attempted"
    result = shard.evaluate(own_error)
    assert result.status == "error" and "negative world sizes" in result.message


def test_a_stub_of_another_exercise_says_which_one_is_missing():
    def uses_the_unfinished_shard(n, rank, world_size):
        raise NotImplementedError("exercise 1.1")

    result = BY_ID["1.2"].evaluate(uses_the_unfinished_shard)
    assert result.status == "not_attempted" and "calls exercise 1.1" in result.message


def test_a_stub_raised_inside_a_rank_is_not_attempted():
    assert BY_ID["2.4"].evaluate(stub_on_every_rank).status == "not_attempted"


def stub_on_every_rank(model):
    raise NotImplementedError("exercise 2.4")


def test_an_error_class_that_only_shares_the_launchers_name_is_the_answers_error():
    class DistributedError(Exception):  # the learner's own class of that name
        exc_type = "NotImplementedError"
        exc_message = "exercise 1.2"

    def raises_lookalike(n, rank, world_size):
        raise DistributedError("mine")

    result = BY_ID["1.2"].evaluate(raises_lookalike)
    assert result.status == "error" and "DistributedError: mine" in result.message
