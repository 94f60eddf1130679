"""The FSDP2 script that resumes, run under torchrun from lesson 05 (Going further): where
the script is, the loopback setting for its ranks, and what of torchrun's report and of the
snapshots the cells show.

The script ships in this folder (`fsdp_train.py`), so that an installed package (Colab,
Kaggle, a kernel of one's own, with no checkout beside it) has it too; in a checkout the
cells run `lessons/fsdp_train.py`, its copy there, which the learner reads and may edit
(`python -m ddp_helpers build` writes it, `--check` finds it stale). These helpers keep
what is not the lesson out of the cells: torchrun's report without its times, host and
process ids (which change every run), and two snapshots compared tensor by tensor.
"""

from __future__ import annotations

import re
import socket
import tempfile
from pathlib import Path

from ..paths import PACKAGE, ROOT


def script_in(root: Path) -> Path:
    """The script the cells run: the checkout's lessons/ copy where `root` has one (what a
    learner edits is what runs), else the package's own."""
    copy = root / "lessons" / "fsdp_train.py"
    return copy if copy.is_file() else PACKAGE / "demos" / "fsdp_train.py"


SCRIPT = script_in(ROOT)
# The lines of torchrun's ChildFailedError report a cell shows: its title, and the rank and
# exit status of the failure it puts first (its root cause).
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n\[\d+\]:\n(.*?)\n=+", re.S)
_PID = re.compile(r" \(pid: \d+\)\s*")


def loopback_env() -> dict[str, str]:
    """gloo's and nccl's own sockets on the loopback interface ('lo', 'lo0'), as the
    notebook launcher keeps its ranks; torchrun's `--local-addr 127.0.0.1` does the same for
    the rendezvous."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return {}
    loopback = next((n for n in names if n in ("lo", "lo0")), None)
    return {"GLOO_SOCKET_IFNAME": loopback, "NCCL_SOCKET_IFNAME": loopback} if loopback else {}


def torchrun_report(stderr: str) -> str:
    """What torchrun printed of a failed job that does not change from run to run: the
    script's own last words (a line starting `rank `), the error's name, and the root
    cause's rank and exit status."""
    lines = [line for line in stderr.splitlines() if line.startswith("rank ")]
    lines += [
        line.rstrip()
        for line in stderr.splitlines()
        if line.startswith("torch.distributed.elastic") and "ChildFailedError" in line
    ]
    cause = _ROOT_CAUSE.search(stderr)
    if cause:
        lines.append("Root Cause (first observed failure):")
        for line in cause.group(1).splitlines():
            if line.strip().startswith(("rank", "exitcode")):
                lines.append(_PID.sub("", line).rstrip())
    return "\n".join(lines)


def losses(stdout: str) -> dict[int, str]:
    """Each epoch's loss as the script printed it (`epoch 2: loss 0.426743, ...`)."""
    return {int(e): loss for e, loss in re.findall(r"^epoch (\d+): loss ([\d.]+)", stdout, re.M)}


def same_snapshot(first: Path, second: Path) -> bool:
    """Whether two of the script's snapshots hold equal tensors, bit for bit, under the same
    names: the model's and the optimizer's (read whole, in this process)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    def whole(folder: Path) -> dict:
        with tempfile.TemporaryDirectory() as scratch:  # not beside the snapshots
            target = Path(scratch, "whole.pt")
            dcp_to_torch_save(folder, target)
            return _flat(torch.load(target, weights_only=False))

    a, b = whole(first), whole(second)
    return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)


def _flat(state, prefix: str = "") -> dict:
    if isinstance(state, dict):
        return {
            k: v for key, value in state.items() for k, v in _flat(value, f"{prefix}{key}/").items()
        }
    if isinstance(state, (list, tuple)):
        return {
            k: v for i, value in enumerate(state) for k, v in _flat(value, f"{prefix}{i}/").items()
        }
    return {prefix: state}


def _equal(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b
