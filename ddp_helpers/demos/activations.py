"""What activation checkpointing saves, measured in one process (lesson 05, Going further).

Sharding divides what a rank holds of the model (parameters, gradients, the optimizer's
state) by the number of ranks; the activations a rank keeps for its backward are those of its
own rows and do not shrink with it. `activation_memory` runs lesson 05's model (made wider
and deeper) forward on a batch of rows and counts the bytes allocated during the forward and
still held at its end (torch's profiler, `profile_memory`: every allocation and free on the
CPU), once plainly and once with each block's call inside `torch.utils.checkpoint`, which
keeps only the block's input and computes the block again in the backward; the gradients of
the two are compared, and the blocks' forwards during each backward counted.
"""

from __future__ import annotations

from ..i18n import messages
from .sharding import _stderr_quiet, parameter_count

# The demo's model: lesson 05's, 256 wide and 8 blocks deep (a batch of rows then holds more
# in activations than the model holds in state on a rank under FSDP2).
WIDTH, DEPTH, ROWS = 256, 8, (128, 512)

MESSAGES = messages(
    "activations",
    {
        "model": (
            "lesson 05's model, {width} wide and {depth} blocks: {parameters:,} parameters; "
            "with AdamW, 16 bytes a trainable parameter on one rank: {state:,} KiB, about "
            "{sharded:,} KiB a rank under FSDP2 on 4"
        ),
        "rows": (
            "{rows} rows on a rank: activations held after the forward {plain:,} KiB "
            "(measured); with each block checkpointed {checkpointed:,} KiB (measured), "
            "{again} block forwards run again in the backward (counted), {more:.0%} more "
            "floating-point work in the step's matrix products (counted), gradients "
            "{gradients}"
        ),
        "equal": "equal bit for bit",
        "apart": "apart by up to {diff:.1e}",
    },
)


def _held_and_grads(model, x, y, checkpointed: bool) -> tuple[int, int, int, list]:
    """(bytes allocated by the forward and held at its end, the blocks' forwards during the
    backward, the step's floating-point operations (torch's FlopCounterMode: its matrix
    products), the gradients)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.checkpoint import checkpoint
    from torch.utils.flop_counter import FlopCounterMode

    calls = [0]
    for block in model.blocks:
        block.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    with FlopCounterMode(display=False) as flops:
        with _stderr_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            h = model.embed(x) + model.shift
            for block in model.blocks:
                h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
            loss = torch.nn.functional.mse_loss(model.head(h), y)
        held = sum(event.self_cpu_memory_usage for event in p.events())
        before = calls[0]
        loss.backward()
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    return held, calls[0] - before, flops.get_total_flops(), grads


def activation_memory(rows=ROWS, width: int = WIDTH, depth: int = DEPTH) -> dict:
    """For each number of rows: {"plain", "checkpointed": bytes held after the forward,
    "again": the blocks' forwards in the checkpointed backward, "flops": (a plain step's, a
    checkpointed step's), "diff": the largest gradient difference}; with "width", "depth",
    "parameters", "trainable"."""
    from ..exercises.lesson05.common import make_batches, make_model

    by_rows = {}
    for n in rows:
        x, y = make_batches(steps=1, rows=n)
        plain, _, work, want = _held_and_grads(make_model(width, depth), x[0], y[0], False)
        held, again, more, got = _held_and_grads(make_model(width, depth), x[0], y[0], True)
        diff = max((a - b).abs().max().item() for a, b in zip(got, want, strict=True))
        by_rows[n] = {"plain": plain, "checkpointed": held, "again": again, "diff": diff}
        by_rows[n]["flops"] = (work, more)
    return {**parameter_count(width, depth), "width": width, "depth": depth, "by_rows": by_rows}


def activation_table(measured: dict) -> str:
    """The model's state on a rank, then a line for each number of rows."""
    frozen = measured["parameters"] - measured["trainable"]  # 4 bytes each: no gradient, no state
    state = (16 * measured["trainable"] + 4 * frozen) / 1024
    lines = [
        MESSAGES["model"].format(
            width=measured["width"],
            depth=measured["depth"],
            parameters=measured["parameters"],
            state=round(state),
            sharded=round(state / 4),
        )
    ]
    for n, m in measured["by_rows"].items():
        gradients = (
            MESSAGES["equal"] if m["diff"] == 0 else MESSAGES["apart"].format(diff=m["diff"])
        )
        lines.append(
            MESSAGES["rows"].format(
                rows=n,
                plain=round(m["plain"] / 1024),
                checkpointed=round(m["checkpointed"] / 1024),
                again=m["again"],
                more=m["flops"][1] / m["flops"][0] - 1,
                gradients=gradients,
            )
        )
    return "\n".join(lines)
