"""What the grader's kernel client makes of a notebook's error (grading/worker/kernel.py)."""

from __future__ import annotations


def test_a_stopped_notebooks_traceback_keeps_the_learners_line_above_a_deep_stack():
    from ddp_helpers.grading.worker.kernel import error_text

    deep = [f"File /site-packages/lib.py:{n}, in f{n}()\n---> {n} f{n + 1}()" for n in range(30)]
    cell = "Cell In[3], line 14\n     13 x = 1\n---> 14 launch(spin, nprocs=2)"
    error = {
        "traceback": ["\x1b[0;31mKeyboardInterrupt\x1b[0m", cell, *deep, "KeyboardInterrupt: "]
    }
    text = error_text(error)
    assert text.startswith("Cell In[3], line 14") and "launch(spin, nprocs=2)" in text
    assert text.endswith("KeyboardInterrupt:") and "f29()" in text and "f0()" not in text
    short = {"traceback": [cell, deep[0], "KeyboardInterrupt: "]}
    assert error_text(short) == "\n".join(
        [*cell.splitlines(), *deep[0].splitlines(), "KeyboardInterrupt:"]
    )
