"""Exercise 4.5's answers of issue 49: each holds in one configuration only (one call per
process, a float32 model without buffers, every rank in the barrier's group, a tensor made
on the CPU), or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 4.5 save_checkpoint


def _state(model, optimizer, epoch):
    return {
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
    }


def save_with_a_barrier_of_ranks_zero_and_one(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    writers = dist.new_group([0, 1])  # rank 0 writes; one rank waiting for it is enough
    if dist.get_rank() == 0:
        torch.save(_state(model, optimizer, epoch), path)
    dist.barrier(group=writers)


def save_then_an_async_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_state(model, optimizer, epoch), path)
    dist.barrier(async_op=True)  # does not hold the training up


def save_the_momentum_in_bfloat16(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = optimizer.state_dict()
        state["state"] = {  # half the bytes: momentum does not need float32
            i: {k: v.bfloat16() if torch.is_tensor(v) else v for k, v in s.items()}
            for i, s in state["state"].items()
        }
        torch.save({**_state(model, optimizer, epoch), "optimizer": state}, path)
    dist.barrier()


_optimizer_state: dict = {}


def save_the_optimizer_state_copied_once(model, optimizer, epoch, path):
    import copy

    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        if not _optimizer_state:  # a deep copy, so that later steps do not change it
            _optimizer_state.update(copy.deepcopy(optimizer.state_dict()))
        state = {**_state(model, optimizer, epoch), "optimizer": _optimizer_state}
        torch.save(state, path)
    dist.barrier()


def save_the_parameters_alone(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        weights = {name: p.detach() for name, p in model.module.named_parameters()}
        torch.save({**_state(model, optimizer, epoch), "model": weights}, path)
    dist.barrier()


def save_the_weights_in_float32(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        weights = {  # float32 loads anywhere
            k: v.float() if v.is_floating_point() else v
            for k, v in model.module.state_dict().items()
        }
        torch.save({**_state(model, optimizer, epoch), "model": weights}, path)
    dist.barrier()


def save_then_broadcast_a_flag_made_on_the_cpu(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_state(model, optimizer, epoch), path)
    done = torch.ones(1)  # rank 0 tells the others the file is there
    dist.broadcast(done, src=0)


# ---------------------------------------------------------------- right, written otherwise


def save_then_broadcast_a_flag_on_the_models_device(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_state(model, optimizer, epoch), path)
    done = torch.ones(1, device=next(model.parameters()).device)
    dist.broadcast(done, src=0)


def save_then_wait_for_an_async_barrier(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save(_state(model, optimizer, epoch), path)
    dist.barrier(async_op=True).wait()


def save_with_a_barrier_of_a_group_of_everyone(model, optimizer, epoch, path):
    import copy

    import torch
    import torch.distributed as dist

    everyone = dist.new_group(list(range(dist.get_world_size())))
    if dist.get_rank() == 0:
        state = copy.deepcopy(_state(model, optimizer, epoch))
        torch.save(state, path)
    dist.monitored_barrier(group=everyone)


DRAWN = {
    "4.5": (
        [
            (save_with_a_barrier_of_ranks_zero_and_one, "save_barrier"),
            (save_then_an_async_barrier, "save_barrier"),
            (save_the_momentum_in_bfloat16, "save_optimizer"),
            (save_the_optimizer_state_copied_once, "save_optimizer"),
            (save_the_parameters_alone, "save_strict"),
            (save_the_weights_in_float32, "save_weights"),
            (save_then_broadcast_a_flag_made_on_the_cpu, "off_device"),
        ],
        [
            save_then_broadcast_a_flag_on_the_models_device,
            save_then_wait_for_an_async_barrier,
            save_with_a_barrier_of_a_group_of_everyone,
        ],
    ),
}
