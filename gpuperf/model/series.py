"""The per-GPU time series a node summary carries to the controller (``gpuperf.series.v1``), bounded.

The node daemon's store keeps full-resolution samples only for a while and only on that node; the
controller must chart a job for as long as it keeps the job, without the node. So the epilog asks its
daemon for the job's series (the ``series`` op, already averaged into at most ``points`` buckets),
and ``compact`` turns it into a small value: time offsets in tenths of a second from ``t0`` (once
per node when its GPUs share them, as one sweep samples them all), per GPU each metric quantised to an integer in a stated unit (percent, watts, MB/s). ``compact`` also
bounds the bytes (``MAX_BYTES`` of JSON): it halves the points until the value fits. ``expand``
gives back the daemon's shape (``{"node:gpu": {"t": [...], field: [...]}}``) that the renderers
take. ``pack``/``unpack`` are its bytes on the wire and in the controller's store (``FRAME_MAGIC``):
each column quantised to at most ``LEVELS`` steps of its own peak, delta-coded, byte-planes, zlib.
Pure functions: no I/O.
"""

from __future__ import annotations

import array
import json
import math
import sys
import zlib
from typing import Any

SCHEMA = "gpuperf.series.v1"
MAX_POINTS = 500
MAX_BYTES = 256 * 1024  # JSON of one node's series, before the transport's zlib (8 GPUs x 500 points fit)
# field -> the unit it is kept in, as a divisor of the daemon's unit (integers survive JSON compactly)
FIELDS: dict[str, float] = {
    "sm_active_pct": 1.0, "tensor_active_pct": 1.0, "dram_active_pct": 1.0, "power_w": 1.0,
    "nvlink_tx_bps": 1e6, "nvlink_rx_bps": 1e6,
}


def _q(v: Any, div: float) -> int | None:
    if v is None or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v):
        return None
    return int(round(v / div))


def _thin(gpu: dict[str, list], points: int) -> dict[str, list]:
    """Average into at most ``points`` equal-count buckets (None skipped): the daemon's own downsampling shape."""
    t = gpu.get("t") or []
    n = len(t)
    if n <= points:
        return gpu
    step = n / points
    out: dict[str, list] = {k: [] for k in gpu}
    for b in range(points):
        lo, hi = int(b * step), int((b + 1) * step)
        for k, col in gpu.items():
            vals = [v for v in col[lo:hi] if isinstance(v, (int, float)) and not math.isnan(v)]
            out[k].append(sum(vals) / len(vals) if vals else None)
    return out


def compact(daemon_series: dict[str, dict[str, list]] | None, points: int = MAX_POINTS, max_bytes: int = MAX_BYTES) -> dict | None:
    """The daemon's ``series`` reply (gpu -> columns) as a bounded ``gpuperf.series.v1`` value; None when empty."""
    gpus = {str(g): s for g, s in (daemon_series or {}).items() if isinstance(s, dict) and s.get("t")}
    if not gpus or points <= 0:
        return None
    t0 = min(s["t"][0] for s in gpus.values())
    points = min(points, MAX_POINTS)
    while True:
        out: dict[str, Any] = {"schema": SCHEMA, "t0": round(t0, 1), "units": {"t": 0.1, **FIELDS}, "gpus": {}}
        for g, s in gpus.items():
            s2 = _thin({k: s[k] for k in ("t", *FIELDS) if k in s}, points)
            col = {"t": [int(round((x - t0) * 10)) for x in s2["t"]]}
            for f, div in FIELDS.items():
                if f in s2:
                    col[f] = [_q(v, div) for v in s2[f]]
            out["gpus"][g] = col
        # one sweep samples every GPU of a node: their times are usually the same, kept once
        ts = [c["t"] for c in out["gpus"].values()]
        if all(t == ts[0] for t in ts):
            out["t"] = ts[0]
            for c in out["gpus"].values():
                del c["t"]
        if len(json.dumps(out, separators=(",", ":"))) <= max_bytes or points <= 8:
            return out
        points //= 2


def expand(node: str, value: dict | None) -> dict[str, dict[str, list]]:
    """A node's ``gpuperf.series.v1`` back in the renderers' shape, labelled ``node:gpu``; {} when unusable."""
    if not isinstance(value, dict) or value.get("schema") != SCHEMA:
        return {}
    t0 = float(value.get("t0") or 0.0)
    units = value.get("units") or {}
    out = {}
    shared = value.get("t")
    for g, col in (value.get("gpus") or {}).items():
        t = col.get("t", shared) if isinstance(col, dict) else None
        if not isinstance(t, list):
            continue
        ts = float(units.get("t", 0.1))
        s: dict[str, list] = {"t": [t0 + x * ts for x in t]}
        for f in FIELDS:
            if isinstance(col.get(f), list):
                div = float(units.get(f, FIELDS[f]))
                s[f] = [None if v is None else v * div for v in col[f]]
        out[f"{node}:{g}"] = s
    return out


def shifted(series: dict[str, dict[str, list]], offset_s: float) -> dict[str, dict[str, list]]:
    """The same series with every time moved by ``offset_s`` (a node whose clock was off)."""
    return {k: dict(v, t=[x + offset_s for x in v.get("t", [])]) for k, v in series.items()}


FRAME_MAGIC = b"GPS\x02"
# a column's values are kept in steps of at most 1/LEVELS of its peak (0.1 %: under one pixel of a
# chart less than 1,000 px tall); percent and watt columns (peak <= 1,000) keep their unit steps
LEVELS = 1000
_TYPECODES = ("B", "H", "I", "Q")


def _columns(value: dict) -> list[tuple[str, str, list]]:
    """(gpu or "" for the shared time column, key, values) of a series.v1 value, in a fixed order."""
    cols = [("", "t", value["t"])] if isinstance(value.get("t"), list) else []
    for g, col in (value.get("gpus") or {}).items():
        for k in ("t", *FIELDS):
            if isinstance(col.get(k), list):
                cols.append((str(g), k, col[k]))
    return cols


def _zigzag_deltas(vals: list[int]) -> list[int]:
    out, prev = [], 0
    for v in vals:
        d = v - prev
        prev = v
        out.append((d << 1) ^ (d >> 63) if d < 0 else d << 1)
    return out


def pack(value: dict, levels: int = LEVELS) -> bytes:
    """A series.v1 value as compact bytes (``FRAME_MAGIC`` + zlib): ~2x smaller than its zlib JSON; ``levels``: the
    steps a column's peak is cut into (the controller keeps old series coarser)."""
    head: dict[str, Any] = {k: value.get(k) for k in ("schema", "t0", "units")}
    head["cols"] = []
    zz: list[int] = []
    for g, k, vals in _columns(value):
        ints = [v if isinstance(v, int) else None for v in vals]
        peak = max((abs(v) for v in ints if v is not None), default=0)
        step = 1 if k == "t" else max(1, math.ceil(peak / levels))
        nones = [i for i, v in enumerate(ints) if v is None]
        q, last = [], 0
        for v in ints:
            # a gap repeats the value before it (a zero delta) and is listed in the head
            last = last if v is None else int(round(v / step))
            q.append(last)
        head["cols"].append([g, k, len(q), step] + ([nones] if nones else []))
        zz += _zigzag_deltas(q)
    big = max(zz, default=0)
    tc = next(c for c in _TYPECODES if big < 256 ** array.array(c).itemsize)
    arr = array.array(tc, zz)
    if sys.byteorder == "big":
        arr.byteswap()
    raw, n = arr.tobytes(), arr.itemsize
    head["tc"] = tc
    # byte planes: low bytes together, then high bytes (mostly zero), which zlib squeezes best
    body = b"".join(raw[i::n] for i in range(n))
    return FRAME_MAGIC + zlib.compress(json.dumps(head, separators=(",", ":")).encode() + b"\n" + body, 9)


def unpack(blob: bytes | None) -> dict | None:
    """``pack``'s bytes (or a zlib JSON series.v1, as older nodes sent) -> the series.v1 value; None when unreadable."""
    if not blob:
        return None
    try:
        if not blob.startswith(FRAME_MAGIC):
            value = json.loads(zlib.decompress(blob))
            return value if isinstance(value, dict) else None
        raw = zlib.decompress(blob[len(FRAME_MAGIC):])
        head_b, _, body = raw.partition(b"\n")
        head = json.loads(head_b)
        n = array.array(head["tc"]).itemsize
        count = len(body) // n
        # byte planes back into little-endian items
        inter = bytearray(len(body))
        for i in range(n):
            inter[i::n] = body[i * count:(i + 1) * count]
        arr = array.array(head["tc"], bytes(inter))
        if sys.byteorder == "big":
            arr.byteswap()
    except (zlib.error, ValueError, KeyError, TypeError):
        return None
    out: dict[str, Any] = {k: head.get(k) for k in ("schema", "t0", "units")}
    out["gpus"] = {}
    pos = 0
    for c in head["cols"]:
        g, k, length, step = c[:4]
        nones = set(c[4]) if len(c) > 4 else set()
        vals, cur = [], 0
        for i, z in enumerate(arr[pos:pos + length]):
            cur += (z >> 1) ^ -(z & 1)
            vals.append(None if i in nones else cur * step)
        pos += length
        if g == "":
            out[k] = vals
        else:
            out["gpus"].setdefault(g, {})[k] = vals
    return out
