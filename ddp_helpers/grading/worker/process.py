"""The worker process: one submission graded in a process of its own. Its notebook runs in a
fresh kernel, then its answers are scored (scorer.py). The grader starts one worker per
submission and supervises it (dispatch.py); nothing here runs in the grader.

`python -m ddp_helpers.grading.worker.process NOTEBOOK LESSON BUDGET CONFINEMENT` prints one
JSON line, the submission's Outcome. The worker is a child subreaper (Linux), so every
process the submission starts (kernel, launcher, ranks, anything that daemonised) ends up
as its descendant and is killed before the outcome is printed. The answers leave the
kernel by value (cloudpickle) after every cell.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from ... import i18n
from ...exercises import exercises_of
from ...files import remove_tree
from ...i18n import messages
from ...procs import Reaper, become_subreaper, die_with_parent, kill_descendants, undumpable
from ..budget import TimeBudget
from ..confinement.disk import Disk
from ..confinement.sandbox import (
    CGROUP_NAME_ENV,
    FILES,
    Cage,
    Confinement,
    format_size,
    shown_size,
)
from ..folders import WorkFolders
from ..notebooks import code_sources, language_of
from ..results import Event, Outcome, Status
from .kernel import (
    MAX_MESSAGE,
    BrokenChannel,
    Kernel,
    KernelDied,
    Malformed,
    OutputTooBig,
    error_text,
)
from .scorer import score

MESSAGES = messages(
    "grading.worker",
    {
        "kernel_start": "The Jupyter kernel did not start ({why}). Kernel log:\n{log}",
        "timeout": (
            "The notebook was stopped after {limit:g} s: it was still running code cell "
            "{cell} (`{first_line}`). Cells after it were not run."
        ),
        "died": (
            "The kernel died ({how}) while running code cell {cell} (`{first_line}`); "
            "cells after it were not run."
        ),
        "cell_error": "Code cell {cell} (`{first_line}`) raised {ename}: {evalue}",
        "probe": (
            "After code cell {cell} (`{first_line}`) the grader could not take the answers out "
            "of the kernel: {how}. Cells after it were not run; answers from earlier cells count."
        ),
        "unreadable": "The notebook could not be read when its turn came: {error}.",
        "probe_hung": "it did not finish",
        "probe_died": "the kernel died ({how})",
        "too_big": (
            "While running code cell {cell} (`{first_line}`) the notebook sent the grader one "
            "message (an output, an error) of more than {limit}, which the grader does not "
            "take; the notebook was stopped there. Print less at once."
        ),
        "tampered": (
            "While running code cell {cell} (`{first_line}`) the notebook replaced the socket "
            "`{socket}` that the grader talks to its kernel through; the notebook was stopped "
            "there."
        ),
        "malformed": (
            "While running code cell {cell} (`{first_line}`) the notebook's kernel sent the "
            "grader a message that the Jupyter protocol does not allow: code in the notebook "
            "wrote to the kernel's own channels. The notebook was stopped there."
        ),
        "cell_too_big": (
            "Code cell {cell} (`{first_line}`) is {size} long, over the {limit} the grader "
            "runs in one cell (the kernel sends a cell's code back whole); the notebook was "
            "stopped there. Keep data in files, not in a cell's code."
        ),
    },
)

# Runs in the learner's kernel after every cell: pickles the answers by value into a file
# (with the launcher's pickler, which keeps each function's code whole, its file name too:
# code taken from the course's own files is told by it). Executed in a fresh namespace, so
# it defines nothing in the learner's.
_PROBE = """
import os, pickle
from ddp_helpers.launcher.pickling import dumps
from IPython import get_ipython
ns = get_ipython().user_ns
found = {}
for name in NAMES:
    if name in ns:
        try:
            found[name] = ("ok", dumps(ns[name]))
        except BaseException as exc:
            found[name] = ("error", f"{type(exc).__name__}: {exc}"[:2000])
with open(PATH + ".tmp", "wb") as f:
    pickle.dump(found, f)
os.replace(PATH + ".tmp", PATH)
"""


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()[:80]
    return ""


def run_notebook(
    cells: list[str],
    names: list[str],
    folders: WorkFolders,
    budget: TimeBudget,
    cage: Cage,
    env=None,
) -> tuple[Status, list[Event], float]:
    """Run the code cells in a fresh kernel, in the cage, taking the answers out after each.

    Returns the status, what happened, and the seconds it took; the answers are in
    folders.answers.
    """
    answers = folders.answers
    probe = f"exec({_PROBE!r}, {{'NAMES': {names!r}, 'PATH': {answers!r}}})"
    status, events = Status.OK, []
    started = time.monotonic()
    kernel = Kernel(folders, cage.env() if env is None else env, cage)
    try:
        try:
            kernel.wait_ready(budget.kernel_start)
        except (KernelDied, TimeoutError, BrokenChannel) as exc:
            text = MESSAGES["kernel_start"].format(why=exc, log=kernel.log_tail())
            return Status.ERROR, [Event("kernel", text)], time.monotonic() - started
        deadline = time.monotonic() + budget.notebook
        for number, source in enumerate(cells, 1):
            where = {"cell": number, "first_line": _first_line(source)}
            stop, happened = _run_cell(kernel, source, where, deadline, probe, budget)
            events += happened
            if stop is not None:
                status = stop
                break
    finally:
        kernel.stop()
    return status, events, time.monotonic() - started


def _run_cell(
    kernel: Kernel, source: str, where: dict, deadline: float, probe: str, budget: TimeBudget
) -> tuple[Status | None, list[Event]]:
    """One cell, then the answers taken out: (the status the notebook stops with, or None
    to go on; what happened)."""
    number = where["cell"]
    size = _echoed_size(source)
    if size > MAX_MESSAGE:  # its echo (execute_input) would be dropped: say what it was
        limit, shown = format_size(MAX_MESSAGE), shown_size(size)
        text = MESSAGES["cell_too_big"].format(size=shown, limit=limit, **where)
        return Status.ERROR, [Event("cell_too_big", text, cell=number)]
    try:
        error = kernel.execute(source, deadline)
    except TimeoutError as exc:
        error = kernel.interrupt(exc.args[0], budget.interrupt_grace)
        text = MESSAGES["timeout"].format(limit=budget.notebook, **where)
        if error is not None:  # the kernel came back: what it defined still counts
            with contextlib.suppress(TimeoutError, KernelDied, BrokenChannel):
                kernel.execute(probe, time.monotonic() + budget.probe, silent=True)
        return Status.TIMEOUT, [Event("timeout", text, error_text(error) if error else "", number)]
    except KernelDied as exc:
        text = MESSAGES["died"].format(how=exc, **where)
        return Status.ERROR, [Event("died", text, kernel.log_tail(), number)]
    except BrokenChannel as exc:
        return Status.ERROR, [_broken_channel(exc, where, number)]
    events = []
    if error is not None:
        text = MESSAGES["cell_error"].format(
            ename=error.get("ename"), evalue=error.get("evalue"), **where
        )
        events.append(Event("cell_error", text, error_text(error), number, name=error["ename"]))
    try:
        kernel.execute(probe, max(deadline, time.monotonic() + budget.probe), silent=True)
    except BrokenChannel as exc:
        return Status.ERROR, [*events, _broken_channel(exc, where, number)]
    except (TimeoutError, KernelDied) as exc:
        # Taking the answers out ran the notebook's objects' pickling code: it hung or ended
        # the kernel. What earlier cells defined still counts.
        hung = isinstance(exc, TimeoutError)
        how = MESSAGES["probe_hung"] if hung else MESSAGES["probe_died"].format(how=exc)
        event = Event("probe", MESSAGES["probe"].format(how=how, **where), cell=number)
        return (Status.TIMEOUT if hung else Status.ERROR), [*events, event]
    return None, events


def _echoed_size(source: str) -> int:
    """Bytes of the message in which the kernel sends a cell's code back (execute_input):
    its code as jupyter_client packs it, and room for the headers."""
    packed = json.dumps(source, ensure_ascii=False).encode("utf8", errors="surrogateescape")
    return len(packed) + (4 << 10)


def _broken_channel(exc: Exception, where: dict, cell: int) -> Event:
    """The event of a kernel the grader stopped talking to: a message too big, a socket
    replaced."""
    if isinstance(exc, OutputTooBig):
        text = MESSAGES["too_big"].format(limit=format_size(MAX_MESSAGE), **where)
        return Event("too_big", text, cell=cell)
    if isinstance(exc, Malformed):
        return Event("malformed", MESSAGES["malformed"].format(**where), str(exc), cell)
    return Event("tampered", MESSAGES["tampered"].format(socket=exc, **where), cell=cell)


def _stop_with_the_grader() -> None:
    """SIGTERM (from the grader, or sent by Linux when the grader dies) runs the clean-up."""

    def stop(signum, frame):
        raise SystemExit(128 + signum)  # unwinds through run_and_score's `finally`

    signal.signal(signal.SIGTERM, stop)
    grader = os.environ.get("DDP_HELPERS_GRADER_PID")
    if grader:
        die_with_parent(int(grader), signal.SIGTERM)


def run_and_score(
    path: str, lesson: str, budget: TimeBudget, confinement: Confinement | None = None
) -> Outcome:
    """Run and score one notebook; nothing it started is left when this returns. What it
    says (the feedback's events) is in the notebook's language."""
    with i18n.using(language_of(path)):
        return _run_and_score(path, lesson, budget, confinement)


def _run_and_score(
    path: str, lesson: str, budget: TimeBudget, confinement: Confinement | None
) -> Outcome:
    become_subreaper()
    _stop_with_the_grader()
    confinement = confinement or Confinement()
    disk = Disk.own(confinement.disk, FILES)  # namespaces first, while single-threaded
    exercises = exercises_of(lesson)
    folders = WorkFolders.make(disk)
    disk.share_memory_in(folders.shm)  # without the sandbox too, /dev/shm is the box's
    # The grader named the cgroups, so that it can remove them should this process be killed.
    cage = Cage(confinement, folders, os.environ.get(CGROUP_NAME_ENV), disk)
    # The checks speak the notebook's language: in its kernel (its language cell says so
    # too) and in the scorer, whose messages go into the feedback.
    env = {**cage.env(), i18n.ENV: i18n.current()}  # run_and_score chose it
    try:
        try:
            cells = code_sources(path)
        except (OSError, ValueError) as exc:  # replaced since the batch found it
            unreadable = Event("unreadable", MESSAGES["unreadable"].format(error=exc))
            status, events, run_seconds = Status.ERROR, [unreadable], 0.0
        else:
            status, events, run_seconds = run_notebook(
                cells, [ex.name for ex in exercises], folders, budget, cage, env
            )
        kill_descendants()  # the kernel's launcher and ranks, before the learner's code runs again
        started = time.monotonic()
        scores, check_events = score(folders, lesson, env, budget.check, cage)
        kinds = {e.kind for e in check_events}
        if status is Status.OK and kinds:  # a check that hung or died is the submission's too
            status = Status.ERROR if "check_died" in kinds else Status.TIMEOUT
        memory_errors = sum(e.name == "MemoryError" for e in events)
        hit = cage.hit(memory_errors)
        if hit is not None:  # over a limit: the submission's row says which
            status = Status.ERROR
            events.insert(0, Event("limit", cage.message(hit)))  # the cause, before its effects
        return Outcome(
            status, scores, events + check_events, run_seconds, time.monotonic() - started
        )
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up itself is not cut short
        Reaper(cgroups=lambda: cage.close(budget.reap)).reap()
        disk.unmount()  # its files gone at once, however many and deep
        remove_tree(folders.root)


def main(argv: list[str]) -> int:
    undumpable()  # no process of this user's opens its stdout (the outcome) through /proc
    path, lesson, budget, confinement = argv
    outcome = run_and_score(
        path,
        lesson,
        TimeBudget.from_json(json.loads(budget)),
        Confinement.from_json(json.loads(confinement)),
    )
    sys.stdout.write(json.dumps(outcome.to_json()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
