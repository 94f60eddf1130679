"""`python -m ddp_helpers export`: lesson 04's capstone as a torchrun script."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from ddp_helpers.exercises import capstone

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
LESSON = ROOT / "lessons" / "04_sampler_and_checkpoint.ipynb"

# Started before the script in every process of the run (PYTHONPATH), it logs each
# torch.save with the global rank that called it: who wrote the checkpoint, how often.
SAVE_SPY = """\
import os

import torch

_real_save = torch.save


def _logged_save(obj, f, *args, **kwargs):
    with open(os.environ["SAVES_LOG"], "a") as log:
        log.write(f"{os.environ.get('RANK')} {f}\\n")
    return _real_save(obj, f, *args, **kwargs)


torch.save = _logged_save
"""

# Started in every process of a run (PYTHONPATH): the machine one-GPU-per-task scheduling
# gives each rank, CUDA there but one GPU visible to the process, however many ranks it has.
ONE_GPU_VISIBLE = """\
import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
"""
WARNING = "warning: CUDA is available, but this process sees"


def export(notebook, out):
    """`python -m ddp_helpers export NOTEBOOK -o OUT`, as the command line runs it."""
    from ddp_helpers.__main__ import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["export", str(notebook), "-o", str(out)])
    return subprocess.CompletedProcess([], code, stdout.getvalue(), stderr.getvalue())


def torchrun(script, *args, env=None):
    """The script under `torchrun --standalone --nproc-per-node 2`, on loopback: its output."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            script.name,
            *args,
        ],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_the_exported_capstone_runs_under_torchrun_saves_once_and_equals_one_process(tmp_path):
    script = tmp_path / "train.py"
    result = export(SOLUTION, script)
    assert result.returncode == 0, result.stderr
    assert "torchrun --standalone --nproc-per-node 2" in result.stdout
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(SAVE_SPY)
    log = tmp_path / "saves.log"
    env = {"PYTHONPATH": str(spy), "SAVES_LOG": str(log)}

    run = torchrun(script, "--epochs", "2", "--checkpoint", "ckpt.pt", env=env)
    assert WARNING not in run.stderr  # no CUDA here: nothing to warn about

    # Rank 0 alone wrote, once after each epoch, to the path given on the command line.
    assert log.read_text().splitlines() == ["0 ckpt.pt", "0 ckpt.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "saves.log", "spy", "train.py"]
    saved = torch.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=True)
    reference = capstone.one_process_weights(2)  # one process, the same global batches
    assert saved.keys() == reference.keys()  # the plain model's keys: no `module.`
    diff = max((saved[k] - reference[k]).abs().max().item() for k in reference)
    assert diff < 1e-6, diff


def test_the_script_is_the_learners_code_without_the_course(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    text = script.read_text()
    lines = text.splitlines()
    assert not [line for line in lines if "import" in line and "ddp_helpers" in line]
    assert "SOLUTION" not in text and "%load_ext" not in text
    code = runpy.run_path(str(script), run_name="exported")
    for name in ("setup", "cleanup", "wrap", "make_loader", "train_ddp", "main"):
        assert callable(code[name]), name
    assert "train_one_process" not in code  # the one-process script stays in the notebook


@pytest.mark.parametrize(
    ("gpus", "local_world", "backend"),
    [(8, "8", "nccl"), (4, "8", "gloo"), (0, "2", "gloo")],
)
def test_the_script_picks_nccl_by_the_gpus_of_its_own_machine(
    tmp_path, monkeypatch, gpus, local_world, backend
):
    # 2 nodes x 8 ranks: WORLD_SIZE 16, but each machine needs only its own 8 GPUs.
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    code = runpy.run_path(str(script), run_name="exported")
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(
        torch.distributed,
        "init_process_group",
        lambda backend, **kwargs: chosen.append((backend, str(kwargs.get("device_id")))),
    )
    env = {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": local_world}
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    device = code["setup"]()
    # nccl with device_id= this rank's GPU (without it, barrier() warns); gloo without one.
    assert chosen == [("nccl", "cuda:1") if backend == "nccl" else ("gloo", "None")]
    assert str(device) == ("cuda:1" if backend == "nccl" else "cpu")


@pytest.mark.parametrize(
    ("cuda", "gpus", "rank", "warned"),
    [(True, 1, "0", True), (True, 2, "0", False), (False, 0, "0", False), (True, 1, "1", False)],
)
def test_the_script_warns_before_training_when_cuda_is_there_but_gloo_is_picked(
    tmp_path, monkeypatch, capsys, cuda, gpus, rank, warned
):
    # 2 ranks on the machine: 1 GPU visible is one GPU per task; 2 is nccl; no CUDA, no word.
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    main = runpy.run_path(str(script), run_name="exported")["main"]
    said_before_training = []  # what the script printed by the time it began to train
    train = lambda *args: said_before_training.append(capsys.readouterr())  # noqa: E731
    monkeypatch.setitem(main.__globals__, "train_ddp", train)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "1"])
    main()
    (said,) = said_before_training
    assert said.out == ""
    if warned:
        assert said.err.startswith(WARNING) and said.err.count("\n") == 1, said.err
        assert "sees 1 GPU(s) for LOCAL_WORLD_SIZE=2 ranks" in said.err
        assert "pick_backend() chose gloo and the job trains on the CPU" in said.err
        assert "CUDA_VISIBLE_DEVICES per rank, e.g. SLURM --gpus-per-task=1" in said.err
    else:
        assert said.err == ""


def test_under_torchrun_one_gpu_per_task_is_said_once_and_the_job_still_trains(tmp_path):
    script = tmp_path / "train.py"
    assert export(SOLUTION, script).returncode == 0
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(ONE_GPU_VISIBLE)
    run = torchrun(script, "--epochs", "1", env={"PYTHONPATH": str(fake)})
    warnings = [line for line in run.stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1, run.stderr[-3000:]  # rank 0's, not one per rank
    assert "sees 1 GPU(s) for LOCAL_WORLD_SIZE=2 ranks" in warnings[0]
    assert (tmp_path / "checkpoint.pt").exists()  # trained on the CPU, with gloo


def test_the_script_name_goes_in_its_header_and_nowhere_else(tmp_path):
    import nbformat

    nb = nbformat.read(SOLUTION, as_version=4)
    cell = next(c for c in nb.cells if "export" in c.metadata.get("tags", []))
    cell.source += '\nLOG = "train.py.log"  # the learner\'s own text\n'
    notebook = tmp_path / "04_sampler_and_checkpoint.ipynb"
    nbformat.write(nb, notebook)
    result = export(notebook, tmp_path / "job.py")
    assert result.returncode == 0, result.stderr
    script = (tmp_path / "job.py").read_text()
    assert "torchrun --standalone --nproc-per-node 2 job.py" in script
    assert 'LOG = "train.py.log"' in script


def test_imports_are_grouped_standard_library_first():
    from ddp_helpers.authoring.export import _import_block

    block = _import_block(["import torch", "import os, sys", "from pathlib import Path"])
    assert block == "import os, sys\nfrom pathlib import Path\n\nimport torch"


def test_exporting_an_unfinished_lesson_names_the_missing_exercises(tmp_path):
    result = export(LESSON, tmp_path / "train.py")
    assert result.returncode == 2
    named = "exercises 4.1 and 4.2, exercises 2.1, 2.2 and 2.3 from lesson 02 and exercise 3.1"
    assert f"needs {named} from lesson 03" in result.stderr, result.stderr
    assert "paste your answers from the earlier lessons" in result.stderr
    assert not (tmp_path / "train.py").exists()


def test_a_lesson_whose_own_exercises_are_done_asks_only_for_the_pasted_ones(tmp_path):
    import nbformat

    nb = nbformat.read(LESSON, as_version=4)
    solved = nbformat.read(SOLUTION, as_version=4)
    answers = {c.source.split("(")[0]: c.source for c in solved.cells if c.cell_type == "code"}
    for cell in nb.cells:
        head = cell.source.split("(")[0]
        if cell.cell_type == "code" and head in ("def make_loader", "def train_ddp"):
            cell.source = answers[head]
    notebook = tmp_path / "04_sampler_and_checkpoint.ipynb"
    nbformat.write(nb, notebook)
    result = export(notebook, tmp_path / "train.py")
    assert result.returncode == 2
    named = "exercises 2.1, 2.2 and 2.3 from lesson 02 and exercise 3.1 from lesson 03"
    assert f"needs {named}," in result.stderr, result.stderr
    assert "Paste your answers from the earlier lessons" in result.stderr


def test_a_notebook_without_export_tags_gets_a_clear_error(tmp_path):
    result = export(ROOT / "solutions" / "01_rank_and_world_size.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "no cells tagged `export`" in result.stderr


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    result = export(tmp_path / "nowhere.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "No such file" in result.stderr
