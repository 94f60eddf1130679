"""5.4 save_sharded: every rank saves its shards with torch.distributed.checkpoint (DCP).

Saving and loading are two exercises, as lesson 04's 4.5 and 4.6 are: each is checked with
the course's own other half (5.4's answer saves and the reference loads; 5.5's reference
saves and the answer loads), so a mistake in one never fails the other, and each is one
function the notebook defines, as every exercise is. Both run round_trip.py's round trip:
saved on 2 ranks and loaded on 3 (the grader's extra cases: 3 then 2). Both references live
there too, each the other's partner (here, one would import the other's module and back)."""

from __future__ import annotations

from ...i18n import messages
from ..kit import Mistake, Phrase, Wrong, and_list, rank_mistakes
from .round_trip import (
    resumed_apart,
    round_trip_exercise,
    state_apart,
)

MESSAGES = messages(
    "exercises.lesson05.checkpoint",
    {
        "hint.ckpt_collective": (
            "Every rank calls dcp.save with its own shards: it is a collective (the ranks "
            "agree on who writes what, then each writes its own file into the folder), so a "
            "call inside `if rank == 0:` waits for ranks that never come."
        ),
        "hint.ckpt_state": (
            "get_state_dict(model, optimizer) gives the model's and the optimizer's state as "
            "this rank's shards, named by parameter: save them as {{'model': ..., "
            "'optimizer': ...}}, both, into the folder path."
        ),
        "hint.ckpt_code": (
            "model_state, optimizer_state = get_state_dict(model, optimizer); "
            "dcp.save({{'model': model_state, 'optimizer': optimizer_state}}, "
            "checkpoint_id=path), on every rank."
        ),
        "ckpt_nothing": "After save_sharded, there is nothing at path.",
        "ckpt_nothing.title": "nothing saved",
        "ckpt_rank_shards": (
            "path is one file that torch.save wrote, holding DTensors: one rank's shards of "
            "a sharded state dict (its '{name}' has {rows} of the {total} rows), the other "
            "ranks' in no file, each tied to a process group of the job that saved it, which "
            "a plain process does not have. Every rank saves its own shards, with dcp.save."
        ),
        "ckpt_rank_shards.title": "one rank's shards saved with torch.save",
        "ckpt_gathered": (
            "{how}, which needs the whole model and its optimizer state in one rank's "
            "memory: what sharding is there to avoid. Every rank saves its own shards, with "
            "dcp.save."
        ),
        "ckpt_gathered_file": (
            "path is one file of whole tensors that torch.save wrote: the state was gathered "
            "whole on one rank"
        ),
        "ckpt_gathered_dcp": (
            "The checkpoint holds each tensor whole, in one piece ('{name}' among them), not "
            "one shard per rank: the state was gathered whole before it was saved"
        ),
        "ckpt_gathered.title": "the whole state gathered and saved, not sharded",
        "ckpt_not_dcp": (
            "path holds no checkpoint that dcp.load can read (no .metadata file): {files}. "
            "Save with dcp.save(..., checkpoint_id=path) on every rank."
        ),
        "ckpt_not_dcp.title": "not a DCP checkpoint",
        "ckpt_layout": (
            "The checkpoint's top level holds {keys}: save {{'model': ..., 'optimizer': ...}}, "
            "the two states that get_state_dict returns."
        ),
        "ckpt_layout.title": "the two states not under 'model' and 'optimizer'",
        "ckpt_no_optimizer": (
            "The checkpoint holds the model but not the optimizer: resumed from it, Adam "
            "would start again from no moments and the first step count, another run than "
            "the one saved. Save the optimizer's state too."
        ),
        "ckpt_no_optimizer.title": "the optimizer not saved",
        "ckpt_optimizer_numbers": (
            "The optimizer's state is saved under parameter numbers ('{key}'), as "
            "optimizer.state_dict() names it: a number is a parameter's place in one "
            "optimizer's list, which another need not share. get_state_dict, whose dicts "
            "dcp.load fills, names each by its parameter (optimizer.state.NAME.exp_avg), so "
            "a checkpoint of numbers has none of the keys a load asks for."
        ),
        "ckpt_optimizer_numbers.title": "optimizer.state_dict() saved, not get_state_dict's",
        "ckpt_missing": (
            "The checkpoint lacks {keys}: save the whole state get_state_dict returns (the "
            "frozen parameters and the buffers are state too)."
        ),
        "ckpt_missing.title": "part of the state not saved",
        "ckpt_values": (
            "Loaded on {ranks} ranks, the checkpoint is not the state save_sharded was given: "
            "{what}. Save the model's and the optimizer's state as they are at the call."
        ),
        "ckpt_values.title": "another state than the model's at the call",
        "ckpt_ok": "Every rank saved its own shards with DCP, on {saved} ranks: {what}.",
    },
)


# ---------------------------------------------------------------- 5.4's check


def _judge_save(saving: dict, loading: dict, loaded_on: int) -> None:
    """One case: what the answer left at path, then the state loaded from it, then the
    step after; the Wrong that names what is off, if anything is."""
    if "found" in loading:
        _judge_found(loading["found"])
    apart = state_apart(saving["saved"], loading["loaded"])
    if apart is not None:
        raise Wrong("ckpt_values", ranks=loaded_on, what=apart)
    resumed = resumed_apart(saving["after"], loading["after"])
    if resumed is not None:
        raise Wrong("ckpt_resumed", ranks=loaded_on, name=resumed[0], diff=resumed[1])


def _judge_found(found: dict) -> None:
    kind = found["kind"]
    if kind == "nothing":
        raise Wrong("ckpt_nothing")
    if kind == "rank_shards":
        rows, total = found["rows"]
        raise Wrong("ckpt_rank_shards", name=found["name"], rows=rows, total=total)
    if kind == "gathered_file":
        raise Wrong("ckpt_gathered", how=Phrase("ckpt_gathered_file"))
    if kind == "gathered_dcp":
        raise Wrong("ckpt_gathered", how=Phrase("ckpt_gathered_dcp", name=found["name"]))
    if kind == "not_dcp":
        raise Wrong("ckpt_not_dcp", files=and_list(found["files"]))
    if kind == "layout":
        raise Wrong("ckpt_layout", keys=and_list(found["keys"]))
    if kind == "no_optimizer":
        raise Wrong("ckpt_no_optimizer")
    if kind == "numbers":
        raise Wrong("ckpt_optimizer_numbers", key=found["key"])
    raise Wrong("ckpt_missing", keys=and_list(found["keys"][:4]))


exercise = round_trip_exercise(
    "5.4",
    "save_sharded",
    MESSAGES,
    _judge_save,
    "ckpt_ok",
    hints=("ckpt_collective", "ckpt_state", "ckpt_code"),
    mistakes={
        "ckpt_nothing": Mistake(hint="ckpt_collective"),
        "ckpt_rank_shards": Mistake(hint="ckpt_collective"),
        "ckpt_gathered": Mistake(hint="ckpt_collective"),
        "ckpt_not_dcp": Mistake(hint="ckpt_collective"),
        "ckpt_layout": Mistake(hint="ckpt_state"),
        "ckpt_no_optimizer": Mistake(hint="ckpt_state"),
        "ckpt_optimizer_numbers": Mistake(hint="ckpt_state"),
        "ckpt_missing": Mistake(hint="ckpt_state"),
        "ckpt_values": Mistake(hint="ckpt_state"),
        "ckpt_resumed": Mistake(hint="ckpt_state"),
        **rank_mistakes(hint="ckpt_collective"),
    },
)
