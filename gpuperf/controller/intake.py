"""The collector's TCP listener: a peer is authenticated before it can make the controller hold more
than a few KiB, and every buffer is bounded whatever the network sends.

Each connection carries one message in four length-prefixed parts (``transport``): the kind (at most
``transport.KIND_MAX`` bytes) and the munge credential (``transport.CRED_MAX``) are read first, and the
credential is decoded (munged: MAC, TTL, replay; uid root or SlurmUser) before a byte of the body.
Only then may the body and series take up to ``transport.MAX_BODY_BYTES``, and only while the bytes
promised to authenticated senders stay within ``AUTHED_BUDGET`` (past it: a "busy, retry" reply;
the node keeps the summary in its outbox). A sender holds against that budget what it has sent so far
plus one more read (``framing.CHUNK``), reserved before each read, and a message read whole holds its
own size until it is stored and answered: a node summary is tens of KiB, so a thousand flow through the
budget a second where reserving the most a message may be (4 MiB) let 8 in at once. So:

- an unauthenticated peer costs at most ``KIND_MAX + CRED_MAX`` bytes per connection, at most
  ``MAX_CONNS`` connections (``MAX_CONNS_PER_HOST`` from one address), each for at most
  ``AUTH_DEADLINE_S``: under 2 MiB whatever it sends;
- authenticated senders at most ``AUTHED_BUDGET`` in all, each connection for ``CONN_DEADLINE_S``;
- a refused peer gets a short reply, then its further bytes are read and dropped (so the reply is
  not lost to a reset) until it closes or ``DRAIN_S`` passes.

Single-threaded (``poll`` then ``reply``), standard library only; the collector thread drives it.
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from gpuperf.files import framing, log
from gpuperf.controller import transport

MAX_CONNS = 256
MAX_CONNS_PER_HOST = 32
AUTH_DEADLINE_S = 5.0          # accept -> credential checked
CONN_DEADLINE_S = 60.0         # accept -> whole message read (4 MiB over a slow link)
DRAIN_S = 1.0                  # a refused peer's remaining bytes are read and dropped this long
AUTHED_BUDGET = 8 * transport.MAX_BODY_BYTES   # bytes authenticated senders may hold at once, in all
ACCEPT_PAUSE_S = 0.1           # after EMFILE/ENFILE: stop accepting this long
LOG_EVERY_S = 60.0             # one log line per kind of refusal per minute, the rest counted

_KIND, _CRED, _BODY, _SERIES, _REPLY, _DRAIN = range(6)


@dataclass(eq=False)
class Conn:
    """One accepted connection and how far its message has come."""

    sock: socket.socket
    host: str
    deadline: float
    stage: int = _KIND
    reader: framing.PartReader = field(default_factory=lambda: framing.PartReader(transport.KIND_MAX))
    sender: transport.Sender | None = None
    digest: bytes = b""
    body: bytes = b""
    reserved: int = 0


@dataclass
class Message:
    """An authenticated message read whole: the collector opens the body (``transport.open_body``)."""

    conn: Conn
    sender: transport.Sender
    digest: bytes
    body: bytes
    series: bytes | None


class Intake:
    """Listening socket and connections; ``poll()`` returns the messages read whole, ``reply()`` answers one."""

    def __init__(self, host: str, port: int, allowed: set[int], munge_socket: str = ""):
        self.allowed, self.munge_socket = allowed, munge_socket
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, port))
            self.sock.listen(128)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.conns: dict[int, Conn] = {}
        self.reserved = 0
        self.refused: dict[str, int] = {}
        self._logged: dict[str, float] = {}
        self._paused_until = 0.0

    @property
    def endpoint(self) -> str:
        """tcp://host:port actually bound."""
        host, port = self.sock.getsockname()[:2]
        return f"tcp://{host}:{port}"

    def poll(self, timeout_s: float) -> list[Message]:
        """Wait up to ``timeout_s`` for bytes; the messages that became complete."""
        now = time.monotonic()
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
            self.sel.register(self.sock, selectors.EVENT_READ)
        done: list[Message] = []
        for key, _ in self.sel.select(timeout_s):
            if key.fileobj is self.sock:
                self._accept(now)
            elif (c := self.conns.get(key.fd)) is not None and c.sock is key.fileobj:
                msg = self._read(c, now)
                if msg is not None:
                    done.append(msg)
        self._expire(time.monotonic())
        return done

    def reply(self, conn: Conn, reply: dict[str, Any]) -> None:
        """Answer a message returned by ``poll`` and close its connection."""
        self._send(conn, reply)
        self._close(conn)

    def close(self) -> None:
        """Close every connection and the listening socket."""
        for c in list(self.conns.values()):
            self._close(c)
        self.sel.close()
        self.sock.close()

    # inside -------------------------------------------------------------------------------------
    def _accept(self, now: float) -> None:
        while True:
            try:
                s, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._paused_until = now + ACCEPT_PAUSE_S   # the listener would be ready again at once
                    self.sel.unregister(self.sock)
                    self._note("descriptors", f"cannot accept: {e}")
                return
            host = addr[0]
            if len(self.conns) >= MAX_CONNS or sum(c.host == host for c in self.conns.values()) >= MAX_CONNS_PER_HOST:
                s.close()
                self._note("connections", f"connection from {host} refused: {len(self.conns)} open")
                continue
            s.setblocking(False)
            c = Conn(s, host, now + AUTH_DEADLINE_S)
            self.conns[s.fileno()] = c
            self.sel.register(s, selectors.EVENT_READ)

    def _read(self, c: Conn, now: float) -> Message | None:
        if c.stage == _DRAIN:
            try:
                if c.sock.recv(framing.CHUNK):
                    return None
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                pass
            self._close(c)
            return None
        if c.stage in (_BODY, _SERIES) and not self._reserve(c):
            return None
        try:
            part = c.reader.read(c.sock)
        except framing.ZmtpPeer:
            self._refuse(c, "zeromq", f"{c.host} speaks ZeroMQ: a node with an older gpuperf (its summaries wait "
                         "in its outbox until it is upgraded)", "this controller takes node summaries over "
                         "gpuperf's framing, not ZeroMQ: upgrade gpuperf on the node")
            return None
        except framing.FrameError as e:
            self._refuse(c, "malformed", f"{c.host}: {e}", f"malformed: {e}")
            return None
        except (framing.Closed, OSError):
            self._close(c)
            return None
        if part is None:
            return None
        return self._advance(c, part, now)

    def _reserve(self, c: Conn) -> bool:
        """Before a read of an authenticated body: what the connection holds plus one more read within the
        budget (reserved now), else a "busy, retry" reply and False."""
        need = len(c.body) + c.reader.buffered + framing.CHUNK - c.reserved
        if need <= 0:
            return True
        if self.reserved + need > AUTHED_BUDGET:
            self._refuse(c, "busy", f"busy: {self.reserved} bytes held by senders; {c.host} told to retry",
                         "busy: try again later", retry=True)
            return False
        c.reserved += need
        self.reserved += need
        return True

    def _advance(self, c: Conn, part: bytes, now: float) -> Message | None:
        """The next stage once a part is complete; the message after its last part."""
        if c.stage == _KIND:
            if part != transport.KIND:
                self._refuse(c, "malformed", f"{c.host}: not a node summary", "not authenticated: not a gpuperf "
                             "node-summary message")
                return None
            c.stage, c.reader.limit = _CRED, transport.CRED_MAX
            return None
        if c.stage == _CRED:
            try:
                c.sender, c.digest = transport.authenticate(transport.KIND, part, self.allowed, self.munge_socket)
            except transport.AuthError as e:
                self._refuse(c, "auth", f"rejected node summary from {c.host}: {e}", f"not authenticated: {e}")
                return None
            c.stage, c.reader.limit, c.deadline = _BODY, transport.MAX_BODY_BYTES, now + CONN_DEADLINE_S
            self._reserve(c)    # the first read's worth now: past the budget, "busy" before a byte is read
            return None
        if c.stage == _BODY:
            c.body = part
            c.stage, c.reader.limit = _SERIES, transport.MAX_BODY_BYTES - len(part)
            return None
        c.stage = _REPLY
        self.sel.unregister(c.sock)
        # read whole: from here until it is answered the message holds its bytes, not the most it might have sent
        self.reserved -= c.reserved - (len(c.body) + len(part))
        c.reserved = len(c.body) + len(part)
        assert c.sender is not None
        return Message(c, c.sender, c.digest, c.body, part or None)

    def _refuse(self, c: Conn, why: str, logged: str, error: str, retry: bool = False) -> None:
        """A short error reply, then the peer's further bytes are dropped until it closes (DRAIN_S at most)."""
        self._note(why, logged)
        self._send(c, {"ok": False, "error": error, **({"retry": True} if retry else {})})
        self._release(c)
        c.stage, c.reader, c.body = _DRAIN, framing.PartReader(0), b""
        c.deadline = time.monotonic() + DRAIN_S
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _send(self, c: Conn, reply: dict[str, Any]) -> None:
        try:
            c.sock.send(framing.encode(json.dumps(reply).encode()))   # small: the kernel takes it at once
        except OSError:
            pass

    def _note(self, why: str, line: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1
        now = time.monotonic()
        if now - self._logged.get(why, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[why] = now
            log.get("collector").warning("%s (%d refused so far for %s)", line, self.refused[why], why)

    def _release(self, c: Conn) -> None:
        self.reserved -= c.reserved
        c.reserved = 0

    def _close(self, c: Conn) -> None:
        if self.conns.pop(c.sock.fileno(), None) is None:
            return
        self._release(c)
        if c.stage != _REPLY:
            self.sel.unregister(c.sock)
        c.sock.close()

    def _expire(self, now: float) -> None:
        for c in [c for c in self.conns.values() if c.deadline < now and c.stage != _REPLY]:
            if c.stage != _DRAIN:
                self._note("deadline", f"{c.host} took too long to send its message: closed")
            self._close(c)
