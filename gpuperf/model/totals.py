"""A job's totals over its GPUs: the job-wide figures of a summary (its ``job`` member) from the per-GPU
ones, means weighted by each GPU's seconds, sums, maxima and spreads. The activity figures, the no-kernel
share and the link rates weigh only the seconds they were read: time under a profiler (``profiled_s``) is
missing from them. The summary (``model.summary``) and the diagnosis (restricting a job to the GPUs it
used) both compute them here.
"""

from __future__ import annotations

from typing import Any, Iterable

# the per-GPU percentages a job's totals average by time
PCT_KEYS = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct", "fp16_active_pct",
            "fp32_active_pct", "fp64_active_pct", "int_active_pct", "tensor_hmma_pct", "tensor_imma_pct",
            "tensor_dfma_pct", "tensor_dmma_pct", "util_gpu_pct")
J_PER_KWH = 3.6e6


def rounded(x: float | None, nd: int = 1) -> float | None:
    """``round(x, nd)``, None kept."""
    return None if x is None else round(x, nd)


def measured_seconds(g: dict) -> float:
    """A GPU's seconds whose activity figures were read (not under a profiler)."""
    return max(0.0, (g.get("seconds") or 0.0) - (g.get("profiled_s") or 0.0))


def _wmean(gpus: list[dict], key: str, measured: bool = False) -> float | None:
    """Mean of one per-GPU figure weighted by each GPU's seconds (``measured``: only those it was read);
    GPUs without the figure left out."""
    num = den = 0.0
    for g in gpus:
        v = g.get(key)
        if v is None:
            continue
        w = measured_seconds(g) if measured else g.get("seconds") or 0.0
        num += v * w
        den += w
    return num / den if den > 0 else None


def _sum(gpus: Iterable[dict], key: str) -> float | None:
    vals = [g[key] for g in gpus if g.get(key) is not None]
    return sum(vals) if vals else None


def _max(gpus: Iterable[dict], key: str) -> float | None:
    vals = [g[key] for g in gpus if g.get(key) is not None]
    return max(vals) if vals else None


def _spread(gpus: list[dict], key: str) -> float | None:
    vals = [g[key] for g in gpus if g.get(key) is not None]
    return max(vals) - min(vals) if len(vals) >= 2 else None


def wasted_gpu_seconds(g: dict) -> float:
    """GPU time not spent on SM work: seconds × (1 − SM active); without SM activity, idle seconds. Time under a
    profiler is not counted: what the job did then is not known."""
    seconds = measured_seconds(g)
    sm = g.get("sm_active_pct")
    if sm is not None:
        return seconds * max(0.0, 1.0 - sm / 100.0)
    util = g.get("util_gpu_pct")
    if util is not None:
        return seconds * max(0.0, 1.0 - util / 100.0)
    return g.get("idle_s") or 0.0


def job_totals(gpus: list[dict]) -> dict[str, Any]:
    """The job-wide figures from its per-GPU summaries."""
    out: dict[str, Any] = {"gpu_count": len(gpus)}
    seconds = sum(g.get("seconds") or 0.0 for g in gpus)
    out["gpu_hours"] = rounded(seconds / 3600.0, 3)
    out["wasted_gpu_hours"] = rounded(sum(wasted_gpu_seconds(g) for g in gpus) / 3600.0, 3)
    for key in PCT_KEYS:
        out[key] = rounded(_wmean(gpus, key, measured=True))
    out["sm_clock_mhz"] = rounded(_wmean(gpus, "sm_clock_mhz"))
    util, sm = out["util_gpu_pct"], out["sm_active_pct"]
    out["util_minus_sm_pct"] = rounded(util - sm) if util is not None and sm is not None else None
    out["mem_peak_mib"] = _max(gpus, "mem_peak_mib")
    out["mem_peak_pct"] = _max(gpus, "mem_peak_pct")
    out["power_mean_w"] = rounded(_sum(gpus, "power_mean_w"))          # all GPUs together
    out["power_max_w"] = _max(gpus, "power_max_w")                # the highest of one GPU
    out["power_limit_w"] = _max(gpus, "power_limit_w")
    out["power_mean_pct_of_limit"] = rounded(_wmean([dict(g, x=100.0 * g["power_mean_w"] / g["power_limit_w"])
                                                for g in gpus if g.get("power_mean_w") is not None
                                                and g.get("power_limit_w")], "x"))
    energy = _sum(gpus, "energy_j")
    out["energy_j"] = rounded(energy, 0)
    out["energy_kwh"] = rounded(energy / J_PER_KWH, 4) if energy is not None else None
    for k in ("nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes"):
        out[k] = _sum(gpus, k)
    # mean rate per GPU, the figure comparable with one GPU's link bandwidth
    out["nvlink_bps"] = rounded(_wmean(gpus, "nvlink_bps", measured=True), 0)
    out["pcie_bps"] = rounded(_wmean(gpus, "pcie_bps", measured=True), 0)
    thr: dict[str, float] = {}
    for g in gpus:
        for k, v in (g.get("throttle_s") or {}).items():
            thr[k] = rounded(thr.get(k, 0.0) + v)
    out["throttle_s"] = thr
    idle = _sum(gpus, "idle_s")
    out["idle_s"] = rounded(idle)
    measured = sum(measured_seconds(g) for g in gpus)
    out["idle_pct"] = rounded(100.0 * idle / measured) if idle is not None and measured > 0 else None
    out["temp_max_c"] = _max(gpus, "temp_max_c")
    out["sm_active_spread_pct"] = rounded(_spread(gpus, "sm_active_pct"))
    out["util_spread_pct"] = rounded(_spread(gpus, "util_gpu_pct"))
    profiled = _sum(gpus, "profiled_s")
    if profiled:
        # GPU-seconds under a profiler, by tool: the figures above leave them out
        out["profiled_s"] = rounded(profiled)
        tools: dict[str, float] = {}
        for g in gpus:
            for tool, sec in (g.get("profilers") or {}).items():
                tools[tool] = rounded(tools.get(tool, 0.0) + (sec or 0.0))
        out["profilers"] = tools
    return out
