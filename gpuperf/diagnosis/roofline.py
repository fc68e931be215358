"""How far a job is from its GPU's roofline: achieved throughput estimated from pipe activity.

Per GPU: tensor activity x the model's dense bf16 peak, FP32/FP64 pipe activity x their peaks, each
scaled by the SM clock the GPU ran at over the clock the datasheet's figure holds at; DRAM activity x
peak bandwidth. Checked against workloads that measure their own TFLOP/s and GB/s
(benchmarks/results/diag_estimates.md): within ERROR_PCT for bf16 and FP32 math and for DRAM; an
FP8 GEMM does twice the FLOPs per tensor-active cycle, so the tensor figure is its floor (x2 its ceiling).
"""

from __future__ import annotations

from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.diagnosis.signals import num

# Largest error of the estimates on the ground-truth recordings (H100, H200), rounded up with margin.
ERROR_PCT = 15.0
LABEL = (f"estimate: pipe activity x the model's dense peak at the clock the GPU ran; within ±{ERROR_PCT:.0f}% "
         "on workloads that measured their own rate (FP8 math: up to 2x the tensor figure)")


def gpu_estimate(g: dict, spec: gpuspecs.GpuSpec) -> dict[str, float | None]:
    """One GPU's estimated TFLOP/s (tensor, FP32, FP64, the busiest) and DRAM GB/s."""
    clk = num(g.get("sm_clock_mhz"))

    def pipe(key: str, peak: float, mhz: float | None) -> float | None:
        v = num(g.get(key))
        if v is None:
            return None
        return v / 100.0 * peak * (clk / mhz if clk and mhz else 1.0)

    tensor = pipe("tensor_active_pct", spec.tensor_bf16_tflops, spec.tensor_mhz)
    fp32 = pipe("fp32_active_pct", spec.fp32_tflops, spec.fp_mhz)
    fp64 = pipe("fp64_active_pct", spec.fp64_tflops, spec.fp_mhz)
    known = [x for x in (tensor, fp32, fp64) if x is not None]
    dram = num(g.get("dram_active_pct"))
    return {"tensor_tflops": tensor, "fp32_tflops": fp32, "fp64_tflops": fp64,
            "tflops": max(known) if known else None,
            "dram_gbps": dram / 100.0 * spec.mem_bw_gbps if dram is not None else None}


def _mean(vals: list[float | None], weights: list[float]) -> float | None:
    pairs = [(v, w) for v, w in zip(vals, weights) if v is not None]
    den = sum(w for _, w in pairs)
    if not pairs:
        return None
    return sum(v * w for v, w in pairs) / den if den > 0 else sum(v for v, _ in pairs) / len(pairs)


def job_estimate(gpus: list[dict], spec: gpuspecs.GpuSpec) -> dict[str, Any]:
    """The job's estimates: per-GPU means (weighted by seconds), the job total, distance to the roof."""
    per = [gpu_estimate(g, spec) for g in gpus]
    # the weights once: the controller runs this over every GPU of a multi-node job
    w = [num(g.get("seconds")) or 0.0 for g in gpus]
    out: dict[str, Any] = {k: _mean([p[k] for p in per], w) for k in ("tensor_tflops", "fp32_tflops", "fp64_tflops",
                                                                     "tflops", "dram_gbps")}
    t = out["tflops"]
    out["tflops_job"] = sum(p["tflops"] for p in per if p["tflops"] is not None) if t is not None else None
    # distance to the roof: the busiest math pipe as a share of its own peak, and of the tensor peak
    pipes = [_mean([num(g.get(k)) for g in gpus], w) for k in ("tensor_active_pct", "fp32_active_pct", "fp64_active_pct")]
    known = [p for p in pipes if p is not None]
    out["compute_roof_pct"] = max(known) if known else None
    out["tensor_peak_pct"] = 100.0 * t / spec.tensor_bf16_tflops if t is not None else None
    out["dram_roof_pct"] = _mean([num(g.get("dram_active_pct")) for g in gpus], w)
    out["clock_scaled"] = spec.tensor_mhz is not None and any(num(g.get("sm_clock_mhz")) for g in gpus)
    return out
