"""Length-prefixed pickle messages between the kernel, the zygote and the ranks.

What they say is typed in protocol.py; this module only frames and carries them. A message
is read by plain.load_message: it can hold protocol.py's classes and plain values, never
make the reader run code of the sender's choosing (a rank runs a learner's code).
"""

from __future__ import annotations

import os
import pickle
import socket
import struct

from .plain import load_message
from .protocol import MoreFds, ProtocolError

_HEADER = struct.Struct("!Q")
MAX_FDS = 250  # below the kernel's SCM_RIGHTS limit of 253 per message
MAX_MESSAGE = 1 << 30  # bytes: a size past it is no message of ours (a rank's value is one)


def _size(header) -> int:
    (size,) = _HEADER.unpack_from(header)
    if size > MAX_MESSAGE:
        raise ProtocolError(f"a message of {size} bytes, over the {MAX_MESSAGE} it may have")
    return size


def _load(body: bytes):
    """The message in body; a ProtocolError if it is none (not a pickle, or naming a class
    that is not the launcher's)."""
    try:
        return load_message(body)
    except Exception as exc:  # noqa: BLE001 - whatever the bytes make pickle raise
        raise ProtocolError(f"an unreadable message ({type(exc).__name__}: {exc})"[:500]) from None


def pack(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def write_message(fd: int, obj) -> None:
    """Write one message to a pipe, all of it."""
    view = memoryview(pack(obj))
    while view:
        view = view[os.write(fd, view) :]


class MessageReader:
    """Reassembles messages from the chunks a non-blocking pipe read returns."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list:
        self._buf += chunk
        out = []
        while len(self._buf) >= _HEADER.size:
            end = _HEADER.size + _size(self._buf)
            if len(self._buf) < end:
                break
            out.append(_load(bytes(self._buf[_HEADER.size : end])))
            del self._buf[:end]
        return out


def send(sock: socket.socket, obj, fds=()) -> None:
    """Send one message over a Unix stream socket, with any number of descriptors attached."""
    fds = list(fds)
    while len(fds) > MAX_FDS:  # each message carries MAX_FDS at most (the kernel: 253)
        _send_one(sock, MoreFds(), fds[:MAX_FDS])
        fds = fds[MAX_FDS:]
    _send_one(sock, obj, fds)


def _send_one(sock: socket.socket, obj, fds: list[int]) -> None:
    data = pack(obj)
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:  # sendall(b"") fails with EPIPE once the reader has read all and closed
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, into: bytearray) -> None:
    while len(into) < n:
        chunk = sock.recv(min(n - len(into), 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the connection")
        into += chunk


def recv(sock: socket.socket):
    """Receive one message and the file descriptors sent with it; EOFError at end."""
    fds: list[int] = []
    while True:
        obj, more = _recv_one(sock)
        fds += more
        if not isinstance(obj, MoreFds):
            return obj, fds


def _recv_one(sock: socket.socket):
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, MAX_FDS)
    if not head:
        raise EOFError("the other end closed the connection")
    buf = bytearray(head)
    _recv_exact(sock, _HEADER.size, buf)
    body = bytearray()
    _recv_exact(sock, _size(buf), body)
    return _load(bytes(body)), fds
