"""Exercises of lesson 02, the process group (`from ddp_helpers.exercises import lesson02`)."""

from __future__ import annotations

import os
from unittest import mock

from ._core import Exercise, Wrong, run_on_ranks
from ._core import progress as _progress

MESSAGES = {
    "backend_hints": [
        "nccl only runs on NVIDIA GPUs; gloo runs on the CPU. Without CUDA, nccl fails at "
        "init_process_group.",
        "nccl needs a GPU of its own for every rank on a machine. Compare the GPUs this "
        "machine has with the ranks this machine runs: LOCAL_WORLD_SIZE, not WORLD_SIZE "
        "(which counts the ranks of every machine).",
        "if torch.cuda.is_available() and torch.cuda.device_count() >= "
        'int(os.environ["LOCAL_WORLD_SIZE"]): return "nccl", else return "gloo".',
    ],
    "backend_case": ("On {machine}, pick_backend() returned {got!r}; it should be {want!r}. {why}"),
    "machine_one": "a machine with {gpus} GPU(s) running {local} rank(s)",
    "machine_many": (
        "{nodes} machines with {gpus} GPU(s) each, {local} ranks per machine "
        "(WORLD_SIZE={world}, LOCAL_WORLD_SIZE={local})"
    ),
    "why_no_cuda": "Without CUDA, nccl fails at init_process_group.",
    "why_too_few": "Two ranks of one machine cannot share a GPU under nccl.",
    "why_enough": "Every rank of this machine has a GPU of its own: nccl is the fast choice.",
    "why_local": (
        "Every rank has a GPU of its own on its machine; the ranks of the other machines "
        "use their own GPUs, so compare with LOCAL_WORLD_SIZE, not WORLD_SIZE."
    ),
    "backend_ok": "Right on {cases} machines: with and without CUDA, one machine and several.",
    "setup_hints": [
        "Start from 2.1: pick_backend() says nccl or gloo. Under gloo the rank works on the "
        "CPU; under nccl each rank works on a GPU of its own, on its own machine.",
        "Each machine numbers its GPUs from 0. RANK counts the ranks of the whole job "
        "(0 to WORLD_SIZE - 1); LOCAL_RANK counts the ranks of this machine (0 to "
        "LOCAL_WORLD_SIZE - 1), so LOCAL_RANK is the one that names this rank's GPU.",
        "Under nccl, pin the process with torch.cuda.set_device(...) before anything touches "
        "the GPU, and give init_process_group the same GPU as device_id=.",
        'if pick_backend() == "gloo": dist.init_process_group("gloo") and return '
        'torch.device("cpu"). Otherwise device = torch.device("cuda", '
        'int(os.environ["LOCAL_RANK"])); torch.cuda.set_device(device); '
        'dist.init_process_group("nccl", device_id=device); return device.',
    ],
    "setup_where": "{machine}, in the rank with RANK={rank}, LOCAL_RANK={local}",
    "setup_no_init": "On {where}, setup() never called init_process_group.",
    "setup_init_twice": (
        "On {where}, setup() called init_process_group {count} times; a process joins the "
        "default group once."
    ),
    "setup_backend": (
        "On {where}, setup() started the group with {got!r}, but 2.1's rule picks {want!r} "
        "on this machine."
    ),
    "setup_argument": (
        "On {where}, init_process_group was given {name}={got}, but this process's {env} is {want}."
    ),
    "setup_pinned": "setup() pinned the process to {got}",
    "setup_device_id": "init_process_group got device_id={got}",
    "setup_returned_gpu": "setup() returned {got}",
    "setup_gpu_global": (
        "On {where}, {what}: that number is RANK, the rank's place among all {world} ranks "
        "of the job, but each machine numbers its own GPUs from 0, and this one has {gpus}."
    ),
    "setup_gpu_no_index": (
        "On {where}, {what}, a GPU without a number: torch.cuda.set_device and device_id= "
        "need the number, and code that reads device.index (DDP's device_ids) gets None."
    ),
    "setup_gpu_missing": "On {where}, {what}, but this machine has only GPUs 0 to {last}.",
    "setup_gpu_other": (
        "On {where}, {what}: that is not this rank's GPU, so two ranks of this machine "
        "would share one GPU while another stays idle."
    ),
    "setup_no_device_id": (
        "On {where}, init_process_group under nccl got no device_id=: nccl then connects "
        "only at the first collective, and barrier() has to guess the GPU (rank 0 warns)."
    ),
    "setup_not_pinned": (
        "On {where}, setup() never called torch.cuda.set_device: the current GPU stays GPU "
        "0 in every rank, so .cuda() and all_gather_object would put every rank's tensors "
        "on GPU 0."
    ),
    "setup_gloo_gpu": (
        "On {where}, 2.1's rule picks gloo, yet {what}: this machine has {gpus} GPU(s) for "
        "{local} ranks."
    ),
    "setup_gloo_device": (
        "On {where}, 2.1's rule picks gloo, and setup() returned {got}: under gloo this "
        "rank's model and data stay on the CPU."
    ),
    "setup_nccl_cpu": (
        "On {where}, the group uses nccl, but setup() returned {got}: under nccl this "
        "rank's model and data live on its GPU."
    ),
    "setup_not_a_device": (
        "On {where}, setup() returned {got}; it must return a torch.device, the device "
        "this rank works on (later steps move the model and data there and read "
        "device.type)."
    ),
    "setup_real": "a real run on 2 ranks of this machine (rank {rank})",
    "setup_real_missing": (
        "In {where}, the process group was not initialised after setup() returned."
    ),
    "setup_real_group": (
        "In {where}, the group says rank {got_rank} of {got_world}; torchrun's environment "
        "says rank {rank} of {world}."
    ),
    "setup_ok": (
        "Right on {cases} pretend machines (a GPU for each rank, 2 machines x 2 ranks, too "
        "few GPUs, none) and in a real run on 2 ranks here."
    ),
    "cleanup_hints": [
        "setup() made every rank join the default process group; cleanup() must make it "
        "leave again. dist.is_initialized() says whether a process still belongs to one.",
        "Every rank leaves the group itself: a call inside `if rank == 0:` leaves the other "
        "ranks in it.",
        "dist.destroy_process_group(), on every rank.",
    ],
    "cleanup_left_all": (
        "After cleanup(), dist.is_initialized() is still True on every rank: nobody left "
        "the process group."
    ),
    "cleanup_left_some": (
        "After cleanup(), the process group is still initialised on rank {ranks}, while the "
        "other rank left it: every rank must leave."
    ),
    "cleanup_ok": "After cleanup() no process group is left on either rank.",
    "avg_hints": [
        "all_reduce with the default op SUM adds every rank's tensor; DDP averages, so "
        "divide by the world size afterwards (or ask all_reduce for ReduceOp.AVG).",
        "Every rank must make the same collective calls in the same order. A call inside "
        "`if rank == 0:` leaves the other ranks out and the job hangs.",
        "Loop over model.parameters(); skip a parameter whose .grad is None; call "
        "dist.all_reduce(p.grad) on every rank, then p.grad /= dist.get_world_size().",
    ],
    "avg_sum": (
        "Your gradients are {ratio:.2f} times DDP's: all_reduce sums, so divide by the world "
        "size to get the average DDP uses."
    ),
    "avg_unchanged": (
        "The gradients did not change: each rank still has only its own. all_reduce them "
        "across the ranks."
    ),
    "avg_differ": "Your gradients differ from DDP's by up to {diff:.3g} (allowed: 1e-6).",
    "avg_ok": "Equal to DDP's averaged gradients (max difference {diff:.1e}) on 2 ranks.",
}


def pick_backend():
    import torch

    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])  # ranks on this machine (torchrun)
    return "nccl" if gpus_here >= ranks_here else "gloo"


# (GPUs on each machine, ranks per machine, ranks in all, the right backend, why)
BACKEND_CASES = [
    (0, 2, 2, "gloo", "why_no_cuda"),
    (0, 1, 1, "gloo", "why_no_cuda"),
    (1, 2, 2, "gloo", "why_too_few"),
    (4, 2, 2, "nccl", "why_enough"),
    (2, 2, 2, "nccl", "why_enough"),
    (8, 8, 16, "nccl", "why_local"),
    (4, 8, 16, "gloo", "why_too_few"),
    (2, 2, 4, "nccl", "why_local"),
]


def _check_backend(fn, cases=BACKEND_CASES) -> str:
    import torch

    for gpus, local, world, want, why in cases:
        env = {"LOCAL_WORLD_SIZE": str(local), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
        env["RANK"] = "0"
        with (
            mock.patch.object(torch.cuda, "is_available", lambda g=gpus: g > 0),
            mock.patch.object(torch.cuda, "device_count", lambda g=gpus: g),
            mock.patch.dict(os.environ, env),
        ):
            got = fn()
        # str(): dist.Backend.GLOO counts as "gloo"; an object equal to everything does not.
        if str(got) != want:
            nodes = world // local
            machine = MESSAGES["machine_one" if nodes == 1 else "machine_many"].format(
                gpus=gpus, local=local, world=world, nodes=nodes
            )
            hint = 0 if gpus == 0 else 1
            raise Wrong(
                MESSAGES["backend_case"].format(
                    machine=machine, got=got, want=want, why=MESSAGES[why]
                ),
                hint=hint,
            )
    return MESSAGES["backend_ok"].format(cases=len(cases))


def _hidden_backend(fn) -> str:
    # Machines the check does not show: more GPUs than ranks, many machines, one GPU each.
    cases = [(8, 4, 32, "nccl", "why_local"), (3, 4, 8, "gloo", "why_too_few")]
    return _check_backend(fn, cases + [(1, 1, 8, "nccl", "why_local")])


def setup():
    import torch
    import torch.distributed as dist

    if pick_backend() == "gloo":
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # LOCAL_RANK, not RANK
    torch.cuda.set_device(device)  # pin: this process's current GPU from now on
    dist.init_process_group("nccl", device_id=device)
    return device


# Pretend machines: (GPUs on each machine, machines, ranks per machine, this rank's RANK)
SETUP_CASES = [
    (2, 1, 2, 1),  # a GPU for each rank: nccl on cuda:1
    (2, 2, 2, 3),  # 2 machines x 2 ranks, the last rank: RANK=3 but LOCAL_RANK=1
    (1, 1, 2, 1),  # one GPU for two ranks: gloo
    (0, 1, 2, 0),  # no GPU
]


def _as_device(value) -> str:
    """A set_device or device_id argument as a device name; an int counts as a CUDA GPU."""
    import torch

    return str(torch.device("cuda", value) if isinstance(value, int) else torch.device(value))


def _describe_device(value) -> dict:
    """A returned value as plain data: {"device": "cuda:1", ...} or {"other": repr}."""
    import torch

    if isinstance(value, torch.device):
        return {"device": str(value), "type": value.type, "index": value.index}
    return {"other": repr(value)[:80]}


class _Pretend:
    """A pretend machine for setup(): CUDA and the process group faked, each call recorded."""

    def __init__(self, gpus, nodes, per_node, rank):
        import inspect

        import torch.distributed as dist

        self.gpus, self.rank, self.world = gpus, rank, nodes * per_node
        self.env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % per_node),
            "GROUP_RANK": str(rank // per_node),
            "WORLD_SIZE": str(self.world),
            "LOCAL_WORLD_SIZE": str(per_node),
        }
        self.inits, self.pinned = [], []
        self._signature = inspect.signature(dist.init_process_group)

    def init_process_group(self, *args, **kwargs):
        given = self._signature.bind(*args, **kwargs).arguments
        backend, device_id = given.get("backend"), given.get("device_id")
        self.inits.append(
            {
                "backend": None if backend is None else str(backend).lower(),
                "device_id": None if device_id is None else _as_device(device_id),
                "rank": given.get("rank", -1),
                "world_size": given.get("world_size", -1),
            }
        )

    def set_device(self, device):
        self.pinned.append(_as_device(device))

    def current_device(self):
        return _index(self.pinned[-1]) if self.pinned else 0

    def get_backend(self, group=None):
        return self.inits[-1]["backend"] or ("nccl" if self.gpus else "gloo")

    def patches(self):
        import torch
        import torch.distributed as dist

        cuda = {
            "is_available": lambda: self.gpus > 0,
            "device_count": lambda: self.gpus,
            "set_device": self.set_device,
            "current_device": self.current_device,
        }
        group = {
            "init_process_group": self.init_process_group,
            "is_initialized": lambda: bool(self.inits),
            "get_backend": self.get_backend,
            "get_rank": lambda group=None: self.rank,
            "get_world_size": lambda group=None: self.world,
            "barrier": lambda *args, **kwargs: None,
        }
        return [
            mock.patch.dict(os.environ, self.env),
            *(mock.patch.object(torch.cuda, name, fake) for name, fake in cuda.items()),
            *(mock.patch.object(dist, name, fake) for name, fake in group.items()),
        ]


def _on_pretend_machine(setup, *case):
    """What setup() does on a pretend machine: its calls and what it returned."""
    import contextlib

    pretend = _Pretend(*case)
    with contextlib.ExitStack() as stack:
        for patch in pretend.patches():
            stack.enter_context(patch)
        returned = _describe_device(setup())
    return {"inits": pretend.inits, "pinned": pretend.pinned, "returned": returned}


def _setup_harness(setup, cases):
    """On each rank: setup() on the pretend machines, then for real on this one."""
    import torch.distributed as dist

    pretend = [_on_pretend_machine(setup, *case) for case in cases]
    real = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"])}
    real["want"] = pick_backend()  # 2.1's rule, on this very machine
    try:
        real["returned"] = _describe_device(setup())
        real["joined"] = dist.is_initialized()
        if real["joined"]:
            real["backend"] = str(dist.get_backend())
            real["group"] = (dist.get_rank(), dist.get_world_size())
            dist.barrier()  # every rank connected before any leaves (see _cleanup_harness)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return {"pretend": pretend, "real": real}


def _index(name):
    """The GPU number in a device name: 1 for "cuda:1", None for "cuda" or "cpu"."""
    kind, _, number = name.partition(":")
    return int(number) if kind == "cuda" and number else None


class _Machine:
    """A pretend machine and rank, and the Wrong answers that name what setup() did there."""

    def __init__(self, gpus, nodes, per_node, rank):
        self.gpus, self.per_node, self.rank = gpus, per_node, rank
        self.local, self.world = rank % per_node, nodes * per_node
        key = "machine_one" if nodes == 1 else "machine_many"
        machine = MESSAGES[key].format(gpus=gpus, local=per_node, world=self.world, nodes=nodes)
        self.where = MESSAGES["setup_where"].format(machine=machine, rank=rank, local=self.local)
        self.want = "nccl" if gpus >= per_node else "gloo"

    def wrong(self, key, hint, **fields):
        return Wrong(MESSAGES[key].format(where=self.where, **fields), hint=hint)

    def wrong_gpu(self, key, name):
        """The Wrong for a GPU that is not this rank's: RANK's number, no number, another."""
        what = MESSAGES[key].format(got=name)
        got = _index(name)
        if got is None:
            return self.wrong("setup_gpu_no_index", 1, what=what)
        if got == self.rank != self.local:
            return self.wrong("setup_gpu_global", 1, what=what, world=self.world, gpus=self.gpus)
        if got >= self.gpus:
            return self.wrong("setup_gpu_missing", 1, what=what, last=self.gpus - 1)
        return self.wrong("setup_gpu_other", 1, what=what)


def _judge_pretend(case, seen) -> None:
    m = _Machine(*case)
    if not seen["inits"]:
        raise m.wrong("setup_no_init", 0)
    if len(seen["inits"]) > 1:
        raise m.wrong("setup_init_twice", 0, count=len(seen["inits"]))
    (init,) = seen["inits"]
    # No backend named: torch takes the device_id's, else the accelerator's (nccl on CUDA).
    got = init["backend"] or ("nccl" if init["device_id"] or m.gpus else "gloo")
    if got != m.want:
        raise m.wrong("setup_backend", 0, got=got, want=m.want)
    for name, env, value in (("rank", "RANK", m.rank), ("world_size", "WORLD_SIZE", m.world)):
        if init[name] not in (-1, value):
            raise m.wrong("setup_argument", 1, name=name, got=init[name], env=env, want=value)
    returned = seen["returned"]
    if "device" not in returned:
        raise m.wrong("setup_not_a_device", 0, got=returned["other"])
    (_judge_nccl if m.want == "nccl" else _judge_gloo)(m, init, seen["pinned"], returned)


def _judge_gloo(m, init, pinned, returned) -> None:
    used = [("setup_pinned", name) for name in pinned]
    used += [("setup_device_id", init["device_id"])] if init["device_id"] else []
    for key, name in used:
        gpu = _index(name)
        if gpu is None or gpu >= m.gpus:
            what = MESSAGES[key].format(got=name)
            raise m.wrong("setup_gloo_gpu", 0, what=what, gpus=m.gpus, local=m.per_node)
    if returned["type"] != "cpu":
        raise m.wrong("setup_gloo_device", 0, got=returned["device"])


def _judge_nccl(m, init, pinned, returned) -> None:
    for name in pinned:
        if _index(name) != m.local:
            raise m.wrong_gpu("setup_pinned", name)
    if init["device_id"] is None:
        raise m.wrong("setup_no_device_id", 2)
    if _index(init["device_id"]) != m.local:
        raise m.wrong_gpu("setup_device_id", init["device_id"])
    if not pinned:
        raise m.wrong("setup_not_pinned", 2)
    if returned["type"] != "cuda":
        raise m.wrong("setup_nccl_cpu", 0, got=returned["device"])
    if returned["index"] != m.local:
        raise m.wrong_gpu("setup_returned_gpu", returned["device"])


def _judge_real(real) -> None:
    where = MESSAGES["setup_real"].format(rank=real["rank"])
    if not real["joined"]:
        raise Wrong(MESSAGES["setup_real_missing"].format(where=where), hint=0)
    want, got = real["want"], real["backend"]
    if got != want:
        raise Wrong(MESSAGES["setup_backend"].format(where=where, got=got, want=want), hint=0)
    if tuple(real["group"]) != (real["rank"], real["world"]):
        got_rank, got_world = real["group"]
        text = MESSAGES["setup_real_group"].format(
            where=where, got_rank=got_rank, got_world=got_world, **real
        )
        raise Wrong(text, hint=1)
    returned = real["returned"]
    if "device" not in returned:
        text = MESSAGES["setup_not_a_device"].format(where=where, got=returned["other"])
        raise Wrong(text, hint=0)
    key = {"gloo": "setup_gloo_device", "nccl": "setup_nccl_cpu"}[want]
    if returned["type"] != ("cpu" if want == "gloo" else "cuda"):
        raise Wrong(MESSAGES[key].format(where=where, got=returned["device"]), hint=0)


def _check_setup(fn, cases=SETUP_CASES) -> str:
    results = run_on_ranks(_setup_harness, fn, cases, nprocs=2, hang_hint=0)
    for case, seen in zip(cases, results[0]["pretend"], strict=True):
        _judge_pretend(case, seen)
    for result in results:
        _judge_real(result["real"])
    return MESSAGES["setup_ok"].format(cases=len(cases))


def _hidden_setup(fn) -> str:
    # Machines the check does not show: 8 GPUs, 2 machines x 8 ranks, and more GPUs than ranks.
    return _check_setup(fn, [(8, 2, 8, 13), (4, 1, 2, 0), (8, 4, 4, 6)])


def cleanup():
    import torch.distributed as dist

    dist.destroy_process_group()


def _cleanup_harness(cleanup):
    """On each rank: join a group, cleanup(), then look whether a group is left."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    # Every rank connected before any leaves: a rank that destroys its group while another
    # is still connecting to it breaks that one's init ("Connection closed by peer").
    dist.barrier()
    cleanup()
    left = dist.is_initialized()
    if left:
        dist.destroy_process_group()  # the check's own, so that the rank ends cleanly
    return {"left": left}


def _check_cleanup(fn) -> str:
    results = run_on_ranks(_cleanup_harness, fn, nprocs=2, hang_hint=1)
    left = [rank for rank, r in enumerate(results) if r["left"]]
    if len(left) == len(results):
        raise Wrong(MESSAGES["cleanup_left_all"], hint=0)
    if left:
        ranks = ", ".join(map(str, left))
        raise Wrong(MESSAGES["cleanup_left_some"].format(ranks=ranks), hint=1)
    return MESSAGES["cleanup_ok"]


def average_gradients(model):
    import torch.distributed as dist

    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # SUM over the ranks ...
            p.grad /= world_size  # ... then divide (DDP divides first, then sums)


def _average_gradients_harness(average_gradients):
    """On each rank: the learner's averaging next to DDP's, on the same data."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        ddp = DDP(copy.deepcopy(model))
        gen = torch.Generator().manual_seed(100 + rank)
        x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        local = [p.grad.clone() for p in model.parameters()]
        average_gradients(model)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        mine = torch.cat([p.grad.flatten() for p in model.parameters()])
        theirs = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
        unchanged = all(
            torch.equal(a, p.grad) for a, p in zip(local, model.parameters(), strict=True)
        )
        diff = (mine - theirs).abs().max().item()
        ratio = (mine.norm() / theirs.norm()).item()
        return {"diff": diff, "ratio": ratio, "unchanged": unchanged}
    finally:
        dist.destroy_process_group()


def _check_average(fn) -> str:
    results = run_on_ranks(_average_gradients_harness, fn, nprocs=2, hang_hint=1)
    worst = max(results, key=lambda r: r["diff"])
    if worst["diff"] <= 1e-6:
        return MESSAGES["avg_ok"].format(diff=worst["diff"])
    if all(r["unchanged"] for r in results):
        raise Wrong(MESSAGES["avg_unchanged"], hint=0)
    if abs(worst["ratio"] - 2.0) < 0.05:
        raise Wrong(MESSAGES["avg_sum"].format(ratio=worst["ratio"]), hint=0)
    raise Wrong(MESSAGES["avg_differ"].format(diff=worst["diff"]), hint=0)


q1 = Exercise(
    "2.1",
    "pick_backend",
    _check_backend,
    MESSAGES["backend_hints"],
    pick_backend,
    hidden=_hidden_backend,
)
q2 = Exercise("2.2", "setup", _check_setup, MESSAGES["setup_hints"], setup, hidden=_hidden_setup)
q3 = Exercise("2.3", "cleanup", _check_cleanup, MESSAGES["cleanup_hints"], cleanup)
q4 = Exercise("2.4", "average_gradients", _check_average, MESSAGES["avg_hints"], average_gradients)
EXERCISES = [q1, q2, q3, q4]


def progress() -> None:
    """Which exercises of lesson 02 pass, checked against this notebook's definitions."""
    _progress(EXERCISES, "02")
