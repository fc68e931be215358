"""The job summary as a Slurm AdminComment that survives ``sacctmgr`` (22.05 lowercases it).

Form: ``gpuperf:v1 class=compute_bound gpus=8 tensor=94 sm=96 util=100 mem=45 power=698w
energy=2.51kwh idle=0 z=<payload>``; a job that left GPUs unused leads with them:
``class=unused_gpus unused=1/2 wasted=0.004gpuh busy=compute_bound gpus=2 ...``; a job of several phases
adds them in order, ``phases=startup:17,compute_bound:33,memory_bound:25,compute_bound:25`` (percent of the
GPU-hours); a class resting on
NVML utilization alone adds ``conf=low``; an array task or het component ends it with its name,
``job=8_3`` or ``job=10+1`` (a plain job's id is its name: sacct's JobID says it). The headline is
lowercase ``key=value`` pairs a person reads in ``sacct -o AdminComment%120``; ``z=`` holds the full
summary as zlib-compressed compact JSON (with the preset dictionary of ``acvocab``, named in the zlib
header by its Adler-32; payloads written before it, plain zlib, still decode) in base32 without
padding, lowercased. Base32 uses one case only, so decoding upper-cases it back; it has no quotes for
sacctmgr to turn into backticks (FACTS.md). Another tool's text may sit beside it in the field
(jobstats' ``JS1:``): the readers here decode gpuperf's part wherever it is (``acshare``).

Every job's AdminComment is at most 4 KiB (``budget``), whatever its size: one 8-GPU node's whole summary
fits; a larger job's loses detail in a fixed order (``_slim``, listed in the payload's ``truncated``) down to
the least busy GPUs by name with every GPU's spread (``gpus_dist``: min, p10, median, p90, max), the first
names of its node lists with their counts, and at last the reduced form (the headline's figures, the class, the
phases without their evidence and the estimated rates: the story every reader tells). The whole merged summary is in the controller's store (``gpuperf report`` as admin).
"""

from __future__ import annotations

import base64
import heapq
import zlib
from typing import Any

from gpuperf.files import jsoncodec
from gpuperf.model import acshare, acvocab, jobref

PREFIX = acshare.PREFIX
SACCT_MAX_BYTES = 65535          # sacct keeps at most this much, cutting silently (FACTS.md)
NODE_BUDGET_BYTES = 4096         # per job: one 8-GPU node's full summary fits (benchmarks/report_sizes.py)


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
    ph = phases_pair(diag)
    if ph:
        pairs.append(("phases", ph))
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


MAX_HEADLINE_PHASES = 16    # the diagnosis gives at most 16 (diagnosis.phases.MAX_PHASES): ~17 bytes each


def phases_pair(diag: dict) -> str:
    """The diagnosis' phases in the headline's compact form, in order: ``startup:17,compute_bound:33,...`` (class and
    percent of the GPU-hours); "" for a job of one phase."""
    out = []
    for p in (diag.get("phases") or [])[:MAX_HEADLINE_PHASES]:
        if isinstance(p, dict) and isinstance(p.get("class"), str) and isinstance(p.get("share_pct"), (int, float)):
            out.append(f"{p['class']}:{p['share_pct']:.0f}")
    return ",".join(out)


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


WORST_GPUS = 8        # GPUs named one by one when not every GPU fits: the least busy
LIST_MAX = 16         # names kept of a node list (nodes, hosts, nodes expected and missing) when not all fit
REASONS_MAX = 8       # quality reasons kept, each cut to REASON_CHARS, when not all fit
REASON_CHARS = 240
LEVELS = 7            # 0: the whole summary ... 6: the headline's figures, the class, phases and rates only
# what the reduced form keeps of each phase and of the estimates: the job's story in every reader (issue 35)
_PHASE_KEEP = ("start", "end", "share_pct", "gpu_hours", "class", "work")
_RATES_KEEP = ("model", "kind", "error_pct", "tflops_est_per_gpu", "tensor_tflops_est", "tflops_est_job", "dram_gbps",
               "roofline_pct", "roofline_side")
_GPU_KEEP = ("node", "gpu", "name", "seconds", "sm_active_pct", "tensor_active_pct", "dram_active_pct",
             "util_gpu_pct", "mem_peak_pct", "power_mean_w", "energy_j", "idle_pct")
_DIST = ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "util_gpu_pct", "mem_peak_pct", "power_mean_w",
         "idle_pct")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def distribution(gpus: list[dict]) -> dict[str, list[float]]:
    """Per figure over the GPUs that have it: [min, p10, median, p90, max] (pure)."""
    out = {}
    for k in _DIST:
        # a plain type test: this runs over every GPU of a job of thousands of nodes
        v = sorted(x for g in gpus if type(x := g.get(k)) is float or type(x) is int)
        if v:
            n = len(v) - 1
            out[k] = [round(v[round(q * n)], 1) for q in (0.0, 0.1, 0.5, 0.9, 1.0)]
    return out


def _busy(g: dict) -> float:
    for k in ("sm_active_pct", "util_gpu_pct"):
        if (x := _num(g.get(k))) is not None:
            return x
    return -1.0


def _short(names: Any, n: int = LIST_MAX) -> Any:
    return names[:n] if isinstance(names, list) and len(names) > n else names


def _slim(summary: dict, level: int) -> dict:
    """A smaller summary when the full one does not fit, losing the least useful detail first. Shallow: each
    level builds anew only what it changes (a deep copy of a 65,536-GPU summary per level cost seconds)."""
    s = dict(summary)
    dropped = []
    if level >= 1:
        # the reasons behind injected variables and the estimates' fixed texts (gpuspecs has them)
        env = s.get("env") if isinstance(s.get("env"), dict) else {}
        s["env"] = {node: ({**e, "vars": {k: (v.get("value") if isinstance(v, dict) else v) for k, v in e["vars"].items()}}
                           if isinstance(e, dict) and isinstance(e.get("vars"), dict) else e) for node, e in env.items()}
        if isinstance(s.get("estimates"), dict):
            s["estimates"] = {k: v for k, v in s["estimates"].items() if k not in ("label", "source")}
        dropped.append("env.reasons")
    if level >= 2:
        for k in ("env", "affinity"):
            if s.get(k):
                s[k] = {}
                dropped.append(k)
    gpus = [g for g in s.get("gpus") or [] if isinstance(g, dict)]
    if level >= 3:
        s["gpus"] = [{k: g.get(k) for k in _GPU_KEEP} for g in gpus]
        dropped.append("gpus.detail")
    if level >= 4:
        # the node lists and the reasons, which grow with the job: the first names, the counts, the rest in the store
        nodes = s.get("nodes") or []
        if len(nodes) > LIST_MAX or len(s.get("hosts") or {}) > LIST_MAX:
            s["nodes"], s["nodes_total"] = _short(nodes), len(nodes)
            hosts = s.get("hosts") if isinstance(s.get("hosts"), dict) else {}
            s["hosts"] = {k: hosts[k] for k in sorted(hosts)[:LIST_MAX]}
            dropped.append("nodes")
        q = s.get("quality")
        if isinstance(q, dict):
            q = s["quality"] = dict(q)
            for k in ("nodes_expected", "nodes_missing"):
                if isinstance(q.get(k), list) and len(q[k]) > LIST_MAX:
                    q[f"{k}_total"], q[k] = len(q[k]), _short(q[k])
            if isinstance(q.get("reasons"), list):
                q["reasons"] = [str(r)[:REASON_CHARS] for r in q["reasons"][:REASONS_MAX]]
        if len(gpus) > WORST_GPUS:
            # every GPU's figures by their spread, and the least busy by name
            s["gpus_dist"], s["gpus_total"] = distribution(gpus), len(gpus)
            s["gpus"] = [{k: g.get(k) for k in _GPU_KEEP} for g in heapq.nsmallest(WORST_GPUS, gpus, key=_busy)]
            dropped.append("gpus.worst")
    if level >= 5:
        s["gpus"], s["hosts"] = [], {}
        dropped.append("gpus")
    if level >= 6:
        # the reduced form: what the headline says, the class and whether the summary was whole
        q = s.get("quality") if isinstance(s.get("quality"), dict) else {}
        diag = s.get("diagnosis") if isinstance(s.get("diagnosis"), dict) else {}
        s = {k: s.get(k) for k in ("schema", "job_id", "user", "uid", "start", "end", "wall_s", "job", "nodes_total")}
        s["nodes"] = _short(summary.get("nodes") or [], 4)
        s["diagnosis"] = {k: diag.get(k) for k in ("class", "busy_class", "confidence", "unused", "imbalanced")
                          if k in diag}
        # the story every reader tells (issue 35): the phases (without their evidence) and the estimated rates
        if isinstance(diag.get("phases"), list):
            s["diagnosis"]["phases"] = [{k: p.get(k) for k in _PHASE_KEEP if k in p}
                                        for p in diag["phases"] if isinstance(p, dict)]
        est = summary.get("estimates") if isinstance(summary.get("estimates"), dict) else {}
        s["estimates"] = {k: est[k] for k in _RATES_KEEP if k in est}
        s["quality"] = {k: q.get(k) for k in ("partial", "samples", "nodes_missing_total") if k in q}
        dropped.append("reduced")
    s["truncated"] = dropped
    return s


def budget(summary: dict) -> int:
    """The AdminComment size gpuperf keeps to: 4 KiB for every job, whatever its size (one 8-GPU node's
    whole summary fits; a larger job's worst GPUs, their spread and the diagnosis do, the rest is in the store)."""
    return NODE_BUDGET_BYTES


def encode(summary: dict, max_bytes: int | None = None, raw: bytes | None = None, name: str | None = None) -> str:
    """The AdminComment for a summary; detail is dropped (and listed in ``truncated``) to fit max_bytes, down
    to the reduced form (headline figures and diagnosis); AdminCommentError only when not even that fits.

    ``raw``: ``compressed(summary)`` when the caller has it already (the controller stores the same bytes);
    ``name``: the job as users name it, shown (``job=``) for an array task or het component only."""
    max_bytes = budget(summary) if max_bytes is None else max_bytes
    head = " ".join([PREFIX] + [f"{k}={v}" for k, v in headline(summary, name)])
    first = 0
    if raw is not None and len(raw) * 8 // 5 > 4 * max_bytes:
        first = 4   # four times too large: the levels that keep every GPU would not fit (and cost a pass each)
    for level in range(first, LEVELS):
        body = _pack(summary, raw) if level == 0 else _pack(_slim(summary, level))
        text = f"{head} z={body}"
        if len(text.encode()) <= max_bytes:
            return text
    raise AdminCommentError(f"summary does not fit in {max_bytes} bytes even in its reduced form")


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
