"""4.5 save_checkpoint (Going further): one writer for the whole job, then a barrier."""

from __future__ import annotations

import contextlib
import inspect
import os
import random
import time

from ...i18n import messages
from ..devices import collectives, made_off_device
from ..kit import (
    Exercise,
    Mistake,
    Phrase,
    Wrong,
    and_list,
    process_group,
    rank_folder,
    rank_folders,
    rank_mistakes,
    run_on_ranks,
)
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying

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
        "hint.save_state": (
            "Save a dict of what model.module.state_dict() and optimizer.state_dict() return "
            "at the call, as they are (no copy kept from an earlier call, nothing converted: "
            "loaded, they must be the model and the optimizer as they were), and the epoch "
            "you are given."
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
        "save_none": "No rank wrote a file at the path save_checkpoint was given.",
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
            "Rank {rank} returned from save_checkpoint before rank 0 had written the file (the "
            "check held rank 0's torch.save back until every other rank had returned or waited "
            "for rank 0 in a collective): a rank that read the checkpoint now would find none."
        ),
        "save_barrier.title": "no barrier after the save",
        "save_weights": (
            "The checkpoint's model entry '{key}' is not the model's own: {how}. Save what "
            "model.module.state_dict() returns, as it is."
        ),
        "save_model_dtype": "saved as {got}, where the model's is {want}",
        "save_model_values": "its values differ by up to {diff:.2e}",
        "save_model_missing": "it is not in the checkpoint",
        "save_weights.title": "other weights than the model's",
        "save_optimizer": (
            "The checkpoint's optimizer state, loaded into an optimizer like it, is not the "
            "optimizer's own when save_checkpoint was called: {what}. Save what "
            "optimizer.state_dict() returns at the call, unchanged."
        ),
        "save_opt_error": "it does not load ({error})",
        "save_opt_missing": (
            "it has no momentum for {count} of the {total} parameters that have one"
        ),
        "save_opt_momentum": "its momentum differs by up to {diff:.2e}",
        "save_opt_groups": "its hyperparameters (param_groups) differ",
        "save_optimizer.title": "another optimizer state than the optimizer's",
        "save_epoch": (
            "The checkpoint's epoch is {got!r}, but save_checkpoint was called with "
            "epoch={want}: save the epoch it is given (load_checkpoint adds the 1)."
        ),
        "save_epoch.title": "not the epoch it was given",
        "tried_weights": "a model in {v}",
        "save_ok": (
            "Written once for the whole job, by rank 0 (on 3 ranks, and on 2 machines x 2 "
            "ranks), twice in one process at other epochs: no `module.`, the model's weights "
            "and buffers and the optimizer's state as they were, in float32 and float64, "
            "with the epoch; no rank went on before the file was there, and every tensor it "
            "sent was made on the model's device."
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


def _make_net(seed: int = 0, dtype: str = "float32"):
    """The save and load checks' model: a buffer (BatchNorm's running statistics) and a
    frozen parameter (the first layer's bias: no gradient, so no momentum), in `dtype`."""
    import torch

    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(), torch.nn.Linear(4, 1)
    )
    net[0].bias.requires_grad_(False)
    return net.to(getattr(torch, dtype))


def _trained_ddp(dtype: str = "float32"):
    """A DDP model one SGD-with-momentum step in, so the optimizer has state to save."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_make_net(dtype=dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train_step(model, opt)
    return model, opt


def _train_step(model, opt) -> None:
    """One more step: new weights, running statistics and momentum."""
    import torch

    dtype = next(model.parameters()).dtype
    opt.zero_grad()
    x, y = torch.randn(8, 4, dtype=dtype), torch.randn(8, 1, dtype=dtype)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


# The collectives an answer may wait in are torch.distributed's (devices.collectives); a
# check notes, in the group's store, each call that waits for rank 0.
_SAVE_KEYS = "ddp-check-save/"  # the check's own keys in the group's store


def _with_rank_zero(name: str, arguments: dict, rank: int, world: int) -> list[int]:
    """The ranks a call joins this rank with, where rank 0 is among them (else []): a
    collective's group, or the peer of a send or recv. A rank outside the group returns at
    once from its call, and waits for nobody."""
    import torch.distributed as dist

    if any(word in name for word in ("send", "recv")):
        peer = next((arguments[k] for k in ("dst", "src", "group_dst", "group_src")
                     if arguments.get(k) is not None), None)  # fmt: skip
        ranks = [rank] if peer is None else [rank, int(peer)]
    else:
        group = arguments.get("group")
        if group is not None and dist.get_rank(group) < 0:
            return []
        ranks = list(range(world)) if group is None else dist.get_process_group_ranks(group)
    return ranks if 0 in ranks else []


def _counted_future(real, enter):
    """A torch future that completes with `real` and calls enter() when first waited for."""
    import torch

    class Counted(torch.futures.Future):
        def wait(self):
            enter()
            return super().wait()

    counted = Counted()
    real.then(lambda done: counted.set_result(done.value()))
    return counted


class _CountedWork:
    """An async collective's work: entering its wait (or its future's) is what counts."""

    def __init__(self, real, enter):
        self._real, self._enter = real, enter

    def wait(self, *args, **kwargs):
        self._enter()
        return self._real.wait(*args, **kwargs)

    def get_future(self):
        return _counted_future(self._real.get_future(), self._enter)

    def __getattr__(self, name):
        return getattr(self._real, name)


@contextlib.contextmanager
def _collectives_counted(store, rank: int, world: int, counts: dict):
    """While it is open, each call this rank makes that waits with rank 0 is counted, per
    rank it waits with: counts[peer] on rank 0, counts[0] on a peer, which also writes its
    count to the store first (`entered/<rank>`). A peer's async call counts where it is
    waited for, rank 0's where it is made."""
    import torch.distributed as dist

    real = {name: getattr(dist, name) for name in collectives()}

    def enter(ranks):
        for other in ranks if rank == 0 else [0]:
            counts[other] = counts.get(other, 0) + 1
        if rank != 0:
            store.set(f"{_SAVE_KEYS}entered/{rank}", str(counts[0]))

    def counted(name, fn):
        signature = inspect.signature(fn)

        def call(*args, **kwargs):
            arguments = signature.bind_partial(*args, **kwargs).arguments
            ranks = [r for r in _with_rank_zero(name, arguments, rank, world) if r != rank]
            # Rank 0's call lets its peers' go on, async or not; a peer waits in its own
            # where it blocks: the call, or an async call's wait.
            if not ranks or rank == 0 or not arguments.get("async_op"):
                if ranks:
                    enter(ranks)
                return fn(*args, **kwargs)
            once = []  # its wait and its future's may both be called: count it once
            work = fn(*args, **kwargs)
            return _CountedWork(work, lambda: once or (once.append(1), enter(ranks)))

        return call

    for name, fn in real.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def _peers_settled(store, peers, counts: dict, call: int) -> list[int]:
    """Wait until every peer has either returned from the answer's call `call`
    (`went_on/<call>/<rank>`) or entered a call that waits with rank 0 past rank 0's own so
    far with it, where it waits for rank 0 itself; then the peers that had returned. Certain,
    whatever the machine's load: a peer in such a call cannot leave it before rank 0 makes
    its own, after its save; a call that does not wait for rank 0 is not counted."""

    def state(peer):
        if store.check([f"{_SAVE_KEYS}went_on/{call}/{peer}"]):
            return "went_on"
        key = f"{_SAVE_KEYS}entered/{peer}"
        if store.check([key]) and int(store.get(key)) > counts.get(peer, 0):
            return "waits"
        return None

    while True:
        states = {peer: state(peer) for peer in peers}
        if None not in states.values():
            return [peer for peer, s in states.items() if s == "went_on"]
        time.sleep(0.002)  # polls the store: the peers' own record, not a guess of time


@contextlib.contextmanager
def _saves_watched(store, rank: int, world: int, call: int, counts: dict, info: dict):
    """On rank 0, torch.save first waits for the peers to settle (_peers_settled) and puts
    the ones that had returned in info["early"]."""
    import torch

    if rank != 0:
        yield
        return
    real_save = torch.save

    def watched_save(*args, **kwargs):
        if info["early"] is None:
            info["early"] = _peers_settled(store, range(1, world), counts, call)
        return real_save(*args, **kwargs)

    torch.save = watched_save
    try:
        yield
    finally:
        torch.save = real_save


def _save_harness(save_checkpoint, folder, epochs, dtype):
    """Each rank saves into a folder of its own, so the file system shows who wrote; the
    answer called once per epoch of `epochs`, a training step between. Rank 0's torch.save
    first waits until each peer has returned or waits for rank 0 in a collective: a peer
    that returned before rank 0 wrote went on without the file (info["early"]). Then the
    off-device probe, on a file outside the ranks' folders."""
    import torch.distributed as dist

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        model, opt = _trained_ddp(dtype)
        store = dist.distributed_c10d._get_default_store()
        records, counts = [], {}
        for call, epoch in enumerate(epochs):
            if call:
                _train_step(model, opt)
            info = {"early": None}  # None: rank 0's answer never called torch.save
            path = os.path.join(rank_folder(folder, rank), f"ckpt-{call}.pt")
            with _collectives_counted(store, rank, world, counts):
                with _saves_watched(store, rank, world, call, counts, info):
                    save_checkpoint(model, opt, epoch, path)
            store.set(f"{_SAVE_KEYS}went_on/{call}/{rank}", "1")
            dist.barrier()
            if rank == 0:
                info.update(_read_back(os.path.join(rank_folder(folder, 0), f"ckpt-{call}.pt"),
                                       model, opt, dtype))  # fmt: skip
            records.append(info)
        probe = os.path.join(folder, f"probe-{rank}.pt")
        records[-1]["off_device"] = made_off_device(save_checkpoint, model, opt, 0, probe)
        return records


def _read_back(path: str, model, opt, dtype: str) -> dict:
    """What rank 0's file holds, against the model and optimizer it was saved from."""
    import torch

    if not os.path.exists(path):
        return {}
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(ckpt, dict):
        return {"keys": type(ckpt).__name__}
    info = {"keys": sorted(map(str, ckpt))}
    for what in ("model", "optimizer"):
        if what in ckpt and not isinstance(ckpt[what], dict):  # no state_dict: the object
            info["whole"] = [what, type(ckpt[what]).__name__, hasattr(ckpt[what], "state_dict")]
            return info
    if not {"model", "optimizer", "epoch"} <= set(ckpt):
        return info
    info["first_key"] = next(iter(ckpt["model"]), "")
    bare = _make_net(dtype=dtype)
    try:
        bare.load_state_dict(ckpt["model"], strict=True)
        info["strict_error"] = None
    except RuntimeError as exc:
        info["strict_error"] = " ".join(str(exc).split())[:300]  # its first reasons
    info["model_diff"] = _first_difference(ckpt["model"], model.module.state_dict())
    info["opt"] = _optimizer_read_back(ckpt["optimizer"], bare, opt)
    info["epoch"] = ckpt["epoch"]
    return info


def _first_difference(saved: dict, own: dict) -> list | None:
    """The first entry of `saved` that is not `own`'s: [key, "dtype", saved's, own's] or
    [key, "values", largest difference]; None when all are equal."""
    import torch

    for key, want in own.items():
        got = saved.get(key)
        if not isinstance(got, torch.Tensor):
            return [key, "missing"]
        if got.dtype != want.dtype:
            return [key, "dtype", *(str(t.dtype).removeprefix("torch.") for t in (got, want))]
        if not torch.equal(got, want):
            return [key, "values", (got.double() - want.double()).abs().max().item()]
    return None


def _optimizer_read_back(saved, bare, opt) -> list | None:
    """The saved optimizer state loaded into a like optimizer, against `opt`'s own: None
    when equal, else what differs (["error", text], ["missing", n, of], ["momentum",
    largest difference], ["groups"])."""
    import torch

    like = torch.optim.SGD(bare.parameters(), lr=1.0)
    try:
        like.load_state_dict(saved)
    except Exception as exc:  # noqa: BLE001 - whatever does not load is what is named
        return ["error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
    got, want = like.state_dict(), opt.state_dict()
    missing = [i for i in want["state"] if "momentum_buffer" not in got["state"].get(i, {})]
    if missing:
        return ["missing", len(missing), len(want["state"])]
    diffs = [
        (got["state"][i]["momentum_buffer"].double() - s["momentum_buffer"].double()).abs().max()
        for i, s in want["state"].items()
    ]
    if max(diffs, default=torch.zeros(())).item() != 0.0:
        return ["momentum", max(diffs).item()]
    if got["param_groups"] != want["param_groups"]:
        return ["groups"]
    return None


def _wrote(folder: str, ranks: int, call: int) -> list[int]:
    """The ranks that wrote a file at the path of call `call` (or beside it: a .tmp)."""
    return [
        rank
        for rank in range(ranks)
        if any(f.startswith(f"ckpt-{call}.") for f in os.listdir(rank_folder(folder, rank)))
    ]


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


# (ranks, machines): 3 ranks, and 2 machines x 2 ranks (where LOCAL_RANK == 0 is two
# writers); each run saves twice in one process, at epochs drawn for the seed (_draws).
SAVE_RUNS = ((3, 1), (4, 2))
NOTEBOOK_EPOCH = 1  # the epoch the notebook's resume demo saves last (run(2) stops after it)
EPOCHS = (0, 3, 4, 6, 9, 12)
SPACE = Space(
    drawn={
        "world": (3, 4),
        "machines": (1, 2),
        "calls": (2,),
        "counts": {"epoch": EPOCHS},
        "dtypes": ("float32", "float64"),
        "model": ("frozen", "buffer"),
        "device": ("cpu", "the default device moved off the model's (off_device)"),
    },
    why_not={
        "steps": "save_checkpoint runs no loop: it is called twice in one process, a training "
        "step between (calls)",
        "lengths": "a checkpoint is the model's and the optimizer's state: no lengths of the "
        "answer's own",
    },
    notebook={"epoch": NOTEBOOK_EPOCH},
)


def _draws(seed: int) -> list[tuple[int, int, tuple[int, int], str]]:
    """(ranks, machines, the two calls' epochs, dtype) of each run for this seed."""
    dtypes = SPACE.values("dtypes")
    draw = random.Random(f"4.5/{seed}")
    return [
        (ranks, machines, tuple(draw.sample(EPOCHS, 2)), dtypes[(i + seed) % len(dtypes)])
        for i, (ranks, machines) in enumerate(SAVE_RUNS)
    ]


def _check_save(fn, seed: int = CHECK_SEED) -> Phrase:
    off_device = []
    for nprocs, nnodes, epochs, dtype in _draws(seed):
        with trying(ranks=nprocs, machines=nnodes, weights=dtype):
            with rank_folders(nprocs, "ddp-ckpt-check-") as folder:
                runs = run_on_ranks(
                    _save_harness, fn, folder, epochs, dtype, nprocs=nprocs, nnodes=nnodes
                )
                wrote = [_wrote(folder, nprocs, call) for call in range(len(epochs))]
            for call, epoch in enumerate(epochs):
                with trying(call=call + 1):
                    _judge_writers(wrote[call], nprocs, nnodes)
                    _judge_file(runs[0][call], epoch)
            off_device += [run[-1]["off_device"] for run in runs if run[-1]["off_device"]]
    if off_device:
        raise Wrong("off_device", function="save_checkpoint", collective=off_device[0])
    return Phrase("save_ok")


def _judge_file(info: dict, epoch: int) -> None:
    """Rank 0's record of one call: the Wrong that names what is off, if anything is."""
    if info["early"]:  # a peer returned before rank 0 had written
        raise Wrong("save_barrier", rank=info["early"][0])
    if "whole" in info:
        what, kind, itself = info["whole"]
        call = "model.module.state_dict()" if what == "model" else "optimizer.state_dict()"
        key = "save_whole" if itself else "save_not_state"
        raise Wrong(key, what=what, kind=kind, call=call)
    keys = info.get("keys")
    if not isinstance(keys, list) or not {"model", "optimizer", "epoch"} <= set(keys):
        raise Wrong("save_keys", keys=keys)
    if str(info["first_key"]).startswith("module."):
        raise Wrong("save_prefix", key=info["first_key"])
    if info["strict_error"]:
        raise Wrong("save_strict", error=info["strict_error"])
    if info["model_diff"] is not None:
        key, kind, *fields = info["model_diff"]
        names = {"dtype": ("got", "want"), "values": ("diff",)}
        how = Phrase(f"save_model_{kind}", **dict(zip(names.get(kind, ()), fields, strict=True)))
        raise Wrong("save_weights", key=key, how=how)
    if info["opt"] is not None:
        kind, *fields = info["opt"]
        names = {"error": ("error",), "missing": ("count", "total"), "momentum": ("diff",)}
        what = Phrase(f"save_opt_{kind}", **dict(zip(names.get(kind, ()), fields, strict=True)))
        raise Wrong("save_optimizer", what=what)
    if info["epoch"] != epoch:
        raise Wrong("save_epoch", got=info["epoch"], want=epoch)


exercise = Exercise(
    "4.5",
    "save_checkpoint",
    _check_save,
    save_checkpoint,
    texts=MESSAGES,
    hints=("save_one_writer", "save_module", "save_barrier", "save_state", "save_code"),
    mistakes={
        "save_none": Mistake(hint="save_one_writer"),
        "save_machines": Mistake(hint="save_one_writer"),
        "save_count": Mistake(hint="save_one_writer"),
        "save_not_zero": Mistake(hint="save_one_writer"),
        "save_barrier": Mistake(hint="save_barrier"),
        "save_keys": Mistake(hint="save_state"),
        "save_whole": Mistake(hint="save_state"),
        "save_not_state": Mistake(hint="save_state"),
        "save_prefix": Mistake(hint="save_module"),
        "save_strict": Mistake(hint="save_module"),
        "save_weights": Mistake(hint="save_state"),
        "save_optimizer": Mistake(hint="save_state"),
        "save_epoch": Mistake(hint="save_state"),
        "off_device": Mistake(),
        **rank_mistakes(hint="save_barrier"),
    },
    hidden=on_hidden_seeds(_check_save),
    space=SPACE,
    further=True,
)
