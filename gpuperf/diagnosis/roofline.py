"""How far a job is from its GPU's roofline: achieved throughput estimated from pipe activity, by kind.

Per GPU and kind of math: the kind's activity x its own dense peak (``gpuspecs``), scaled by the SM
clock the GPU ran at over the clock the datasheet's figure holds at; DRAM activity x peak bandwidth.
The kinds: HMMA tensor work (fp16/bf16, and TF32 at half and FP8 at twice that rate per active
cycle: GPM cannot tell them apart, so the estimate prices it at bf16 and states the bracket), IMMA
(INT8 TOPS), DMMA/DFMA (FP64 tensor), the FP16, FP32 and FP64 CUDA-core pipes and the INT32 pipe.
Where the GPU or driver gives no per-kind tensor figure, every tensor-active share is priced at the
bf16 peak (the ``tensor`` kind) with the wider bracket of what it may be (FP64 tensor to FP8/INT8).
The stated errors (``ERROR_PCT_BY_DTYPE``, ``ERROR_BY_KIND``) are the largest seen on workloads that
measured their own rate (benchmarks/results/diag_estimates.md and benchmarks/results/zoo/estimates.md).
"""

from __future__ import annotations

from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.diagnosis.signals import num
from gpuperf.diagnosis.thresholds import DEFAULTS

# Largest error of the estimates on the ground-truth recordings (H100, H200), rounded up with margin:
# bf16 tensor, FP32 pipe and DRAM within 11% (benchmarks/results/diag_estimates.md).
ERROR_PCT = 15.0
# kind -> (summary keys whose max is its activity, peak attribute of GpuSpec, clock attribute, unit)
KINDS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "hmma": (("tensor_hmma_pct",), "tensor_bf16_tflops", "tensor_mhz", "TFLOP/s"),
    "imma": (("tensor_imma_pct",), "tensor_int8_tops", "tensor_mhz", "TOPS"),
    # FP64 tensor: 132 SMs x 256 FLOP/clk x 1980 MHz = 67 TFLOP/s on H100 SXM: the FP clock
    "dmma": (("tensor_dmma_pct", "tensor_dfma_pct"), "tensor_fp64_tflops", "fp_mhz", "TFLOP/s"),
    "fp16": (("fp16_active_pct",), "fp16_tflops", "fp_mhz", "TFLOP/s"),
    "fp32": (("fp32_active_pct",), "fp32_tflops", "fp_mhz", "TFLOP/s"),
    "fp64": (("fp64_active_pct",), "fp64_tflops", "fp_mhz", "TFLOP/s"),
    "int": (("int_active_pct",), "int32_tops", "fp_mhz", "TOPS"),
    # fallback: any tensor activity, kind unknown, priced at bf16
    "tensor": (("tensor_active_pct",), "tensor_bf16_tflops", "tensor_mhz", "TFLOP/s"),
}
TENSOR_KINDS = ("hmma", "imma", "dmma")
# What each kind's work is, for the report: the datatypes it covers
DTYPES = {"hmma": "fp16/bf16 (TF32, FP8) tensor", "imma": "INT8 tensor", "dmma": "FP64 tensor",
          "fp16": "FP16 non-tensor", "fp32": "FP32 non-tensor", "fp64": "FP64 non-tensor", "int": "INT32",
          "tensor": "tensor (kind not measured)"}
# Stated error per datatype (percent): the largest judged error of the rate the report gives for the working
# phase that covered each workload's own timed work (the zoo's benchmarks/results/zoo/estimates.md, H100 and H200;
# the ground-truth benchmarks/results/diag_estimates.md), rounded up to the next 5%, never under the ground
# truth's 15%. int8: torch._int_mm reached 55-61% of IMMA activity x the INT8 peak (63.6% off); int32: the integer
# pipe's lanes x clock under-counts an integer mix by 19.5% (multiply-adds run on the FMA pipe as well); fp32: a
# CuPy n-body (rsqrt and FMAs per pair) reads +22.6% (the FP32 pipe's activity counts more than the 20 FLOPs per
# interaction it counts). "none": host<->device copies (PCIe bytes per second). tests/unit/test_zoo_errors.py
# re-derives them.
ERROR_PCT_BY_DTYPE: dict[str, float] = {"bf16": 15.0, "fp16": 15.0, "fp8": 15.0, "tf32": 15.0, "fp32": 25.0,
                                        "fp64": 15.0, "int8": 65.0, "int32": 20.0, "none": 15.0}
# ... and per kind of math, the largest over the datatypes it covers (HMMA: fp16/bf16, TF32, FP8 within
# its bracket); the bf16-priced fallback states the bf16 bound and its note the 15x of FP64 tensor work.
ERROR_BY_KIND: dict[str, float] = {
    "hmma": max(ERROR_PCT_BY_DTYPE[d] for d in ("bf16", "fp16", "fp8", "tf32")), "imma": ERROR_PCT_BY_DTYPE["int8"],
    "dmma": ERROR_PCT_BY_DTYPE["fp64"], "fp16": ERROR_PCT_BY_DTYPE["fp16"], "fp32": ERROR_PCT_BY_DTYPE["fp32"],
    "fp64": ERROR_PCT_BY_DTYPE["fp64"], "int": ERROR_PCT_BY_DTYPE["int32"], "dram": ERROR_PCT, "tensor": ERROR_PCT}
# Per active cycle, HMMA work in TF32 does half and FP8 twice the bf16 FLOPs: the bracket of an HMMA estimate
HMMA_BRACKET = (0.5, 2.0)
# Without per-kind metrics a tensor-active share may be FP64 tensor work, priced at bf16 up to
# bf16/FP64-tensor = 14.8x too high (H100: 989/67; FACTS.md: a DMMA GEMM read 575 for 40 achieved),
# or FP8, 2x too low: the fallback says so rather than claim the bf16 figure's error.
LABEL = f"estimate: activity x its kind's dense peak at the clock run, ±{ERROR_PCT:.0f}% (HMMA at bf16: TF32 half, FP8 2x)"


def _kind_rate(g: dict, spec: gpuspecs.GpuSpec, kind: str, clk: float | None) -> tuple[float | None, float | None]:
    """(activity %, rate) of one kind on one GPU; rate None where the model has no such peak."""
    keys, peak_attr, mhz_attr, _ = KINDS[kind]
    vals = [v for v in (num(g.get(k)) for k in keys) if v is not None]
    if not vals:
        return None, None
    act = max(vals)
    peak, mhz = getattr(spec, peak_attr), getattr(spec, mhz_attr)
    if peak is None:
        return act, None
    return act, act / 100.0 * peak * (clk / mhz if clk and mhz else 1.0)


def by_kind(g: dict) -> bool:
    """Whether the GPU's figures carry tensor activity by kind (GPM's HMMA/IMMA/DMMA metrics, DCGM's fields)."""
    return any(num(g.get(k)) is not None for kind in TENSOR_KINDS for k in KINDS[kind][0])


def gpu_estimate(g: dict, spec: gpuspecs.GpuSpec) -> dict[str, Any]:
    """One GPU's estimated rate per kind, the busiest FLOP rate (``tflops``) and DRAM GB/s."""
    clk = num(g.get("sm_clock_mhz"))
    measured = by_kind(g)     # once: the controller runs this over every GPU of a job of thousands of nodes
    kinds = [k for k in KINDS if k != "tensor"] if measured else ["tensor", "fp16", "fp32", "fp64", "int"]
    out: dict[str, Any] = {"by_kind": measured}
    for k in KINDS:
        act, r = _kind_rate(g, spec, k, clk) if k in kinds else (None, None)
        out[f"{k}_act"], out[f"{k}_rate"] = act, r
    # the figures older readers know: tensor (all tensor kinds' FLOPs), FP32, FP64 pipes
    tensor_flops = [out[f"{k}_rate"] for k in ("hmma", "dmma", "tensor") if out[f"{k}_rate"] is not None]
    out["tensor_tflops"] = sum(tensor_flops) if tensor_flops else None
    out["fp32_tflops"], out["fp64_tflops"] = out["fp32_rate"], out["fp64_rate"]
    flops = [out[f"{k}_rate"] for k in kinds if k not in ("imma", "int") and out[f"{k}_rate"] is not None]
    out["tflops"] = max(flops) if flops else None
    dram = num(g.get("dram_active_pct"))
    out["dram_gbps"] = dram / 100.0 * spec.mem_bw_gbps if dram is not None else None
    return out


def _mean(vals: list[float | None], weights: list[float]) -> float | None:
    pairs = [(v, w) for v, w in zip(vals, weights) if v is not None]
    den = sum(w for _, w in pairs)
    if not pairs:
        return None
    return sum(v * w for v, w in pairs) / den if den > 0 else sum(v for v, _ in pairs) / len(pairs)


def _kind(kinds: dict[str, list]) -> str | None:
    """The kind of math with the highest activity. The integer pipe computes every load's and store's
    address, so it is the job's kind only near its roof with no floating-point kind past the compute bar."""
    flops = {k: v[0] for k, v in kinds.items() if k != "int"}
    best = max(flops, key=flops.get) if flops else None
    act = kinds.get("int", [None])[0]
    if act is not None and act >= DEFAULTS["roof_near_pct"] and (best is None or flops[best] < DEFAULTS["compute_pipe_pct"]):
        return "int"
    return best


def bracket(kind: str, spec: gpuspecs.GpuSpec) -> tuple[float, float]:
    """(low, high) factors on a bf16-priced tensor estimate: HMMA work may be TF32 (half) or FP8 (twice);
    tensor work of no measured kind may also be FP64 tensor (its peak over bf16's: 1/15 on Hopper) or INT8
    (twice): the fallback's wider stated error."""
    lo, hi = HMMA_BRACKET
    hi = hi if spec.fp8 else 1.0
    if kind == "tensor":
        if spec.tensor_fp64_tflops:
            lo = min(lo, spec.tensor_fp64_tflops / spec.tensor_bf16_tflops)
        if spec.tensor_int8_tops:
            hi = max(hi, spec.tensor_int8_tops / spec.tensor_bf16_tflops)
    return lo, hi


def rate(roof: dict[str, Any], kind: str) -> float | None:
    """A kind's estimated rate from a job estimate (None: not measured or no peak)."""
    v = (roof.get("kinds") or {}).get(kind)
    return v[1] if v else None


def job_estimate(gpus: list[dict], spec: gpuspecs.GpuSpec) -> dict[str, Any]:
    """The job's estimates: per-GPU means (weighted by seconds), the job total, distance to the roof.

    ``kinds``: {kind: [activity %, rate]} for the kinds measured (rate None where the model has no peak)."""
    per = [gpu_estimate(g, spec) for g in gpus]
    # the weights once: the controller runs this over every GPU of a multi-node job
    w = [num(g.get("seconds")) or 0.0 for g in gpus]
    out: dict[str, Any] = {k: _mean([p[k] for p in per], w)
                           for k in ("tensor_tflops", "fp32_tflops", "fp64_tflops", "tflops", "dram_gbps")}
    kinds = {}
    for k in KINDS:
        act = _mean([p[f"{k}_act"] for p in per], w)
        if act is not None and (act >= 0.05 or k in ("tensor", "hmma")):
            r = _mean([p[f"{k}_rate"] for p in per], w)
            kinds[k] = [round(act, 1), None if r is None else round(r, 1)]
    # kinds not measured, or idle but for the tensor kinds, are left out (the summary travels in a 4 KiB
    # AdminComment per node)
    out["kinds"] = kinds
    out["by_kind"] = bool(per) and all(p["by_kind"] for p in per)
    t = out["tflops"]
    out["tflops_job"] = sum(p["tflops"] for p in per if p["tflops"] is not None) if t is not None else None
    kind = _kind(kinds)
    out["kind"] = kind
    out["kind_error_pct"] = ERROR_BY_KIND.get(kind or "", ERROR_PCT)
    if kind in ("hmma", "tensor") and rate(out, kind) is not None:
        lo, hi = bracket(kind, spec)
        out["bracket"] = [round(rate(out, kind) * lo, 1), round(rate(out, kind) * hi, 1)]
    # distance to the roof: the busiest pipe as a share of its own peak, and the FLOPs of the tensor peak
    out["compute_roof_pct"] = kinds[kind][0] if kind else None
    out["tensor_peak_pct"] = 100.0 * t / spec.tensor_bf16_tflops if t is not None else None
    out["dram_roof_pct"] = _mean([num(g.get("dram_active_pct")) for g in gpus], w)
    out["clock_scaled"] = spec.tensor_mhz is not None and any(num(g.get("sm_clock_mhz")) for g in gpus)
    return out


# figures that are a job's means over its whole time, rescaled to its working phases: activities (percent of a
# peak) by their activity's factor; rates (activity x peak x clock) by it and the clock's as well
_ACTIVITIES = ("compute_roof_pct", "dram_roof_pct", "dram_gbps")
_RATES = ("tensor_tflops", "fp32_tflops", "fp64_tflops", "tflops", "tflops_job", "tensor_peak_pct")


def over_working(roof: dict[str, Any], factors: dict[str, float], share: float) -> None:
    """Rescale a job estimate (``job_estimate``, in place) from the job's whole time to its working phases.

    ``factors``: each series field's mean over the working phases over its job-wide mean
    (``phases.working_factors``): an activity is multiplied by its own (start-up, a ramp into the work and an idle
    tail did part of it, not none), a rate by its activity's and the SM clock's (the work's clock, not the job's
    mean over idle stretches); an activity without a factor is divided by the working share (``share``,
    percent), as if the rest did none. DRAM bandwidth does not scale with the SM clock."""
    def f(*fields: str) -> float:
        vals = [factors[k] for k in fields if k in factors]
        return max(vals) if vals else 100.0 / share

    clk = factors.get("sm_clock_mhz", 1.0) if roof.get("clock_scaled") else 1.0
    act = {k: f(*KINDS[k][0]) for k in KINDS}
    main = act.get(roof.get("kind") or "", f("tensor_active_pct", "fp16_active_pct", "fp32_active_pct",
                                             "fp64_active_pct"))
    by = {"tensor_tflops": act["tensor"], "fp32_tflops": act["fp32"], "fp64_tflops": act["fp64"],
          "dram_gbps": f("dram_active_pct"), "dram_roof_pct": f("dram_active_pct")}
    for k in _ACTIVITIES + _RATES:
        if isinstance(roof.get(k), (int, float)):
            roof[k] = round(roof[k] * by.get(k, main) * (clk if k in _RATES else 1.0), 1)
    roof["kinds"] = {k: [round(v[0] * act.get(k, main), 1),
                         None if v[1] is None else round(v[1] * act.get(k, main) * clk, 1)]
                     for k, v in (roof.get("kinds") or {}).items()}
    if roof.get("bracket"):
        roof["bracket"] = [round(x * main * clk, 1) for x in roof["bracket"]]
    roof["working_share_pct"] = round(share, 1)
