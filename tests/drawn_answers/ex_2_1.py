"""Exercise 2.1's answers of issue 49: each keeps what one machine or a first call gave, or
is right and written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

import os

# ---------------------------------------------------------------- 2.1 pick_backend

_chosen: list[str] = []


def backend_chosen_once():
    import torch

    if not _chosen:  # "the machine does not change while the job runs"
        enough = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
        _chosen.append("nccl" if torch.cuda.is_available() and enough else "gloo")
    return _chosen[0]


def backend_if_my_gpu_exists():
    import torch

    mine = int(os.environ["LOCAL_RANK"])  # is there a cuda:LOCAL_RANK for this rank?
    return "nccl" if torch.cuda.device_count() > mine else "gloo"


def backend_named_by_the_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def backend_for_two_ranks_a_machine():
    import torch

    return "nccl" if torch.cuda.device_count() >= 2 else "gloo"  # the notebook's 2 x 2


def backend_from_the_world_and_the_machines():
    import torch

    per_machine = int(os.environ["WORLD_SIZE"]) // int(os.environ["GROUP_WORLD_SIZE"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "nccl" if gpus and gpus >= per_machine else "gloo"


def backend_as_the_enum_of_the_rule():
    import torch.distributed as dist
    from torch import cuda

    ranks_here = int(os.getenv("LOCAL_WORLD_SIZE", "1"))
    if not cuda.is_available() or cuda.device_count() < ranks_here:
        return dist.Backend.GLOO
    return dist.Backend.NCCL


DRAWN = {
    "2.1": (
        [
            (backend_chosen_once, "backend_kept"),
            (backend_if_my_gpu_exists, "backend_ranks_differ"),
            (backend_named_by_the_device, "backend_other"),
            (backend_for_two_ranks_a_machine, "backend_too_few"),
        ],
        [backend_from_the_world_and_the_machines, backend_as_the_enum_of_the_rule],
    ),
}
