"""Exercise 5.5's answers (load_sharded): each wrong one makes the mistake its name says (the
state loaded and never applied, or the model's alone; the optimizer left out, or the model;
plain state dicts to load into, the whole state to load into, dcp.load on rank 0 alone); the
right ones are written other ways."""

from __future__ import annotations

# ---------------------------------------------------------------- 5.5 load_sharded, wrong


def load_without_set_state_dict(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)
    # dcp.load fills the tensors in place: nothing more to do


def load_the_model_alone(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    state = {"model": get_model_state_dict(model)}  # the weights are what matters
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])


def load_into_the_plain_state_dicts(model, optimizer, path):
    import torch.distributed.checkpoint as dcp

    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    dcp.load(state, checkpoint_id=path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def load_the_model_and_the_optimizer_as_it_is(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.load({"model": model_state}, checkpoint_id=path)  # the optimizer's state: made fresh
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)


def load_the_whole_state_unapplied(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    # Whole tensors on every rank: the checkpoint fills them, whatever the sharding.
    options = StateDictOptions(full_state_dict=True)
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_on_rank_zero_alone(model, optimizer, path):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    if dist.get_rank() == 0:  # one reader, then...
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)


def load_the_optimizer_alone(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.load({"optimizer": optimizer_state}, checkpoint_id=path)  # the moments are the point
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)


def load_both_and_apply_the_model_alone(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)
    set_model_state_dict(model, model_state)  # dcp.load filled the optimizer's tensors in place


# ---------------------------------------------------------------- right, written otherwise


def load_through_a_stateful_object(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.checkpoint.stateful import Stateful

    class Model(Stateful):  # dcp.load calls load_state_dict with what it loaded
        def state_dict(self):
            return get_model_state_dict(model)

        def load_state_dict(self, state):
            set_model_state_dict(model, state)

    class Optimizer(Stateful):
        def state_dict(self):
            return get_optimizer_state_dict(model, optimizer)

        def load_state_dict(self, state):
            set_optimizer_state_dict(model, optimizer, state)

    dcp.load({"model": Model(), "optimizer": Optimizer()}, checkpoint_id=path)


def load_with_the_two_setters_and_a_reader(model, optimizer, path):
    from torch.distributed.checkpoint import FileSystemReader, load
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = {
        "model": get_model_state_dict(model),
        "optimizer": get_optimizer_state_dict(model, optimizer),
    }
    load(state, storage_reader=FileSystemReader(path))
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def load_the_whole_state_and_apply_it(model, optimizer, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
        set_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)  # more memory, the same state
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=options,
    )


ANSWERS = {
    "5.5": (
        [
            (load_without_set_state_dict, "resume_not_applied"),
            (load_the_model_alone, "resume_optimizer_empty"),
            (load_into_the_plain_state_dicts, "resume_optimizer_empty"),
            (load_the_model_and_the_optimizer_as_it_is, "resume_optimizer"),
            (load_the_whole_state_unapplied, "resume_model"),
            (load_on_rank_zero_alone, "hang"),
            (load_the_optimizer_alone, "resume_model"),
            (load_both_and_apply_the_model_alone, "resume_not_applied"),
        ],
        [
            load_through_a_stateful_object,
            load_with_the_two_setters_and_a_reader,
            load_the_whole_state_and_apply_it,
        ],
    ),
}

# Joined to the sweep of tests/exercises/test_answers.py.
DRAWN = ANSWERS
