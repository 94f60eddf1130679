"""2.2 setup: the process group joined with the right backend, the rank pinned to its GPU."""

from __future__ import annotations

import contextlib
import inspect
import os
from unittest import mock

from ...i18n import messages
from ..kit import Exercise, Mistake, Phrase, Wrong, and_list, rank_mistakes, run_on_ranks
from ..lesson01.gpu import layout_env
from ..space import CHECK_SEED, HIDDEN_SEEDS, Space, on_hidden_seeds, trying
from . import machines
from .backend import pick_backend
from .machines import _machine_key

MESSAGES = messages(
    "exercises.lesson02.setup",
    {
        "hint.setup_backend": (
            "Start from 2.1: pick_backend() says nccl or gloo. Under gloo the rank works on "
            "the CPU; under nccl each rank works on a GPU of its own, on its own machine."
        ),
        "hint.setup_local_rank": (
            "Each machine numbers its GPUs from 0. RANK counts the ranks of the whole job "
            "(0 to WORLD_SIZE - 1); LOCAL_RANK counts the ranks of this machine (0 to "
            "LOCAL_WORLD_SIZE - 1), so LOCAL_RANK is the one that names this rank's GPU."
        ),
        "hint.setup_pin": (
            "Under nccl, pin the process with torch.cuda.set_device(...) before anything "
            "touches the GPU, and give init_process_group the same GPU as device_id=."
        ),
        "hint.setup_code": (
            'if pick_backend() == "gloo": dist.init_process_group("gloo") and return '
            'torch.device("cpu"). Otherwise device = torch.device("cuda", '
            'int(os.environ["LOCAL_RANK"])); torch.cuda.set_device(device); '
            'dist.init_process_group("nccl", device_id=device); return device.'
        ),
        "setup_where": "{machine}, in the rank with RANK={rank}, LOCAL_RANK={local}",
        "setup_no_init": "On {where}, setup() never called init_process_group.",
        "setup_no_init.title": "init_process_group never called",
        "setup_init_twice": (
            "On {where}, setup() called init_process_group {count} times; a process joins "
            "the default group once."
        ),
        "setup_init_twice.title": "init_process_group called more than once",
        "setup_backend": (
            "On {where}, setup() started the group with {got!r}, but 2.1's rule picks "
            "{want!r} on this machine."
        ),
        "setup_backend.title": "not the backend 2.1's rule picks",
        "setup_argument": (
            "On {where}, init_process_group was given {name}={got}, but this process's {env} "
            "is {want}."
        ),
        "setup_argument.title": "init_process_group told another rank or world size",
        "setup_pinned": "setup() pinned the process to {got}",
        "setup_device_id": "init_process_group got device_id={got}",
        "setup_returned_gpu": "setup() returned {got}",
        "setup_gpu_global": (
            "On {where}, {what}: that number is RANK, the rank's place among all {world} "
            "ranks of the job, but each machine numbers its own GPUs from 0, and this one "
            "has {gpus}."
        ),
        "setup_gpu_global.title": "RANK used where LOCAL_RANK belongs",
        "setup_gpu_no_index": (
            "On {where}, {what}, a GPU without a number: torch.cuda.set_device and "
            "device_id= need the number, and code that reads device.index (DDP's "
            "device_ids) gets None."
        ),
        "setup_gpu_no_index.title": "cuda without a GPU number",
        "setup_gpu_missing": "On {where}, {what}, but this machine has only GPUs 0 to {last}.",
        "setup_gpu_missing.title": "a GPU number the machine does not have",
        "setup_gpu_other": (
            "On {where}, {what}: that is not this rank's GPU, so two ranks of this machine "
            "would share one GPU while another stays idle."
        ),
        "setup_gpu_other.title": "another rank's GPU",
        "setup_no_device_id": (
            "On {where}, init_process_group under nccl got no device_id=: nccl then "
            "connects only at the first collective, and barrier() has to guess the GPU "
            "(rank 0 warns)."
        ),
        "setup_no_device_id.title": "nccl without device_id=",
        "setup_not_pinned": (
            "On {where}, setup() never called torch.cuda.set_device: the current GPU stays "
            "GPU 0 in every rank, so .cuda() and all_gather_object would put every rank's "
            "tensors on GPU 0."
        ),
        "setup_not_pinned.title": "torch.cuda.set_device never called",
        "setup_gloo_gpu": (
            "On {where}, 2.1's rule picks gloo, yet {what}: this machine has {gpus} GPU(s) "
            "for {local} ranks."
        ),
        "setup_gloo_gpu.title": "a GPU used where 2.1's rule picks gloo",
        "setup_gloo_device": (
            "On {where}, 2.1's rule picks gloo, and setup() returned {got}: under gloo this "
            "rank's model and data stay on the CPU."
        ),
        "setup_gloo_device.title": "a GPU returned under gloo",
        "setup_nccl_cpu": (
            "On {where}, the group uses nccl, but setup() returned {got}: under nccl this "
            "rank's model and data live on its GPU."
        ),
        "setup_nccl_cpu.title": "the CPU returned under nccl",
        "setup_not_a_device": (
            "On {where}, setup() returned {got}; it must return a torch.device, the device "
            "this rank works on (later steps move the model and data there and read "
            "device.type)."
        ),
        "setup_not_a_device.title": "did not return a torch.device",
        "setup_real": "a real run on 2 ranks of this machine (rank {rank})",
        "setup_real_missing": (
            "In {where}, the process group was not initialised after setup() returned."
        ),
        "setup_real_missing.title": "no process group after setup() in a real run",
        "setup_real_group": (
            "In {where}, the group says rank {got_rank} of {got_world}; torchrun's "
            "environment says rank {rank} of {world}."
        ),
        "setup_real_group.title": "the group's rank or size is not torchrun's",
        "setup_kept": (
            "On {where}, setup() did not do the same in two processes: in one it {did}, in "
            "the other it {other}. The two had called it on other machines before, in other "
            "orders: what it does depends on an earlier call. Whether this process has joined "
            "a group is dist.is_initialized()'s to say, and its GPU LOCAL_RANK's, on every "
            "call."
        ),
        "setup_kept.title": "depends on an earlier call",
        "setup_did": "{inits}, {pinned} and returned {returned}",
        "setup_did_inits": "called init_process_group {count} time(s) ({inits})",
        "setup_did_no_init": "never called init_process_group",
        "setup_did_pinned": "pinned {pinned}",
        "setup_did_unpinned": "pinned nothing",
        "setup_ok": (
            "Right on {cases} pretend machines (a GPU for each rank, 3 ranks on one machine "
            "with GPUs enough and too few, 2 machines x 2 ranks, none), called in 2 processes "
            "in opposite orders, then in a real run on 2 ranks here."
        ),
    },
)


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


# Pretend machines, by seed: (GPUs on each machine, machines, ranks per machine, this rank's
# RANK). Each process of the check calls setup() on every one, in its own order (2.1 picks
# the backend; here what setup() does with it).
SETUP_CASES = {
    CHECK_SEED: (
        (2, 1, 2, 1),  # a GPU for each rank: nccl on cuda:1
        (4, 1, 3, 2),  # 3 ranks, more GPUs than ranks: nccl on cuda:2
        (2, 1, 3, 0),  # 3 ranks, 2 GPUs: gloo
        (2, 2, 2, 3),  # 2 machines x 2 ranks, the last rank: RANK=3 but LOCAL_RANK=1
        (1, 1, 2, 1),  # one GPU for two ranks: gloo
        (0, 1, 2, 0),  # no GPU
    ),
    HIDDEN_SEEDS[0]: ((8, 2, 8, 13), (4, 1, 2, 0), (3, 1, 3, 1)),
    HIDDEN_SEEDS[1]: ((8, 4, 4, 6), (3, 2, 3, 4), (0, 3, 1, 2)),
}
SPACE = Space(
    drawn={
        "world": tuple(sorted({m * p for cs in SETUP_CASES.values() for _, m, p, _ in cs})),
        "machines": tuple(sorted({m for cs in SETUP_CASES.values() for _, m, _, _ in cs})),
        "calls": tuple(len(cases) + 1 for cases in SETUP_CASES.values()),
        "device": ("cpu", "cuda:LOCAL_RANK on pretend GPU machines"),
    },
    why_not={
        "steps": "it joins a group once a process: the calls, one a machine, are drawn above",
        "counts": "it is given no count: the GPUs a machine has (none to 8) and the ranks it "
        "runs are the machines drawn above",
        "dtypes": "it handles no values",
        "model": "it is given no model",
        "lengths": "it is given no data",
    },
)


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
        import torch.distributed as dist

        self.gpus, self.rank, self.world = gpus, rank, nodes * per_node
        self.env = layout_env(rank, nodes, per_node)
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
    pretend = _Pretend(*case)
    with contextlib.ExitStack() as stack:
        for patch in pretend.patches():
            stack.enter_context(patch)
        returned = _describe_device(setup())
    return {"inits": pretend.inits, "pinned": pretend.pinned, "returned": returned}


def _setup_harness(setup, cases):
    """On each rank: setup() on the pretend machines (rank 0 in turn, rank 1 in the opposite
    order: what a call does must not depend on those before it), then for real here."""
    import torch.distributed as dist

    pretend = [None] * len(cases)
    order = range(len(cases)) if os.environ["RANK"] == "0" else reversed(range(len(cases)))
    for k in order:
        pretend[k] = _on_pretend_machine(setup, *cases[k])
    real = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"])}
    real["want"] = pick_backend()  # 2.1's rule, on this very machine
    try:
        real["returned"] = _describe_device(setup())
        real["joined"] = dist.is_initialized()
        if real["joined"]:
            real["backend"] = str(dist.get_backend())
            real["group"] = (dist.get_rank(), dist.get_world_size())
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
        machine = Phrase(
            _machine_key(gpus, nodes), gpus=gpus, local=per_node, world=self.world, nodes=nodes
        )
        self.where = Phrase("setup_where", machine=machine, rank=rank, local=self.local)
        self.want = "nccl" if gpus >= per_node else "gloo"

    def wrong(self, key, **fields):
        return Wrong(key, where=self.where, **fields)

    def wrong_gpu(self, key, name):
        """The Wrong for a GPU that is not this rank's: RANK's number, no number, another."""
        what = Phrase(key, got=name)
        got = _index(name)
        if got is None:
            return self.wrong("setup_gpu_no_index", what=what)
        if got == self.rank != self.local:
            return self.wrong("setup_gpu_global", what=what, world=self.world, gpus=self.gpus)
        if got >= self.gpus:
            return self.wrong("setup_gpu_missing", what=what, last=self.gpus - 1)
        return self.wrong("setup_gpu_other", what=what)


def _judge_pretend(case, seen) -> None:
    m = _Machine(*case)
    if not seen["inits"]:
        raise m.wrong("setup_no_init")
    if len(seen["inits"]) > 1:
        raise m.wrong("setup_init_twice", count=len(seen["inits"]))
    (init,) = seen["inits"]
    # No backend named: torch takes the device_id's, else the accelerator's (nccl on CUDA).
    got = init["backend"] or ("nccl" if init["device_id"] or m.gpus else "gloo")
    if got != m.want:
        raise m.wrong("setup_backend", got=got, want=m.want)
    for name, env, value in (("rank", "RANK", m.rank), ("world_size", "WORLD_SIZE", m.world)):
        if init[name] not in (-1, value):
            raise m.wrong("setup_argument", name=name, got=init[name], env=env, want=value)
    returned = seen["returned"]
    if "device" not in returned:
        raise m.wrong("setup_not_a_device", got=returned["other"])
    (_judge_nccl if m.want == "nccl" else _judge_gloo)(m, init, seen["pinned"], returned)


def _judge_gloo(m, init, pinned, returned) -> None:
    used = [("setup_pinned", name) for name in pinned]
    used += [("setup_device_id", init["device_id"])] if init["device_id"] else []
    for key, name in used:
        gpu = _index(name)
        if gpu is None or gpu >= m.gpus:
            what = Phrase(key, got=name)
            raise m.wrong("setup_gloo_gpu", what=what, gpus=m.gpus, local=m.per_node)
    if returned["type"] != "cpu":
        raise m.wrong("setup_gloo_device", got=returned["device"])


def _judge_nccl(m, init, pinned, returned) -> None:
    for name in pinned:
        if _index(name) != m.local:
            raise m.wrong_gpu("setup_pinned", name)
    if init["device_id"] is None:
        raise m.wrong("setup_no_device_id")
    if _index(init["device_id"]) != m.local:
        raise m.wrong_gpu("setup_device_id", init["device_id"])
    if not pinned:
        raise m.wrong("setup_not_pinned")
    if returned["type"] != "cuda":
        raise m.wrong("setup_nccl_cpu", got=returned["device"])
    if returned["index"] != m.local:
        raise m.wrong_gpu("setup_returned_gpu", returned["device"])


def _judge_real(real) -> None:
    where = Phrase("setup_real", rank=real["rank"])
    if not real["joined"]:
        raise Wrong("setup_real_missing", where=where)
    want, got = real["want"], real["backend"]
    if got != want:
        raise Wrong("setup_backend", where=where, got=got, want=want)
    if tuple(real["group"]) != (real["rank"], real["world"]):
        got_rank, got_world = real["group"]
        raise Wrong(
            "setup_real_group",
            where=where,
            got_rank=got_rank,
            got_world=got_world,
            rank=real["rank"],
            world=real["world"],
        )
    returned = real["returned"]
    if "device" not in returned:
        raise Wrong("setup_not_a_device", where=where, got=returned["other"])
    key = {"gloo": "setup_gloo_device", "nccl": "setup_nccl_cpu"}[want]
    if returned["type"] != ("cpu" if want == "gloo" else "cuda"):
        raise Wrong(key, where=where, got=returned["device"])


def _check_setup(fn, seed: int = CHECK_SEED) -> Phrase:
    cases = SETUP_CASES[seed]
    results = run_on_ranks(_setup_harness, fn, cases, nprocs=2)
    for k, case in enumerate(cases):
        with trying(ranks=case[1] * case[2], machines=case[1]):
            _judge_same(case, results[0]["pretend"][k], results[1]["pretend"][k])
            _judge_pretend(case, results[0]["pretend"][k])
    for result in results:
        _judge_real(result["real"])
    return Phrase("setup_ok", cases=len(cases))


def _judge_same(case, seen: dict, other: dict) -> None:
    """The same pretend machine in 2 processes that came to it after other machines: what
    setup() does there may not depend on which."""
    if seen == other:
        return
    did = [_did(s) for s in (seen, other)]
    raise _Machine(*case).wrong("setup_kept", did=did[0], other=did[1])


def _did(seen: dict) -> Phrase:
    """What setup() did on a pretend machine, in words: its joins, its pins, its device."""
    inits = [f"{i['backend']}, device_id={i['device_id']}" for i in seen["inits"]]
    joined = (
        Phrase("setup_did_inits", count=len(inits), inits=and_list(inits))
        if inits
        else Phrase("setup_did_no_init")
    )
    pinned = (
        Phrase("setup_did_pinned", pinned=and_list(seen["pinned"]))
        if seen["pinned"]
        else Phrase("setup_did_unpinned")
    )
    returned = seen["returned"].get("device", seen["returned"].get("other"))
    return Phrase("setup_did", inits=joined, pinned=pinned, returned=returned)


exercise = Exercise(
    "2.2",
    "setup",
    _check_setup,
    setup,
    texts=(MESSAGES, machines.MESSAGES),
    hints=("setup_backend", "setup_local_rank", "setup_pin", "setup_code"),
    mistakes={
        "setup_no_init": Mistake(hint="setup_backend"),
        "setup_init_twice": Mistake(hint="setup_backend"),
        "setup_backend": Mistake(hint="setup_backend"),
        "setup_argument": Mistake(hint="setup_local_rank"),
        "setup_not_a_device": Mistake(hint="setup_backend"),
        "setup_gloo_gpu": Mistake(hint="setup_backend"),
        "setup_gloo_device": Mistake(hint="setup_backend"),
        "setup_no_device_id": Mistake(hint="setup_pin"),
        "setup_not_pinned": Mistake(hint="setup_pin"),
        "setup_nccl_cpu": Mistake(hint="setup_backend"),
        "setup_gpu_no_index": Mistake(hint="setup_local_rank"),
        "setup_gpu_global": Mistake(hint="setup_local_rank"),
        "setup_gpu_missing": Mistake(hint="setup_local_rank"),
        "setup_gpu_other": Mistake(hint="setup_local_rank"),
        "setup_real_missing": Mistake(hint="setup_backend"),
        "setup_real_group": Mistake(hint="setup_local_rank"),
        **rank_mistakes(hint="setup_backend"),
        "setup_kept": Mistake(),
    },
    # Machines the check does not show: 8 GPUs, 2 machines x 8 ranks, 3 ranks a machine, 3
    # machines with no GPU.
    hidden=on_hidden_seeds(_check_setup),
    space=SPACE,
)
