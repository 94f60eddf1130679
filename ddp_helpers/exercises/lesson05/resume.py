"""5.5 load_sharded: a sharded checkpoint read into a model sharded on another number of ranks.

5.4's reference saves on one number of ranks, the answer loads on another (round_trip.py's
round trip, where this exercise's reference lives too); the state loaded must be the one
saved, and one more step the run that never stopped."""

from __future__ import annotations

from ...i18n import messages
from ..kit import Mistake, Wrong, rank_mistakes
from .round_trip import (
    resumed_apart,
    round_trip_exercise,
    state_apart,
)

MESSAGES = messages(
    "exercises.lesson05.resume",
    {
        "hint.resume_into": (
            "dcp.load fills the state dicts it is given, in place, from the checkpoint: "
            "give it get_state_dict(model, optimizer)'s, this rank's shards of this model "
            "and this optimizer, under the keys they were saved with ('model', "
            "'optimizer'). The checkpoint is resharded to fit them, whatever the number of "
            "ranks that saved it."
        ),
        "hint.resume_apply": (
            "Then hand what was loaded to the model and the optimizer with "
            "set_state_dict(model, optimizer, model_state_dict=..., optim_state_dict=...): "
            "what dcp.load put in the dicts is not all in the model and the optimizer yet."
        ),
        "hint.resume_code": (
            "model_state, optimizer_state = get_state_dict(model, optimizer); state = "
            "{{'model': model_state, 'optimizer': optimizer_state}}; dcp.load(state, "
            "checkpoint_id=path); set_state_dict(model, optimizer, "
            "model_state_dict=state['model'], optim_state_dict=state['optimizer'])."
        ),
        "resume_model": (
            "After load_sharded, the model is not the one saved: {what}. Load into the "
            "model's own state dict (get_state_dict), and apply it (set_state_dict)."
        ),
        "resume_model.title": "the model not loaded",
        "resume_optimizer_empty": (
            "After load_sharded, the optimizer has no state at all: Adam would start again "
            "from no moments and the first step. A fresh optimizer's state is empty until "
            "its first step (its state_dict() gives dcp.load nothing to fill): load the "
            "optimizer too, into the state get_state_dict(model, optimizer) makes."
        ),
        "resume_optimizer_empty.title": "nothing of the optimizer loaded",
        "resume_optimizer": ("After load_sharded, the optimizer is not the one saved: {what}."),
        "resume_optimizer.title": "the optimizer's state not loaded",
        "resume_not_applied": (
            "After load_sharded the tensors are the saved ones, but {what}. dcp.load fills "
            "the dicts it is given: their tensors are the model's and the optimizer's own "
            "(torch 2.13 shares them), what is not a tensor only lands in the dict; "
            "set_state_dict applies it."
        ),
        "resume_not_applied.title": "loaded, not applied (no set_state_dict)",
        "resume_ok": "Saved on {saved} ranks, {what}.",
    },
)


def _judge_load(saving: dict, loading: dict, loaded_on: int) -> None:
    """One case: the state the answer loaded against the one saved, then the step after."""
    saved, loaded = saving["saved"], loading["loaded"]
    apart = state_apart(saved, loaded, parts=("model",))
    if apart is not None:
        raise Wrong("resume_model", what=apart)
    if loading["entries"] == 0 and saved["state"]:
        raise Wrong("resume_optimizer_empty")
    apart = state_apart(saved, loaded, parts=("state",))
    if apart is not None:
        raise Wrong("resume_optimizer", what=apart)
    apart = state_apart(saved, loaded, parts=("groups",))
    if apart is not None:
        raise Wrong("resume_not_applied", what=apart)
    resumed = resumed_apart(saving["after"], loading["after"])
    if resumed is not None:
        raise Wrong("ckpt_resumed", ranks=loaded_on, name=resumed[0], diff=resumed[1])


exercise = round_trip_exercise(
    "5.5",
    "load_sharded",
    MESSAGES,
    _judge_load,
    "resume_ok",
    hints=("resume_into", "resume_apply", "resume_code"),
    mistakes={
        "resume_model": Mistake(hint="resume_into"),
        "resume_optimizer_empty": Mistake(hint="resume_into"),
        "resume_optimizer": Mistake(hint="resume_into"),
        "resume_not_applied": Mistake(hint="resume_apply"),
        "ckpt_resumed": Mistake(hint="resume_apply"),
        **rank_mistakes(hint="resume_into"),
    },
)
