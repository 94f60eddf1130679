"""Gradescope: its results.json for each graded submission, and its own autograder.

`python -m ddp_helpers autograder --lesson NN` builds the autograder's zip on the
instructor's machine (generate.py). Gradescope builds an image from it once: setup.sh (a
file here, as root: CPU-only torch and this package's wheel at the course's pins), which
ends with `python -m ddp_helpers.grading.gradescope setup`, the check of that image
(image.py). For each submission it runs run_autograder (a file here) in a fresh container,
which calls `python -m ddp_helpers.grading.gradescope run` (run.py): it picks the notebook
in /autograder/submission and grades it with `grade`, whose Gradescope output (results.py)
writes /autograder/results/results.json. The container is the sandbox there: bubblewrap's
user namespaces are usually blocked inside it, so --no-sandbox, said outright (the default
would say in its output that bubblewrap cannot run). AUTOGRADER_ROOT moves /autograder
elsewhere (tests).
"""
