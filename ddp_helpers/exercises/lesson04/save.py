"""4.5 save_checkpoint (Going further): one writer for the whole job, then a barrier."""

from __future__ import annotations

import contextlib
import os

from ...i18n import messages
from .._core import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_folder,
    rank_folders,
    run_on_ranks,
    writers,
)
from ..devices import collectives

MESSAGES = messages(
    "exercises.lesson04.save",
    {
        "hint.save_one_writer": (
            "Only one rank of the whole job writes: the copies are identical, and several "
            "processes writing one file at the same time can corrupt it. That is the global "
            "rank 0 (dist.get_rank()); LOCAL_RANK is 0 once on every machine."
        ),
        "hint.save_module": (
            "DDP's own state_dict() prefixes every key with `module.`, and a plain model "
            "will not load it: save the state of the model inside the wrapper."
        ),
        "hint.save_barrier": (
            "After rank 0 has written, every rank waits at dist.barrier(), outside the "
            "`if`, so that no rank reads the file before it is complete. A barrier inside "
            "`if rank == 0:` hangs."
        ),
        "hint.save_code": (
            "if dist.get_rank() == 0: torch.save({{'model': model.module.state_dict(), "
            "'optimizer': optimizer.state_dict(), 'epoch': epoch}}, path); then, on every "
            "rank, dist.barrier()."
        ),
        "save_count": "Ranks {ranks} each wrote a checkpoint; one writer is enough.",
        "save_count.title": "several ranks wrote the checkpoint",
        "save_machines": (
            "A checkpoint was written on every machine: ranks {ranks} (local rank 0 on "
            "machines 0 and 1) each wrote one. On a shared file system those are {count} "
            "writers of one file; one for the whole job is enough."
        ),
        "save_machines.title": "LOCAL_RANK 0 used where RANK 0 belongs",
        "save_not_zero": "Only rank {ranks} wrote a checkpoint; by convention rank 0 saves.",
        "save_not_zero.title": "a rank other than 0 saved",
        "save_none": "Nothing reached the disk: no rank wrote a file.",
        "save_none.title": "nothing written",
        "save_keys": "Save a dict with 'model', 'optimizer' and 'epoch'; the keys were {keys}.",
        "save_keys.title": "not a dict of model, optimizer and epoch",
        "save_whole": (
            "The checkpoint's '{what}' is the {kind} object itself, saved whole: loading it "
            "needs the class's code, and it pickles more than the tensors. Save `{call}` "
            "instead."
        ),
        "save_whole.title": "a model or optimizer saved whole, not its state_dict",
        "save_not_state": (
            "The checkpoint's '{what}' holds a {kind}, not a state_dict (a dict of "
            "tensors): save what `{call}` returns."
        ),
        "save_not_state.title": "something other than a state_dict saved",
        "save_prefix": "The saved model keys start with `module.` ({key!r}).",
        "save_prefix.title": "DDP's state_dict saved (keys start with `module.`)",
        "save_strict": "A plain model could not load the saved weights: {error}",
        "save_strict.title": "a plain model cannot load the weights",
        "save_barrier": (
            "Rank {rank} went on before rank 0 had written the file (rank 0 started late on "
            "purpose): a rank that read the checkpoint now would find none."
        ),
        "save_barrier.title": "no barrier after the save",
        "save_weights": "The checkpoint's model weights differ from the model's own.",
        "save_weights.title": "other weights than the model's",
        "save_optimizer": (
            "The checkpoint's optimizer state differs from the optimizer's own (its "
            "momentum buffers, one per parameter)."
        ),
        "save_optimizer.title": "another optimizer state than the optimizer's",
        "save_epoch": (
            "The checkpoint's epoch is {got!r}, but save_checkpoint was called with "
            "epoch={want}: save the epoch it is given (load_checkpoint adds the 1)."
        ),
        "save_epoch.title": "not the epoch it was given",
        "save_ok": (
            "Written once for the whole job, by rank 0 (on 2 ranks, and on 2 machines x 2 "
            "ranks), no `module.`, with optimizer and epoch; no rank went on before the "
            "file was there."
        ),
    },
)


def save_checkpoint(model, optimizer, epoch, path):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        state = {
            "model": model.module.state_dict(),  # no `module.` prefix
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
        }
        tmp = f"{path}.tmp"  # path may be a str or a pathlib.Path
        torch.save(state, tmp)  # a crash mid-write leaves the old file intact
        os.replace(tmp, path)  # atomic: readers see the old file or the new one
    dist.barrier()  # nobody reads the file before rank 0 has finished writing it


def _make_net(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _trained_ddp():
    """A DDP model one SGD-with-momentum step in, so the optimizer has state to save."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_make_net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    opt.step()
    return model, opt


# The collectives an answer may wait in: torch.distributed's that move tensors (devices.py)
# and those that move none or objects only; a check counts each rank's calls of them.
_SAVE_KEYS = "ddp-check-save/"  # the check's own keys in the group's store


@contextlib.contextmanager
def _collectives_counted(store, rank: int):
    """While it is open, each call this rank makes to a collective first writes how many it
    has entered (1, 2, ...) to the store, as `entered/<rank>`; the counts, here too."""
    import torch.distributed as dist

    count = [0]
    real = {name: getattr(dist, name) for name in collectives()}

    def counted(fn):
        def entered(*args, **kwargs):
            count[0] += 1
            store.set(f"{_SAVE_KEYS}entered/{rank}", str(count[0]))
            return fn(*args, **kwargs)

        return entered

    for name, fn in real.items():
        setattr(dist, name, counted(fn))
    try:
        yield count
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def _peers_settled(store, peers, collectives: int) -> list[int]:
    """Wait until every peer has either returned from the answer (`went_on/<rank>`) or
    entered a collective past rank 0's `collectives` so far, where it waits for rank 0
    itself; then the peers that had returned. Certain, whatever the machine's load: a peer
    in that collective cannot leave it before rank 0 calls it too, after its save."""
    import time

    def state(peer):
        if store.check([f"{_SAVE_KEYS}went_on/{peer}"]):
            return "went_on"
        key = f"{_SAVE_KEYS}entered/{peer}"
        if store.check([key]) and int(store.get(key)) > collectives:
            return "waits"
        return None

    while True:
        states = {peer: state(peer) for peer in peers}
        if None not in states.values():
            return [peer for peer, s in states.items() if s == "went_on"]
        time.sleep(0.002)  # polls the store: the peers' own record, not a guess of time


@contextlib.contextmanager
def _saves_watched(store, rank: int, world: int, info: dict):
    """The collectives counted on every rank; on rank 0, torch.save first waits for the
    peers to settle (_peers_settled) and puts the ones that had returned in info["early"]."""
    import torch

    with _collectives_counted(store, rank) as count:
        if rank != 0:
            yield
            return
        real_save = torch.save

        def watched_save(*args, **kwargs):
            if info["early"] is None:
                info["early"] = _peers_settled(store, range(1, world), count[0])
            return real_save(*args, **kwargs)

        torch.save = watched_save
        try:
            yield
        finally:
            torch.save = real_save


def _save_harness(save_checkpoint, folder, epoch):
    """Each rank saves into a folder of its own, so the file system shows who wrote. Rank
    0's torch.save first waits until each peer has returned or waits in a collective: a
    peer that returned before rank 0 wrote went on without the file (info["early"])."""
    import torch
    import torch.distributed as dist

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        model, opt = _trained_ddp()
        store = dist.distributed_c10d._get_default_store()
        info = {"early": None}  # None: rank 0's answer never called torch.save
        with _saves_watched(store, rank, world, info):
            save_checkpoint(model, opt, epoch, os.path.join(rank_folder(folder, rank), "ckpt.pt"))
        store.set(f"{_SAVE_KEYS}went_on/{rank}", "1")
        rank0_file = os.path.join(rank_folder(folder, 0), "ckpt.pt")
        dist.barrier()
        if rank == 0 and os.path.exists(rank0_file):
            ckpt = torch.load(rank0_file, map_location="cpu", weights_only=False)
            info["keys"] = sorted(ckpt) if isinstance(ckpt, dict) else type(ckpt).__name__
            not_states = [
                (what, type(ckpt[what]).__name__, hasattr(ckpt[what], "state_dict"))
                for what in ("model", "optimizer")
                if isinstance(ckpt, dict) and what in ckpt and not isinstance(ckpt[what], dict)
            ]
            if not_states:  # the module or optimizer itself, or something else: no state_dict
                info["whole"] = list(not_states[0])
            elif isinstance(ckpt, dict) and {"model", "optimizer", "epoch"} <= set(ckpt):
                info["first_key"] = next(iter(ckpt["model"]), "")
                bare = _make_net()
                try:
                    bare.load_state_dict(ckpt["model"], strict=True)
                    info["strict_error"] = None
                except RuntimeError as exc:
                    info["strict_error"] = str(exc).splitlines()[0]
                info["same_model"] = all(
                    torch.equal(a, b)
                    for a, b in zip(
                        ckpt["model"].values(), model.module.state_dict().values(), strict=False
                    )
                )
                info["same_opt"] = ckpt["optimizer"]["state"].keys() == (
                    opt.state_dict()["state"].keys()
                )
                info["epoch"] = ckpt["epoch"]
        return info


def _judge_writers(wrote: list[int], nprocs: int, nnodes: int) -> None:
    if not wrote:
        raise Wrong("save_none")
    if len(wrote) > 1:
        ranks = and_list(wrote)
        per_node = nprocs // nnodes
        if nnodes > 1 and wrote == list(range(0, nprocs, per_node)):
            raise Wrong("save_machines", ranks=ranks, count=len(wrote))
        raise Wrong("save_count", ranks=ranks)
    if wrote != [0]:
        raise Wrong("save_not_zero", ranks=wrote[0])


def _check_save(fn) -> Phrase:
    # On 2 ranks, then on 2 machines x 2 ranks (where LOCAL_RANK == 0 is two writers), each
    # at another epoch.
    for nprocs, nnodes, epoch in ((2, 1, 7), (4, 2, 3)):
        with rank_folders(nprocs, "ddp-ckpt-check-") as folder:
            results = run_on_ranks(_save_harness, fn, folder, epoch, nprocs=nprocs, nnodes=nnodes)
            wrote = writers(folder, nprocs)
        _judge_writers(wrote, nprocs, nnodes)
        if results[0]["early"]:  # a peer returned before rank 0 had written
            raise Wrong("save_barrier", rank=results[0]["early"][0])
        info = results[0]
        if "whole" in info:
            what, kind, itself = info["whole"]
            call = "model.module.state_dict()" if what == "model" else "optimizer.state_dict()"
            raise Wrong(
                "save_whole" if itself else "save_not_state", what=what, kind=kind, call=call
            )
        keys = info.get("keys")
        if not isinstance(keys, list) or not {"model", "optimizer", "epoch"} <= set(keys):
            raise Wrong("save_keys", keys=keys)
        if str(info["first_key"]).startswith("module."):
            raise Wrong("save_prefix", key=info["first_key"])
        if info["strict_error"]:
            raise Wrong("save_strict", error=info["strict_error"])
        if not info["same_model"]:
            raise Wrong("save_weights")
        if not info["same_opt"]:
            raise Wrong("save_optimizer")
        if info["epoch"] != epoch:
            raise Wrong("save_epoch", got=info["epoch"], want=epoch)
    return Phrase("save_ok")


q5 = Exercise(
    "4.5",
    "save_checkpoint",
    _check_save,
    save_checkpoint,
    texts=MESSAGES,
    hints=("save_one_writer", "save_module", "save_barrier", "save_code"),
    mistakes={
        "save_none": Mistake(hint="save_one_writer"),
        "save_machines": Mistake(hint="save_one_writer"),
        "save_count": Mistake(hint="save_one_writer"),
        "save_not_zero": Mistake(hint="save_one_writer"),
        "save_barrier": Mistake(hint="save_barrier"),
        "save_keys": Mistake(hint="save_one_writer"),
        "save_whole": Mistake(hint="save_one_writer"),
        "save_not_state": Mistake(hint="save_one_writer"),
        "save_prefix": Mistake(hint="save_module"),
        "save_strict": Mistake(hint="save_module"),
        "save_weights": Mistake(hint="save_one_writer"),
        "save_optimizer": Mistake(hint="save_one_writer"),
        "save_epoch": Mistake(hint="save_one_writer"),
        "hang": Mistake(hint="save_barrier"),
        "mismatch": Mistake(hint="save_barrier"),
    },
    further=True,
)
