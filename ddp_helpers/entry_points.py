"""The package's own process entry points: every module a process of the course is started
as (`python -m NAME`), named once. A leaf: it imports nothing, so the light commands that
start a process stay light. tests/test_imports.py holds that each exists and runs as a
program; docs/development.md draws the tree of processes they make."""

from __future__ import annotations

# The kernel's helper that forks the ranks (launcher/client.py starts it).
ZYGOTE = "ddp_helpers.launcher.zygote"
# One submission's grading, from the notebook's kernel to its scores (orchestration/dispatch).
WORKER = "ddp_helpers.grading.worker.process"
# The checks of one submission, run on the answers the kernel saved (worker/scorer.py).
SCORER = "ddp_helpers.grading.worker.scorer"
# What puts a grading process in its cgroups and rlimits before it runs (confinement/sandbox).
CONFINE = "ddp_helpers.grading.confinement.confine"
# Gradescope's autograder: `setup` on the image, `run` per submission (gradescope/run_autograder).
GRADESCOPE = "ddp_helpers.grading.gradescope"

ALL = (ZYGOTE, WORKER, SCORER, CONFINE, GRADESCOPE)
