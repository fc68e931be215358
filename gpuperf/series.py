"""The per-GPU time series a node summary carries to the controller (``gpuperf.series.v1``), bounded.

The node daemon's store keeps full-resolution samples only for a while and only on that node; the
controller must chart a job for as long as it keeps the job, without the node. So the epilog asks its
daemon for the job's series (the ``series`` op, already averaged into at most ``points`` buckets),
and ``compact`` turns it into a small value: time offsets in tenths of a second from ``t0`` (once
per node when its GPUs share them, as one sweep samples them all), per GPU each metric quantised to an integer in a stated unit (percent, watts, MB/s). ``compact`` also
bounds the bytes (``MAX_BYTES`` of JSON): it halves the points until the value fits. ``expand``
gives back the daemon's shape (``{"node:gpu": {"t": [...], field: [...]}}``) that the renderers
take. Pure functions: no I/O.
"""

from __future__ import annotations

import json
import math
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


def compact(daemon_series: dict[str, dict[str, list]], points: int = MAX_POINTS, max_bytes: int = MAX_BYTES) -> dict | None:
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
