"""Exercise 4.6's answers of issue 49: each holds in one configuration only (a model without
buffers, float32 weights, one load per process), or is right and written another way. DRAWN
joins the sweep (tests/exercises/test_answers.py)."""

from __future__ import annotations

# ---------------------------------------------------------------- 4.6 load_checkpoint


def load_the_parameters_alone(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location=next(model.parameters()).device)
    with torch.no_grad():
        for name, p in model.module.named_parameters():
            p.copy_(checkpoint["model"][name])  # every weight and bias, by name
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


def load_through_float32(model, optimizer, path):
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    weights = {k: v.float() for k, v in checkpoint["model"].items()}  # the model's usual dtype
    model.module.load_state_dict(weights)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


_loaded: dict = {}


def load_once_and_keep_it(model, optimizer, path):
    import torch

    if not _loaded:  # reading the file is slow: once is enough
        _loaded.update(torch.load(path, map_location="cpu"))
    model.module.load_state_dict(_loaded["model"])
    optimizer.load_state_dict(_loaded["optimizer"])
    return _loaded["epoch"] + 1


# ---------------------------------------------------------------- right, written otherwise


def load_weights_only_onto_the_models_device(model, optimizer, path):
    import torch

    device = next(model.module.parameters()).device
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    missing, unexpected = model.module.load_state_dict(checkpoint["model"], strict=True)
    assert not missing and not unexpected
    optimizer.load_state_dict(checkpoint["optimizer"])
    return int(checkpoint["epoch"]) + 1


def load_by_a_location_map(model, optimizer, path):
    import torch

    here = str(next(model.parameters()).device)  # "cpu", or "cuda:3" on a rank's GPU
    checkpoint = torch.load(path, map_location=here)
    state = {"module." + k: v for k, v in checkpoint["model"].items()}
    model.load_state_dict(state)  # DDP's own keys carry the prefix
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


DRAWN = {
    "4.6": (
        [
            (load_the_parameters_alone, "load_buffers"),
            (load_through_float32, "load_weights"),
            (load_once_and_keep_it, "load_weights"),
        ],
        [load_weights_only_onto_the_models_device, load_by_a_location_map],
    ),
}
