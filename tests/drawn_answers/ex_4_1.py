"""Exercise 4.1's answers of issue 49 (the capstone, train_ddp): each hard-codes what one
configuration keeps fixed, or is right and written another way. DRAWN joins the sweep
(tests/exercises/test_answers.py)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_helpers.exercises.lesson02.cleanup import cleanup
from ddp_helpers.exercises.lesson02.setup import setup
from ddp_helpers.exercises.lesson03.wrap import wrap
from ddp_helpers.exercises.lesson04.capstone import GLOBAL_BATCH, LR, make_dataset, make_model


def _one_pass(model, loader, optimizer, device):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()


def _begin(batch=None, **sampler_options):
    """setup, the wrapped model, its data, a loader over a DistributedSampler, SGD."""
    device = setup()
    model = wrap(make_model(), device)
    data = make_dataset()
    per_rank = batch or GLOBAL_BATCH // dist.get_world_size()
    sampler = DistributedSampler(data, **sampler_options)
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler)
    return device, model, data, loader, torch.optim.SGD(model.parameters(), lr=LR)


# ---------------------------------------------------------------- wrong


def trains_two_epochs_whatever_it_is_asked(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(2):  # the number of epochs seen in the notebook
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def epochs_counted_from_one(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(1, epochs):  # epoch 1, 2, ...: one epoch short
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def saves_once_after_training(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
    if dist.get_rank() == 0:  # the final weights, once: but the script saves every epoch
        torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def sampler_in_data_order(epochs, path):
    device, model, _, loader, optimizer = _begin(shuffle=False)  # "reproducible"
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def sampler_with_a_seed_of_its_own(epochs, path):
    device, model, _, loader, optimizer = _begin(seed=1234)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def per_rank_batch_for_two_ranks(epochs, path):
    device, model, _, loader, optimizer = _begin(batch=GLOBAL_BATCH // 2)  # "2 GPUs"
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def reloads_without_a_barrier(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
        # every rank checks that the checkpoint loads back: rank 0 may still be writing it
        model.module.load_state_dict(torch.load(path, map_location=device))
    cleanup()
    return model


# ---------------------------------------------------------------- right


def a_new_sampler_each_epoch_seeded_by_the_epoch(epochs, path):
    device = setup()
    model = wrap(make_model(), device)
    data = make_dataset()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(epochs):
        sampler = DistributedSampler(data, seed=epoch)  # seed + 0: the order of set_epoch
        loader = DataLoader(data, batch_size=GLOBAL_BATCH // dist.get_world_size(), sampler=sampler)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def every_rank_reloads_after_a_barrier(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
        dist.barrier()  # the file is whole before any rank reads it
        model.module.load_state_dict(torch.load(path, map_location=device))
    cleanup()
    return model


def logs_the_whole_data_sets_loss_every_epoch(epochs, path):
    device, model, data, loader, optimizer = _begin()
    x, y = (t.to(device) for t in data.tensors)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        with torch.no_grad():  # every rank: the DDP model's forward, 96 rows, no step
            loss = torch.nn.functional.mse_loss(model(x), y)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
            torch.save(model.module.state_dict(), path)
    cleanup()
    return model


def saves_through_a_temporary_file(epochs, path):
    device, model, _, loader, optimizer = _begin()
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        _one_pass(model, loader, optimizer, device)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), f"{path}.tmp")
            os.replace(f"{path}.tmp", path)  # no half-written checkpoint, ever
    cleanup()
    return model


DRAWN = {
    "4.1": (
        [
            (trains_two_epochs_whatever_it_is_asked, "passes"),
            (epochs_counted_from_one, "passes"),
            (saves_once_after_training, "ckpt_epochs"),
            (sampler_in_data_order, "epoch_unshuffled"),
            (sampler_with_a_seed_of_its_own, "epoch_seed"),
            (per_rank_batch_for_two_ranks, "batch_other"),
            (reloads_without_a_barrier, "ckpt_no_barrier"),
        ],
        [
            a_new_sampler_each_epoch_seeded_by_the_epoch,
            every_rank_reloads_after_a_barrier,
            logs_the_whole_data_sets_loss_every_epoch,
            saves_through_a_temporary_file,
        ],
    ),
}
