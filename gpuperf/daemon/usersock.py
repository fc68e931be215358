"""The user socket: every local user's door to the daemon (``gpuperf report``, ``gpuperf top``), bounded.

A plain Unix stream socket (``<user_socket_dir>/user.sock``, 0666) carrying the daemon's protocol in
length-prefixed parts (``gpuperf.files.framing``): one request part, one reply part, then the daemon
closes. Why not ZeroMQ as before: libzmq buffers every frame of a multi-frame message it has not
completed (``ZMQ_MAXMSGSIZE`` is per frame, the high-water mark counts whole messages), so a user
sending endless MORE-flagged frames grew the root daemon without bound; and it aborts the process
when a listener runs out of descriptors. Here the daemon holds, whatever users send:

- at most ``MAX_CONNS`` connections (``MAX_CONNS_PER_UID`` of one uid); one more is accepted and
  closed at once, so the backlog drains and descriptors stay far below the file limit;
- per connection at most one request of ``protocol.MAX_BYTES`` (a longer one is refused from its
  4-byte header) and one reply; replies not yet read at most ``OUT_BUDGET`` bytes in all (one that would
  pass it is replaced by a short error);
- every connection for at most ``CONN_DEADLINE_S`` from accept to the last byte of its reply.

The caller's uid comes from ``SO_PEERCRED``. ``call`` is the client (standard library only).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from dataclasses import dataclass, field

from gpuperf.files import framing, jsonlite
from gpuperf.daemon import protocol
from gpuperf.daemon.hooksock import listen_unix, peer_uid

SOCKET_NAME = "user.sock"
MAX_CONNS = 64                  # every user together; well below any file limit (RLIMIT_NOFILE is raised too)
MAX_CONNS_PER_UID = 8           # one user cannot take every slot
CONN_DEADLINE_S = 5.0           # accept -> reply sent; a slow or silent peer is dropped
OUT_BUDGET = 32 * 1024 * 1024   # replies not yet taken by their readers, all connections together
ACCEPT_PAUSE_S = 0.1            # after EMFILE/ENFILE: stop accepting this long (the backlog waits)
CLIENT_REPLY_MAX = 64 * 1024 * 1024


class UserSocketUnavailable(Exception):
    """No daemon behind the user socket, or no reply in time."""


class OldDaemon(UserSocketUnavailable):
    """The daemon behind the socket speaks ZeroMQ (a gpuperf older than this client)."""


def path_of(user_socket_dir: str) -> str:
    """The user socket's path."""
    return os.path.join(user_socket_dir, SOCKET_NAME)


def call(user_socket_dir: str, op: str, job: dict | None, timeout_s: float) -> dict:
    """Send one request, return the decoded reply; UserSocketUnavailable (OldDaemon) when none comes."""
    path = path_of(user_socket_dir)
    deadline = time.monotonic() + timeout_s
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout_s)
        s.connect(path)
        framing.send_parts(s, protocol.encode(protocol.request(op, job)))
        data = framing.recv_part(s, CLIENT_REPLY_MAX, deadline)
    except framing.ZmtpPeer:
        raise OldDaemon(f"{path}: the daemon speaks ZeroMQ (older gpuperf)") from None
    except (framing.FrameError, framing.Closed, ConnectionResetError) as e:
        s.close()
        # libzmq drops a peer whose first bytes are not its greeting, sometimes before we read its own:
        # ask once more, saying nothing, whether the socket greets like ZeroMQ
        if _greets_like_zeromq(path, min(0.5, max(0.05, deadline - time.monotonic()))):
            raise OldDaemon(f"{path}: the daemon speaks ZeroMQ (older gpuperf)") from None
        raise UserSocketUnavailable(f"{path}: {e}") from None
    except OSError as e:  # absent, refused, timed out
        raise UserSocketUnavailable(f"{path}: {e.strerror or e}") from None
    finally:
        s.close()
    try:
        reply = jsonlite.loads(data)
    except ValueError:
        raise UserSocketUnavailable(f"{path}: reply is not JSON") from None
    if not isinstance(reply, dict) or reply.get("v") != protocol.VERSION:
        raise UserSocketUnavailable(f"{path}: reply of an unknown protocol version")
    return reply


def _greets_like_zeromq(path: str, timeout_s: float) -> bool:
    """Whether the socket at ``path`` sends a ZeroMQ greeting (0xFF) unasked; this daemon never speaks first."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout_s)
        s.connect(path)
        return s.recv(1) == b"\xff"
    except OSError:
        return False
    finally:
        s.close()


@dataclass(eq=False)
class Conn:
    """One accepted connection: reading its request, or writing its reply."""

    sock: socket.socket
    uid: int | None
    deadline: float
    reader: framing.PartReader = field(default_factory=lambda: framing.PartReader(protocol.MAX_BYTES))
    out: memoryview | None = None


class Listener:
    """The daemon's end, driven by its poll loop: ``fds()`` to poll, ``ready(fd)``, ``reply()``, ``expire()``."""

    def __init__(self, user_socket_dir: str):
        self.path = path_of(user_socket_dir)
        self.sock = listen_unix(self.path, socket.SOCK_STREAM, 0o666, MAX_CONNS)
        self.conns: dict[int, Conn] = {}
        self.out_bytes = 0
        self.refused = 0           # connections closed at accept (caps, EMFILE)
        self._paused_until = 0.0

    def fds(self, now: float | None = None) -> dict[int, bool]:
        """fd -> True to poll for writing (a reply pending), False for reading; the listener while accepting."""
        now = time.monotonic() if now is None else now
        want = {fd: c.out is not None for fd, c in self.conns.items()}
        if now >= self._paused_until:
            want[self.sock.fileno()] = False
        return want

    def per_uid(self, uid: int | None) -> int:
        """Connections open now from ``uid``."""
        return sum(1 for c in self.conns.values() if c.uid == uid)

    def _accept(self, now: float) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._paused_until = now + ACCEPT_PAUSE_S   # poll would say "readable" again at once
                return
            uid = peer_uid(conn)
            if len(self.conns) >= MAX_CONNS or self.per_uid(uid) >= MAX_CONNS_PER_UID:
                conn.close()   # a flood costs the flooder, not the daemon
                self.refused += 1
                continue
            conn.setblocking(False)
            self.conns[conn.fileno()] = Conn(conn, uid, now + CONN_DEADLINE_S)

    def ready(self, fd: int, now: float | None = None) -> tuple[Conn, bytes | None] | None:
        """Accept (listening fd) or read; (connection, request or None when refused by its header) once complete."""
        now = time.monotonic() if now is None else now
        if fd == self.sock.fileno():
            self._accept(now)
            return None
        c = self.conns.get(fd)
        if c is None or c.out is not None:
            return None
        try:
            part = c.reader.read(c.sock)
        except framing.FrameError:
            return c, None
        except (framing.Closed, OSError):
            self._close(fd)
            return None
        return None if part is None else (c, part)

    def reply(self, c: Conn, frame: bytes) -> None:
        """Queue the reply and send what the socket takes now; the rest goes out as the reader reads."""
        data = framing.encode(frame)
        if self.out_bytes + len(data) > OUT_BUDGET:
            data = framing.encode(protocol.encode(protocol.error(
                f"reply of {len(data)} bytes refused: the daemon holds at most {OUT_BUDGET} bytes of replies "
                f"for their readers ({self.out_bytes} now); ask for less or try again")))
        c.out = memoryview(data)
        self.out_bytes += len(data)
        self.flush(c.sock.fileno())

    def flush(self, fd: int) -> None:
        """Send more of a pending reply; close the connection when it is all sent or the reader is gone."""
        c = self.conns.get(fd)
        if c is None or c.out is None:
            return
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(fd)
            return
        self.out_bytes -= n
        c.out = c.out[n:]
        if not len(c.out):
            self._close(fd)

    def _close(self, fd: int) -> None:
        c = self.conns.pop(fd, None)
        if c is None:
            return
        if c.out is not None:
            self.out_bytes -= len(c.out)
        c.sock.close()

    def expire(self, now: float | None = None) -> int:
        """Close the connections past their deadline; how many."""
        now = time.monotonic() if now is None else now
        gone = [fd for fd, c in self.conns.items() if c.deadline < now]
        for fd in gone:
            self._close(fd)
        return len(gone)

    def close(self) -> None:
        """Close every connection and the listening socket; remove the socket file."""
        for fd in list(self.conns):
            self._close(fd)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
