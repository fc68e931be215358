"""Node summaries to the controller over plain TCP, authenticated with munge before the body is read.

A message is four parts (``gpuperf.files.framing``: each a 4-byte length and its bytes):
``gpuperf.node-summary.v1``, a munge credential whose payload is the SHA-256 of the body, the body
(zlib-compressed summary JSON) and the summary's time series (gpuperf.series.v1 as ``series.pack``
bytes; older nodes sent zlib JSON, still read), empty when it has none; with a series the payload is
both digests, ``body:series``. The collector (``intake``) reads the kind and the credential, at most
``KIND_MAX + CRED_MAX`` bytes, and decodes the credential with munge (munged checks the MAC, the TTL
and replays) and the sender's uid against root and SlurmUser before it reads a byte of the body; then
the digest against the body and series. The reply is one part, JSON. munged is asked through
libmunge (``libmunge``: no process per message); where the library is missing the munge binaries
are called by absolute path (hooks get no PATH).

Until this version the same frames went over a ZeroMQ REQ/ROUTER pair, whose receiver buffered a peer's
frames before any check; the two do not talk to each other (see docs/SECURITY.md, rolling upgrade).
"""

from __future__ import annotations

import hashlib
import json
import pwd
import socket
import subprocess
import time
import zlib
from dataclasses import dataclass

from gpuperf.files import framing, jsoncodec, log
from gpuperf.model import series as series_mod
from gpuperf.controller import libmunge

KIND = b"gpuperf.node-summary.v1"
MAX_BODY_BYTES = 4 * 1024 * 1024   # body and series together
KIND_MAX = 64
CRED_MAX = 4096                    # a munge credential of a two-digest payload is ~300 bytes
REPLY_MAX = 64 * 1024
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
    if len(frames) not in (3, 4):
        raise AuthError("not a gpuperf node-summary message (expected 3 or 4 frames: kind, munge credential, body"
                        "[, series])")
    sender, digest = authenticate(frames[0], frames[1], allowed, socket)
    body, series = frames[2], (frames[3] or None) if len(frames) == 4 else None
    if len(body) + len(series or b"") > MAX_BODY_BYTES:
        raise ValueError(f"message of {len(body) + len(series or b'')} bytes exceeds {MAX_BODY_BYTES}")
    return sender, open_body(digest, body, series), series


def authenticate(kind: bytes, cred: bytes, allowed: set[int], socket: str = "") -> tuple[Sender, bytes]:
    """The first two parts -> (sender, the digest it vouches for); AuthError unless root/SlurmUser's credential."""
    if kind != KIND:
        raise AuthError("not a gpuperf node-summary message (expected 3 or 4 frames: kind, munge credential, body"
                        "[, series])")
    if len(cred) > CRED_MAX:
        raise AuthError(f"credential of {len(cred)} bytes exceeds {CRED_MAX}")
    sender, digest = verify_credential(cred, socket)
    if sender.uid not in allowed:
        raise AuthError(f"sender uid {sender.uid} is not root or SlurmUser")
    return sender, digest


def open_body(digest: bytes, body: bytes, series: bytes | None) -> dict:
    """The summary of an authenticated message; AuthError when the digest differs, ValueError when malformed."""
    if digest != _digest(body, series):
        raise AuthError("body does not match the credential's digest (tampered or swapped)")
    try:
        summary = jsoncodec.loads(zlib.decompress(body))
    except (zlib.error, ValueError, RecursionError) as e:
        raise ValueError(f"body is not a compressed summary: {e}") from None
    if not isinstance(summary, dict):
        raise ValueError("body is not a summary object")
    return summary


def controller_endpoint(cfg, slurm_config: dict[str, str] | None = None) -> str:
    """tcp://host:port of the controller's collector: ``controller.address``, else Slurm's controller
    (SlurmctldAddr, else SlurmctldHost[0]'s address) from ``slurm_config`` (``scontrol show config`` as
    a dict) when the caller has read it, from scontrol otherwise."""
    addr = cfg.controller.address
    if not addr:
        from gpuperf.access.slurm import Slurm, ctld_address

        addr = ctld_address(slurm_config) if slurm_config is not None else Slurm(cfg.general.slurm_bin_dir).ctld_host()
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        host, port = addr, str(cfg.controller.port)
    return f"tcp://{host}:{port}"


def address(endpoint: str) -> tuple[str, int]:
    """(host, port) of a ``tcp://host:port`` endpoint."""
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return host.strip("[]"), int(port)


def exchange(endpoint: str, frames: list[bytes], timeout_s: float) -> dict:
    """Send one message (3 or 4 frames) to the collector and return its reply; TransportError on no reply."""
    parts = list(frames) + [b""] * (4 - len(frames))
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection(address(endpoint), timeout=timeout_s) as s:
            s.settimeout(max(0.001, deadline - time.monotonic()))
            framing.send_parts(s, *parts)
            data = framing.recv_part(s, REPLY_MAX, deadline)
    except framing.ZmtpPeer:
        raise TransportError(f"{endpoint} speaks ZeroMQ: the controller runs an older gpuperf") from None
    except TimeoutError:
        raise TransportError(f"no reply from {endpoint} within {timeout_s:.1f} s") from None
    except (OSError, framing.FrameError, framing.Closed) as e:
        raise TransportError(f"{endpoint}: {e}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise TransportError(f"{endpoint}: reply is not JSON") from None
    if not isinstance(reply, dict):
        raise TransportError(f"{endpoint}: reply is not an object")
    return reply


def send_node_summary(cfg, summary: dict, timeout_s: float | None = None, attempts: int = 3) -> dict:
    """Send one node summary to the controller; the collector's reply, or TransportError."""
    timeout_s = timeout_s or cfg.daemon.request_timeout_s
    endpoint = controller_endpoint(cfg)
    last = "no attempt"
    for _ in range(attempts):
        # a fresh credential per attempt: the one of a lost reply would now be a replay
        frames = pack(summary, cfg.controller.munge_socket)
        try:
            reply = exchange(endpoint, frames, timeout_s)
        except TransportError as e:
            last = str(e)
            continue
        if reply.get("ok"):
            return reply
        if not reply.get("retry"):
            raise Refused(f"controller at {endpoint} refused the summary: {reply.get('error')}")
        last = f"{endpoint}: {reply.get('error')}"     # busy: kept for a later try
    log.get("transport").warning("node summary of job %s not delivered: %s", summary.get("job_id"), last)
    raise TransportError(last)
