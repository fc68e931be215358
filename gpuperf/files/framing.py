"""Length-prefixed parts over a stream socket, read without ever holding more than the reader allows.

A part on the wire is a 4-byte big-endian length, then that many bytes. ``PartReader`` reads one part
at a time from a non-blocking socket: it asks the kernel for at most what the current part still
needs, and a length above the limit the caller set for that part is refused from its 4-byte header,
before a byte of the part is read. So a connection costs at most its current limit, whatever the
peer sends (a ZeroMQ peer's greeting starts with 0xFF: refused from its first 4 bytes, and named).
``recv_part``/``send_parts`` are the blocking client side. Standard library only.
"""

from __future__ import annotations

import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

HEADER = struct.Struct(">I")
CHUNK = 64 * 1024               # one recv asks for at most this much


class FrameError(ValueError):
    """The peer sent something that is not a part within its limit (the connection is to be closed)."""


class ZmtpPeer(FrameError):
    """The peer speaks ZeroMQ (an older gpuperf): its greeting's first byte is 0xFF."""


class Closed(Exception):
    """The peer closed the connection (cleanly or not) before a part was complete."""


def encode(*parts: bytes) -> bytes:
    """The wire form of ``parts``: each as its length and its bytes."""
    return b"".join(HEADER.pack(len(p)) + p for p in parts)


def _check_length(header: bytes, limit: int) -> int:
    n = HEADER.unpack(header)[0]
    if n > limit:
        if header[:1] == b"\xff":
            raise ZmtpPeer("the peer speaks ZeroMQ (a gpuperf older than this one): upgrade it")
        raise FrameError(f"part of {n} bytes exceeds the {limit}-byte limit")
    return n


class PartReader:
    """Reads parts from a non-blocking socket; ``limit`` is the largest next part accepted."""

    __slots__ = ("limit", "_buf", "_need", "_header")

    def __init__(self, limit: int):
        self.limit = limit
        self._buf = bytearray()
        self._need = HEADER.size
        self._header = True

    @property
    def buffered(self) -> int:
        """Bytes held now (never more than the current part's limit, or 4)."""
        return len(self._buf)

    def read(self, sock: socket.socket) -> bytes | None:
        """One recv; the part when it is complete, else None. FrameError, Closed or OSError end the connection."""
        want = min(self._need - len(self._buf), CHUNK)
        data = sock.recv(want) if want else b""
        if want and not data:
            raise Closed("closed by the peer")
        self._buf += data
        if len(self._buf) < self._need:
            return None
        if self._header:
            n = _check_length(bytes(self._buf), self.limit)
            self._buf.clear()
            self._header = False
            self._need = n
            if n:
                return None
        part = bytes(self._buf)
        self._buf.clear()
        self._header, self._need = True, HEADER.size
        return part


def send_parts(sock: socket.socket, *parts: bytes) -> None:
    """Send ``parts`` on a blocking socket (its timeout applies)."""
    sock.sendall(encode(*parts))


def recv_part(sock: socket.socket, limit: int, deadline: float) -> bytes:
    """One part from a blocking socket, by ``deadline`` (monotonic); FrameError, Closed or TimeoutError."""

    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
            data = sock.recv(min(n - len(buf), CHUNK))
            if not data:
                raise Closed("closed by the peer")
            buf += data
        return bytes(buf)

    return exactly(_check_length(exactly(HEADER.size), limit))
