"""lessons/fsdp_train.py, lesson 04's training in FSDP2 with DCP snapshots (lesson 05, Going
further): on 2 ranks it trains and leaves a complete snapshot each epoch; a rank killed
mid-run and the group restarted by torchrun, or a job started again beside a half-written
save, ends with the losses, weights and optimizer state of a run that never stopped.
Lesson 05's cells 05-51..05-53 run it under torchrun three times (uninterrupted, a rank
killed, the same command again), under nbval; here the runs that need no torchrun (the
uninterrupted one, the start after a half-written save) run the script's own `train` on the
course's launcher, whose ranks get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
...): forked, a torchrun job's three fresh interpreters (6 core-seconds here) spared, and
its result the same bit for bit, which the restart test below holds."""

from __future__ import annotations

import ast
import os
import re
import runpy
import shutil
import subprocess
import sys

import cloudpickle
import nbformat
import pytest

from ddp_helpers import launch
from ddp_helpers.demos import fsdp_job
from support import ROOT, setup_on_a_machine

# _train_here travels to the ranks by value: a rank that imported this module would import
# pytest and nbformat too.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EPOCHS = ["epoch-0000", "epoch-0001", "epoch-0002", "epoch-0003"]


def _torchrun(snapshots, *options: str, **env) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "--local-addr", "127.0.0.1", *options]
    command += [str(fsdp_job.SCRIPT), "--epochs", "4", "--snapshots", str(snapshots)]
    environ = {k: v for k, v in os.environ.items() if k != "FAIL_AT_STEP"}
    return subprocess.run(
        command,
        env={**environ, **fsdp_job.loopback_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _train_here(epochs: int, snapshots) -> str:
    """In a rank of the course's launcher: the script's `train`, what it printed returned."""
    import contextlib
    import io

    code = runpy.run_path(str(fsdp_job.SCRIPT), run_name="fsdp_train")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code["train"](epochs, snapshots)
    return printed.getvalue()


def _on_the_launcher(snapshots) -> str:
    """The script's 4 epochs on 2 ranks of the course's launcher: what rank 0 printed."""
    return launch(_train_here, 4, snapshots, nprocs=2)[0]


def _complete(folder) -> list[str]:
    """The snapshot folders in `folder`, each asserted complete: every rank's shards and the
    metadata."""
    for snapshot in folder.iterdir():
        names = sorted(p.name for p in snapshot.iterdir())
        assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"], (snapshot.name, names)
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole") / "snapshots"
    return folder, _on_the_launcher(folder)


def test_the_script_trains_and_leaves_one_complete_snapshot_per_epoch(whole):
    folder, printed = whole
    assert _complete(folder) == EPOCHS
    losses = fsdp_job.losses(printed)
    assert list(losses) == [0, 1, 2, 3] and float(losses[3]) < float(losses[0])
    assert "resuming" not in printed


def test_a_rank_killed_mid_run_and_restarted_by_torchrun_ends_as_if_never_stopped(whole, tmp_path):
    # FAIL_AT_STEP fires on the first start only; torchrun's restart (c10d, a store of its
    # own per start: docs/cluster.md) resumes from the latest complete snapshot.
    folder = tmp_path / "snapshots"
    run = _torchrun(
        folder,
        "--max-restarts",
        "1",
        FAIL_AT_STEP="15",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rank 1: dying at step 15 (FAIL_AT_STEP)" in run.stderr
    assert "resuming from epoch-0001: epochs 2 to 3 left" in run.stdout
    # Bit for bit as the uninterrupted run on the course's launcher: the same script and
    # environment, whichever starts its processes.
    assert fsdp_job.losses(run.stdout) == fsdp_job.losses(whole[1])
    assert _complete(folder) == EPOCHS
    assert fsdp_job.same_snapshot(folder / "epoch-0003", whole[0] / "epoch-0003")


def test_a_save_killed_halfway_is_never_taken_for_a_snapshot(whole, tmp_path):
    # As a job killed while writing epoch 2 leaves it: epochs 0 and 1 complete, epoch 2's
    # folder partial (one rank's file, no metadata yet). A start deletes it and resumes
    # from epoch 1.
    folder = tmp_path / "snapshots"
    for name in EPOCHS[:2]:
        shutil.copytree(whole[0] / name, folder / name)
    partial = folder / "epoch-0002.partial"
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half written")
    printed = _on_the_launcher(folder)
    assert "resuming from epoch-0001: epochs 2 to 3 left" in printed
    losses = fsdp_job.losses(printed)
    assert losses == {e: fsdp_job.losses(whole[1])[e] for e in (2, 3)}
    assert _complete(folder) == EPOCHS
    assert fsdp_job.same_snapshot(folder / "epoch-0003", whole[0] / "epoch-0003")


def test_torchruns_report_keeps_what_does_not_change_from_run_to_run():
    stderr = (
        "rank 1: dying at step 15 (FAIL_AT_STEP)\n"
        "    raise ChildFailedError(\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "====\nfsdp_train.py FAILED\n----\nFailures:\n[1]:\n  time      : 2026-01-01_00:00:00\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 12)  (SIGTERM)\n----\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_00:00:00\n"
        "  host      : node7\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 13) \n"
        "  error_file: <N/A>\n====\n"
    )
    assert fsdp_job.torchrun_report(stderr).splitlines() == [
        "rank 1: dying at step 15 (FAIL_AT_STEP)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 1",
    ]


@pytest.mark.parametrize(
    ("gpus", "local_world", "backend"),
    [(8, "8", "nccl"), (4, "8", "gloo"), (0, "2", "gloo")],
)
def test_the_script_picks_nccl_by_the_gpus_of_its_own_machine_as_lesson_04s_does(
    monkeypatch, gpus, local_world, backend
):
    # What lesson 05's last section says of it: nccl where every rank of this machine has a GPU
    # (2 machines x 8 ranks: WORLD_SIZE 16, each machine needs its own 8), else gloo.
    code = runpy.run_path(str(fsdp_job.SCRIPT), run_name="fsdp_train")
    chosen, device = setup_on_a_machine(monkeypatch, code["setup"], gpus, local_world)
    assert chosen == [("nccl", "cuda:1") if backend == "nccl" else ("gloo", "None")]
    assert device == ("cuda:1" if backend == "nccl" else "cpu")


def _first_arguments(source: str, name: str) -> list:
    """The first argument of each call of `name` in source (its IPython magics left out), as
    a constant's value, or None where it has none or it is not a constant."""
    code = "\n".join(line for line in source.splitlines() if not line.startswith("%"))
    return [
        node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == name
    ]


def test_every_cell_of_lesson_05_but_its_torchrun_jobs_runs_gloo_on_the_cpu_on_any_machine():
    # Lesson 05's first cell: every cell except the torchrun jobs runs with gloo on the CPU,
    # on a machine with GPUs too. Its %%ddp cells, the demos it calls and its checks name
    # gloo and a CPU mesh, where a backend left to choose would take nccl on a GPU machine.
    cells = nbformat.read(ROOT / "solutions" / "05_sharding.ipynb", as_version=4).cells
    sources = [c.source for c in cells if c.cell_type == "code" and "torchrun(" not in c.source]
    package = ROOT / "ddp_helpers"
    modules = [package / "demos" / "sharding.py", package / "demos" / "activations.py"]
    modules += [package / "exercises" / "harness.py"]
    modules += sorted((package / "exercises" / "lesson05").glob("*.py"))
    sources += [module.read_text() for module in modules]
    groups = [a for s in sources for a in _first_arguments(s, "init_process_group")]
    meshes = [a for s in sources for a in _first_arguments(s, "init_device_mesh")]
    assert len(groups) >= 5 and set(groups) == {"gloo"}, groups
    assert len(meshes) >= 6 and set(meshes) == {"cpu"}, meshes
    assert not any(_first_arguments(s, "pick_backend") for s in sources)
    assert not re.search(r"--backend|launch\([^)]*backend=", "\n".join(sources))
