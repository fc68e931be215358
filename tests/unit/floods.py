"""What a hostile peer sends, for the socket-bound tests and benchmarks/socket_floods.py."""

from __future__ import annotations

import os
import socket
import struct


def zmtp_more_flood(sock: socket.socket, total: int, frame_bytes: int = 60 * 1024) -> int:
    """Speak ZMTP 3.0 (NULL) as a DEALER on ``sock`` and send ``total`` bytes of frames all flagged MORE.

    Raw bytes, as an attacker would: libzmq's own client never flushes an unfinished message. Returns
    the bytes sent before the peer closed."""
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" * 32
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    frame = b"\x03" + struct.pack(">Q", frame_bytes) + b"x" * frame_bytes      # MORE | LONG
    sent = 0
    try:
        sock.sendall(greeting)
        sock.recv(64)                                   # libzmq answers the greeting before it reads on
        sock.sendall(b"\x04" + bytes([len(ready)]) + ready)
        sock.recv(256)                                  # its READY
        sock.sendall(b"\x01\x00")                       # the empty delimiter, flagged MORE
        while sent < total:
            sock.sendall(frame)
            sent += frame_bytes
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    return sent


class Holders:
    """Forked children, one per uid, each holding ``per_uid`` connections to ``path`` until ``release()``
    (root only: a flood from many users, not one, so the per-uid cap does not hide the total one)."""

    def __init__(self, path: str, uids: range, per_uid: int):
        self.pids: list[int] = []
        r, self.w = os.pipe()
        for uid in uids:
            pid = os.fork()
            if pid == 0:   # child: never returns into pytest
                try:
                    os.close(self.w)
                    os.setgid(65534)
                    os.setuid(uid)
                    held = []
                    for _ in range(per_uid):
                        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        c.setblocking(False)
                        try:
                            c.connect(path)
                        except OSError:
                            pass
                        held.append(c)
                    os.read(r, 1)
                finally:
                    os._exit(0)
            self.pids.append(pid)
        os.close(r)

    def release(self) -> None:
        os.close(self.w)
        for pid in self.pids:
            os.waitpid(pid, 0)
