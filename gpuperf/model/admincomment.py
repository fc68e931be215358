"""The job summary as a Slurm AdminComment that survives ``sacctmgr`` (22.05 lowercases it).

Form: ``gpuperf:v1 class=compute_bound gpus=8 tensor=94 sm=96 util=100 mem=45 power=698w
energy=2.51kwh idle=0 z=<payload>``; a job that left GPUs unused leads with them:
``class=unused_gpus unused=1/2 wasted=0.004gpuh busy=compute_bound gpus=2 ...``; a class resting on
NVML utilization alone adds ``conf=low``; an array task or het component ends it with its name,
``job=8_3`` or ``job=10+1`` (a plain job's id is its name: sacct's JobID says it). The headline is
lowercase ``key=value`` pairs a person reads in ``sacct -o AdminComment%120``; ``z=`` holds the full
summary as zlib-compressed compact JSON (with the preset dictionary of ``acvocab``, named in the zlib
header by its Adler-32; payloads written before it, plain zlib, still decode) in base32 without
padding, lowercased. Base32 uses one case only, so decoding upper-cases it back; it has no quotes for
sacctmgr to turn into backticks (FACTS.md). Another tool's text may sit beside it in the field
(jobstats' ``JS1:``): the readers here decode gpuperf's part wherever it is (``acshare``).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from gpuperf.files import jsoncodec
from gpuperf.model import acshare, acvocab, jobref

PREFIX = acshare.PREFIX
SACCT_MAX_BYTES = 65535          # sacct keeps at most this much, cutting silently (FACTS.md)
NODE_BUDGET_BYTES = 4096         # per node: one 8-GPU node's full summary fits (benchmarks/report_sizes.py)


MAX_DECODED_BYTES = 4 << 20  # a summary is a few KiB to a few hundred; sacct gives at most 64 KiB of text


class AdminCommentError(ValueError):
    """Text that is not a gpuperf AdminComment, or one whose payload is damaged."""


def _fmt(x: Any, unit: str = "", nd: int = 0) -> str:
    if x is None:
        return "na"
    return f"{x:.{nd}f}{unit}"


def headline(summary: dict, name: str | None = None) -> list[tuple[str, str]]:
    """The readable key=value pairs: class, tensor/SM/util/memory %, power, energy, idle %, GPUs; last
    ``job=<name>`` when ``name`` is an array task's or het component's (``8_3``, ``10+1``)."""
    job = summary.get("job") or {}
    diag = summary.get("diagnosis") or {}
    q = summary.get("quality") or {}
    pairs = [("class", str(diag.get("class") or "na")), ("gpus", str(job.get("gpu_count", 0))),
             ("tensor", _fmt(job.get("tensor_active_pct"))), ("sm", _fmt(job.get("sm_active_pct"))),
             ("util", _fmt(job.get("util_gpu_pct"))), ("mem", _fmt(job.get("mem_peak_pct"))),
             ("power", _fmt(job.get("power_mean_w"), "w")), ("energy", _fmt(job.get("energy_kwh"), "kwh", 2)),
             ("idle", _fmt(job.get("idle_pct")))]
    unused = diag.get("unused") if isinstance(diag.get("unused"), dict) else None
    if unused:
        # the waste first: allocated GPUs that did nothing, and the GPU-hours they held
        pairs[1:1] = [("unused", f"{unused.get('count', 0)}/{unused.get('of', 0)}"),
                      ("wasted", _fmt(unused.get("wasted_gpu_hours"), "gpuh", 3)),
                      ("busy", str(diag.get("busy_class") or "na"))]
    if diag.get("confidence") in ("low", "medium", "none"):
        pairs.append(("conf", str(diag["confidence"])))
    if diag.get("imbalanced"):
        pairs.append(("imbalanced", "1"))
    if q.get("partial"):
        pairs.append(("partial", "1"))
    name = jobref.task_or_component(name)
    if name:
        pairs.append(("job", name))
    return pairs


def compressed(summary: dict) -> bytes:
    """The summary as the ``z=`` payload carries it before base32: compact JSON, zlib level 6 (level 9
    made an 8-GPU summary 0.7 % smaller for twice the controller's CPU per job) with the summary's
    vocabulary as preset dictionary (an 8-GPU node's payload 36-42 % smaller: benchmarks/report_sizes.py)."""
    z = zlib.compressobj(6, zdict=acvocab.CURRENT)
    return z.compress(jsoncodec.dumps(summary)) + z.flush()


def inflate(blob: bytes, max_bytes: int = MAX_DECODED_BYTES) -> bytes:
    """``compressed``'s bytes, or plain zlib (payloads and stores written before the dictionary), inflated;
    ValueError past ``max_bytes`` or for a dictionary gpuperf does not know, zlib.error when damaged."""
    zdict = None
    if len(blob) >= 6 and blob[1] & 0x20:       # FDICT: the dictionary's Adler-32 follows the 2-byte header
        zdict = acvocab.BY_ID.get(int.from_bytes(blob[2:6], "big"))
        if zdict is None:
            raise ValueError("compressed with a preset dictionary this gpuperf does not know")
    z = zlib.decompressobj(zdict=zdict) if zdict is not None else zlib.decompressobj()
    raw = z.decompress(blob, max_bytes)
    if z.unconsumed_tail:   # a payload of 40 KB may inflate to 40 GB: stop at the bound
        raise ValueError(f"inflates past {max_bytes} bytes")
    return raw


_B32 = b"abcdefghijklmnopqrstuvwxyz234567"
_ALPHA = bytes.maketrans(bytes(range(32)), _B32)
# for each of the 8 characters of a 5-byte group: (byte index, table of that byte's share) pairs; a share
# is a few bits already shifted into place, so adding two shares never carries into the next byte
_SHARES = [[(0, lambda b: b >> 3)], [(0, lambda b: (b & 7) << 2), (1, lambda b: b >> 6)], [(1, lambda b: (b >> 1) & 31)],
           [(1, lambda b: (b & 1) << 4), (2, lambda b: b >> 4)], [(2, lambda b: (b & 15) << 1), (3, lambda b: b >> 7)],
           [(3, lambda b: (b >> 2) & 31)], [(3, lambda b: (b & 3) << 3), (4, lambda b: b >> 5)], [(4, lambda b: b & 31)]]
_TABLES = [[(i, bytes(f(b) for b in range(256))) for i, f in char] for char in _SHARES]


def b32_lower(data: bytes) -> str:
    """``base64.b32encode(data)`` lowercased without its ``=`` padding, computed a whole byte plane at a
    time (bytes.translate, big-int adds): the standard library's loop per 5 bytes cost the controller
    ~0.3 ms per AdminComment. Equal to the standard library's on every length (tests/unit/test_admincomment.py)."""
    n = len(data)
    groups = -(-n // 5)
    padded = data + bytes(groups * 5 - n)
    planes = [padded[i::5] for i in range(5)]
    out = bytearray(groups * 8)
    for k, shares in enumerate(_TABLES):
        if len(shares) == 1:
            plane = planes[shares[0][0]].translate(shares[0][1])
        else:
            (i, t), (j, u) = shares
            plane = (int.from_bytes(planes[i].translate(t), "big")
                     + int.from_bytes(planes[j].translate(u), "big")).to_bytes(groups, "big")
        out[k::8] = plane.translate(_ALPHA)
    return out[:-(-n * 8 // 5)].decode("ascii")


def _pack(summary: dict, raw: bytes | None = None) -> str:
    return b32_lower(raw if raw is not None else compressed(summary))


def _slim(summary: dict, level: int) -> dict:
    """A smaller summary when the full one does not fit, losing the least useful detail first."""
    s = json.loads(json.dumps(summary))
    dropped = []
    if level >= 1:
        # the reasons behind injected variables and the estimates' fixed texts (gpuspecs has them)
        for env in (s.get("env") or {}).values():
            vars_ = env.get("vars") if isinstance(env, dict) else None
            if isinstance(vars_, dict):
                env["vars"] = {k: (v.get("value") if isinstance(v, dict) else v) for k, v in vars_.items()}
        for k in ("label", "source"):
            (s.get("estimates") or {}).pop(k, None)
        dropped.append("env.reasons")
    if level >= 2:
        for k in ("env", "affinity"):
            if s.get(k):
                s[k] = {}
                dropped.append(k)
    if level >= 3:
        keep = ("node", "gpu", "name", "seconds", "sm_active_pct", "tensor_active_pct", "dram_active_pct",
                "util_gpu_pct", "mem_peak_pct", "power_mean_w", "energy_j", "idle_pct")
        s["gpus"] = [{k: g.get(k) for k in keep} for g in s.get("gpus", [])]
        dropped.append("gpus.detail")
    if level >= 4:
        s["gpus"] = []
        dropped.append("gpus")
    s["truncated"] = dropped
    return s


def budget(summary: dict) -> int:
    """The AdminComment size gpuperf aims for: 4 KiB per node (the issue's bound for an 8-GPU node)."""
    return min(SACCT_MAX_BYTES, NODE_BUDGET_BYTES * max(1, len(summary.get("nodes") or [])))


def encode(summary: dict, max_bytes: int | None = None, raw: bytes | None = None, name: str | None = None) -> str:
    """The AdminComment for a summary; detail is dropped (and listed in ``truncated``) to fit max_bytes.

    ``raw``: ``compressed(summary)`` when the caller has it already (the controller stores the same bytes);
    ``name``: the job as users name it, shown (``job=``) for an array task or het component only."""
    max_bytes = budget(summary) if max_bytes is None else max_bytes
    head = " ".join([PREFIX] + [f"{k}={v}" for k, v in headline(summary, name)])
    for level in range(5):
        body = _pack(summary, raw) if level == 0 else _pack(_slim(summary, level))
        text = f"{head} z={body}"
        if len(text.encode()) <= max_bytes:
            return text
    raise AdminCommentError(f"summary does not fit in {max_bytes} bytes even without per-GPU detail")


def is_admincomment(text: str | None) -> bool:
    """Whether text holds a gpuperf AdminComment (any case), alone or beside another tool's (``acshare``)."""
    return bool(acshare.ours(text))


def decode_headline(text: str) -> dict[str, str]:
    """The readable key=value pairs (without the payload)."""
    if not is_admincomment(text):
        raise AdminCommentError("not a gpuperf AdminComment (holds no gpuperf:v1)")
    out = {}
    for tok in acshare.ours(text).split()[1:]:
        k, sep, v = tok.partition("=")
        if sep and k.lower() != "z":
            out[k.lower()] = v.lower()
    return out


def decode(text: str) -> dict:
    """The full summary from an AdminComment, whatever case or quote mangling sacctmgr applied."""
    if not is_admincomment(text):
        raise AdminCommentError("not a gpuperf AdminComment (holds no gpuperf:v1)")
    payload = None
    for tok in acshare.ours(text).split():
        if tok.lower().startswith("z="):
            payload = tok[2:]
    if not payload:
        raise AdminCommentError("AdminComment has no z= payload")
    # quotes are never in base32; sacctmgr turns them into backticks, so any is stray and dropped
    payload = payload.strip("`'\"").upper()
    payload += "=" * (-len(payload) % 8)
    try:
        summary = jsoncodec.loads(inflate(base64.b32decode(payload)))
    except RecursionError:
        raise AdminCommentError("AdminComment payload is nested too deeply") from None
    except (ValueError, zlib.error) as e:
        raise AdminCommentError(f"AdminComment payload is damaged ({len(payload)} chars): {e}") from None
    if not isinstance(summary, dict):
        raise AdminCommentError("AdminComment payload is not a summary")
    return summary
