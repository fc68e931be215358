"""The daemon's wire protocol: versioned JSON messages, validated before anything acts on them.

Request ``{"v": 1, "op": OP, ...}``; reply ``{"v": 1, "ok": true, ...}`` or
``{"v": 1, "ok": false, "error": "..."}``. A frame over ``MAX_BYTES``, not JSON, of another
version, with an unknown op or a bad field is a ``ProtocolError``: the server replies with the error
and changes nothing.
"""

from __future__ import annotations

import os

from gpuperf.files import jsonlite  # the prolog encodes with it: ``json`` would import re (~1/3 of its start)

TYPE_CHECKING = False  # the prolog imports this module: typing would cost it ~3 ms
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
MAX_BYTES = 64 * 1024
MAX_GPUS = 64
# ops that change state: only root and SlurmUser may send them
WRITE_OPS = frozenset({"register", "finalize", "prolog", "epilog"})
READ_OPS = frozenset({"ping", "health", "job", "jobs", "live", "series"})
# a TaskProlog (the job's user) asks for its task's environment: it reads the job's plan, changes nothing
TASK_OPS = frozenset({"taskenv"})
OPS = WRITE_OPS | READ_OPS | TASK_OPS


class ProtocolError(Exception):
    """A request that cannot be served; the message goes back to the caller."""


MAX_ENV = 256           # variables a prolog request may carry
MAX_ENV_VALUE = 8192


class Request:
    """A validated request (a slotted class: the prolog imports this, and dataclasses costs it ~5 ms)."""

    __slots__ = ("op", "job_id", "job")

    def __init__(self, op: str, job_id: int | None = None, job: dict[str, Any] | None = None):
        self.op, self.job_id, self.job = op, job_id, job if job is not None else {}


def _int(d: dict[str, Any], key: str, lo: int = 0, hi: int = 2**63 - 1, required: bool = False) -> int | None:
    v = d.get(key)
    if v is None:
        if required:
            raise ProtocolError(f"job.{key} is required")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ProtocolError(f"job.{key} must be an integer in [{lo}, {hi}]")
    return v


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise ProtocolError(f"job.{key} must be a finite number")
    return float(v)


def _str(d: dict[str, Any], key: str, max_len: int = 256) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > max_len:
        raise ProtocolError(f"job.{key} must be a string of at most {max_len} characters")
    return v


def validate_job(op: str, job: Any) -> dict[str, Any]:
    """The ``job`` member of a request, checked field by field for ``op``."""
    if not isinstance(job, dict):
        raise ProtocolError("job must be an object")
    needs_id = op in ("register", "finalize", "job", "series")
    out: dict[str, Any] = {"job_id": _int(job, "job_id", 1, 2**63 - 1, required=needs_id)}
    if op == "register":
        out["uid"] = _int(job, "uid", 0, 2**32 - 1, required=True)
        out["user"] = _str(job, "user")
        gpus = job.get("gpus", [])
        if (not isinstance(gpus, list) or len(gpus) > MAX_GPUS
                or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < 4096 for g in gpus)):
            raise ProtocolError(f"job.gpus must be a list of at most {MAX_GPUS} GPU indices")
        out["gpus"] = sorted(set(gpus))
        out["cpus"] = _int(job, "cpus", 0, 1 << 20)
        out["start"] = _num(job, "start")
        out["node"] = _str(job, "node")
        out["partial"] = bool(job.get("partial", False))
    elif op == "finalize":
        out["end"] = _num(job, "end")
        out["partial"] = bool(job.get("partial", False))
        out["exit_code"] = _int(job, "exit_code", -(2**31), 2**31)
        # the daemon writes and sends the node summary itself, after replying (the epilog: the job's
        # COMPLETING waits for the finalisation only); without it the reply carries the aggregates
        out["deliver"] = job.get("deliver") is True
    elif op == "series":
        out["max_points"] = _int(job, "max_points", 1, 100_000) or 500
    elif op in ("prolog", "epilog"):
        out.update(_prolog_job(job))
    elif op == "taskenv":
        out.update(_prolog_job(job))
        out["cpus"] = _int(job, "cpus", 0, 1 << 20)
        out["pid"] = _int(job, "pid", 1, 2**31)
        out["nccl"] = _nccl_listing(job.get("nccl"))
    elif op == "health":
        gpus = job.get("gpus")
        if gpus is not None and (not isinstance(gpus, list) or len(gpus) > MAX_GPUS
                                 or any(isinstance(g, bool) or not isinstance(g, int) for g in gpus)):
            raise ProtocolError("job.gpus must be a list of GPU indices")
        out["gpus"] = gpus
        out["max_age_s"] = _num(job, "max_age_s")
    return out


def _prolog_job(job: dict[str, Any]) -> dict[str, Any]:
    """The prolog op: the hook's environment (Slurm's variables) and the config the hook loaded."""
    env = job.get("env")
    if (not isinstance(env, dict) or len(env) > MAX_ENV
            or any(not isinstance(k, str) or not isinstance(v, str) or len(k) > 256 or len(v) > MAX_ENV_VALUE
                   for k, v in env.items())):
        raise ProtocolError(f"job.env must be an object of at most {MAX_ENV} string variables")
    conf = job.get("config")
    if not isinstance(conf, dict):
        raise ProtocolError("job.config must be an object (source, digest or file)")
    # digest: the Python hook's effective settings; file: the compiled client's CRC-32 and length of the file
    return {"env": dict(env), "config": {"source": _str(conf, "source", 4096), "digest": _str(conf, "digest", 64),
                                         "file": _str(conf, "file", 64)}}


MAX_NCCL_DIRS = 64
MAX_NCCL_NAMES = 32


def _nccl_listing(v: Any) -> dict[str, Any]:
    """What a task saw of NCCL: {"dirs": {dir: [names]}, "wheels": [names]}, bounded."""
    v = {} if v is None else v
    dirs, wheels = (v.get("dirs", {}), v.get("wheels", [])) if isinstance(v, dict) else (None, None)

    def names_ok(x: Any) -> bool:
        return isinstance(x, list) and len(x) <= MAX_NCCL_NAMES and all(isinstance(n, str) and len(n) <= 256 for n in x)

    if (not isinstance(dirs, dict) or len(dirs) > MAX_NCCL_DIRS or not names_ok(wheels)
            or any(not isinstance(d, str) or len(d) > 4096 or not names_ok(n) for d, n in dirs.items())):
        raise ProtocolError(f"job.nccl must be {{dirs: {{dir: [names]}}, wheels: [names]}} of at most "
                            f"{MAX_NCCL_DIRS} directories and {MAX_NCCL_NAMES} names each")
    return {"dirs": {d: list(n) for d, n in dirs.items()}, "wheels": list(wheels)}


def parse_request(frame: bytes) -> Request:
    """Decode and validate one request frame; ProtocolError says what is wrong."""
    if len(frame) > MAX_BYTES:
        raise ProtocolError(f"request of {len(frame)} bytes exceeds the {MAX_BYTES}-byte limit")
    import json  # the daemon's parser: json's own (bytes in UTF-16/32 too), already loaded there

    try:
        msg = json.loads(frame)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ProtocolError("request is not JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError("request must be a JSON object")
    v = msg.get("v")
    if v != VERSION or isinstance(v, bool):
        raise ProtocolError(f"unsupported protocol version {v!r} (this daemon speaks {VERSION})")
    op = msg.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ProtocolError(f"unknown op {op!r} (known: {', '.join(sorted(OPS))})")
    job = validate_job(op, msg.get("job", {}))
    return Request(op=op, job_id=job.get("job_id"), job=job)


def encode(msg: dict[str, Any]) -> bytes:
    """Serialise a message (requests and replies)."""
    return jsonlite.dumps(msg, separators=(",", ":"), allow_nan=False, default=str).encode()


def ok(**data: Any) -> dict[str, Any]:
    """A success reply."""
    return {"v": VERSION, "ok": True, **data}


def error(message: str) -> dict[str, Any]:
    """An error reply."""
    return {"v": VERSION, "ok": False, "error": message}


def request(op: str, job: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request message."""
    return {"v": VERSION, "op": op, "job": job or {}}


def parse_peer(peer_address: str | None) -> int | None:
    """The peer's uid from libzmq's IPC ``Peer-Address`` property ('host:uid:gid:pid'); None if absent."""
    if not peer_address:
        return None
    parts = peer_address.rsplit(":", 3)
    if len(parts) != 4:
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


def control_endpoint(cfg: Any) -> str:
    """ipc:// endpoint of the root-only control socket."""
    return f"ipc://{os.path.join(cfg.daemon.socket_dir, 'control.sock')}"


def user_endpoint(cfg: Any) -> str:
    """ipc:// endpoint of the read-only user socket."""
    return f"ipc://{os.path.join(cfg.daemon.user_socket_dir, 'user.sock')}"
