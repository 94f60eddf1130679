"""Exercise 2.2's answers of issue 49: each keeps what a first call set up, or is right and
written another way. DRAWN joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

import os

# ---------------------------------------------------------------- 2.2 setup

_set_up: dict = {}


def setup_once_per_process():
    import torch
    import torch.distributed as dist

    if "device" in _set_up:  # a notebook cell run twice: do not join twice
        return _set_up["device"]
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    _set_up["device"] = device
    return device


_joined: list[bool] = []


def setup_joining_behind_a_flag():
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    if not _joined:  # join once, whatever is asked after
        dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
        _joined.append(True)
    return device


def setup_for_two_gpus_a_machine():
    import torch
    import torch.distributed as dist

    if torch.cuda.device_count() < 2:  # the notebook's machines: 2 ranks each
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def setup_guarded_by_is_initialized():
    import torch
    import torch.distributed as dist

    ranks_here = int(os.environ["LOCAL_WORLD_SIZE"])
    on_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= ranks_here
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}") if on_gpus else torch.device("cpu")
    if on_gpus:
        torch.cuda.set_device(device)
    if not dist.is_initialized():  # a cell run twice joins once
        if on_gpus:
            dist.init_process_group(backend="nccl", device_id=device)
        else:
            dist.init_process_group(backend="gloo")
    return device


def setup_from_a_table_of_backends():
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = {True: "nccl", False: "gloo"}[gpus >= int(os.environ["LOCAL_WORLD_SIZE"])]
    if backend == "gloo":
        dist.init_process_group(backend)
        return torch.device("cpu")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, device_id=torch.device("cuda", local_rank))
    return torch.device("cuda", local_rank)


DRAWN = {
    "2.2": (
        [
            (setup_once_per_process, "setup_kept"),
            (setup_joining_behind_a_flag, "setup_kept"),
            (setup_for_two_gpus_a_machine, "setup_backend"),
        ],
        [setup_guarded_by_is_initialized, setup_from_a_table_of_backends],
    ),
}
