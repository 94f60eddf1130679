"""Rank output to the notebook: whole `[rank k] ` lines on the kernel's own streams."""

from __future__ import annotations

import codecs
import sys
import time

from ..torch_compat import is_noise

STREAMS = ("stdout", "stderr")


class OutputRouter:
    """Turns the ranks' byte streams into whole `[rank k] ` lines on the kernel's streams."""

    PROGRESS_EVERY = 2.0  # seconds between two snapshots of a `\r` progress line

    def __init__(self, nprocs: int, ordered: bool, sink=None, clock=time.monotonic):
        """`sink(stream, text)` receives the lines (default: the kernel's sys.stdout/stderr)."""
        self.ordered = ordered
        self.sink = sink or _to_sys
        self.clock = clock
        self.decoders = {
            (r, s): codecs.getincrementaldecoder("utf-8")("replace")
            for r in range(nprocs)
            for s in STREAMS
        }
        self.partial = {key: "" for key in self.decoders}
        self.last_snapshot = {key: 0.0 for key in self.decoders}
        self.snapshot_text = {key: "" for key in self.decoders}
        self.held = {key: [] for key in self.decoders}

    def feed(self, rank: int, stream: str, data: bytes) -> None:
        key = (rank, stream)
        text = self.partial[key] + self.decoders[key].decode(data)
        *lines, rest = text.split("\n")
        for line in lines:
            self._emit(key, _last_state(line.rstrip("\r")))
        self.partial[key] = rest
        if "\r" in rest:
            self._progress(key, rest)

    def _progress(self, key, rest: str) -> None:
        # Keep only the newest state of a line that `\r` keeps rewriting, and show it
        # at most every PROGRESS_EVERY seconds, so a progress bar cannot flood the cell.
        head, _, tail = rest.rpartition("\r")
        self.partial[key] = "\r" + tail if tail else "\r"
        state = _last_state(head) if not tail else tail
        now = self.clock()
        if state and state != self.snapshot_text[key] and not self.ordered:
            if now - self.last_snapshot[key] >= self.PROGRESS_EVERY:
                self.last_snapshot[key] = now
                self.snapshot_text[key] = state
                self._emit(key, state)

    def close_stream(self, rank: int, stream: str) -> None:
        key = (rank, stream)
        text = self.partial[key] + self.decoders[key].decode(b"", final=True)
        self.partial[key] = ""
        state = _last_state(text.rstrip("\r"))
        if state and state != self.snapshot_text[key]:
            self._emit(key, state)

    def _emit(self, key, line: str) -> None:
        if is_noise(line):
            return
        rank, stream = key
        text = f"[rank {rank}] {line}\n"
        if self.ordered:
            self.held[key].append(text)
        else:
            self.sink(stream, text)

    def finish(self) -> None:
        for rank, stream in list(self.partial):
            self.close_stream(rank, stream)
        if self.ordered:
            for stream in STREAMS:
                for rank in range(len(self.held) // 2):
                    if self.held[(rank, stream)]:
                        self.sink(stream, "".join(self.held[(rank, stream)]))
        if self.sink is _to_sys:
            for stream in STREAMS:
                try:
                    getattr(sys, stream).flush()
                except Exception:
                    pass


def _to_sys(stream: str, text: str) -> None:
    getattr(sys, stream).write(text)


def _last_state(line: str) -> str:
    return line.rpartition("\r")[2] if "\r" in line else line
