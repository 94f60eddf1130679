"""The rank output's routing as logic (launcher/output.py): bytes in, prefixed lines out."""

from __future__ import annotations

from ddp_helpers.launcher.output import OutputRouter
from support import Sink


def test_whole_lines_only_each_prefixed_and_on_its_own_stream():
    sink = Sink()
    router = OutputRouter(2, ordered=False, sink=sink)
    router.feed(1, "stdout", b"hel")
    router.feed(0, "stderr", b"warn\n")
    assert sink.out == [("stderr", "[rank 0] warn\n")]  # half a line waits
    router.feed(1, "stdout", b"lo\nwor")
    router.finish()  # what is left of a line comes out at the end
    assert sink.lines() == ["[rank 1] hello", "[rank 1] wor"]


def test_a_character_split_between_two_reads_is_not_broken():
    sink = Sink()
    router = OutputRouter(1, ordered=False, sink=sink)
    data = "✅ ok\n".encode()
    router.feed(0, "stdout", data[:2])
    router.feed(0, "stdout", data[2:])
    assert sink.lines() == ["[rank 0] ✅ ok"]


def test_carriage_return_progress_shows_its_latest_state_at_most_every_two_seconds():
    sink, now = Sink(), [100.0]
    router = OutputRouter(1, ordered=False, sink=sink, clock=lambda: now[0])
    for i in range(1, 2001):
        router.feed(0, "stdout", f"\rstep {i}/2000".encode())
        now[0] += 0.001  # 2000 updates in 2 s
    router.feed(0, "stdout", b"\n")
    router.finish()
    lines = sink.lines()
    assert 2 <= len(lines) <= 3, lines
    assert lines[-1] == "[rank 0] step 2000/2000"


def test_ordered_output_comes_rank_by_rank_at_the_end():
    sink = Sink()
    router = OutputRouter(3, ordered=True, sink=sink)
    for rank in (2, 0, 1, 0):
        router.feed(rank, "stdout", f"line from {rank}\n".encode())
    assert sink.out == []
    router.finish()
    assert sink.lines() == [
        "[rank 0] line from 0",
        "[rank 0] line from 0",
        "[rank 1] line from 1",
        "[rank 2] line from 2",
    ]
