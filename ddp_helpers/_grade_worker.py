"""One submission in its own process: run its notebook in a fresh kernel, then score it.

`python -m ddp_helpers._grade_worker run NOTEBOOK LESSON TIMEOUT` prints one JSON line,
the submission's result; grading.py starts one such process per submission. This process
is a child subreaper (Linux), so every process the submission starts (kernel, launcher,
ranks, anything that daemonised) ends up as its descendant and is killed before the
result is printed.

The answers leave the kernel by value (cloudpickle) after every cell and are scored in a
separate scorer process (`... score ...`) that imports this package afresh: whatever the
notebook did to the checks inside its kernel is gone. The scorer runs the learner's
functions, so it can hang or die too; it is restarted for the remaining exercises.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .launcher import with_this_package
from .worker import arm_parent_death_signal, prepare

KERNEL_START_LIMIT = 60.0  # seconds for a fresh kernel to answer; not counted in TIMEOUT
INTERRUPT_GRACE = 5.0  # after the limit: time for the interrupt's traceback to arrive
MIN_CHECK_LIMIT = 60.0  # the rank checks have their own 30 s hang detection; let it speak

MESSAGES = {
    "kernel_start": "The Jupyter kernel did not start ({why}). Kernel log:\n{log}",
    "timeout": (
        "The notebook was stopped after {limit:g} s: it was still running code cell "
        "{cell} (`{first_line}`). Cells after it were not run."
    ),
    "died": (
        "The kernel died ({how}) while running code cell {cell} (`{first_line}`); "
        "cells after it were not run."
    ),
    "check_timeout": (
        "Checking this answer did not finish within {limit:g} s (an endless loop, or a "
        "rank waiting for one that never comes?), so it was stopped."
    ),
    "check_died": "Checking this answer ended the grader's process ({how}).",
    "probe": (
        "After code cell {cell} (`{first_line}`) the grader could not take the answers out "
        "of the kernel: {how}. Cells after it were not run; answers from earlier cells count."
    ),
    "missing": "`{name}` is not defined in this notebook (was its cell run, or renamed?).",
    "unsendable": "`{name}` could not be taken out of the notebook: {error}",
    "unloadable": "`{name}` could not be loaded by the grader: {error}",
    "from_course": (
        "`{name}` is the course's reference answer imported from `{module}`, not code "
        "written in this notebook: write your own."
    ),
}

# Runs in the learner's kernel after every cell: pickles the answers by value into a file.
# Executed in a fresh namespace, so it defines nothing in the learner's.
_PROBE = """
import os, pickle
import cloudpickle
from IPython import get_ipython
ns = get_ipython().user_ns
found = {}
for name in NAMES:
    if name in ns:
        try:
            found[name] = ("ok", cloudpickle.dumps(ns[name]))
        except BaseException as exc:
            found[name] = ("error", f"{type(exc).__name__}: {exc}")
with open(PATH + ".tmp", "wb") as f:
    pickle.dump(found, f)
os.replace(PATH + ".tmp", PATH)
"""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()[:80]
    return ""


# ---------------------------------------------------------------- processes


def become_subreaper() -> None:
    """Orphaned descendants become this process's children, so none can slip away."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _stop_with_the_grader() -> None:
    """SIGTERM (from the grader, or sent by Linux when the grader dies) runs the clean-up."""

    def stop(signum, frame):
        raise SystemExit(128 + signum)  # unwinds through grade_submission's `finally`

    signal.signal(signal.SIGTERM, stop)
    grader = os.environ.get("DDP_HELPERS_GRADER_PID")
    if grader:
        prepare()
        arm_parent_death_signal(int(grader), signal.SIGTERM)


def _start(argv: list[str], cwd: str, env: dict, log_path: str, pass_fds=()) -> subprocess.Popen:
    """A process of the submission's, in a session of its own, its output to a log file."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children()}


def kill_descendants(pid: int | None = None, include_self: bool = False) -> int:
    """SIGKILL every descendant of pid (default: this process) and reap them; count them."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return 0
    killed: set[int] = set()
    for _ in range(5):  # a process may fork while its siblings are being killed
        try:
            procs = root.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        if include_self and not killed and root.is_running():
            procs.append(root)
        procs = [p for p in procs if p.pid not in killed or p.is_running()]
        if not procs:
            break
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
            killed.add(p.pid)
        psutil.wait_procs(procs, timeout=5)
    return len(killed)


# ---------------------------------------------------------------- the kernel


class KernelDied(Exception):
    pass


class _Kernel:
    """A fresh IPython kernel in its own session, driven over the Jupyter protocol."""

    def __init__(self, workdir: str, env: dict):
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        self.connection_file = os.path.join(workdir, "kernel.json")
        # Unix sockets in the submission's folder: no ports to race for, nothing to reach.
        # Their paths must fit in 107 bytes; under a long TMPDIR, TCP on loopback instead.
        ipc = os.path.join(workdir, "kernel-ipc")
        if len(ipc.encode()) + 6 <= 100:
            write_connection_file(self.connection_file, transport="ipc", ip=ipc)
        else:
            write_connection_file(self.connection_file, ip="127.0.0.1")
        self.log_path = os.path.join(workdir, "kernel.log")
        self.proc = _start(
            [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file],
            os.path.join(workdir, "cwd"),
            env,
            self.log_path,
        )
        self.client = BlockingKernelClient()
        self.client.load_connection_file(self.connection_file)
        self.client.start_channels()

    def log_tail(self, lines: int = 15) -> str:
        """The end of the kernel's own output, without ipykernel's start-up banner."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        banner_end = text.rfind("--existing ")
        if banner_end >= 0:
            text = text[text.find("\n", banner_end) + 1 :] if "\n" in text[banner_end:] else ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def wait_ready(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        # kernel_info until the shell answers, then an empty execute until iopub shows it
        # (a subscriber that connected late would miss the first cell's messages).
        for channel_ready in (self._shell_ready, self._iopub_ready):
            while True:
                try:
                    if channel_ready():
                        break
                except TimeoutError:
                    pass
                if self.proc.poll() is not None:
                    raise KernelDied(_signal_name(self.proc.returncode))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer within {limit:g} s")

    def _reply(self, get, msg_id: str, within: float = 1.0) -> dict | None:
        end = time.monotonic() + within
        while time.monotonic() < end:
            try:
                msg = get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    return None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        return None

    def _shell_ready(self) -> bool:
        return self._reply(self.client.get_shell_msg, self.client.kernel_info()) is not None

    def _iopub_ready(self) -> bool:
        msg_id = self.client.execute("", silent=True, store_history=False)
        msg = self._reply(self.client.get_iopub_msg, msg_id)
        if msg is None:
            return False
        if msg["msg_type"] != "status" or msg["content"].get("execution_state") != "idle":
            self._wait_idle(msg_id, time.monotonic() + 30, [])
        return True

    def execute(self, code: str, deadline: float, silent: bool = False) -> dict | None:
        """Run code; the error it raised (or None). Raises TimeoutError, KernelDied."""
        msg_id = self.client.execute(
            code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False
        )
        errors: list[dict] = []
        self._wait_idle(msg_id, deadline, errors)
        return errors[0] if errors else None

    def _wait_idle(self, msg_id: str, deadline: float, errors: list) -> None:
        while True:
            if self.proc.poll() is not None:
                raise KernelDied(_signal_name(self.proc.returncode))
            if time.monotonic() > deadline:
                raise TimeoutError(msg_id)
            try:
                msg = self.client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "error":
                errors.append(content)
            elif kind == "status" and content["execution_state"] == "idle":
                return

    def interrupt(self, msg_id: str) -> dict | None:
        """Send SIGINT; the error it produced (the KeyboardInterrupt traceback) if any."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGINT)
        errors: list[dict] = []
        try:
            self._wait_idle(msg_id, time.monotonic() + INTERRUPT_GRACE, errors)
        except (TimeoutError, KernelDied):
            return errors[0] if errors else None
        return errors[0] if errors else {}

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)


def _error_text(error: dict) -> str:
    text = strip_ansi("\n".join(error.get("traceback") or []))
    if not text.strip():
        text = f"{error.get('ename')}: {error.get('evalue')}"
    lines = text.strip().splitlines()
    return "\n".join(lines[-25:])  # the end of a traceback is where it happened


def run_notebook(cells: list[str], names: list[str], workdir: str, limit: float) -> dict:
    """Run the code cells in a fresh kernel, taking the answers out after each one."""
    answers = os.path.join(workdir, "answers.pkl")
    probe = f"exec({_PROBE!r}, {{'NAMES': {names!r}, 'PATH': {answers!r}}})"
    env = _child_env(workdir)
    run = {"status": "ok", "events": [], "answers": answers}
    started = time.monotonic()
    kernel = _Kernel(workdir, env)
    try:
        try:
            kernel.wait_ready(KERNEL_START_LIMIT)
        except (KernelDied, TimeoutError) as exc:
            run["status"] = "error"
            run["events"].append(
                {
                    "kind": "kernel",
                    "text": MESSAGES["kernel_start"].format(why=exc, log=kernel.log_tail()),
                }
            )
            return run
        deadline = time.monotonic() + limit
        for number, source in enumerate(cells, 1):
            where = {"cell": number, "first_line": _first_line(source)}
            try:
                error = kernel.execute(source, deadline)
            except TimeoutError as exc:
                error = kernel.interrupt(exc.args[0])
                run["status"] = "timeout"
                run["events"].append(
                    {
                        "kind": "timeout",
                        "cell": number,
                        "text": MESSAGES["timeout"].format(limit=limit, **where),
                        "detail": _error_text(error) if error else "",
                    }
                )
                if error is not None:  # the kernel came back: what it defined still counts
                    with contextlib.suppress(TimeoutError, KernelDied):
                        kernel.execute(probe, time.monotonic() + 30, silent=True)
                break
            except KernelDied as exc:
                run["status"] = "error"
                run["events"].append(
                    {
                        "kind": "died",
                        "cell": number,
                        "text": MESSAGES["died"].format(how=exc, **where),
                        "detail": kernel.log_tail(),
                    }
                )
                break
            if error is not None:
                run["events"].append(
                    {
                        "kind": "cell_error",
                        "cell": number,
                        "text": f"Code cell {number} (`{where['first_line']}`) raised "
                        f"{error.get('ename')}: {error.get('evalue')}",
                        "detail": _error_text(error),
                    }
                )
            try:
                kernel.execute(probe, max(deadline, time.monotonic() + 30), silent=True)
            except (TimeoutError, KernelDied) as exc:
                # Taking the answers out ran the notebook's objects' pickling code: it hung or
                # ended the kernel. What earlier cells defined still counts.
                how = (
                    "it did not finish"
                    if isinstance(exc, TimeoutError)
                    else f"the kernel died ({exc})"
                )
                run["status"] = "timeout" if isinstance(exc, TimeoutError) else "error"
                run["events"].append(
                    {
                        "kind": "probe",
                        "cell": number,
                        "text": MESSAGES["probe"].format(how=how, **where),
                    }
                )
                break
    finally:
        kernel.stop()
        run["seconds"] = time.monotonic() - started
    return run


# ---------------------------------------------------------------- scoring


def _from_course(obj) -> str | None:
    """The ddp_helpers module an answer was imported from, or None for notebook code."""
    for _ in range(10):  # functools.partial, functools.wraps, bound methods: look inside
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and (
            module == "ddp_helpers" or module.startswith("ddp_helpers.")
        ):
            return module
        inner = getattr(obj, "func", None) or getattr(obj, "__wrapped__", None)
        inner = inner or getattr(obj, "__func__", None)
        if inner is None or inner is obj:
            return None
        obj = inner
    return None


def score_answers(answers_path: str, lesson: str, ids: list[str], out) -> None:
    """The scorer process: each exercise's Result as a JSON line on `out`."""
    from .exercises import exercises_of

    exercises = {ex.id: ex for ex in exercises_of(lesson)}
    try:
        with open(answers_path, "rb") as f:
            found = pickle.load(f)
    except (OSError, EOFError):
        found = {}
    for ex_id in ids:
        ex = exercises[ex_id]
        out.write(json.dumps({"event": "start", "id": ex_id}) + "\n")
        out.flush()
        status, message, hint = _score_one(ex, found.get(ex.name))
        out.write(
            json.dumps(
                {"event": "done", "id": ex_id, "status": status, "message": message, "hint": hint}
            )
            + "\n"
        )
        out.flush()


def _score_one(ex, entry) -> tuple[str, str, str | None]:
    import cloudpickle

    if entry is None:
        return "missing", MESSAGES["missing"].format(name=ex.name), None
    kind, payload = entry
    if kind != "ok":
        return "error", MESSAGES["unsendable"].format(name=ex.name, error=payload), None
    try:
        answer = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - whatever the pickle raises is the answer's
        error = f"{type(exc).__name__}: {exc}"
        return "error", MESSAGES["unloadable"].format(name=ex.name, error=error), None
    module = _from_course(answer)
    if module is not None:
        return "wrong", MESSAGES["from_course"].format(name=ex.name, module=module), None
    result = ex.grade(answer)
    return result.status, result.message, result.hint


def score(answers_path: str, lesson: str, ids: list[str], workdir: str, limit: float) -> tuple:
    """Score in scorer processes, a fresh one after one hangs or dies: (results, events)."""
    results: dict[str, dict] = {}
    events: list[dict] = []
    env = _child_env(workdir)
    while remaining := [i for i in ids if i not in results]:
        before = _children()
        read_fd, write_fd = os.pipe()
        proc = _start(
            # -P: nothing the notebook wrote into a folder can shadow a module here.
            [sys.executable, "-P", "-m", "ddp_helpers._grade_worker", "score"]
            + [answers_path, lesson, str(write_fd), *remaining],
            os.path.join(workdir, "score"),
            env,
            os.path.join(workdir, "scorer.log"),
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        try:
            stopped_in, kind, text = _read_scores(proc, read_fd, limit, results)
        finally:
            os.close(read_fd)
            # The scorer, and what it started (still holding the pipe, perhaps): our new
            # children, orphans included, since this process is a subreaper.
            for pid in _children() - before:
                kill_descendants(pid, include_self=True)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
        if kind is None:
            if all(i in results for i in remaining):
                break
            kind, text = "check_died", MESSAGES["check_died"].format(how="exit code 0")
        progressed = any(i in results for i in remaining)
        if stopped_in is None and progressed:
            continue  # it stopped between two exercises: a new scorer takes the rest
        # It hung or died in one exercise, or before scoring any: that one gets the reason.
        culprit = stopped_in or next(i for i in ids if i not in results)
        results[culprit] = {"status": "error", "message": text, "hint": None}
        events.append({"kind": kind, "exercise": culprit, "text": text})
    return results, events


def _read_scores(proc, fd: int, limit: float, results: dict) -> tuple:
    """Read the scorer's lines into results: (exercise, kind, why) if it hung or died.

    The limit runs from the scorer's start and from each line it writes, so a scorer that
    hangs between two exercises is stopped too; its exit is noticed even when something it
    started still holds the pipe open.
    """
    state = {"buffer": b"", "current": None, "deadline": time.monotonic() + limit}

    def take(chunk: bytes) -> None:
        *lines, state["buffer"] = (state["buffer"] + chunk).split(b"\n")
        for line in lines:
            event = json.loads(line)
            if event["event"] == "start":
                state["current"] = event["id"]
            else:
                results[event["id"]] = {k: event[k] for k in ("status", "message", "hint")}
                state["current"] = None
            state["deadline"] = time.monotonic() + limit

    def drain() -> bool:
        """Read what is there; False once the pipe is closed."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            take(chunk)

    os.set_blocking(fd, False)
    while True:
        wait = max(0.0, min(0.5, state["deadline"] - time.monotonic()))
        select.select([fd], [], [], wait)
        open_ = drain()
        code = proc.poll()
        if not open_ or code is not None:  # the scorer is gone (what it wrote is read)
            code = proc.wait() if code is None else code
            drain()
            if code == 0 and state["current"] is None:
                return None, None, ""
            how = _signal_name(code)
            return state["current"], "check_died", MESSAGES["check_died"].format(how=how)
        if time.monotonic() >= state["deadline"]:
            text = MESSAGES["check_timeout"].format(limit=limit)
            return state["current"], "check_timeout", text


def _child_env(workdir: str) -> dict:
    env = dict(os.environ)
    env["TMPDIR"] = os.path.join(workdir, "tmp")  # the submission's temporary files die with it
    env.pop("DDP_HELPERS_OUTPUT", None)
    return with_this_package(env)  # the grader's own copy, wherever the notebook runs


# ---------------------------------------------------------------- one submission


def read_notebook(path):
    """The notebook at path, as nbformat v4; raises ValueError saying why it is not one."""
    import nbformat

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc.reason}") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"broken JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds; all mean "not one"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"not in Jupyter's notebook format: {first[:200]}") from None
    return nb


def grade_submission(path: str, lesson: str, limit: float) -> dict:
    """Run and score one notebook; nothing it started is left when this returns."""
    from .exercises import exercises_of

    become_subreaper()
    _stop_with_the_grader()
    exercises = exercises_of(lesson)
    workdir = tempfile.mkdtemp(prefix="ddp-grade-")
    for sub in ("cwd", "tmp", "score"):
        os.mkdir(os.path.join(workdir, sub))
    try:
        nb = read_notebook(path)
        cells = [c.source for c in nb.cells if c.cell_type == "code"]
        run = run_notebook(cells, [ex.name for ex in exercises], workdir, limit)
        kill_descendants()  # the kernel's launcher and ranks, before the learner's code runs again
        started = time.monotonic()
        results, check_events = score(
            run["answers"],
            lesson,
            [ex.id for ex in exercises],
            workdir,
            max(limit, MIN_CHECK_LIMIT),
        )
        status = run["status"]
        kinds = {e["kind"] for e in check_events}
        if status == "ok" and kinds:  # a check that hung or died is the submission's too
            status = "error" if "check_died" in kinds else "timeout"
        return {
            "status": status,
            "events": run["events"] + check_events,
            "run_seconds": run["seconds"],
            "score_seconds": time.monotonic() - started,
            "exercises": [
                dict(results[ex.id], id=ex.id, name=ex.name, max=ex.points) for ex in exercises
            ],
        }
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up itself is not cut short
        kill_descendants()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[0] == "score":
        answers_path, lesson, fd, *ids = argv[1:]
        with os.fdopen(int(fd), "w") as out:
            score_answers(answers_path, lesson, ids, out)
        return 0
    if argv[0] == "run":
        path, lesson, limit = argv[1:]
        result = grade_submission(path, lesson, float(limit))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        return 0
    return 2


if __name__ == "__main__":
    # The scorer ends with os._exit: the learner's code may have left threads or atexit
    # handlers that would hang a normal exit after the results are out.
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
