"""Node summaries to the controller over pyzmq, authenticated with munge.

A message is three frames: ``gpuperf.node-summary.v1``, a munge credential whose payload is the
SHA-256 of the body, and the body (zlib-compressed summary JSON); a fourth, the summary's time series
(gpuperf.series.v1 as ``series.pack`` bytes; older nodes sent zlib JSON, still read), when it has one,
and then the payload is both digests, ``body:series``. The receiver decodes the
credential with ``unmunge`` (munged checks the MAC, the TTL and replays), checks the digest
against the body and the sender's uid against root and SlurmUser. Anything else is rejected
before the body is parsed. munged is asked through libmunge (``libmunge``: no process per message);
where the library is missing the munge binaries are called by absolute path (hooks get no PATH).
"""

from __future__ import annotations

import hashlib
import json
import pwd
import subprocess
import zlib
from dataclasses import dataclass

import zmq

from gpuperf.files import jsoncodec, log
from gpuperf.model import series as series_mod
from gpuperf.controller import libmunge

KIND = b"gpuperf.node-summary.v1"
MAX_BODY_BYTES = 4 * 1024 * 1024
MUNGE = "/usr/bin/munge"
UNMUNGE = "/usr/bin/unmunge"


class TransportError(Exception):
    """A node summary could not be sent (controller unreachable, munge failing)."""


class Refused(TransportError):
    """The controller answered and refused the summary: sending it again would not help."""


class AuthError(Exception):
    """A message that is not from an authenticated root/SlurmUser sender, or was tampered with."""


@dataclass(frozen=True)
class Sender:
    """Who sent a message, as munge vouches for it."""

    uid: int
    gid: int
    host: str


def _munge_args(binary: str, socket: str) -> list[str]:
    return [binary] + (["--socket", socket] if socket else [])


def credential(payload: bytes, socket: str = "", timeout_s: float = 5.0) -> bytes:
    """A munge credential carrying ``payload`` (made by munged for this process's uid)."""
    if libmunge.available():
        try:
            return libmunge.encode(payload, socket)
        except libmunge.MungeError as e:
            raise TransportError(f"munge failed: {e}") from None
    try:
        p = subprocess.run(_munge_args(MUNGE, socket), input=payload, capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TransportError(f"munge failed: {e}") from None
    if p.returncode != 0:
        raise TransportError(f"munge failed: {p.stderr.decode(errors='replace').strip()}")
    return p.stdout.strip()


def parse_unmunge(out: bytes) -> tuple[dict[str, str], bytes]:
    """``unmunge -N`` output -> (metadata, payload): 'KEY: value' lines, a blank line, the payload."""
    head, sep, payload = out.partition(b"\n\n")
    meta = {}
    for line in head.decode(errors="replace").splitlines():
        k, _, v = line.partition(":")
        meta[k.strip()] = v.strip()
    return meta, payload if sep else b""


def verify_credential(cred: bytes, socket: str = "", timeout_s: float = 5.0) -> tuple[Sender, bytes]:
    """Decode a credential; AuthError unless munged says it is valid (not forged, expired or replayed)."""
    if libmunge.available():
        try:
            uid, gid, payload = libmunge.decode(cred, socket)
        except (libmunge.MungeError, ValueError, TypeError) as e:
            raise AuthError(f"invalid munge credential: {e}") from None
        return Sender(uid=uid, gid=gid, host=""), payload
    try:
        p = subprocess.run(_munge_args(UNMUNGE, socket) + ["-N"], input=cred, capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AuthError(f"unmunge failed: {e}") from None
    meta, payload = parse_unmunge(p.stdout)
    if p.returncode != 0 or meta.get("STATUS") != "0":
        raise AuthError(f"invalid munge credential: {p.stderr.decode(errors='replace').strip() or meta.get('STATUS')}")
    try:
        return Sender(uid=int(meta["UID"]), gid=int(meta["GID"]), host=meta.get("ENCODE_HOST", "")), payload
    except (KeyError, ValueError):
        raise AuthError("munge credential without uid/gid") from None


def allowed_uids(cfg) -> set[int]:
    """root and SlurmUser: the only senders of node summaries (the epilog runs as root)."""
    uids = {0}
    try:
        uids.add(pwd.getpwnam(cfg.general.slurm_user).pw_uid)
    except KeyError:
        pass
    return uids


def _digest(body: bytes, series: bytes | None) -> bytes:
    d = hashlib.sha256(body).hexdigest().encode()
    return d + b":" + hashlib.sha256(series).hexdigest().encode() if series is not None else d


def pack(summary: dict, socket: str = "") -> list[bytes]:
    """The frames of one authenticated node-summary message.

    A summary's time series (``series``, gpuperf.series.v1) travels in a fourth frame of its own:
    the controller stores it without parsing it (it is most of the bytes), the credential covers both."""
    summary = dict(summary)
    series = summary.pop("series", None)
    body = zlib.compress(json.dumps(summary, separators=(",", ":")).encode(), 6)
    extra = series_mod.pack(series) if series is not None else None
    cred = credential(_digest(body, extra), socket)
    return [KIND, cred, body] + ([extra] if extra is not None else [])


def unpack(frames: list[bytes], allowed: set[int], socket: str = "") -> tuple[Sender, dict]:
    """Authenticate and decode a message; AuthError for forged/unauthenticated, ValueError for malformed."""
    sender, summary, _ = unpack_message(frames, allowed, socket)
    return sender, summary


def unpack_message(frames: list[bytes], allowed: set[int], socket: str = "") -> tuple[Sender, dict, bytes | None]:
    """Like unpack, and the series frame as received (``series.pack`` bytes, not parsed here) or None."""
    if len(frames) not in (3, 4) or frames[0] != KIND:
        raise AuthError("not a gpuperf node-summary message (expected 3 or 4 frames: kind, munge credential, body"
                        "[, series])")
    cred, body = frames[1], frames[2]
    series = frames[3] if len(frames) == 4 else None
    if len(body) + len(series or b"") > MAX_BODY_BYTES:
        raise ValueError(f"message of {len(body) + len(series or b'')} bytes exceeds {MAX_BODY_BYTES}")
    sender, digest = verify_credential(cred, socket)
    if sender.uid not in allowed:
        raise AuthError(f"sender uid {sender.uid} is not root or SlurmUser")
    if digest != _digest(body, series):
        raise AuthError("body does not match the credential's digest (tampered or swapped)")
    try:
        summary = jsoncodec.loads(zlib.decompress(body))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"body is not a compressed summary: {e}") from None
    if not isinstance(summary, dict):
        raise ValueError("body is not a summary object")
    return sender, summary, series


def controller_endpoint(cfg) -> str:
    """tcp://host:port of the controller's collector: ``controller.address`` or SlurmctldHost."""
    addr = cfg.controller.address
    if not addr:
        from gpuperf.access.slurm import Slurm

        addr = Slurm(cfg.general.slurm_bin_dir).ctld_host()
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        host, port = addr, str(cfg.controller.port)
    return f"tcp://{host}:{port}"


def send_node_summary(cfg, summary: dict, timeout_s: float | None = None, attempts: int = 3) -> dict:
    """Send one node summary to the controller; the collector's reply, or TransportError."""
    timeout_s = timeout_s or cfg.daemon.request_timeout_s
    endpoint = controller_endpoint(cfg)
    frames = pack(summary, cfg.controller.munge_socket)
    ctx = zmq.Context.instance()
    last = "no attempt"
    for _ in range(attempts):
        # a REQ socket that missed its reply is stuck: a fresh one per attempt
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(endpoint)
            sock.send_multipart(frames)
            if sock.poll(int(timeout_s * 1000)):
                reply = json.loads(sock.recv())
                if not reply.get("ok"):
                    raise Refused(f"controller at {endpoint} refused the summary: {reply.get('error')}")
                return reply
            last = f"no reply from {endpoint} within {timeout_s:.1f} s"
        except zmq.ZMQError as e:
            last = f"{endpoint}: {e}"
        finally:
            sock.close()
        # the same credential would now be a replay: munge a fresh one for the retry
        frames = pack(summary, cfg.controller.munge_socket)
    log.get("transport").warning("node summary of job %s not delivered: %s", summary.get("job_id"), last)
    raise TransportError(last)
