"""Talking to the node daemon from hooks and the CLI: one request, one reply, a hard time limit.

Hooks (root) use the control socket; users' commands (``gpuperf top``, ``report`` of a running job)
use the user socket (``usersock``: a plain stream socket; a daemon older than this client still speaks
ZeroMQ there, and is then asked that way), where the daemon answers for the caller's own jobs only. The prolog's own
requests (``HOOK_OPS``: small replies) go over the daemon's hook socket when it is there: the same
messages and uid rule, but the standard library's socket instead of pyzmq, whose import alone costs
a prolog that runs every step itself ~20 ms (benchmarks/hook_latency.py, the ``full`` row).
"""

from __future__ import annotations

import os

from gpuperf.files import jsonlite
from gpuperf.daemon import protocol
from gpuperf.daemon.protocol import control_endpoint, user_endpoint


TYPE_CHECKING = False
if TYPE_CHECKING:   # hooks import this module: typing and json cost a fresh process ~8 ms
    from typing import Any

# requests whose replies are small (well under a SEQPACKET message's limit, the socket's send buffer)
# finalize: the epilog's, whose reply is small when the daemon delivers (``deliver``)
HOOK_OPS = frozenset({"health", "register", "finalize"})


class DaemonUnavailable(Exception):
    """No reply from the daemon in time (not running, socket absent, overloaded)."""


class DaemonRefused(Exception):
    """The daemon answered with an error (``ok: false``); the message is its error."""


def default_channel() -> str:
    """'control' for root (hooks, admins), 'user' for everyone else."""
    return "control" if os.geteuid() == 0 else "user"


def endpoint(cfg: Any, channel: str | None = None) -> str:
    """The endpoint of ``channel`` (control or user)."""
    return control_endpoint(cfg) if (channel or default_channel()) == "control" else user_endpoint(cfg)


def call(cfg: Any, op: str, job: dict[str, Any] | None = None, timeout_s: float | None = None,
         channel: str | None = None) -> dict[str, Any]:
    """Send one request; the reply (``ok`` true or false), or DaemonUnavailable after ``timeout_s``."""
    timeout_s = float(timeout_s if timeout_s is not None else cfg.daemon.request_timeout_s)
    channel = channel or default_channel()
    if channel == "control" and op in HOOK_OPS:
        from gpuperf.daemon import hooksock

        if os.path.exists(hooksock.path_of(cfg.daemon.socket_dir)):
            try:
                return hooksock.call(cfg.daemon.socket_dir, op, job, timeout_s)
            except hooksock.HookSocketUnavailable as e:
                raise DaemonUnavailable(str(e)) from None
    if channel != "control":
        from gpuperf.daemon import usersock

        try:
            return usersock.call(cfg.daemon.user_socket_dir, op, job, timeout_s)
        except usersock.OldDaemon:
            pass   # a daemon not yet restarted after an upgrade: its ZeroMQ socket, below
        except usersock.UserSocketUnavailable as e:
            raise DaemonUnavailable(str(e)) from None
    ep = endpoint(cfg, channel)
    path = ep[len("ipc://"):]
    if not os.path.exists(path):
        # libzmq would wait for the socket to appear: fail at once instead
        raise DaemonUnavailable(f"no daemon socket at {path}")
    import zmq  # here, not at the top: the hook socket's callers never need it

    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(ep)
        sock.send(protocol.encode(protocol.request(op, job)))
        if not sock.poll(int(timeout_s * 1000)):
            raise DaemonUnavailable(f"no reply from {ep} within {timeout_s:.1f} s")
        reply = jsonlite.loads(sock.recv())
    except zmq.ZMQError as e:
        raise DaemonUnavailable(f"{ep}: {e}") from None
    except ValueError:
        raise DaemonUnavailable(f"{ep}: reply is not JSON") from None
    finally:
        sock.close(0)
    if not isinstance(reply, dict) or reply.get("v") != protocol.VERSION:
        raise DaemonUnavailable(f"{ep}: reply of an unknown protocol version")
    return reply


def request(cfg: Any, op: str, job: dict[str, Any] | None = None, timeout_s: float | None = None,
            channel: str | None = None) -> dict[str, Any]:
    """Like call(), but an error reply is raised as DaemonRefused."""
    reply = call(cfg, op, job, timeout_s, channel)
    if not reply.get("ok"):
        raise DaemonRefused(str(reply.get("error")))
    return reply


def health(cfg: Any, gpus: list[int] | None = None, max_age_s: float | None = None,
           timeout_s: float | None = None) -> list[dict[str, Any]]:
    """The daemon's cached fast health results (CheckResult dicts) for the prolog.

    Raises DaemonUnavailable (daemon down) or DaemonRefused (no fresh result: check locally)."""
    reply = request(cfg, "health", {"gpus": gpus, "max_age_s": max_age_s}, timeout_s)
    return list(reply.get("results") or [])


def job_aggregates(cfg: Any, job_id: int, timeout_s: float | None = None) -> dict[str, Any]:
    """Live (or final) aggregates of a job on this node: {"state", "job", "aggregates"}."""
    reply = request(cfg, "job", {"job_id": int(job_id)}, timeout_s)
    return {"state": reply.get("state"), "job": reply.get("job"), "aggregates": reply.get("aggregates")}
