"""Lesson 04's own touchpoint: 4.6's check knows a missing map_location by torch.load's text."""

from __future__ import annotations

from ddp_helpers import torch_compat
from ddp_helpers.exercises.lesson04.load import LOAD_DEVICE_TEXT, LoadDeviceText


def worded_otherwise(location, backend_name):
    raise RuntimeError(f"no {backend_name} device {location} here")


def test_torch_load_saying_something_else_for_a_missing_gpu_fails_its_self_check(
    monkeypatch, capsys
):
    import torch.serialization

    monkeypatch.setattr(torch.serialization, "_validate_device", worded_otherwise)
    why = LOAD_DEVICE_TEXT.check()
    assert why == torch_compat.Reason.of(
        "other_text", said="RuntimeError: no cuda device cuda:99 here"
    )
    point = LoadDeviceText()  # a fresh one: warned once per process, and this one has not
    point.warn_once()
    point.warn_once()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("[ddp_helpers] warning: torch.load's error text")
    assert "the load check shows torch's own error" in line


def test_the_missing_gpu_self_check_passes_and_leaves_torch_cuda_as_it_was(capsys):
    import torch

    before = torch.cuda.is_available, torch.cuda.device_count
    assert LOAD_DEVICE_TEXT.check() is None
    assert (torch.cuda.is_available, torch.cuda.device_count) == before
    LoadDeviceText().warn_once()
    assert capsys.readouterr().err == ""


def test_the_launchers_touchpoints_leave_lesson_04s_to_the_lesson():
    assert "load_device_text" not in {p.name for p in torch_compat.TOUCHPOINTS}
