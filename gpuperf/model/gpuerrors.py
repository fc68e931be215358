"""Error counters per GPU from the node's health snapshot (``gpus.v1``: ECC, row remapping, NVLink error
counters), and their growth over a job: read when the job registers and when it ends (the daemon's
cached health read, at most ``daemon.health_interval_s`` old), so a job is charged what grew meanwhile."""

from __future__ import annotations

from typing import Any

COUNTERS = ("ecc_uncorrected", "ecc_corrected", "remapped_rows", "nvlink_errors")


def counters(snapshot: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """GPU index (str) -> counter -> value, for the counters the snapshot has (a counter NVML did not give is absent)."""
    out: dict[str, dict[str, int]] = {}
    for g in (snapshot or {}).get("gpus") or []:
        if not isinstance(g, dict) or "index" not in g:
            continue
        c: dict[str, int] = {}
        ecc = g.get("ecc") or {}
        for key, name in (("volatile_uncorrected", "ecc_uncorrected"), ("volatile_corrected", "ecc_corrected")):
            if isinstance(ecc.get(key), int):
                c[name] = ecc[key]
        rr = g.get("row_remap") or {}
        if isinstance(rr.get("correctable"), int) and isinstance(rr.get("uncorrectable"), int):
            c["remapped_rows"] = rr["correctable"] + rr["uncorrectable"]
        errs = [v for link in (g.get("nvlink") or {}).get("links") or [] for v in (link.get("errors") or {}).values()
                if isinstance(v, int)]
        if errs:
            c["nvlink_errors"] = sum(errs)
        out[str(g["index"])] = c
    return out


def growth(start: dict[str, int] | None, end: dict[str, int] | None) -> dict[str, int] | None:
    """Counter growth between two reads; None when either is missing. A counter that went down (driver
    reload resets the volatile ones) counts from zero: what it shows now grew since."""
    if start is None or end is None:
        return None
    return {k: (end[k] - start[k] if end[k] >= start[k] else end[k]) for k in COUNTERS if k in start and k in end}
