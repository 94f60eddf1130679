"""The DDP recipe as one script for torchrun, its seven steps numbered: recipe.md beside it
explains each one and lists the classic bugs.

    torchrun --standalone --nproc-per-node 2 ddp_recipe.py

gloo on a machine without a GPU for each of its ranks, nccl (one GPU per rank) on one
that has them. A small regression on synthetic data: a few seconds on a CPU.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 32  # the examples of one optimizer step, all the ranks together
LR = 0.1


def make_dataset():
    gen = torch.Generator().manual_seed(0)  # the same data on every rank
    x = torch.randn(512, 4, generator=gen)
    return TensorDataset(x, torch.sin(x[:, :1]) + 0.5 * x[:, 1:2])


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def main(epochs, checkpoint):
    # Step 1 · Setup: join the process group; pick this rank's device. Its GPU number is
    # LOCAL_RANK (each machine numbers its own GPUs from 0), never RANK.
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus_here >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU for each rank of the machine
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # this process's current GPU from now on
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()  # global: across all machines

    # Step 2 · Wrap: DDP copies rank 0's weights to every rank, then averages the gradients
    # across the ranks in every backward(). device_ids on a GPU only.
    model = make_model().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    # Step 3 · Sampler: each rank its own share of the data, and its part of the global
    # batch (the per-rank batch times the world size makes one optimizer step's batch).
    dataset = make_dataset()
    sampler = DistributedSampler(dataset)  # shuffles; no shuffle=True in the DataLoader
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)

    for epoch in range(epochs):
        # Step 4 · set_epoch at the top of every epoch: without it, every epoch repeats
        # epoch 0's order.
        sampler.set_epoch(epoch)
        summed = torch.zeros(2, device=device)  # this rank's loss x examples, its examples
        for x, y in loader:
            # Step 5 · The batch to the device; forward, backward (where DDP averages the
            # gradients), step: the same on every rank.
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            summed += torch.stack([loss.detach() * len(y), torch.tensor(len(y), device=device)])
        dist.all_reduce(summed)  # a collective: every rank calls it, never under `if rank == 0:`
        if rank == 0:  # one rank does the talking
            print(f"epoch {epoch}: mean loss {(summed[0] / summed[1]).item():.4f}")

    # Step 6 · Save once for the whole job: global rank 0, the plain model's state (DDP's
    # own keys start with `module.`). Then a barrier on every rank, outside the `if`, so
    # that no rank reads the file before it is complete.
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)
        print(f"saved {checkpoint}")
    dist.barrier()

    # Step 7 · Leave cleanly: every rank's last call.
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--checkpoint", default="recipe_checkpoint.pt")
    args = parser.parse_args()
    main(args.epochs, args.checkpoint)
