"""Slurm's own GPU figures beside gpuperf's: ``gres/gpuutil`` and ``gres/gpumem`` from sacct's TRES usage.

Slurm records them from 23.02 where gres.conf has ``AutoDetect=nvml`` (fake GPUs record none), sampled each
``JobAcctGatherFrequency`` (30 s by default) per step: ``TRESUsageInAve`` holds the step's mean utilisation
(percent, one GPU's scale summed over the step's GPUs), ``TRESUsageInMax`` its peak memory. Multi-GPU steps
were recorded wrongly before 24.05.1 (FACTS.md): their figures are shown but never judged. gpuperf samples
each second, so where the two disagree by more than Slurm's sparser sampling explains, one of them is wrong
(``disagreement``; ``gpuperf doctor`` reports it). Pure functions of sacct's text and the summary; the one
sacct call is ``read``. Fixtures: tests/data/slurm/tres/ (sacct's TRES text form).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FIELDS = ("JobIDRaw", "JobID", "TRESUsageInAve", "TRESUsageInMax")
GATHER_S = 30.0      # Slurm's default JobAcctGatherFrequency (task=30)
MEM_SLACK = 0.05     # Slurm's sparse samples may miss gpuperf's peak (lower is explained), not exceed it by more
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class SlurmGpu:
    """Slurm's figures for a job: mean utilisation per GPU (%) and peak memory (MiB) over its steps."""

    util_pct: float | None
    mem_mib: float | None


def parse_tres(text: str) -> dict[str, str]:
    """``cpu=00:00:01,gres/gpumem=1234M,gres/gpuutil=87`` as a dict (pure)."""
    out = {}
    for part in (text or "").split(","):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _bytes(v: str | None) -> float | None:
    if not v:
        return None
    try:
        return float(v[:-1]) * _UNITS[v[-1]] if v[-1] in _UNITS else float(v)
    except ValueError:
        return None


def figures(rows: list[dict[str, str]], gpus: int) -> SlurmGpu | None:
    """Slurm's figures from a job's step lines (pure): the busiest step's mean utilisation over ``gpus`` GPUs,
    the largest step peak of memory; None when no step recorded ``gres/gpuutil`` (before 23.02, no NVML)."""
    util = mem = None
    for r in rows:
        ave, mx = parse_tres(r.get("TRESUsageInAve", "")), parse_tres(r.get("TRESUsageInMax", ""))
        if "gres/gpuutil" in ave:
            try:
                u = float(ave["gres/gpuutil"]) / max(1, gpus)
            except ValueError:
                continue
            util = u if util is None else max(util, u)
        m = _bytes(mx.get("gres/gpumem"))
        if m is not None:
            mem = m / (1 << 20) if mem is None else max(mem, m / (1 << 20))
    return None if util is None and mem is None else SlurmGpu(util, mem)


def util_tolerance(seconds: float | None) -> float:
    """How far (percentage points) Slurm's mean may sit from gpuperf's by sampling alone: two standard errors
    of a mean of values in [0, 100] from one sample per ``GATHER_S`` (at most 50 / sqrt(n) each), plus 5."""
    n = max(1.0, (seconds or 0.0) / GATHER_S)
    return 5.0 + 2 * 50.0 / math.sqrt(n)


def disagreement(summary: dict, slurm: SlurmGpu, release: tuple[int, int, int] | None = None) -> str | None:
    """Why Slurm's and gpuperf's figures cannot both be right (pure), None when sampling explains the gap."""
    job = summary.get("job") or {}
    gpus = int(job.get("gpu_count") or 0)
    if gpus > 1 and release is not None and release < (24, 5, 1):
        return None  # Slurm's multi-GPU figures are wrong before 24.05.1: nothing to judge by
    seconds = (summary.get("end") or 0) - (summary.get("start") or 0) or None
    ours = job.get("util_gpu_pct")
    out = []
    if slurm.util_pct is not None and ours is not None:
        tol = util_tolerance(seconds)
        if abs(slurm.util_pct - ours) > tol:
            out.append(f"GPU utilisation: Slurm {slurm.util_pct:.0f}%, gpuperf {ours:.0f}% (sampling explains {tol:.0f} points)")
    peak = job.get("mem_peak_mib")
    if slurm.mem_mib is not None and peak:
        if slurm.mem_mib > peak * (1 + MEM_SLACK):
            out.append(f"GPU memory peak: Slurm {slurm.mem_mib:.0f} MiB above gpuperf's {peak:.0f} MiB (gpuperf samples "
                       "each second: a higher peak is not a sampling gap)")
    return "; ".join(out) or None


def line(summary: dict, slurm: SlurmGpu | None) -> str | None:
    """The report's line: Slurm's figures beside gpuperf's (None when Slurm recorded none)."""
    if slurm is None:
        return None
    job = summary.get("job") or {}
    bits = []
    if slurm.util_pct is not None:
        bits.append(f"GPU util {slurm.util_pct:.0f}% (gpuperf {_pct(job.get('util_gpu_pct'))})")
    if slurm.mem_mib is not None:
        bits.append(f"GPU memory peak {slurm.mem_mib / 1024:.1f} GiB (gpuperf {_gib(job.get('mem_peak_mib'))})")
    return "Slurm's own figures (gres/gpuutil, gres/gpumem): " + ", ".join(bits)


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _gib(x: Any) -> str:
    return "n/a" if not x else f"{x / 1024:.1f} GiB"


def read(slurm: Any, job_id: int, gpus: int) -> SlurmGpu | None:
    """One sacct call for the job's steps (``slurm``: gpuperf.access.slurm.Slurm); None when sacct fails."""
    try:
        out = slurm.run("sacct", "-n", "-P", "-j", str(int(job_id)), "-o", ",".join(FIELDS))
    except Exception:  # noqa: BLE001 - Slurm's figures are extra evidence: the report stands without them
        return None
    rows = [dict(zip(FIELDS, ln.split("|", len(FIELDS) - 1))) for ln in out.splitlines() if ln.count("|") >= 3]
    return figures(rows, gpus)
