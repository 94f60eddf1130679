"""Exercise 5.4's answers (save_sharded): each wrong one makes the mistake its name says
(torch.save of the sharded state dict on rank 0, the whole state gathered on rank 0, dcp.save
on rank 0 alone, the optimizer not saved, ...); the right ones are written other ways."""

from __future__ import annotations

# ---------------------------------------------------------------- 5.4 save_sharded, wrong


def save_the_state_dict_with_torch_save_on_rank_zero(model, optimizer, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:  # one writer, as lesson 04 taught
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    dist.barrier()


def save_the_full_state_gathered_on_rank_zero(model, optimizer, path):
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    # Gathered whole onto rank 0's CPU: a checkpoint any plain process can read.
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    if dist.get_rank() == 0:
        torch.save({"model": model_state, "optimizer": optimizer_state}, path)
    dist.barrier()


def save_with_dcp_on_rank_zero_alone(model, optimizer, path):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    if dist.get_rank() == 0:  # one writer
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def save_the_model_alone(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=path)  # the weights


def save_the_plain_state_dicts(model, optimizer, path):
    import torch.distributed.checkpoint as dcp

    dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint_id=path)


def save_the_parameters_alone(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, optimizer_state = get_state_dict(model, optimizer)
    weights = dict(model.named_parameters())  # what training changes
    dcp.save({"model": weights, "optimizer": optimizer_state}, checkpoint_id=path)


def save_each_ranks_shards_with_torch_save(model, optimizer, path):
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    os.makedirs(path, exist_ok=True)
    shard = os.path.join(path, f"rank{dist.get_rank()}.pt")  # each rank its own file
    torch.save({"model": model_state, "optimizer": optimizer_state}, shard)
    dist.barrier()


def save_the_full_state_with_dcp(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True)  # whole tensors: simpler to read back
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def save_under_keys_of_its_own(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model_state": model_state, "optim_state": optimizer_state}, checkpoint_id=path)


def save_the_moments_in_bfloat16(model, optimizer, path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    smaller = {  # half the bytes: Adam's moments need no float32 on disk
        name: {k: v.to(torch.bfloat16) if k.startswith("exp_avg") else v for k, v in s.items()}
        for name, s in optimizer_state["state"].items()
    }
    optimizer_state = {**optimizer_state, "state": smaller}
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def save_beside_path_with_an_extension(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.save(state, checkpoint_id=f"{path}.dcp")  # a name that says what it is


# ---------------------------------------------------------------- right, written otherwise


def save_through_a_stateful_object(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.stateful import Stateful

    class Both(Stateful):
        def state_dict(self):
            model_state, optimizer_state = get_state_dict(model, optimizer)
            return {"model": model_state, "optimizer": optimizer_state}

        def load_state_dict(self, state):
            raise NotImplementedError

    dcp.save(Both().state_dict(), checkpoint_id=path)


def save_with_the_two_getters_and_a_writer(model, optimizer, path):
    from torch.distributed.checkpoint import FileSystemWriter, save
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    state = {
        "model": get_model_state_dict(model),
        "optimizer": get_optimizer_state_dict(model, optimizer),
    }
    save(state, storage_writer=FileSystemWriter(path))


ANSWERS = {
    "5.4": (
        [
            (save_the_state_dict_with_torch_save_on_rank_zero, "ckpt_rank_shards"),
            (save_the_full_state_gathered_on_rank_zero, "ckpt_gathered"),
            (save_the_full_state_with_dcp, "ckpt_gathered"),
            (save_with_dcp_on_rank_zero_alone, "hang"),
            (save_the_model_alone, "ckpt_no_optimizer"),
            (save_the_plain_state_dicts, "ckpt_optimizer_numbers"),
            (save_the_parameters_alone, "ckpt_missing"),
            (save_each_ranks_shards_with_torch_save, "ckpt_not_dcp"),
            (save_under_keys_of_its_own, "ckpt_layout"),
            (save_the_moments_in_bfloat16, "ckpt_values"),
            (save_beside_path_with_an_extension, "ckpt_nothing"),
        ],
        [save_through_a_stateful_object, save_with_the_two_getters_and_a_writer],
    ),
}

# Joined to the sweep of tests/exercises/test_answers.py.
DRAWN = ANSWERS
