"""Samples a job took while its own process ran under a profiler (Nsight Compute, Nsight Systems, a CUPTI
injection tool; the daemon's attribution tells from the process's environment).

Such a tool replays or traces the job's kernels and shares the GPU's performance counters: Nsight
Compute serialises the kernels and replays each once per metric pass, so on a real H100 a bf16 GEMM
ran at 6 TFLOP/s instead of 680 and GPM read tensor 3% (benchmarks/results/gpu/README.md, "Nsight
Compute beside the daemon"). Those readings are the profiler's, not the job's: the activity figures of
such a sample (``COUNTER_FIELDS``) are folded as missing, not as values, and the time is counted
(``profiled_s``, by tool, in ``spans``). Power, memory, clocks, temperature and energy are the GPU's
whatever ran and still fold.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuperf.samplers.base import GpuSample

# GPM/DCGM profiling fields (activity, pipes, occupancy, PCIe/NVLink rates from the same counters) and
# NVML's utilization (the share of time a kernel ran: the replays' schedule, not the job's)
COUNTER_FIELDS: tuple[str, ...] = (
    "util_gpu_pct", "util_mem_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct",
    "fp64_active_pct", "fp32_active_pct", "fp16_active_pct", "int_active_pct", "tensor_hmma_pct",
    "tensor_imma_pct", "tensor_dfma_pct", "tensor_dmma_pct", "pcie_tx_bps", "pcie_rx_bps", "nvlink_tx_bps",
    "nvlink_rx_bps")
MAX_SPANS = 16          # profiled spans kept per GPU; past it the last one stretches (the series' mask errs wide)
_BLANK = dict.fromkeys(COUNTER_FIELDS)


def without_counters(s: GpuSample) -> GpuSample:
    """The sample with its profiling-counter figures missing (None)."""
    return dataclasses.replace(s, **_BLANK)


def add_span(spans: list[list[float]], t0: float, t1: float) -> None:
    """Add the time [t0, t1] to ``spans`` (sorted, merged where they touch, at most MAX_SPANS)."""
    if spans and t0 <= spans[-1][1] + 1e-6:
        spans[-1][1] = max(spans[-1][1], t1)
    elif len(spans) >= MAX_SPANS:
        spans[-1][1] = max(spans[-1][1], t1)
    else:
        spans.append([t0, t1])


def _spans(g: dict) -> list[tuple[float, float]]:
    out = []
    for sp in g.get("profiled_spans") or []:
        if isinstance(sp, (list, tuple)) and len(sp) == 2 and all(isinstance(x, (int, float)) for x in sp):
            out.append((float(sp[0]), float(sp[1])))
    return out


def mask_series(series: dict[str, Any], gpus: list[dict], drop: bool = False) -> dict[str, Any]:
    """The per-GPU series (gpu or "node:gpu" -> {"t": [...], field: [...]}) with the counter fields missing at
    the points inside that GPU's profiled spans (summary GPU entries' ``profiled_spans``), or with ``drop``
    those points left out altogether (for the phases: a stretch of nothing measured is no phase); the rest
    unchanged."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for g in gpus:
        if isinstance(g, dict) and g.get("profiled_spans"):
            spans[str(g.get("gpu"))] = spans[f"{g.get('node')}:{g.get('gpu')}"] = _spans(g)
    out: dict[str, Any] = {}
    for key, ser in series.items():
        sp = spans.get(str(key))
        if not sp or not isinstance(ser, dict) or not isinstance(ser.get("t"), list):
            out[key] = ser
            continue
        hide = [isinstance(t, (int, float)) and any(a <= t <= b for a, b in sp) for t in ser["t"]]
        if drop:
            out[key] = {f: [v for i, v in enumerate(vals) if not (i < len(hide) and hide[i])]
                        if isinstance(vals, list) else vals for f, vals in ser.items()}
        else:
            out[key] = {f: [None if i < len(hide) and hide[i] else v for i, v in enumerate(vals)]
                        if f in _BLANK and isinstance(vals, list) else vals for f, vals in ser.items()}
    return out
