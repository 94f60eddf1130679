"""What a check hands an answer, written down in the process the answer runs in, and the
hold that what an exercise declares drawn is seen drawn (exercises/space.py, issue 49):
tests/exercises/test_answers.py holds it on each swept exercise's graded right answer (the
learner's check and the grader's extra cases, run there anyway), test_spaces.py on the rest,
with the reference."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys
from collections import defaultdict

import cloudpickle

from ddp_helpers.exercises import running

# The answers are sent to the ranks by value, this module's watchers with them.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _seen(value, found: dict) -> None:
    """What a value handed to the answer shows of the axes: dtypes, sizes (a data set's
    length too), a model's parts."""
    import torch

    if isinstance(value, torch.Tensor):
        found["dtypes"].add(str(value.dtype).removeprefix("torch."))
        found["sizes"].add(value.numel())
        found["keys"].append((str(value.dtype), tuple(value.shape), float(value.double().sum())))
    elif isinstance(value, torch.nn.Module):
        params = list(value.named_parameters())
        found["dtypes"] |= {str(p.dtype).removeprefix("torch.") for _, p in params}
        found["model"] |= {"frozen"} if any(not p.requires_grad for _, p in params) else set()
        found["model"] |= {"buffer"} if list(value.buffers()) else set()
        found["keys"].append([(n, tuple(p.shape), _total(p), _total(p.grad)) for n, p in params])
    elif inspect.isgenerator(value) and isinstance(_walked(value), torch.nn.Module):
        _seen(_walked(value), found)  # model.parameters(), as 5.1's answer is handed it
    elif isinstance(value, (list, tuple)):
        found["sizes"].add(len(value))
        for item in value[:50]:
            _seen(item, found)
        found["keys"].append(repr(value)[:200])
    elif isinstance(value, (int, float, str, bool)) or value is None:
        if isinstance(value, int) and not isinstance(value, bool):
            found["sizes"].add(value)
        found["keys"].append(repr(value))
    else:
        found["keys"].append(type(value).__name__)
        if hasattr(value, "__len__"):  # a data set the answer is handed: its length
            found["sizes"].add(len(value))
            found["keys"].append(len(value))


def _walked(generator):
    """The module whose parameters a generator yields (module.parameters(), not yet read:
    reading it here would leave the answer none), or None."""
    frame = generator.gi_frame
    return None if frame is None else frame.f_locals.get("self")


def _total(tensor) -> float | None:
    """A tensor's sum as a float (what tells two inputs apart), None for no tensor."""
    return None if tensor is None else float(tensor.detach().double().sum())


def _record(log: str, world_from: str | None, reference, args, kwargs) -> None:
    """In the process the answer runs in: one line about this call."""
    import os

    import torch.distributed as dist

    found = {"dtypes": set(), "sizes": set(), "model": set(), "keys": []}
    for value in (*args, *kwargs.values()):
        _seen(value, found)
    world = dist.get_world_size() if dist.is_initialized() else os.environ.get("WORLD_SIZE")
    if world_from is not None:
        world = inspect.signature(reference).bind(*args, **kwargs).arguments[world_from]
    # What an answer that reads its surroundings is given: the environment of its rank, the
    # GPUs it sees (a check may pretend them) and the process group it is called in.
    layout = (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "GROUP_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
    )
    env = {k: os.environ.get(k) for k in layout}
    env["gpus"] = _gpus_seen()
    env["group"] = id(dist.group.WORLD) if dist.is_initialized() else None
    line = {
        "pid": os.getpid(),
        "world": None if world is None else int(world),
        "machines": os.environ.get("GROUP_WORLD_SIZE"),
        "dtypes": sorted(found["dtypes"]),
        "sizes": sorted(found["sizes"]),
        "model": sorted(found["model"]),
        "key": repr((found["keys"], env)),
    }
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")


def _gpus_seen():
    """What torch.cuda tells a caller of the GPUs there are (it creates no CUDA context)."""
    import torch

    return (torch.cuda.is_available(), torch.cuda.device_count())


def watching(reference, log: str, world_from: str | None):
    """An answer (the reference, or one written otherwise), each call written down (a
    function, or a class whose construction and methods are)."""
    if isinstance(reference, type):
        methods = {
            name: _watched_method(getattr(reference, name), log)
            for name, value in vars(reference).items()
            if callable(value) and not name.startswith("__")
        }
        init = _watched_method(reference.__init__, log)
        return type(reference.__name__, (reference,), {**methods, "__init__": init})

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        _record(log, world_from, reference, args, kwargs)
        return reference(*args, **kwargs)

    return answer


def _watched_method(method, log):
    def watched(self, *args, **kwargs):
        _record(log, None, method, args, kwargs)
        return method(self, *args, **kwargs)

    return watched


def _calls(log) -> list[dict]:
    try:
        with open(log) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


SEEN_AXES = ("world", "machines", "calls", "dtypes", "model", "lengths")


@contextlib.contextmanager
def launches_watched(monkeypatch):
    """The hang timeout of each launch a check makes inside, in order."""
    launches = []
    real = running._launched

    def watched(harness, answer, args, nprocs, nnodes, timeout):
        launches.append(timeout)
        return real(harness, answer, args, nprocs, nnodes, timeout)

    monkeypatch.setattr(running, "_launched", watched)  # undone with the monkeypatch
    yield launches


def assert_drawn_seen(ex, log: str, launches: list) -> None:
    """The check and the grader's cases ran every case within the declared hang timeout, and
    every value the exercise declares drawn reached the answer."""
    space = ex.space
    # What the grader's budget reads (TimeBudget.check), held on the same runs: every case
    # goes through run_on_ranks or run_answer, and a launch waits at most the declared time
    # before it names a hang.
    assert launches, "every check runs the answer through run_on_ranks or run_answer"
    assert max(launches) <= ex.hang_timeout, (launches, ex.hang_timeout)
    calls = _calls(log)
    assert calls, "the answer was never called"
    seen = {
        "world": {c["world"] for c in calls} - {None},
        "machines": {int(c["machines"]) for c in calls if c["machines"]},
        "dtypes": {d for c in calls for d in c["dtypes"]},
        "model": {m for c in calls for m in c["model"]},
        "lengths": {n for c in calls for n in c["sizes"]},
    }
    by_process = defaultdict(set)
    for c in calls:
        by_process[c["pid"]].add(c["key"])
    seen["calls"] = {max(len(keys) for keys in by_process.values())}
    missing = {}
    for axis in SEEN_AXES:
        if axis not in space.drawn:
            continue
        declared = set(space.drawn[axis])
        if axis == "calls":
            ok = max(seen["calls"]) >= min(declared)
        elif axis == "lengths":
            ok = max(seen["lengths"], default=0) >= max(declared)
        else:
            ok = declared <= seen[axis]
        if not ok:
            missing[axis] = (sorted(declared), sorted(seen[axis]))
    assert not missing, f"declared, not seen drawn (declared, seen): {missing}"
