"""The daemon's sockets: control and user REP sockets, the hook socket, the PUB stream, one poller.

``Channels.serve(timeout_ms, handle)`` answers every request that is ready within the timeout by
calling ``handle(frame, uid, channel)``; the daemon's single thread calls it between sweeps.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import zmq

from gpuperf.daemon import hooksock, protocol, ratelimit
from gpuperf.daemon.protocol import control_endpoint, user_endpoint
from gpuperf.daemon.pub import Publisher
from gpuperf.daemon.startup import DaemonError

HARD_MAX_BYTES = 1024 * 1024       # libzmq drops the connection above this (protocol.MAX_BYTES answers)
# the user socket is open to every local user: its requests are small, and a user's queued requests
# must not hold the daemon's memory (libzmq queues up to RCVHWM messages per connection)
USER_MAX_BYTES = 64 * 1024
USER_RCVHWM = 8

Handler = Callable[[bytes, "int | None", str], dict[str, Any]]


def pub_endpoint(cfg: Any) -> str:
    """Endpoint of the PUB stream: root-only IPC, or TCP when ``pub_port`` is set."""
    if cfg.daemon.pub_port:
        return f"tcp://*:{cfg.daemon.pub_port}"
    return f"ipc://{os.path.join(cfg.daemon.socket_dir, 'pub.sock')}"


class Channels:
    """Bound sockets and the poller over them; ``close()`` releases all."""

    def __init__(self, cfg: Any, log: Any, stats: dict[str, float]):
        self.cfg, self.log, self.stats = cfg, log, stats
        self.user_limit = ratelimit.Buckets()
        self.ctx = zmq.Context()
        try:
            self.control = self._rep(control_endpoint(cfg))
            ud = Path(cfg.daemon.user_socket_dir)
            ud.mkdir(parents=True, exist_ok=True)
            os.chmod(ud, 0o755)
            self.user = self._rep(user_endpoint(cfg), USER_MAX_BYTES, USER_RCVHWM)
            os.chmod(ud / "user.sock", 0o666)
        except BaseException:
            self.ctx.destroy(0)  # a socket already bound is closed with it
            raise
        try:
            self.pub: Publisher | None = Publisher(self.ctx, pub_endpoint(cfg))
        except zmq.ZMQError as e:
            self.log.error("PUB stream: cannot bind %s: %s", pub_endpoint(cfg), e)
            self.pub = None
        self.poller = zmq.Poller()
        self.poller.register(self.control, zmq.POLLIN)
        self.poller.register(self.user, zmq.POLLIN)
        self.hooks: hooksock.Listener | None = None
        self._hook_fds: set[int] = set()
        try:
            self.hooks = hooksock.Listener(cfg.daemon.socket_dir)
        except OSError as e:  # the prolog then uses the control socket, only slower
            self.log.error("hook socket: cannot bind in %s: %s", cfg.daemon.socket_dir, e)
        self._sync_hook_fds()

    def _rep(self, endpoint: str, max_bytes: int = HARD_MAX_BYTES, rcvhwm: int | None = None) -> zmq.Socket:
        s = self.ctx.socket(zmq.REP)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        if rcvhwm is not None:
            s.setsockopt(zmq.RCVHWM, rcvhwm)
        s.setsockopt(zmq.SNDTIMEO, 1000)
        try:
            s.bind(endpoint)
        except zmq.ZMQError as e:
            s.close(0)
            raise DaemonError(f"cannot bind {endpoint}: {e}") from None
        return s

    def _sync_hook_fds(self) -> None:
        """Poll exactly the hook socket's listening fd and its connections waiting for a request."""
        if self.hooks is None:
            return
        want = set(self.hooks.fds())
        for fd in self._hook_fds - want:
            self.poller.unregister(fd)
        for fd in want - self._hook_fds:
            self.poller.register(fd, zmq.POLLIN)
        self._hook_fds = want

    def serve(self, timeout_ms: int, handle: Handler) -> None:
        """Answer the requests that arrive within ``timeout_ms``; expire idle hook connections."""
        for sock, _ in self.poller.poll(timeout_ms):
            if isinstance(sock, int):
                self._serve_hook(sock, handle)
            else:
                self._serve_one(sock, handle)
        if self.hooks is not None and self.hooks.conns:
            self.hooks.expire()
            self._sync_hook_fds()

    def _serve_one(self, sock: zmq.Socket, handle: Handler) -> None:
        try:
            frames = sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            return
        uid = None
        try:
            uid = protocol.parse_peer(frames[0].get("Peer-Address"))
        except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
            uid = None
        channel = "control" if sock is self.control else "user"
        if len(frames) != 1:
            reply = protocol.error("one frame per request")
            self.stats["bad_requests"] += 1
        elif channel == "user" and not self.user_limit.allow(uid, time.monotonic()):
            # one user's request loop must not take the daemon's time from sampling and the hooks
            reply = protocol.error(f"refused: more than {ratelimit.RATE_PER_S:g} requests/s from uid {uid}")
            self.stats["rate_limited"] = self.stats.get("rate_limited", 0) + 1
        else:
            reply = handle(frames[0].bytes, uid, channel)
        try:
            sock.send(self._reply_bytes(reply))
        except zmq.ZMQError as e:
            self.log.warning("cannot send reply: %s", e)
            try:  # a REP socket must answer before it can receive again: try the short error reply
                sock.send(protocol.encode(protocol.error("reply could not be sent")))
            except zmq.ZMQError:
                pass

    def _reply_bytes(self, reply: dict[str, Any]) -> bytes:
        """The encoded reply; an error reply when it cannot be encoded (every request gets an answer)."""
        try:
            return protocol.encode(reply)
        except ValueError as e:
            self.log.warning("cannot encode reply: %s", e)
            return protocol.encode(protocol.error("reply could not be encoded"))

    def _serve_hook(self, fd: int, handle: Handler) -> None:
        got = self.hooks.ready(fd) if self.hooks is not None else None
        self._sync_hook_fds()
        if got is None:
            return
        conn, frame, uid = got
        if frame is None:
            self.stats["requests"] += 1
            self.stats["bad_requests"] += 1
            reply = protocol.error(f"request exceeds the {protocol.MAX_BYTES}-byte limit")
        else:
            reply = handle(frame, uid, "hook")
        hooksock.Listener.reply(conn, self._reply_bytes(reply))

    def close(self) -> None:
        """Close every socket and the context."""
        for s in (self.control, self.user):
            s.close(0)
        if self.hooks is not None:
            self.hooks.close()
            self.hooks = None
        if self.pub:
            self.pub.close()
        self.ctx.term()
