"""`python -m ddp_helpers export`: lesson 04 as a torchrun script that trains and resumes."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from ddp_helpers import launch

SOLUTION = ROOT / "solutions" / "04_sampler_and_checkpoint.ipynb"
LESSON = ROOT / "lessons" / "04_sampler_and_checkpoint.ipynb"


def export(notebook, out):
    """`python -m ddp_helpers export NOTEBOOK -o OUT`, as the command line runs it."""
    from ddp_helpers.__main__ import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["export", str(notebook), "-o", str(out)])
    return subprocess.CompletedProcess([], code, stdout.getvalue(), stderr.getvalue())


def torchrun(script, *args):
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
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def losses(stdout):
    return {int(e): float(v) for e, v in re.findall(r"epoch (\d+): training loss ([\d.]+)", stdout)}


def main_of_the_script(script, *argv):
    """In a rank: the exported script's main(), with this command line."""
    code = runpy.run_path(str(script), run_name="exported")
    sys.argv[:] = [str(script), *argv]
    code["main"]()


def test_the_exported_script_trains_checkpoints_resumes_and_matches_the_notebook(tmp_path, capfd):
    script = tmp_path / "train.py"
    result = export(SOLUTION, script)
    assert result.returncode == 0, result.stderr
    assert "torchrun --standalone --nproc-per-node 2" in result.stdout

    first = torchrun(script, "--epochs", "2")  # under torchrun itself, as on a cluster
    assert sorted(losses(first)) == [0, 1]
    assert losses(first)[1] < losses(first)[0]  # it learns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "train.py"]
    assert torch.load(tmp_path / "checkpoint.pt", map_location="cpu")["epoch"] == 1

    # Started again with the checkpoint there, its main() resumes (the launcher gives the
    # ranks torchrun's environment: a second torchrun would prove nothing more).
    os.chdir(tmp_path)
    try:
        launch(main_of_the_script, script, "--epochs", "4", nprocs=2, timeout=120, ordered=True)
    finally:
        os.chdir(ROOT)
    resumed = torch.load(tmp_path / "checkpoint.pt", map_location="cpu")
    assert resumed["epoch"] == 3
    second = capfd.readouterr().out
    assert "[rank 0] resuming from epoch 2" in second and "epoch 3: training loss" in second

    # The notebook's own run of the same code, 4 epochs without stopping.
    code = runpy.run_path(str(script), run_name="exported")
    _, straight = launch(code["run"], 4, str(tmp_path / "straight.pt"), nprocs=2, timeout=120).rank0
    diff = max((resumed["model"][k] - straight[k]).abs().max().item() for k in straight)
    assert diff < 1e-6, diff


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
    monkeypatch.setattr(torch.distributed, "init_process_group", chosen.append)
    env = {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": local_world}
    monkeypatch.setattr(os, "environ", dict(os.environ, **env))
    device = code["setup"]()
    assert chosen == [backend]
    assert str(device) == ("cuda:1" if backend == "nccl" else "cpu")


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


def test_exporting_an_unfinished_lesson_names_the_missing_exercise(tmp_path):
    result = export(LESSON, tmp_path / "train.py")
    assert result.returncode == 2
    assert "exercise 4.1 is not done yet" in result.stderr
    assert not (tmp_path / "train.py").exists()


def test_a_notebook_without_export_tags_gets_a_clear_error(tmp_path):
    result = export(ROOT / "solutions" / "01_rank_and_world_size.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "no cells tagged `export`" in result.stderr


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    result = export(tmp_path / "nowhere.ipynb", tmp_path / "t.py")
    assert result.returncode == 2 and "No such file" in result.stderr
