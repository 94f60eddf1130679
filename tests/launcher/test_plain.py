"""What comes from a rank, read without running its code (launcher/plain.py): the
launcher's messages, and launch_plain's values as plain data."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from ddp_helpers.launcher import protocol, wire
from ddp_helpers.launcher.api import launch_plain
from ddp_helpers.launcher.failures import DistributedError
from ddp_helpers.launcher.pickling import dumps
from ddp_helpers.launcher.plain import Opaque, PlainOnly, load_message, load_plain, to_plain

RAN = []


class Runs:
    """Whoever loads it calls RAN.append: what a hostile pickle does, harmlessly."""

    def __reduce__(self):
        return (RAN.append, ("ran",))


class Everything(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_a_message_may_name_the_launchers_classes_only():
    message = protocol.RankError("ValueError", "builtins", "m", "tb", 1.0, None)
    assert load_message(pickle.dumps(message)) == message
    with pytest.raises(PlainOnly):
        load_message(pickle.dumps(Runs()))
    assert RAN == []


def test_a_rank_that_writes_a_pickle_of_its_own_making_gets_a_protocol_error():
    reader = wire.MessageReader()
    with pytest.raises(protocol.ProtocolError, match="unreadable message"):
        reader.feed(wire.pack(Runs()))
    with pytest.raises(protocol.ProtocolError, match="over the"):
        wire.MessageReader().feed(b"\xff" * 16)  # a header claiming exabytes
    assert RAN == []


def test_plain_values_come_back_as_they_were_and_nothing_else_loads():
    value = {"w": torch.arange(3.0), "n": [1, 2.5, "x", None, b"b", (1,)], "d": torch.float16}
    value["size"], value["device"] = torch.Size([2]), torch.device("cpu")
    back = load_plain(dumps(value, cpu_tensors=True))
    assert torch.equal(back["w"], value["w"]) and back["n"] == value["n"]
    assert (back["d"], back["size"], back["device"]) == (value["d"], value["size"], value["device"])
    for hostile in (Runs(), Everything("x"), np.int64(3)):
        with pytest.raises(PlainOnly):
            load_plain(dumps(hostile))
    assert RAN == []


def test_to_plain_makes_a_learners_objects_plain_or_opaque():
    got = to_plain([Everything("cuda:0"), np.int64(4), np.float32(0.5), range(2), Runs()])
    assert got[:4] == ["cuda:0", 4, 0.5, [0, 1]]
    assert [type(x) for x in got[:3]] == [str, int, float]  # no __eq__ of the learner's left
    assert isinstance(got[4], Opaque) and "Runs object" in repr(got[4])
    assert load_plain(dumps(got))[4] == got[4]


def _returns_its_own_class():
    class Mine:
        pass

    return Mine()


def test_launch_plain_refuses_a_value_that_is_not_plain_data():
    with pytest.raises(DistributedError, match="a value the check does not accept"):
        launch_plain(_returns_its_own_class, nprocs=1)
    assert list(launch_plain(to_plain, [np.int64(1)], nprocs=2)) == [[1], [1]]


class _Persistent(pickle.Pickler):
    def persistent_id(self, obj):
        return "outside" if obj == "elsewhere" else None


def test_a_ranks_unreadable_bytes_are_named_in_the_learners_language():
    import io

    from ddp_helpers import i18n
    from ddp_helpers.launcher.api import _plain_value

    buffer = io.BytesIO()
    _Persistent(buffer).dump(["elsewhere"])
    for data, english, japanese in [
        (b"\x80\x05garbage", "unreadable data (UnpicklingError)", "読み取れないデータ"),
        (buffer.getvalue(), "a persistent reference", "pickle の永続参照"),
    ]:
        with pytest.raises(DistributedError) as caught:
            _plain_value(1, data)
        assert f"rank 1 returned a value the check does not accept: it holds {english}." in (
            str(caught.value)
        )
        with i18n.using("ja"), pytest.raises(DistributedError) as caught:
            _plain_value(1, data)
        assert japanese in str(caught.value) and "unreadable" not in str(caught.value)


def test_a_value_with_no_tensor_is_read_without_importing_torch():
    # Most checks' records are numbers and strings: the process reading them (a lesson 01
    # scorer) then never pays for `import torch`.
    code = (
        "import sys; from ddp_helpers.launcher.pickling import dumps; "
        "from ddp_helpers.launcher.plain import load_plain; "
        "value = [1, 'two', {'three': 3.0}, (4,), {5}, b'6']; "
        "assert load_plain(dumps(value)) == value; print('torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
