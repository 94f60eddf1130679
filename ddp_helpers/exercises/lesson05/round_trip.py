"""The round trip that 5.4 (save_sharded) and 5.5 (load_sharded) are checked by, and the
words their messages share.

An FSDP2 model trained a step or two on one number of ranks, its learning rate halved (a
schedule) and its buffer moved, is saved into a folder; a fresh model of other weights with
a fresh Adam, sharded on another number of ranks, loads it; its state must be the one saved,
and one more step the run that never stopped (to within fsdp.TOLERANCE: 2 ranks and 3 round
the gradients apart). The answer is on one side, the course's reference on the other: both
references are here (save_sharded is 5.4's, load_sharded 5.5's), so that neither exercise's
module imports the other's."""

from __future__ import annotations

import os
import random
import re

from ...i18n import messages
from ..kit import Exercise, Phrase, process_group, rank_folders, run_on_ranks
from ..space import CHECK_SEED, Space, on_hidden_seeds, trying
from .common import DEPTH, WIDTH, make_batches, make_model, my_rows
from .fsdp import NOTEBOOK_ROWS, TOLERANCE, _everyone

WORDS = messages(
    "exercises.lesson05.round_trip",
    {
        "tried_saved": "a checkpoint saved on {v} ranks",
        "tried_loaded": "loaded on {v}",
        "tried_model": "a model of {v}",
        "ckpt_model": "{depth} blocks {width} wide in {dtype}",
        "state_model": "the model's '{name}' differs by up to {diff:.2e}",
        "state_model_missing": "the model's '{name}' is not in it",
        "state_opt_missing": "the optimizer has no '{what}' for '{name}'",
        "state_opt_values": "the optimizer's '{what}' of '{name}' differs by up to {diff:.2e}",
        "ckpt_resumed": (
            "Loaded on {ranks} ranks, one more step does not match the model that never "
            "stopped: '{name}' differs by up to {diff:.2e}."
        ),
        "ckpt_resumed.title": "resumed, not the run that never stopped",
        "round_trip_ok": (
            "the model and the optimizer loaded on {loaded} ranks are the ones saved (the "
            "frozen parameter, the buffer, Adam's moments and step, the learning rate the "
            "schedule had reached), and one more step is the run that never stopped; twice "
            "in one process with other models, in float32 and float64"
        ),
        "state_opt_groups": ("the optimizer's '{what}' is {got}, where the saved one is {want}"),
    },
)

# The course's two halves: each exercise's reference (5.4's, 5.5's), and the other's partner.


def save_sharded(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)  # this rank's shards
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_sharded(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)  # this rank's shards
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)  # resharded from however many ranks saved it
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


LR = 0.01  # Adam's, as the optimizer is made; the schedule halves it before the save
HANG = 20  # s: a launch takes 0.5-3 s here (2 cores), the first FSDP2 and DCP use included
RUN_TIME = 60.0  # s: the check and the grader's extra cases, 3 x 2 launches (1.5 + 3 s here)
DEPTHS = (2, 4)
WIDTHS = (11, 13)  # shards uneven on 2 and 3 ranks
ROWS = (6, 12)  # a batch's rows: 2 and 3 ranks each take an equal part
DTYPES = ("float32", "float64")  # the first call's, the second's
BEFORE = (1, 2)  # the steps before the save in the first call, in the second; one after
BUFFER_MOVE = 0.125  # the buffer moves as a running statistic would before the save


# 5.4's and 5.5's space: the same round trip, the answer on one side of it.
SPACE = Space(
    drawn={
        "world": (2, 3),
        "calls": (2,),
        "steps": tuple(n + 1 for n in BEFORE),
        "counts": {"depth": DEPTHS, "width": WIDTHS, "rows": ROWS},
        "dtypes": DTYPES,
        "model": ("frozen", "buffer"),
    },
    why_not={
        "machines": "DCP writes a file per rank into one folder and reads it back on "
        "any number of ranks: which machine a rank is on does not change what it saves "
        "or loads (a shared file system is assumed, as the course's checkpoints do)",
        "lengths": "a checkpoint is the model's and the optimizer's state: no lengths "
        "of the answer's own",
        "device": "the state dicts are DTensors on the model's device and DCP reads and "
        "writes them there: the answer names no device (on the CPU the check runs gloo)",
    },
    # The notebook's global batch (4 rows a rank on 2): rows here are the global batch's.
    notebook={"depth": DEPTH, "width": WIDTH, "rows": 2 * NOTEBOOK_ROWS},
)


def draws(exercise: str, seed: int) -> tuple[tuple[int, int], list[dict]]:
    """((ranks that save, ranks that load), the two calls' models) for this seed: 2 then 3,
    or 3 then 2, and two models in one process that differ in depth, width and dtype."""
    draw = random.Random(f"{exercise}/{seed}")
    worlds = (2, 3) if seed % 2 == 0 else (3, 2)
    depths, widths = draw.sample(DEPTHS, 2), draw.sample(WIDTHS, 2)
    cases = [
        {
            "depth": depths[call],
            "width": widths[call],
            "rows": draw.choice(ROWS),
            "before": BEFORE[call],
            "dtype": DTYPES[call],
            "seed": draw.randrange(1000),
        }
        for call in range(2)
    ]
    return worlds, cases


def _sharded(case: dict, mesh, seed: int):
    """The case's model, each block then the root sharded on `mesh`, and its Adam."""
    import torch
    from torch.distributed.fsdp import fully_shard

    model = make_model(case["width"], case["depth"], seed, getattr(torch, case["dtype"]))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _step(model, optimizer, batch, rank: int, world: int) -> None:
    import torch

    x, y = (my_rows(t, rank, world) for t in batch)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _batches(case: dict) -> list:
    import torch

    steps = case["before"] + 1
    xs, ys = make_batches(steps, case["rows"], case["seed"], getattr(torch, case["dtype"]))
    return list(zip(xs, ys, strict=True))


def _full_state(model, optimizer) -> dict:
    """The model's and the optimizer's state, each tensor gathered whole (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True)
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    groups = [
        {k: v for k, v in group.items() if k != "params"}
        for group in optimizer_state["param_groups"]
    ]
    return {"model": model_state, "state": optimizer_state["state"], "groups": groups}


def _full_model(model) -> dict:
    """The model's state alone, each tensor gathered whole (a collective): the step after."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def saving_harness(save_sharded, cases, folder):
    """On each rank: per case, a model trained `before` steps, its learning rate halved (a
    schedule) and its buffer moved, saved by save_sharded into its folder; then one more
    step, the run that never stopped. Rank 0 returns, per case, the state saved and the
    model after the step."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,))
        records = []
        for call, case in enumerate(cases):
            model, optimizer = _sharded(case, mesh, case["seed"])
            batches = _batches(case)
            for batch in batches[:-1]:
                _step(model, optimizer, batch, rank, world)
            for group in optimizer.param_groups:
                group["lr"] = LR / 2
            with torch.no_grad():
                model.shift.add_(BUFFER_MOVE)
            if not _called(save_sharded, f"save/{call}", model, optimizer, _path(folder, call)):
                break
            saved = _full_state(model, optimizer)
            _step(model, optimizer, batches[-1], rank, world)
            after = _full_model(model)
            records.append({"saved": saved, "after": after} if rank == 0 else {})
        return records


def loading_harness(load_sharded, cases, folder, look: bool):
    """On each rank: per case, a fresh model of other weights with a fresh Adam sharded on
    this launch's ranks; first (`look`) what is at the case's path, and no load unless a DCP
    checkpoint of the layout load_sharded reads is there; then load_sharded, the state it
    left, one more step. Rank 0 returns, per case, what it found, or the state loaded and
    the model after the step."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with process_group():
        rank, world = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (world,))
        records = []
        for call, case in enumerate(cases):
            path = _path(folder, call)
            model, optimizer = _sharded(case, mesh, case["seed"] + 1)
            found = _what_is_at(path, model) if look else None
            if found is not None:
                records.append({"found": found} if rank == 0 else {})
                break
            if not _called(load_sharded, f"load/{call}", model, optimizer, path):
                break
            entries = len(optimizer.state)  # read before _full_state fills an empty state
            loaded = _full_state(model, optimizer)
            _step(model, optimizer, _batches(case)[-1], rank, world)
            after = _full_model(model)
            record = {"loaded": loaded, "entries": entries, "after": after}
            records.append(record if rank == 0 else {})
        return records


def _path(folder: str, call: int) -> str:
    return os.path.join(folder, f"ckpt-{call}")


def _called(fn, tag: str, model, optimizer, path: str) -> bool:
    """fn(model, optimizer, path) on every rank; then each rank waits, in the store, until
    every rank has returned (no collective of the check's can meet one the answer left a
    rank in). What it raised is raised again on the rank that raised it; False on the
    others, when one raised (the launcher shows that rank's error)."""
    raised = None
    try:
        fn(model, optimizer, path)
    except Exception as exc:  # noqa: BLE001 - raised again, after the others know
        raised = exc
    everyone = _everyone(tag, {"raised": raised is not None})
    if raised is not None:
        raise raised
    return not any(seen["raised"] for seen in everyone)


def _what_is_at(path: str, model) -> dict | None:
    """What the answer left at path, where it is not a DCP checkpoint that the course's load
    reads ({'model': ..., 'optimizer': ...} as get_state_dict names them): None when it is."""
    if not os.path.exists(path):
        return {"kind": "nothing"}
    if os.path.isfile(path):
        return _torch_saved(path)
    if not os.path.exists(os.path.join(path, ".metadata")):
        return {"kind": "not_dcp", "files": sorted(os.listdir(path))[:6]}
    return _dcp_layout(path, model)


def _torch_saved(path: str) -> dict:
    """A file at path: whole tensors, or one rank's shards (DTensors), as torch.save wrote
    them; read with weights_only, as a plain process would."""
    import torch
    import torch.distributed.tensor  # noqa: F401 - weights_only loads DTensors once imported
    from torch.distributed.tensor import DTensor

    try:
        state = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - whatever does not load is named by the files
        return {"kind": "not_dcp", "files": [os.path.basename(path)]}
    tensors = _tensors_in(state)
    shards = [(k, t) for k, t in tensors if isinstance(t, DTensor) and t.dim()]
    for name, shard in shards:
        if shard.to_local().shape[0] < shard.shape[0]:
            rows = [shard.to_local().shape[0], shard.shape[0]]
            return {"kind": "rank_shards", "name": name, "rows": rows}
    return {"kind": "gathered_file"} if tensors else {"kind": "not_dcp", "files": ["?"]}


def _tensors_in(state, name: str = "") -> list:
    """(name, tensor) for every tensor in nested dicts, named by its keys joined by dots."""
    import torch

    if isinstance(state, torch.Tensor):
        return [(name, state)]
    if isinstance(state, dict):
        return [t for k, v in state.items() for t in _tensors_in(v, f"{name}.{k}".strip("."))]
    return []


def _dcp_layout(path: str, model) -> dict | None:
    """A DCP checkpoint at path: what keeps the course's load from reading it, or None."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    tops = sorted({key.split(".")[0] for key in saved})
    if "model" not in tops:
        return {"kind": "layout", "keys": tops}
    if "optimizer" not in tops:
        return {"kind": "no_optimizer"}
    numbered = [k for k in saved if re.match(r"optimizer\.state\.\d+\.", k)]
    if numbered:
        return {"kind": "numbers", "key": sorted(numbered)[0]}
    wanted = [f"model.{name}" for name in model.state_dict()]
    missing = [key for key in wanted if key not in saved]
    if missing:
        return {"kind": "missing", "keys": missing}
    tensors = {k: v for k, v in saved.items() if isinstance(v, TensorStorageMetadata)}
    if all(len(v.chunks) == 1 for k, v in tensors.items() if k.startswith("model.")):
        weight = next(k for k in wanted if k.endswith(".weight"))
        return {"kind": "gathered_dcp", "name": weight.removeprefix("model.")}
    return None


def round_trip(exercise: str, save, load, judge, seed: int) -> tuple[int, int]:
    """Both launches of one seed, then judge(saving, loading, ranks that load) on rank 0's
    records of each case, up to the first that stopped, where each was tried; the two
    world sizes (saving, loading)."""
    worlds, cases = draws(exercise, seed)
    look = exercise == "5.4"  # the answer saved: what is at path is looked at first
    with rank_folders(0, "ddp-dcp-check-") as folder:
        with trying(saved=worlds[0]):
            saving = run_on_ranks(
                saving_harness, save, cases, folder, nprocs=worlds[0], timeout=HANG
            )
            with trying(loaded=worlds[1]):
                loading = run_on_ranks(
                    loading_harness, load, cases, folder, look, nprocs=worlds[1], timeout=HANG
                )
    for call, records in enumerate(zip(saving[0], loading[0], strict=False)):
        model = case_phrase(cases[call])
        with trying(saved=worlds[0], loaded=worlds[1], call=call + 1, model=model):
            judge(*records, worlds[1])
    return worlds


def state_apart(saved: dict, loaded: dict, parts=("model", "state", "groups")) -> Phrase | None:
    """The first way a loaded state is not the saved one, or None, looking at `parts`, in
    order: the model's tensors, the optimizer's state tensors, its hyperparameters."""
    if "model" in parts:
        apart = _model_apart(saved["model"], loaded["model"])
        if apart is not None:
            return apart
    if "state" in parts:
        apart = _moments_apart(saved["state"], loaded["state"])
        if apart is not None:
            return apart
    if "groups" in parts:
        for want, got in zip(saved["groups"], loaded["groups"], strict=True):
            for what in sorted(want):
                if _same_value(got.get(what)) != _same_value(want[what]):
                    return Phrase("state_opt_groups", what=what, got=got.get(what), want=want[what])
    return None


def _same_value(value):
    """A hyperparameter as compared: a tuple as the list a checkpoint may give it back as
    (Adam's betas)."""
    return list(value) if isinstance(value, tuple) else value


def _model_apart(saved: dict, loaded: dict) -> Phrase | None:
    import torch

    for name, want in saved.items():
        got = loaded.get(name)
        if got is None:
            return Phrase("state_model_missing", name=name)
        if not torch.equal(got, want):
            return Phrase("state_model", name=name, diff=_largest(got, want))
    return None


def _moments_apart(saved: dict, loaded: dict) -> Phrase | None:
    import torch

    for name, entries in saved.items():
        for what, want in entries.items():
            got = loaded.get(name, {}).get(what)
            if got is None:
                return Phrase("state_opt_missing", what=what, name=name)
            got, want = torch.as_tensor(got), torch.as_tensor(want)
            if not torch.equal(got, want):
                return Phrase("state_opt_values", what=what, name=name, diff=_largest(got, want))
    return None


def resumed_apart(never_stopped: dict, resumed: dict) -> tuple[str, float] | None:
    """(name, largest difference) of the first weight the resumed step leaves further from
    the run that never stopped than TOLERANCE units of its dtype allow; else None."""
    import torch

    for name, want in never_stopped.items():
        got = resumed[name]
        eps = torch.finfo(want.dtype).eps
        units = ((got.double() - want.double()).abs() / want.double().abs().clamp(min=1)).max()
        if not units.item() <= TOLERANCE * eps:
            return name, _largest(got, want)
    return None


def _largest(got, want) -> float:
    return (got.double() - want.double()).abs().max().item()


def case_phrase(case: dict) -> Phrase:
    return Phrase("ckpt_model", depth=case["depth"], width=case["width"], dtype=case["dtype"])


def round_trip_exercise(number: str, name: str, texts, judge, ok: str, **declared) -> Exercise:
    """5.4 or 5.5: the answer on its side of the round trip (5.4 saves, 5.5 loads), the
    other's reference on the other; `ok` the message of a pass, `declared` its hints and
    mistakes."""
    answer_saves = number == "5.4"

    def check(fn, seed: int = CHECK_SEED) -> Phrase:
        save, load = (fn, load_sharded) if answer_saves else (save_sharded, fn)
        saved, loaded = round_trip(number, save, load, judge, seed)
        return Phrase(ok, saved=saved, what=Phrase("round_trip_ok", loaded=loaded))

    # The check belongs to the exercise's module, where its judge raises its mistakes.
    check.__module__ = judge.__module__
    reference = save_sharded if answer_saves else load_sharded
    return Exercise(
        number,
        name,
        check,
        reference,
        texts=(texts, WORDS),
        hidden=on_hidden_seeds(check),
        space=SPACE,
        hang_timeout=HANG,
        run_time=RUN_TIME,
        further=True,
        **declared,
    )
