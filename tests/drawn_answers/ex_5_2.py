"""Exercise 5.2's answers: each wrong one makes the mistake its name says (the optimizer made
before sharding, the root alone sharded, the blocks alone, model.forward past the hooks, a
mesh of its own, a depth of its own, ...); the right ones are written other ways."""

from __future__ import annotations

# ---------------------------------------------------------------- 5.2 train_fsdp, wrong


def _train(model, optimizer, batches, forward=None):
    import torch

    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss((forward or model)(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _shard(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def fsdp_optimizer_made_before_sharding(model, mesh, make_optimizer, batches):
    optimizer = make_optimizer(model.parameters())  # as with DDP: first the optimizer
    _shard(model, mesh)
    return _train(model, optimizer, batches)


def fsdp_the_root_alone(model, mesh, make_optimizer, batches):
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=mesh)  # the root takes every parameter with it
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_the_blocks_alone(model, mesh, make_optimizer, batches):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:  # the blocks hold most of the weights
        fully_shard(block, mesh=mesh)
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_nothing_sharded(model, mesh, make_optimizer, batches):
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_forward_past_the_hooks(model, mesh, make_optimizer, batches):

    _shard(model, mesh)
    return _train(model, make_optimizer(model.parameters()), batches, forward=model.forward)


def fsdp_a_mesh_of_two(model, mesh, make_optimizer, batches):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2,))  # the notebook runs 2 ranks
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_no_mesh_given(model, mesh, make_optimizer, batches):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)  # fully_shard makes a mesh of every rank itself
    fully_shard(model)
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_three_blocks_by_index(model, mesh, make_optimizer, batches):
    from torch.distributed.fsdp import fully_shard

    for i in range(3):  # the model has 3 blocks
        fully_shard(model.blocks[i], mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, make_optimizer(model.parameters()), batches)


def fsdp_its_own_adam(model, mesh, make_optimizer, batches):
    import torch

    _shard(model, mesh)
    return _train(model, torch.optim.Adam(model.parameters(), lr=1e-3), batches)


def fsdp_returns_the_loss_tensors(model, mesh, make_optimizer, batches):
    import torch

    _shard(model, mesh)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # no .item(): no wait for the value
    return losses


def fsdp_summed_loss(model, mesh, make_optimizer, batches):
    import torch

    _shard(model, mesh)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def fsdp_gradients_never_zeroed(model, mesh, make_optimizer, batches):
    import torch

    _shard(model, mesh)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # FSDP2 frees what it gathered: the gradients too, surely
        optimizer.step()
        losses.append(loss.item())
    return losses


_sharded_optimizer: list = []


def fsdp_the_optimizer_kept_from_the_first_call(model, mesh, make_optimizer, batches):

    _shard(model, mesh)
    if not _sharded_optimizer:  # made once: Adam's state is the expensive part
        _sharded_optimizer.append(make_optimizer(model.parameters()))
    return _train(model, _sharded_optimizer[0], batches)


# ---------------------------------------------------------------- right, written otherwise


def fsdp_blocks_by_enumerate_root_kept_gathered(model, mesh, make_optimizer, batches):
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard

    for _, block in enumerate(model.blocks):
        fully_shard(block, mesh=mesh)
    # The root's weights are needed again at once by the backward pass: keep them gathered.
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
    losses = []
    for x, y in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def fsdp_with_an_mse_module_and_the_modules_list(model, mesh, make_optimizer, batches):
    import torch
    from torch.distributed.fsdp import FSDPModule, fully_shard

    criterion = torch.nn.MSELoss()
    blocks = list(model.blocks.children())
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert isinstance(model, FSDPModule)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for step in range(len(batches)):
        x, y = batches[step]
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().item())
    return losses


def fsdp_from_a_param_group(model, mesh, make_optimizer, batches):
    import torch
    from torch.distributed.fsdp import fully_shard

    for name, child in model.named_children():
        if name == "blocks":
            for block in child:
                fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = make_optimizer([{"params": list(model.parameters())}])
    return [_one_step(model, optimizer, x, y, torch.nn.functional.mse_loss) for x, y in batches]


def _one_step(model, optimizer, x, y, loss_fn):
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


ANSWERS = {
    "5.2": (
        [
            (fsdp_optimizer_made_before_sharding, "fsdp_optimizer_before"),
            (fsdp_the_optimizer_kept_from_the_first_call, "fsdp_optimizer_before"),
            (fsdp_the_root_alone, "fsdp_root_only"),
            (fsdp_the_blocks_alone, "fsdp_blocks_only"),
            (fsdp_nothing_sharded, "fsdp_none"),
            (fsdp_forward_past_the_hooks, "fsdp_forward"),
            (fsdp_a_mesh_of_two, "fsdp_mesh"),
            (fsdp_no_mesh_given, "fsdp_mesh"),
            (fsdp_three_blocks_by_index, "fsdp_blocks_missed"),
            (fsdp_its_own_adam, "fsdp_no_optimizer"),
            (fsdp_returns_the_loss_tensors, "fsdp_return"),
            (fsdp_summed_loss, "fsdp_losses"),
            (fsdp_gradients_never_zeroed, "fsdp_weights"),
        ],
        [
            fsdp_blocks_by_enumerate_root_kept_gathered,
            fsdp_with_an_mse_module_and_the_modules_list,
            fsdp_from_a_param_group,
        ],
    ),
}

# Joined to the sweep of tests/exercises/test_answers.py.
DRAWN = ANSWERS
