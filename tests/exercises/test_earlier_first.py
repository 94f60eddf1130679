"""When an answer fails because the learner's answer to an earlier exercise it calls is
wrong, the check says to fix that one first, naming it (2.2 on a wrong 2.1; the capstone
on a setup() whose pick_backend() is wrong), and only then."""

from __future__ import annotations

import textwrap
import types

from ddp_helpers.exercises import lesson02, lesson04

WRONG_PICK = """
def pick_backend():
    return "gloo"  # never nccl, even where every rank has a GPU
"""
RIGHT_PICK = """
def pick_backend():
    import os
    import torch

    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local else "gloo"
"""
SETUP = """
def setup():
    import os
    import torch
    import torch.distributed as dist

    backend = pick_backend()
    dist.init_process_group(backend)
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")
"""


def _notebook(*cells: str) -> types.ModuleType:
    """The learner's notebook: the cells run in one namespace (not importable, as a
    notebook's functions are not)."""
    notebook = types.ModuleType("a_learners_notebook")
    for cell in cells:
        exec(compile(textwrap.dedent(cell), "<cell>", "exec"), notebook.__dict__)
    return notebook


def test_setup_on_a_wrong_pick_backend_says_fix_2_1_first():
    notebook = _notebook(WRONG_PICK, SETUP)
    result = lesson02.q2.evaluate(notebook.setup)
    assert (result.status, result.mistake) == ("wrong", "earlier_first")
    assert "`pick_backend()` (exercise 2.1) is not right yet" in result.message
    assert "Fix exercise 2.1 first" in result.message


def test_setup_on_a_right_pick_backend_gets_its_own_verdict():
    notebook = _notebook(RIGHT_PICK, SETUP.replace('int(os.environ["LOCAL_RANK"])', "0"))
    result = lesson02.q2.evaluate(notebook.setup)
    assert result.status == "wrong" and result.mistake != "earlier_first"
    assert "2.1" not in result.message


def test_the_capstone_names_the_earliest_wrong_answer_under_it():
    always_nccl = WRONG_PICK.replace(
        '"gloo"  # never nccl, even', '"nccl"  # nccl even without a GPU, or'
    )
    notebook = _notebook(
        always_nccl,
        SETUP,
        """
        def cleanup():
            import torch.distributed as dist
            dist.destroy_process_group()

        def wrap(model, device):
            from torch.nn.parallel import DistributedDataParallel as DDP
            ids = [device.index] if device.type == "cuda" else None
            return DDP(model.to(device), device_ids=ids)
        """,
        "from ddp_helpers.exercises.lesson04.capstone import "
        "make_dataset, make_model, GLOBAL_BATCH, LR",
        lesson04.q1.solution_source(namespace={"make_model": 1, "make_dataset": 1}),
    )
    result = lesson04.q1.evaluate(notebook.train_ddp)
    assert (result.status, result.mistake) == ("wrong", "earlier_first")
    assert "(exercise 2.1)" in result.message and "Fix exercise 2.1 first" in result.message


def test_the_grader_judges_each_exercise_on_its_own():
    notebook = _notebook(WRONG_PICK, SETUP)
    result = lesson02.q2.grade(notebook.setup)
    assert result.status == "wrong" and result.mistake != "earlier_first"
