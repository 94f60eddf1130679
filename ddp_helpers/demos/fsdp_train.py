"""Lesson 04's exported training (`python -m ddp_helpers export`) turned into FSDP2, with
sharded snapshots that resume: lesson 05's Going further runs it, kills a rank, and runs it
again.

    torchrun --standalone --nproc-per-node 2 fsdp_train.py --epochs 4

What changed from lesson 04's script: `fully_shard` on each linear layer, then on the root,
in place of DDP; the optimizer built after, on the sharded parameters (AdamW: a state to
snapshot, where lesson 04's plain SGD has none); a snapshot each epoch with
torch.distributed.checkpoint (every rank writes its own shards into one folder) in place of
rank 0's `torch.save`. Each epoch's snapshot is written into `epoch-NNNN.partial` and renamed
`epoch-NNNN` once complete, so a job killed mid-save never leaves a half snapshot as the
latest; a start resumes from the latest complete one.

FAIL_AT_STEP=S makes rank FAIL_RANK (default: the last) die as step S begins (steps counted
from 0 across epochs), on the job's first start only, as when its machine is lost.
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

ITEMS, GLOBAL_BATCH, LR = 96, 16, 0.01  # lesson 04's data and batch; AdamW's step size


def setup():
    """Lesson 04's rule: nccl with a GPU for every rank of this machine, else gloo."""
    gpus_here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus_here < int(os.environ["LOCAL_WORLD_SIZE"]):
        dist.init_process_group("gloo")
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # LOCAL_RANK, not RANK
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return device


def make_dataset():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(ITEMS, 4, generator=gen)
    return TensorDataset(x, torch.sin(x.sum(1, keepdim=True)))


def make_model():
    torch.manual_seed(0)  # the same initial weights in every run
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def shard(model, device):
    """FSDP2 in place of DDP: each linear layer sharded, then the root (which holds what is
    left and starts the first all-gather); every rank keeps its rows of each weight."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    model.to(device)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def complete_snapshots(folder):
    """The complete snapshots, oldest first: `epoch-NNNN` folders (not `.partial`)."""
    return sorted(p for p in folder.glob("epoch-*") if not p.name.endswith(".partial"))


def save_snapshot(model, optimizer, epoch, folder):
    """Every rank writes its shards (dcp.save is a collective); rank 0 then renames the
    folder, which dcp.save returns from only once every rank's part and the metadata are
    written: a job killed before leaves a `.partial` folder, never a half snapshot."""
    model_state, optimizer_state = get_state_dict(model, optimizer)  # this rank's shards
    partial = folder / f"epoch-{epoch:04d}.partial"
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=partial)
    if dist.get_rank() == 0:
        partial.rename(folder / f"epoch-{epoch:04d}")  # atomic: complete, or not there


def resume(model, optimizer, folder):
    """The first epoch still to train: 0 without a snapshot, else the one after the latest
    complete snapshot, loaded into this rank's shards."""
    if dist.get_rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        for partial in folder.glob("epoch-*.partial"):  # what a killed job left half written
            shutil.rmtree(partial)
    dist.barrier()  # no rank looks before rank 0 has tidied up
    found = complete_snapshots(folder)
    if not found:
        return 0
    model_state, optimizer_state = get_state_dict(model, optimizer)  # the shapes to fill
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=found[-1])  # each rank reads the pieces of its shards
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
    return int(found[-1].name.removeprefix("epoch-")) + 1


def fail_if_asked(step):
    """FAIL_AT_STEP=S: rank FAIL_RANK (default the last) dies as step S begins, on the job's
    first start only (torchrun counts starts in TORCHELASTIC_RESTART_COUNT)."""
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    rank = int(os.environ.get("FAIL_RANK", dist.get_world_size() - 1))
    if os.environ.get("FAIL_AT_STEP") == str(step) and dist.get_rank() == rank:
        print(f"rank {rank}: dying at step {step} (FAIL_AT_STEP)", file=sys.stderr, flush=True)
        os._exit(1)  # no clean-up at all, as when its machine is lost


def train(epochs, folder):
    device = setup()
    model = shard(make_model(), device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)  # after: the sharded parameters
    dataset = make_dataset()
    loader = DataLoader(
        dataset,
        batch_size=GLOBAL_BATCH // dist.get_world_size(),
        sampler=DistributedSampler(dataset),
    )
    start = resume(model, optimizer, folder)
    if dist.get_rank() == 0 and start:
        print(f"resuming from epoch-{start - 1:04d}: epochs {start} to {epochs - 1} left")
    for epoch in range(start, epochs):
        loader.sampler.set_epoch(epoch)
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # summed loss, examples
        for i, (x, y) in enumerate(loader):
            fail_if_asked(epoch * len(loader) + i)
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)  # model(x): its hooks gather
            loss.backward()  # reduce-scatters the gradients: each rank its rows, averaged
            optimizer.step()
            totals += torch.stack([loss.detach().double() * len(y), totals.new_tensor(len(y))])
        dist.all_reduce(totals)  # every rank's share: the loss over the whole epoch
        save_snapshot(model, optimizer, epoch, folder)
        if dist.get_rank() == 0:
            print(
                f"epoch {epoch}: loss {totals[0].item() / totals[1].item():.6f}, "
                f"snapshot epoch-{epoch:04d}",
                flush=True,
            )
    dist.destroy_process_group()
    return model  # the caller keeps it, and the process group it holds, to the end


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--snapshots",
        type=Path,
        default=Path("snapshots"),
        help="the folder of the snapshots, one folder per epoch; a start resumes from them",
    )
    args = parser.parse_args()
    if os.environ["RANK"] == "0":
        print(f"{os.environ['WORLD_SIZE']} ranks, FSDP2, snapshots in {args.snapshots.name}/")
    model = train(args.epochs, args.snapshots)
    # As lesson 04's script ends (docs/cluster.md): no Python teardown, the model and its
    # process group still referenced, a precaution for gloo in torch 2.13.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if model is not None else 1)


if __name__ == "__main__":
    main()
