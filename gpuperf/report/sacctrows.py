"""Rows of ``gpuperf jobs`` from the AdminComments sacct holds: any user, any host, no store needed.

One ``sacct`` call for the whole period (``Slurm.sacct_rows``) fetches every job with its
AdminComment; each gpuperf AdminComment is decoded (``admincomment.decode``, about 0.3 ms) into
the same row the controller's store gives: class, GPU-hours, wasted GPU-hours, energy. A payload
sacct cut short still gives the headline (class, GPUs, energy). Jobs without a gpuperf AdminComment
are counted, not listed (no GPUs, or accounting not written yet).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuperf.model import admincomment

FIELDS = ("JobIDRaw", "JobID", "User", "UID", "Start", "End", "NodeList", "AllocTRES", "AdminComment%65535")
SORT_KEYS = {"waste": "wasted_gpu_hours", "energy": "energy_j", "gpu-hours": "gpu_hours", "end": "end"}


def _time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def row(r: dict[str, str]) -> dict[str, Any] | None:
    """One sacct line (field -> text) as a jobs row; None when it holds no gpuperf AdminComment."""
    text = r.get("AdminComment", "")
    if not admincomment.is_admincomment(text):
        return None
    if not r.get("JobIDRaw", "").isdigit():
        return None
    # job_id: Slurm's raw id (what gpuperf stores); job: as users name it (8_3, 10+1), never int()-ed
    out: dict[str, Any] = {"job_id": int(r["JobIDRaw"]), "job": r.get("JobID") or r["JobIDRaw"], "user": r.get("User") or None, "uid": _int(r.get("UID", "")),
                           "start": _time(r.get("Start", "")), "end": _time(r.get("End", "")),
                           "nodes": r.get("NodeList", ""), "accounting": "done"}
    try:
        s = admincomment.decode(text)
        job, diag, q = s.get("job") or {}, s.get("diagnosis") or {}, s.get("quality") or {}
        out.update(gpus=job.get("gpu_count"), gpu_hours=job.get("gpu_hours"),
                   wasted_gpu_hours=job.get("wasted_gpu_hours"), energy_j=job.get("energy_j"),
                   **{"class": diag.get("class")}, imbalanced=bool(diag.get("imbalanced")), partial=bool(q.get("partial")))
    except admincomment.AdminCommentError:
        h = admincomment.decode_headline(text)
        kwh = h.get("energy", "").removesuffix("kwh")
        out.update(gpus=_int(h.get("gpus", "")), gpu_hours=None, wasted_gpu_hours=None,
                   energy_j=float(kwh) * 3.6e6 if kwh.replace(".", "", 1).isdigit() else None,
                   **{"class": h.get("class")}, imbalanced=False, partial=True)
    return out


def rows(lines: list[dict[str, str]], sort: str = "waste", limit: int | None = None) -> tuple[list[dict], int]:
    """(rows sorted largest first, how many GPU jobs had no gpuperf AdminComment)."""
    out, without = [], 0
    for r in lines:
        got = row(r)
        if got is None:
            without += "gres/gpu" in r.get("AllocTRES", "")
            continue
        out.append(got)
    key = SORT_KEYS[sort]
    out.sort(key=lambda x: (x.get(key) or 0.0, x["job_id"]), reverse=True)
    return (out[:limit] if limit else out), without
