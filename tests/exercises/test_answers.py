"""The learner-answer sweep: real mistakes must not pass, and right answers written
differently from the reference must. Plus: one source for every reference answer.

Each wrong answer is a mistake learners make (one the exercise's `mistakes` names, one seen
in the forums, a loop tried by hand); each must get the message that names it. Each right
answer differs from the reference in algorithm, import style or the API it reads.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import sys
import textwrap

import cloudpickle
import nbformat
import pytest
from answers_further import SWEEP_3_4, SWEEP_3_5, SWEEP_3_6, SWEEP_4_7
from drawn_answers import DRAWN
from ja_guard import english_in_japanese
from space_watch import assert_drawn_seen, launches_watched, watching
from test_capstone import SWEEP_4_1

from ddp_helpers import i18n
from ddp_helpers.exercises import LESSONS, exercises_of, notebook_name
from ddp_helpers.exercises.kit import RANK_MISTAKES, Hidden, hang_limit
from support import ROOT

# The answers travel to the ranks by value, as a notebook's do: a rank that had to import
# this module (and pytest with it) would spend seconds on it.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ALL = [ex for lesson in LESSONS for ex in exercises_of(lesson)]
BY_ID = {ex.id: ex for ex in ALL}


# ---------------------------------------------------------------- one source


class _FromTheModule(ast.NodeTransformer):
    """`ex.buckets_for` in a notebook is `buckets_for` in the module that defines both."""

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == "ex":
            return ast.Name(id=node.attr, ctx=node.ctx)
        return self.generic_visit(node)


def _without_imports_and_docstring(fn) -> None:
    body = [n for n in fn.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    fn.body = body
    fn.decorator_list = []


def _function_ast(source: str, name: str) -> str:
    """The function or class `name` in source, as an AST dump without its imports and
    docstrings (a class's methods' too), the notebook's `ex.` left out."""
    tree = _FromTheModule().visit(ast.parse(textwrap.dedent(source)))
    kinds = (ast.FunctionDef, ast.ClassDef)
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, kinds) and n.name == name]
    for node in ast.walk(fn):
        if isinstance(node, kinds):
            _without_imports_and_docstring(node)
    return ast.dump(fn, include_attributes=False)


def _solution_cell(lesson: str, name: str) -> str:
    nb = nbformat.read(ROOT / "solutions" / notebook_name(lesson), as_version=4)
    cells = [
        c.source
        for c in nb.cells
        if c.cell_type == "code"
        and "# BEGIN SOLUTION" in c.source
        and (f"def {name}(" in c.source or f"class {name}:" in c.source)
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


def gpu_as_the_environment_string():
    return os.environ["LOCAL_RANK"]  # the number, not yet a device


def gpu_counted_from_the_last():
    local, per_machine = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    return f"cuda:{per_machine - 1 - local}"


def shard_in_blocks(n, rank, world_size):
    size = -(-n // world_size)
    return list(range(rank * size, min(n, (rank + 1) * size)))


def shard_without_padding(n, rank, world_size):
    return list(range(n))[rank::world_size]


def shard_padded_from_the_end(n, rank, world_size):
    total = -(-n // world_size) * world_size
    padded = list(range(n)) + [n - 1] * (total - n)
    return padded[rank::world_size]


def shard_as_a_tensor(n, rank, world_size):
    import torch

    total = -(-n // world_size) * world_size
    return (torch.arange(total) % n)[rank::world_size]


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


def backend_with_more_gpus_than_ranks():
    import torch

    more = torch.cuda.device_count() > int(os.environ["LOCAL_WORLD_SIZE"])
    return "nccl" if torch.cuda.is_available() and more else "gloo"


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


def _nccl_here():
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return gpus >= int(os.environ["LOCAL_WORLD_SIZE"])


def setup_without_init_under_gloo():
    import torch
    import torch.distributed as dist

    if not _nccl_here():
        return torch.device("cpu")  # the process group is forgotten here
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_gloo_first_then_nccl():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if not _nccl_here():
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_pinning_a_gpu_under_gloo_too():
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if torch.cuda.is_available():
        torch.cuda.set_device(device)
    if not _nccl_here():
        dist.init_process_group("gloo")
        return torch.device("cpu")
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_returning_a_gpu_under_gloo():
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if not _nccl_here():
        dist.init_process_group("gloo")
        return device if torch.cuda.is_available() else torch.device("cpu")
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_returning_the_cpu_under_nccl():
    import torch
    import torch.distributed as dist

    if not _nccl_here():
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return torch.device("cpu")


def _setup_on_gpu(index):
    """setup() with the GPU `index` (a number, or None for plain "cuda") under nccl."""
    import torch
    import torch.distributed as dist

    if not _nccl_here():
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda") if index is None else torch.device("cuda", index)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_on_cuda_without_a_number():
    return _setup_on_gpu(None)


def setup_counting_gpus_from_one():
    return _setup_on_gpu(int(os.environ["LOCAL_RANK"]) + 1)


def setup_on_the_gpu_of_the_machine_number():
    return _setup_on_gpu(int(os.environ["GROUP_RANK"]))


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


def _trained(model) -> list:
    """The parameters with a gradient (the check's model has a frozen one, issue 49)."""
    return [p for p in model.parameters() if p.grad is not None]


def gradients_summed(model):
    import torch.distributed as dist

    for p in _trained(model):
        dist.all_reduce(p.grad)


def gradients_left_alone(model):
    pass


def gradients_divided_by_the_local_world_size(model):
    import os

    import torch.distributed as dist

    for p in _trained(model):
        dist.all_reduce(p.grad)
        p.grad /= int(os.environ["LOCAL_WORLD_SIZE"])  # the ranks of this machine only


def gradients_averaged_in_a_flat_buffer_on_the_cpu(model):
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in _trained(model)]
    flat = torch.zeros(sum(g.numel() for g in grads))  # made without device=
    offset = 0
    for g in grads:
        flat[offset : offset + g.numel()].copy_(g.view(-1))
        offset += g.numel()
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(part.view_as(g))


def gradients_averaged_on_rank_zero_only(model):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        for p in _trained(model):
            dist.all_reduce(p.grad)
            p.grad /= 2


def weights_averaged_instead_of_gradients(model):
    import torch.distributed as dist

    for p in _trained(model):
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def gradients_divided_twice(model):
    import torch.distributed as dist

    for p in _trained(model):
        p.grad /= dist.get_world_size()  # DDP divides first ...
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()  # ... and so, again, here


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


def wrap_without_the_first_broadcast(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    return DDP(model.to(device), device_ids=ids, init_sync=False)


def wrap_on_the_first_gpu(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model.to(device), device_ids=[0] if device.type == "cuda" else None)


def wrap_checking_where_the_model_went(model, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model.to(device)
    where = next(model.parameters()).device
    if where != device:
        raise RuntimeError(f"the model is on {where}, not {device}")
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


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


def loader_returning_its_sampler(dataset, global_batch):
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(dataset)


def loader_with_rank_zero_on_every_rank(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    world = dist.get_world_size()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=0)
    return DataLoader(dataset, batch_size=global_batch // world, sampler=sampler)


def loader_dealt_among_twice_the_ranks(dataset, global_batch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    world = dist.get_world_size()
    sampler = DistributedSampler(dataset, num_replicas=2 * world, rank=dist.get_rank())
    return DataLoader(dataset, batch_size=global_batch // world, sampler=sampler)


def loader_sharded_by_hand(dataset, global_batch):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, SubsetRandomSampler

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = SubsetRandomSampler(range(rank, len(dataset), world), torch.Generator().manual_seed(0))
    return DataLoader(dataset, batch_size=global_batch // world, sampler=mine)


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


def evaluate_in_overlapping_blocks(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    rank, world, n = dist.get_rank(), dist.get_world_size(), len(dataset)
    per = -(-n // world) + 1  # one row too many: the blocks overlap, no sampler to blame
    model.eval()
    block = Subset(dataset, range(rank * (per - 1), min(n, rank * (per - 1) + per)))
    with torch.no_grad():
        counts = _count(model, DataLoader(block, batch_size), "cpu")
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


def evaluate_always_ending_in_training_mode(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(part, batch_size), next(model.parameters()).device)
    model.train()  # whatever mode it came in
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


def evaluate_counting_on_the_cpu(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = Subset(dataset, range(rank, len(dataset), world))
    correct = total = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=batch_size):
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    model.train(was_training)
    counts = torch.tensor([correct, total])  # made without device=: the CPU, under nccl too
    dist.all_reduce(counts)
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


def evaluate_returning_the_accuracy(model, dataset, batch_size=128):
    correct, total = evaluate_by_gathering_and_deduplicating(model, dataset, batch_size)
    return correct / total


def evaluate_taking_rank_zeros_counts(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    model.eval()
    with torch.no_grad():
        counts = _count(model, DataLoader(part, batch_size), "cpu")
    model.train()
    dist.broadcast(counts, src=0)  # every rank holds the same counts: rank 0's
    return int(counts[0]), int(counts[1])


def evaluate_with_a_threshold(model, dataset, batch_size=128):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    part = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    counts = torch.zeros(2, dtype=torch.long)
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(part, batch_size):
            predicted = (model(x)[:, 1] > 0).long()  # not the larger of the two scores
            counts += torch.stack([(predicted == y).sum(), torch.tensor(len(y))])
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
    device = next(model.parameters()).device
    correct = torch.zeros((), dtype=torch.long, device=device)
    total = torch.zeros((), dtype=torch.long, device=device)
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
    mode = model.training
    model.eval()
    with torch.no_grad():
        x, y = dataset[indices]
        right = (model(x).argmax(1) == y).tolist()
    model.train(mode)
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


def save_the_module_whole(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = {"model": model.module, "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(state, path)
    dist.barrier()


def save_the_optimizer_whole(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer, "epoch": epoch}
        torch.save(state, path)
    dist.barrier()


def save_the_state_dict_method_uncalled(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = {
            "model": model.module.state_dict,
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
        }
        torch.save(state, path)  # the method itself, not what it returns
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


def save_with_the_peers_sleeping_instead(model, optimizer, epoch, path):
    import time

    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch), path)
    else:
        time.sleep(0.5)  # "long enough" for rank 0 to write: a guess, not a barrier


def save_with_an_all_reduce_as_the_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch), path)
    done = torch.zeros(1, device=next(model.parameters()).device)  # where nccl takes it
    dist.all_reduce(done)  # every rank waits here for rank 0, as a barrier does


def save_nothing_but_the_barrier(model, optimizer, epoch, path):
    import torch.distributed as dist

    dist.barrier()


def save_in_half_precision(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        weights = {k: v.half() for k, v in model.module.state_dict().items()}  # half the size
        torch.save({"model": weights, "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


def save_without_the_momentum(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        optimizer_state = {**optimizer.state_dict(), "state": {}}  # a smaller file
        state = {"model": model.module.state_dict(), "optimizer": optimizer_state}
        torch.save({**state, "epoch": epoch}, path)
    dist.barrier()


def save_the_epoch_to_resume_at(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, epoch + 1), path)
    dist.barrier()


def save_epoch_seven_always(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_checkpoint(model, optimizer, 7), path)  # the first run's epoch, hard-coded
    dist.barrier()


def save_the_weights_without_the_biases(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        weights = {k: v for k, v in model.module.state_dict().items() if k.endswith("weight")}
        torch.save({"model": weights, "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
    dist.barrier()


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


def load_resuming_at_five_always(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    _restore(model, optimizer, checkpoint)
    return 5  # the first run's answer, hard-coded


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

# exercise -> (wrong answers with the mistake each must be named by, right answers)
SWEEP = {
    "1.1": (
        [
            (gpu_as_the_environment_string, "gpu_type"),
            (gpu_without_a_number, "gpu_no_index"),
            (gpu_from_the_global_rank, "gpu_global"),
            (gpu_from_the_machine_number, "gpu_node"),
            (gpu_counted_from_the_last, "gpu_other"),
        ],
        [gpu_as_a_string, gpu_from_rank_modulo_ranks_per_machine],
    ),
    "1.2": (
        [
            (shard_as_a_tensor, "shard_type"),
            (shard_in_blocks, "shard_blocks"),
            (shard_without_padding, "shard_length"),
            (shard_padded_from_the_end, "shard_other"),
        ],
        [shard_with_the_sampler_itself, shard_by_counting],
    ),
    "2.1": (
        [
            (backend_always_nccl, "backend_no_cuda"),
            (backend_nccl_with_any_gpu, "backend_too_few"),
            (backend_with_more_gpus_than_ranks, "backend_enough"),
            (backend_by_world_size, "backend_local"),
        ],
        [backend_as_an_enum, backend_from_a_table],
    ),
    "2.2": (
        [
            (setup_without_init_under_gloo, "setup_no_init"),
            (setup_gloo_first_then_nccl, "setup_init_twice"),
            (setup_always_gloo, "setup_backend"),
            (setup_telling_the_local_rank_as_rank, "setup_argument"),
            (setup_returning_nothing, "setup_not_a_device"),
            (setup_pinning_a_gpu_under_gloo_too, "setup_gloo_gpu"),
            (setup_returning_a_gpu_under_gloo, "setup_gloo_device"),
            (setup_nccl_without_device_id, "setup_no_device_id"),
            (setup_never_pinned, "setup_not_pinned"),
            (setup_returning_the_cpu_under_nccl, "setup_nccl_cpu"),
            (setup_on_cuda_without_a_number, "setup_gpu_no_index"),
            (setup_gpu_from_the_global_rank, "setup_gpu_global"),
            (setup_counting_gpus_from_one, "setup_gpu_missing"),
            (setup_on_the_gpu_of_the_machine_number, "setup_gpu_other"),
        ],
        [setup_with_numbers_and_keywords, setup_letting_torch_name_the_backend],
    ),
    "2.3": (
        [
            (cleanup_forgotten, "cleanup_left_all"),
            (cleanup_on_rank_zero_only, "cleanup_left_some"),
            (cleanup_with_a_barrier_instead, "cleanup_left_all"),
        ],
        [cleanup_after_a_barrier, cleanup_only_if_initialised],
    ),
    "3.1": (
        [
            (wrap_returning_the_bare_model, "wrap_bare"),
            (wrap_with_device_ids_on_the_cpu, "wrap_cpu_ids"),
            (wrap_without_the_first_broadcast, "wrap_weights"),
            (wrap_without_broadcasting_buffers, "wrap_buffers"),
            (wrap_without_moving_the_model, "wrap_not_moved"),
            (wrap_without_device_ids, "wrap_no_ids"),
            (wrap_with_the_global_rank, "wrap_global_ids"),
            (wrap_on_the_first_gpu, "wrap_other_ids"),
            (wrap_checking_where_the_model_went, "wrap_gpu_error"),
            (wrap_asking_torch_for_cuda, "wrap_cpu_ids"),
        ],
        [wrap_by_branching, wrap_with_options_for_gpus_only],
    ),
    "3.2": (
        [
            (gradients_summed, "avg_sum"),
            (gradients_left_alone, "avg_unchanged"),
            (gradients_divided_by_the_local_world_size, "avg_local"),
            (gradients_averaged_in_a_flat_buffer_on_the_cpu, "off_device"),
            (gradients_divided_twice, "avg_differ"),
            (gradients_averaged_on_rank_zero_only, "hang"),  # rank 1 broadcasts BN's buffers
            (weights_averaged_instead_of_gradients, "avg_unchanged"),
        ],
        [gradients_with_avg, gradients_in_one_flat_bucket],
    ),
    "3.4": SWEEP_3_4,  # Going further's, in tests/answers_further.py
    "3.5": SWEEP_3_5,
    "3.6": SWEEP_3_6,
    "4.2": (
        [
            (loader_returning_its_sampler, "loader_type"),
            (loader_with_the_global_batch, "loader_batch"),
            (loader_shuffled_without_a_sampler, "loader_everything"),
            (loader_dealt_per_machine, "loader_machines"),
            (loader_with_rank_zero_on_every_rank, "loader_overlap"),
            (loader_dealt_among_twice_the_ranks, "loader_missing"),
            (loader_in_data_order, "loader_unshuffled"),
            (loader_sharded_by_hand, "loader_sampler"),
            (loader_with_a_seed_of_its_own, "loader_seed"),
        ],
        [loader_with_explicit_ranks, loader_with_imported_names],
    ),
    "4.1": SWEEP_4_1,  # the capstone's answers, in tests/exercises/test_capstone.py
    "4.7": SWEEP_4_7,
    "4.4": (
        [
            (evaluate_returning_the_accuracy, "eval_shape"),
            (evaluate_in_training_mode, "eval_train_mode"),
            (evaluate_leaving_eval_mode_on, "eval_not_restored"),
            (evaluate_everything_everywhere, "eval_everything"),
            (evaluate_on_rank_zero_with_the_module, "eval_idle"),
            (evaluate_counting_on_the_cpu, "off_device"),
            (evaluate_always_ending_in_training_mode, "eval_forced_train"),
            (evaluate_without_reducing, "eval_disagree"),
            (evaluate_with_the_module_everywhere, "eval_own_stats"),
            (evaluate_with_the_padding, "eval_padding"),
            (evaluate_in_overlapping_blocks, "eval_counted_extra"),
            (evaluate_taking_rank_zeros_counts, "eval_share"),
            (evaluate_with_drop_last, "eval_dropped"),
            (evaluate_with_a_threshold, "eval_correct"),
            (evaluate_on_rank_zero_only, "mismatch"),
            (evaluate_with_gradients_on, "hang"),
        ],
        [evaluate_in_contiguous_blocks, evaluate_by_gathering_and_deduplicating],
    ),
    "4.5": (
        [
            (save_nothing_but_the_barrier, "save_none"),
            (save_where_local_rank_is_zero, "save_machines"),
            (save_on_every_rank, "save_count"),
            (save_on_the_last_rank, "save_not_zero"),
            (save_without_a_barrier, "save_barrier"),
            (save_after_the_barrier, "save_barrier"),
            (save_with_the_peers_sleeping_instead, "save_barrier"),
            (save_weights_only, "save_keys"),
            (save_the_module_whole, "save_whole"),
            (save_the_optimizer_whole, "save_whole"),
            (save_the_state_dict_method_uncalled, "save_not_state"),
            (save_with_the_prefix, "save_prefix"),
            (save_the_weights_without_the_biases, "save_strict"),
            (save_in_half_precision, "save_weights"),
            (save_without_the_momentum, "save_optimizer"),
            (save_the_epoch_to_resume_at, "save_epoch"),
            (save_epoch_seven_always, "save_epoch"),
        ],
        [
            save_with_imported_names,
            save_through_a_file_object,
            save_with_an_all_reduce_as_the_barrier,
        ],
    ),
    "4.6": (
        [
            (load_without_map_location, "load_map"),
            (load_into_ddp_without_strictness, "load_weights"),
            (load_weights_only, "load_optimizer"),
            (load_returning_the_saved_epoch, "load_epoch"),
            (load_returning_a_float_epoch, "load_epoch"),
            (load_resuming_at_five_always, "load_epoch"),
        ],
        [load_with_imported_load_to_cpu, load_with_a_location_function_into_ddp],
    ),
}

# Issue 49's answers (tests/drawn_answers/), each exercise's joined to its own (an exercise of
# a lesson LESSONS does not list yet joins once it does).
for _id, (_wrong, _right) in DRAWN.items():
    if _id in BY_ID:
        _own_wrong, _own_right = SWEEP.get(_id, ([], []))
        SWEEP[_id] = (_own_wrong + _wrong, _own_right + _right)

WRONG = [(i, fn, key) for i, (wrong, _) in SWEEP.items() for fn, key in wrong]
# Each exercise's first right answer is graded (its check, then the grader's hidden cases:
# other draws of the same space), every call it gets watched (space_watch: what the exercise
# declares drawn reaches it); the others run the check alone, every axis of the space, which
# is the part where a right answer written differently could be refused.
RIGHT = [(i, fn, n == 0) for i, (_, right) in SWEEP.items() for n, fn in enumerate(right)]


def _loader_run(epochs, n=60, batch=12):
    """What the loader check's 2 ranks report for a loader of n items with
    DistributedSampler's defaults, whose passes go in the order of `epochs`."""
    from ddp_helpers.exercises.lesson04 import loader

    def batches(rank, epoch):
        order = loader._default_order(rank, 2, epoch, n)
        return [order[k : k + batch // 2] for k in range(0, len(order), batch // 2)]

    base = {"type": "DataLoader", "sampler": "DistributedSampler", "distributed": True}
    return [{**base, "dealt": n, "epochs": [batches(rank, e) for e in epochs]} for rank in range(2)]


def _judged(judge, *record):
    """A check's verdict on what a run reported (`record`), as its exercise shows it."""
    return lambda answer: judge(*record)


def _judges():
    from ddp_helpers.exercises.lesson02 import setup
    from ddp_helpers.exercises.lesson04 import capstone, loader
    from ddp_helpers.exercises.lesson05 import checkpoint, resume

    real = {"rank": 1, "world": 2, "want": "gloo", "returned": {"device": "cpu", "type": "cpu"}}
    joined = {**real, "joined": True, "backend": "gloo"}
    return [
        # What only a real run can show: the pretend machines catch first whatever an
        # answer does wrong (what it was told, what it called, what it returned).
        ("2.2", _judged(setup._judge_real, {**real, "joined": False}), "setup_real_missing"),
        ("2.2", _judged(setup._judge_real, {**joined, "group": (0, 1)}), "setup_real_group"),
        # A DistributedSampler that does not reshuffle on set_epoch: none of torch's does.
        ("4.2", _judged(loader._judge_loader, _loader_run([0, 0]), 1, 60, 12), "loader_same_epoch"),
        # Several writers, neither every rank nor one a machine: ranks 0 and 3 of 2 x 2.
        ("4.1", _judged(capstone._judge_checkpoint, [0, 3], None, 4, 2), "ckpt_several"),
        # A load whose state is the saved one yet whose next step is not the run that never
        # stopped: no load can reach it, so a record shows it.
        ("5.4", _judged(checkpoint._judge_save, *_resumed_apart()), "ckpt_resumed"),
        ("5.5", _judged(resume._judge_load, *_resumed_apart()), "ckpt_resumed"),
    ]


def _resumed_apart():
    """5.5's round trip, as its ranks report it, with the next step off by 1e-3."""
    import torch

    state = {"model": {"w": torch.ones(2)}, "state": {}, "groups": [{"lr": 0.005}]}
    saving = {"saved": state, "after": {"w": torch.ones(2)}}
    loading = {"loaded": state, "entries": 1, "after": {"w": torch.ones(2) + 1e-3}}
    return saving, loading, 3


JUDGED = _judges()

# Predictions and the quiz: (exercise, answer, the mistake it must be named by)
PREDICTIONS = [
    ("1.3", lambda: [1, 2, 3], "reduce_local"),
    ("1.3", lambda: 6, "reduce_shape"),
    ("1.3", lambda: [2, 2, 2], "reduce_other"),
    ("1.4", lambda: [0, 1, 2], "gather_one"),
    ("1.4", lambda: 3, "gather_shape"),
    ("1.4", lambda: [[0], [1], [2]], "gather_one"),  # one rank's list of 1-element tensors
    ("1.4", lambda: [[0], [0, 1], [0, 1, 2]], "gather_other"),
    ("3.3", lambda: 2, "ratio_inverse"),
    ("3.3", lambda: 1, "ratio_other"),
    ("3.3", lambda: None, "ratio_shape"),  # a prediction worked out, never returned
    ("4.3", lambda: ["b", "a", "c", "a"], "quiz_shape"),
    ("4.3", lambda: {1: "a", 2: "a", 3: "c", 4: "a"}, "quiz_wrong"),
    ("4.3", lambda: {1: "b)", 2: "(a)", 3: "C", 4: "b."}, "quiz_wrong"),
]


def assert_named(ex, result, key: str) -> None:
    """The result names mistake `key`: its key, its message (so a text table that loses a
    key's text, or names fields the check does not give, fails too), its title and hint."""
    assert (result.status, result.mistake) == ("wrong", key), str(result)
    shown = str(result)
    message = ex.texts.text(key, **result.fields)
    assert message.strip() and message in shown, f"{key}: {message!r} is not in: {shown}"
    # A title the report can count: words of its own, no field that differs per answer.
    title = ex.texts.template(f"{key}.title")
    assert title.strip() and not i18n.fields(title) and result.title == title
    hint = ex.mistakes[key].hint if key in ex.mistakes else None
    assert result.hint_name == hint
    if hint is not None:
        assert result.hint == ex.hints[hint] and result.hint in shown
    if len(ex.hints) > 1:  # the last hint may show the solution; a mistake's feedback never
        assert result.hint != list(ex.hints.values())[-1], result.hint


def test_every_mistake_of_every_exercise_is_made_by_some_answer():
    made = {(i, key) for i, _, key in [*WRONG, *JUDGED, *PREDICTIONS]}
    # hang and mismatch are the rank runner's (tests/exercises/test_exercises.py); an exercise
    # only names their hint, and the sweep makes them where its checks are likeliest to see them.
    own = {(ex.id, key) for ex in ALL for key in ex.mistakes if key not in RANK_MISTAKES}
    assert not own - made, f"mistakes no answer makes: {sorted(own - made)}"
    assert made <= own | {(ex.id, key) for ex in ALL for key in RANK_MISTAKES}


def test_every_coding_exercise_is_swept_with_three_mistakes_and_two_other_right_answers():
    # A prediction given inputs (5.3's bytes for any size and world) is code the learner writes.
    import inspect

    given = {ex.id for ex in ALL if inspect.signature(ex.reference).parameters}
    coding = {ex.id for ex in ALL if not ex.name.startswith(("predict_", "quiz_"))} | given
    assert set(SWEEP) == coding
    for wrong, right in SWEEP.values():
        assert len(wrong) >= 3 and len(right) >= 2
    # Lesson 05's exercises, as its issue asks: at least 8 wrong answers each.
    assert {i: len(w) for i, (w, _) in SWEEP.items() if i.startswith("5.") and len(w) < 8} == {}


def _name(value):
    return getattr(value, "__name__", value)


@pytest.mark.parametrize(("exercise_id", "answer", "key"), WRONG, ids=_name)
def test_a_real_mistake_does_not_pass_and_is_named(exercise_id, answer, key):
    ex = BY_ID[exercise_id]
    # A hang is found at the check's hang limit: a shorter one costs the test less.
    with hang_limit(2) if key == "hang" else contextlib.nullcontext():
        result = ex.grade(answer)
    assert_named(ex, result, key)
    assert_japanese(result)


@pytest.mark.parametrize(("exercise_id", "judge", "key"), JUDGED, ids=_name)
def test_a_mistake_only_a_check_record_shows_is_named(exercise_id, judge, key):
    ex = BY_ID[exercise_id]
    result = ex._run(judge, None)
    assert_named(ex, result, key)
    assert_japanese(result)


@pytest.mark.parametrize(("exercise_id", "answer", "graded"), RIGHT, ids=_name)
def test_a_right_answer_written_differently_passes(exercise_id, answer, graded, tmp_path):
    ex = BY_ID[exercise_id]
    if not graded:
        result = ex.evaluate(answer)
        assert (result.status, result.hidden) == ("correct", None), str(result)
        assert_japanese(result)
        return
    # Graded: the learner's check, then the grader's extra cases, every call the answer gets
    # written down: what the exercise declares drawn must reach it (tests/exercises/
    # test_spaces.py holds the exercises the sweep does not cover, with the reference).
    log = str(tmp_path / "calls.jsonl")
    with pytest.MonkeyPatch.context() as monkeypatch:
        with launches_watched(monkeypatch) as launches:
            result = ex.grade(watching(answer, log, ex.space.world_from))
    assert (result.status, result.hidden) == ("correct", Hidden.PASSED), str(result)
    assert_japanese(result)
    assert_drawn_seen(ex, log, launches)


def assert_japanese(result):
    """The result's message, hint and title, shown in Japanese with the fields of this real
    run, hold no English the Japanese edition's guard forbids (tests/ja_guard.py)."""
    with i18n.using("ja"):
        shown = [result.message, result.hint or "", result.title or ""]
    problems = [
        f"{found}: {line}"
        for text in shown
        for line in text.splitlines()
        if (found := english_in_japanese(line))
    ]
    assert problems == [], "\n".join(problems)


def test_an_answer_that_raises_on_the_ranks_is_shown_as_its_own_error_with_its_line():
    # DataLoader refuses shuffle with a sampler, on every rank. What the check adds, and so
    # what is tested here: an error of the answer (not a wrong one, not the check's), the
    # answer's own line in the rank's traceback, and every rank accounted for.
    result = BY_ID["4.2"].grade(loader_shuffled_twice)
    assert (result.status, result.mistake) == ("error", "error"), str(result)
    assert result.title == "raised ValueError"
    line = "return DataLoader(dataset, per_rank, shuffle=True, sampler=DistributedSampler(dataset))"
    assert "in loader_shuffled_twice" in result.message and line in result.message
    assert "also failed" in result.message and "The other ranks were stopped." in result.message


# ---------------------------------------------------------------- predictions and the quiz


@pytest.mark.parametrize(("exercise_id", "answer", "key"), PREDICTIONS)
def test_a_wrong_prediction_explains_without_giving_the_answer(exercise_id, answer, key):
    ex = BY_ID[exercise_id]
    result = ex.evaluate(answer)
    assert_named(ex, result, key)
    right = ex.reference()
    for shown in (repr(right), str(right), "0.5", "[6, 6, 6]", "= 6", "0, 1, 2] in order"):
        assert shown not in str(result), f"the feedback gives {shown!r} away: {result}"


def _tensor(values):
    import torch

    return torch.tensor(values)


def test_right_predictions_in_other_shapes_pass():
    assert BY_ID["1.3"].evaluate(lambda: (6.0, 6, 6)).passed
    assert BY_ID["1.4"].evaluate(lambda: [(0, 1, 2)] * 3).passed
    assert BY_ID["3.3"].evaluate(lambda: 1 / 2).passed
    # What each rank's tensor holds, as the lesson makes them (one element each), or tensors
    assert BY_ID["1.3"].evaluate(lambda: [[6], [6], [6]]).passed
    assert BY_ID["1.3"].evaluate(lambda: [_tensor([6])] * 3).passed
    assert BY_ID["1.4"].evaluate(lambda: [[[0], [1], [2]]] * 3).passed
    assert BY_ID["1.4"].evaluate(lambda: [_tensor([0, 1, 2])] * 3).passed
    assert BY_ID["3.3"].evaluate(lambda: "1/2").passed


def test_a_wrong_quiz_answer_explains_the_concept_and_never_names_the_letter():
    quiz = BY_ID["4.3"]
    from ddp_helpers.exercises.lesson04.quiz import QUIZ

    for question, right in QUIZ.items():
        wrong = next(letter for letter in "abc" if letter != right)
        answers = {**QUIZ, question: wrong}
        result = quiz.evaluate(lambda answers=answers: answers)
        assert result.mistake == "quiz_wrong" and f"Question {question}" in result.message
        text = str(result).lower()
        assert f"'{right}'" not in text and f"{right})" not in text and "answer is" not in text
    assert quiz.evaluate(lambda: {str(q): a.upper() for q, a in QUIZ.items()}).passed
    # In the form the prompt prints its choices too: "b)", "(b)", "b."
    for form in ("{})", "({})", "{}."):
        answers = {q: form.format(a) for q, a in QUIZ.items()}
        assert quiz.evaluate(lambda answers=answers: answers).passed, form
    # Those forms read as their letters: only the one wrong letter is named.
    mixed = quiz.evaluate(lambda: {1: "b)", 2: "(a)", 3: "C", 4: "b."})
    assert (mixed.mistake, mixed.fields["q"]) == ("quiz_wrong", 4), str(mixed)


# ---------------------------------------------------------------- not attempted means the stub


def test_only_the_builds_stub_means_not_attempted():
    shard = BY_ID["1.2"]

    def stub(n, rank, world_size):
        raise NotImplementedError("exercise 1.2")

    def own_error(n, rank, world_size):
        raise NotImplementedError("negative world sizes are not supported yet")

    result = shard.evaluate(stub)
    assert (result.status, result.mistake) == ("not_attempted", "not_attempted")
    assert result.title == "the stub still raises NotImplementedError"
    result = shard.evaluate(own_error)
    assert (result.status, result.mistake) == ("error", "error")
    assert result.title == "raised NotImplementedError"
    assert "negative world sizes" in result.message


def test_a_stub_of_another_exercise_says_which_one_is_missing():
    def uses_the_unfinished_shard(n, rank, world_size):
        raise NotImplementedError("exercise 1.1")

    result = BY_ID["1.2"].evaluate(uses_the_unfinished_shard)
    assert (result.status, result.mistake) == ("not_attempted", "not_attempted_other")
    assert "calls exercise 1.1" in result.message


def test_a_stub_raised_inside_a_rank_is_not_attempted():
    result = BY_ID["3.2"].evaluate(stub_on_every_rank)
    assert (result.status, result.mistake) == ("not_attempted", "not_attempted")


def stub_on_every_rank(model):
    raise NotImplementedError("exercise 3.2")


def test_an_error_class_that_only_shares_the_launchers_name_is_the_answers_error():
    class DistributedError(Exception):  # the learner's own class of that name
        exc_type = "NotImplementedError"
        exc_message = "exercise 1.2"

    def raises_lookalike(n, rank, world_size):
        raise DistributedError("mine")

    result = BY_ID["1.2"].evaluate(raises_lookalike)
    assert result.status == "error" and "DistributedError: mine" in result.message
    assert result.title == "raised DistributedError"
