"""The hooks' socket: the daemon's protocol over a kernel-framed Unix socket (``SOCK_SEQPACKET``).

Why beside the pyzmq control socket: a Slurm prolog is a fresh Python process on every job, and
importing pyzmq costs it about 26 ms of its 50 ms budget (benchmarks/prolog_daemon_latency.py);
the standard library's socket costs 2 ms. The messages, the validation and the handler are the
control socket's (``protocol``, ``Daemon.handle``); the socket lives in the same root-only 0700
directory, and the caller's uid comes from ``SO_PEERCRED``. Each connection carries one request
and one reply; SEQPACKET keeps message boundaries, so there is no framing of our own.

Client side (``call``) needs only the standard library and ``protocol``, server side (``Listener``)
is driven by the daemon's poll loop and never blocks it: a connection that sends nothing in time is closed.
"""

from __future__ import annotations

import _socket  # the client's socket: ``socket`` adds enum, selectors and ~2 ms to a prolog's start
import os
import time

from gpuperf.files import jsonlite
from gpuperf.daemon import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

SOCKET_NAME = "hook.sock"
MAX_BYTES = protocol.MAX_BYTES
RECV_BYTES = MAX_BYTES + 1          # one byte more: a longer message is seen as too long, not cut
REPLY_MAX_BYTES = 1024 * 1024
CONN_DEADLINE_S = 1.0               # a connection that sends nothing in this time is dropped
MAX_CONNS = 64
_PEERCRED = "3i"                    # struct ucred: pid, uid, gid


class HookSocketUnavailable(Exception):
    """No daemon behind the hook socket, or no reply in time."""


def path_of(socket_dir: str) -> str:
    """The hook socket's path in the daemon's (root-only) socket directory."""
    return os.path.join(socket_dir, SOCKET_NAME)


def call(socket_dir: str, op: str, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send one request, return the decoded reply; HookSocketUnavailable when none comes."""
    path = path_of(socket_dir)
    frame = protocol.encode(protocol.request(op, job))
    deadline = time.monotonic() + timeout_s
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(frame)
        s.settimeout(max(0.001, deadline - time.monotonic()))
        data = s.recv(REPLY_MAX_BYTES)
    except (OSError, TimeoutError) as e:  # absent, refused, timed out, reset
        raise HookSocketUnavailable(f"{path}: {e.strerror or e}") from None
    finally:
        s.close()
    if not data:
        raise HookSocketUnavailable(f"{path}: the daemon closed the connection without a reply")
    try:
        reply = jsonlite.loads(data)
    except ValueError:
        raise HookSocketUnavailable(f"{path}: reply is not JSON") from None
    if not isinstance(reply, dict) or reply.get("v") != protocol.VERSION:
        raise HookSocketUnavailable(f"{path}: reply of an unknown protocol version")
    return reply


class Listener:
    """The daemon's end: bound in ``socket_dir``; the daemon polls ``fds()`` and calls ``ready(fd)``."""

    def __init__(self, socket_dir: str):
        import socket

        self.path = path_of(socket_dir)
        self.sock = listen_unix(self.path, socket.SOCK_SEQPACKET, 0o600, MAX_CONNS)
        self.conns: dict[int, tuple[socket.socket, float]] = {}

    def fds(self) -> list[int]:
        """The descriptors to poll: the listening socket and every connection waiting for its request."""
        return [self.sock.fileno(), *self.conns]

    def ready(self, fd: int) -> tuple[socket.socket, bytes | None, int | None] | None:
        """Accept (listening fd) or read one request: (connection, frame or None when too long, uid)."""
        import socket

        if fd == self.sock.fileno():
            self._accept()
            return None
        conn, _ = self.conns.pop(fd, (None, 0.0))
        if conn is None:
            return None
        try:
            data, _, flags, _ = conn.recvmsg(RECV_BYTES)
        except OSError:
            conn.close()
            return None
        if not data and not flags:
            conn.close()  # closed without a request
            return None
        too_long = len(data) > MAX_BYTES or bool(flags & socket.MSG_TRUNC)
        return conn, (None if too_long else data), peer_uid(conn)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self.conns) >= MAX_CONNS:
                conn.close()  # a flood costs the flooder, not the daemon
                continue
            conn.setblocking(False)
            self.conns[conn.fileno()] = (conn, time.monotonic() + CONN_DEADLINE_S)

    def expire(self, now: float | None = None) -> list[int]:
        """Close connections that sent nothing before their deadline; the fds the poller must forget."""
        now = time.monotonic() if now is None else now
        gone = [fd for fd, (_, dl) in self.conns.items() if dl < now]
        for fd in gone:
            self.conns.pop(fd)[0].close()
        return gone

    @staticmethod
    def reply(conn: socket.socket, frame: bytes) -> None:
        """Send the reply and close; a caller that went away loses its reply, nothing else."""
        try:
            conn.setblocking(True)
            conn.settimeout(1.0)
            conn.send(frame)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        """Close every connection and the listening socket; remove the socket file."""
        for conn, _ in self.conns.values():
            conn.close()
        self.conns.clear()
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def listen_unix(path: str, kind: int, mode: int, backlog: int) -> socket.socket:
    """A non-blocking Unix socket of ``kind`` listening at ``path`` with ``mode``; a stale file there is replaced."""
    import socket

    try:
        os.unlink(path)  # a stale socket of a killed daemon (the daemon lock is already held)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, kind)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def peer_uid(conn: socket.socket) -> int | None:
    """The connecting process's uid (``SO_PEERCRED``); None when the kernel does not say."""
    import struct

    try:
        _, uid, _ = struct.unpack(_PEERCRED, conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED,
                                                             struct.calcsize(_PEERCRED)))
    except (OSError, struct.error):
        return None
    return uid
