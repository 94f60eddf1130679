"""A rank's stack as the learner reads it (launcher/tracebacks.py)."""

from __future__ import annotations


def test_a_stack_shows_each_run_of_torchs_frames_as_one_line_without_the_install_path(tmp_path):
    import os

    import torch

    from ddp_helpers.launcher.tracebacks import render_stack

    torch_dir = os.path.dirname(torch.__file__)
    mine = tmp_path / "train.py"
    source = "def step():\n    model(x)\n\n\ndef forward(self, x):\n    dist.all_reduce(x)\n"
    mine.write_text(source)
    frames = [  # faulthandler's order: most recent call first
        (f"{torch_dir}/distributed/distributed_c10d.py", 3252, "all_reduce"),
        (f"{torch_dir}/distributed/c10d_logger.py", 83, "wrapper"),
        (str(mine), 6, "forward"),  # torch called back into the learner's code
        (f"{torch_dir}/nn/modules/module.py", 1789, "_call_impl"),
        (f"{torch_dir}/nn/modules/module.py", 1778, "_wrapped_call_impl"),
        (str(mine), 2, "step"),
    ]
    dump = "Current thread 0x00007f (most recent call first):\n" + "".join(
        f'  File "{f}", line {n} in {name}\n' for f, n, name in frames
    )
    assert render_stack(dump).splitlines() == [
        f'  File "{mine}", line 2, in step',
        "    model(x)",
        "  in torch: _wrapped_call_impl > _call_impl (torch/nn/modules/module.py, line 1789)",
        f'  File "{mine}", line 6, in forward',
        "    dist.all_reduce(x)",
        "  in torch: wrapper > all_reduce (torch/distributed/distributed_c10d.py, line 3252)",
    ]
    assert torch_dir not in render_stack(dump)
