"""The daemon's sockets: the control REP socket, the hook and user sockets, the PUB stream, one poller.

``Channels.serve(timeout_ms, handle)`` answers every request that is ready within the timeout by
calling ``handle(frame, uid, channel)``; the daemon's loop calls it between sweeps. Once ``split_root()``
is called, the root channels (the control socket and the hook socket: prolog, epilog, registration) are
served by ``serve_root`` alone, on a thread of their own, so neither a sweep nor a user's request delays a
hook (issue 36); ``serve`` then answers the user socket only.
The user socket, open to every local user, is a plain stream socket whose every buffer is bounded
(``usersock``); the file limit is raised at start (``raise_nofile``), and both plain listeners cap
their connections far below it, so no peer can make the daemon run out of descriptors.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any, Callable

import zmq

from gpuperf.daemon import hooksock, protocol, ratelimit, usersock
from gpuperf.daemon.protocol import control_endpoint
from gpuperf.daemon.pub import Publisher
from gpuperf.daemon.startup import DaemonError

HARD_MAX_BYTES = 1024 * 1024       # libzmq drops the connection above this (protocol.MAX_BYTES answers)
NOFILE_CEILING = 1 << 20           # soft file limit asked for when the hard one is unlimited

Handler = Callable[[bytes, "int | None", str], dict[str, Any]]


def raise_nofile(log: Any) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (systemd's default soft limit is 1,024); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return want
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, want, e)
    return soft


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
        self.user_cpu = ratelimit.CpuBudget()    # CPU time each uid's user-socket requests may take
        self.split = False                       # the root channels served by serve_root (their own thread)
        self.nofile = raise_nofile(log)
        self.ctx = zmq.Context()
        try:
            self.control = self._rep(control_endpoint(cfg))
            ud = Path(cfg.daemon.user_socket_dir)
            ud.mkdir(parents=True, exist_ok=True)
            os.chmod(ud, 0o755)
            self.users = usersock.Listener(str(ud))
        except OSError as e:
            self.ctx.destroy(0)
            raise DaemonError(f"cannot bind the user socket in {cfg.daemon.user_socket_dir}: {e}") from None
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
        self.root_poller = zmq.Poller()      # the control and hook sockets once split (serve_root's)
        self.hooks: hooksock.Listener | None = None
        self._polled: dict[int, int] = {}   # plain fds registered with the poller -> their events
        self._root_polled: dict[int, int] = {}
        try:
            self.hooks = hooksock.Listener(cfg.daemon.socket_dir)
        except OSError as e:  # the prolog then uses the control socket, only slower
            self.log.error("hook socket: cannot bind in %s: %s", cfg.daemon.socket_dir, e)
        self._sync_fds()

    def _rep(self, endpoint: str) -> zmq.Socket:
        s = self.ctx.socket(zmq.REP)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, HARD_MAX_BYTES)
        s.setsockopt(zmq.SNDTIMEO, 1000)
        try:
            s.bind(endpoint)
        except zmq.ZMQError as e:
            s.close(0)
            raise DaemonError(f"cannot bind {endpoint}: {e}") from None
        return s

    def _hook_fds(self) -> dict[int, int]:
        return {fd: zmq.POLLIN for fd in (self.hooks.fds() if self.hooks is not None else ())}

    def _sync_fds(self) -> None:
        """Poll exactly the plain listeners' fds: hook (unless split) and user listening sockets and connections."""
        want = {} if self.split else self._hook_fds()
        want.update((fd, zmq.POLLOUT if w else zmq.POLLIN) for fd, w in self.users.fds().items())
        self._polled = _sync(self.poller, self._polled, want)

    def split_root(self) -> None:
        """From now on the control and hook sockets are served by ``serve_root`` only (before its thread starts)."""
        self.split = True
        self.poller.unregister(self.control)
        self.root_poller.register(self.control, zmq.POLLIN)
        self._sync_fds()
        self._root_polled = _sync(self.root_poller, self._root_polled, self._hook_fds())

    def serve_root(self, timeout_ms: int, handle: Handler) -> None:
        """Answer the control and hook requests that arrive within ``timeout_ms`` (the root channels' thread)."""
        for sock, _ in self.root_poller.poll(timeout_ms):
            if not isinstance(sock, int):
                self._serve_one(sock, handle)
            else:
                self._serve_hook(sock, handle)
        if self.hooks is not None and self.hooks.conns:
            self.hooks.expire()
        self._root_polled = _sync(self.root_poller, self._root_polled, self._hook_fds())

    def serve(self, timeout_ms: int, handle: Handler) -> None:
        """Answer the requests that arrive within ``timeout_ms``; expire idle connections."""
        for sock, ev in self.poller.poll(timeout_ms):
            if not isinstance(sock, int):
                self._serve_one(sock, handle)
            elif not self.split and self.hooks is not None and (sock == self.hooks.sock.fileno() or sock in self.hooks.conns):
                self._serve_hook(sock, handle)
            else:
                self._serve_user(sock, ev, handle)
        if not self.split and self.hooks is not None and self.hooks.conns:
            self.hooks.expire()
        self.users.expire()
        self._sync_fds()

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
        if len(frames) != 1:
            reply = protocol.error("one frame per request")
            self.stats["bad_requests"] += 1
        else:
            reply = handle(frames[0].bytes, uid, "control")
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

    def _serve_user(self, fd: int, events: int, handle: Handler) -> None:
        if events & zmq.POLLOUT:
            self.users.flush(fd)
            return
        got = self.users.ready(fd)
        if got is None:
            return
        conn, frame = got
        if frame is None:
            self.stats["requests"] += 1
            self.stats["bad_requests"] += 1
            reply = protocol.error(f"request exceeds the {protocol.MAX_BYTES}-byte limit")
        elif not self.user_limit.allow(conn.uid, now := time.monotonic()):
            # one user's request loop must not take the daemon's time from sampling and the hooks
            reply = protocol.error(f"refused: more than {ratelimit.RATE_PER_S:g} requests/s from uid {conn.uid}")
            self.stats["rate_limited"] = self.stats.get("rate_limited", 0) + 1
        elif not self.user_cpu.allow(conn.uid, now):
            # requests that each cost much (a plan parsed, a series read) at the rate limit: the CPU is bounded too
            reply = protocol.error(f"refused: uid {conn.uid} used its share of the daemon's CPU time; try again in a second")
            self.stats["cpu_limited"] = self.stats.get("cpu_limited", 0) + 1
        else:
            c0 = time.thread_time()
            reply = handle(frame, conn.uid, "user")
            self.user_cpu.charge(conn.uid, time.thread_time() - c0, now)
        self.users.reply(conn, self._reply_bytes(reply))

    def _serve_hook(self, fd: int, handle: Handler) -> None:
        got = self.hooks.ready(fd) if self.hooks is not None else None
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
        """Close every socket and the context (the root channels' thread has ended)."""
        self.control.close(0)
        self.users.close()
        if self.hooks is not None:
            self.hooks.close()
            self.hooks = None
        if self.pub:
            self.pub.close()
        self.ctx.term()


def _sync(poller: zmq.Poller, polled: dict[int, int], want: dict[int, int]) -> dict[int, int]:
    """Make ``poller`` poll exactly the plain fds ``want`` (fd -> events); what it polls now."""
    for fd in polled.keys() - want.keys():
        poller.unregister(fd)
    for fd, ev in want.items():
        if polled.get(fd) != ev:
            poller.register(fd, ev)   # registers, or changes the events of one registered
    return want
