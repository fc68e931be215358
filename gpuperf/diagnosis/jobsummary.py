"""A job's summary as a node sends it and the controller keeps it: the job model's figures with their
estimates and diagnosis.

``node_summary(aggregates, context)`` is one node's (``gpuperf.summary.v1``); ``merge(node_summaries,
expected_nodes, thresholds)`` joins a multi-node job's. The figures are the job model's
(``model.summary.node_part``, ``join``); here they get the throughput and roofline ``estimates`` and
the ``diagnosis`` (``diagnose``), which read those figures, so the model never imports the diagnosis.
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis import diagnose, frameworks, roofline
from gpuperf.model import gpuspecs, summary
from gpuperf.model.summary import SCHEMA  # noqa: F401 - the summary's schema, with the summary's makers
from gpuperf.model.totals import rounded as _r


def node_summary(aggregates: dict, context: dict) -> dict:
    """One node's summary from its aggregates (``model.summary.node_part``'s context, and ``thresholds``
    and ``series``: the diagnosis' overrides and the job's series, for its phases)."""
    s = summary.node_part(aggregates, context)
    s["frameworks"] = frameworks.union([aggregates.get("frameworks")])    # what its CUDA processes mapped, or None
    s["estimates"], roof = estimates(s["gpus"])
    series = context.get("series") if isinstance(context.get("series"), dict) else None
    s["diagnosis"] = diagnose(s, series, thresholds=context.get("thresholds"), roof=roof).to_dict()
    return s


PHASE_SERIES = "phase_series"   # a node summary's coarse series (the node's ``context["series"]``): its phases' evidence


def merge(node_summaries: list[dict], expected_nodes: list[str], thresholds: dict | None = None) -> dict:
    """One summary for a multi-node job (``model.summary.join``), estimated and diagnosed from every node's
    phase series (``PHASE_SERIES``, as each node judged its own part); a job of one node that reported keeps
    that node's diagnosis. The series are evidence, not part of the job's summary."""
    out = summary.join(node_summaries, expected_nodes)
    out.pop(PHASE_SERIES, None)
    out["frameworks"] = frameworks.union([n.get("frameworks") for n in node_summaries if isinstance(n, dict)])
    if isinstance(out.get("diagnosis"), dict):
        return out
    out["estimates"], roof = estimates(out["gpus"])
    series = phase_series(node_summaries)
    out["diagnosis"] = diagnose(out, series, thresholds=thresholds, roof=roof).to_dict()
    sent = len({k.rsplit(":", 1)[0] for k in series or {}})
    if 0 < sent < len(out.get("nodes") or []):
        # a large job's merge reads a spread of its nodes' series (controller.mergework.trim_for): said, not hidden
        out["diagnosis"]["notes"].append(f"phases from the series of {sent} of the job's {len(out['nodes'])} nodes, "
                                         "spread evenly over them")
    return out


def phase_series(node_summaries: list[dict]) -> dict | None:
    """Every node's phase series, keyed ``node:gpu`` as the merged summary's GPUs are; None when no node sent any."""
    out = {f"{(s.get('nodes') or ['?'])[0]}:{gpu}": ser for s in node_summaries if isinstance(s, dict)
           and isinstance(s.get(PHASE_SERIES), dict) for gpu, ser in s[PHASE_SERIES].items()}
    return out or None


def estimates(gpus: list[dict]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Throughput and roofline estimates from activity × the model's dense peak at the clock run (labelled),
    and the ``roofline.job_estimate`` they came from (None: no single known model), which the diagnosis
    reuses rather than computing it again over every GPU."""
    names = sorted({g.get("name") or "" for g in gpus})
    spec = gpuspecs.lookup(names[0]) if len(names) == 1 else None
    out: dict[str, Any] = {"label": roofline.LABEL}
    if spec is None:
        out["model"] = None
        if not names:
            out["note"] = "no GPUs"
        elif len(names) > 1:
            out["note"] = "mixed GPU models"
        else:
            out["note"] = (f"GPU model {names[0]} not in gpuperf's table" if names[0]
                           else "GPU model not reported by the sampler")
        return out, None
    est = roofline.job_estimate(gpus, spec)
    out.update(model=spec.model, source=spec.source, peak_tensor_tflops=spec.tensor_bf16_tflops,
               peak_fp32_tflops=spec.fp32_tflops, peak_mem_bw_gbps=spec.mem_bw_gbps, fp8=spec.fp8,
               ridge_flop_per_byte=_r(spec.tensor_bf16_tflops * 1e3 / spec.mem_bw_gbps),
               error_pct=est["kind_error_pct"], clock_scaled=est["clock_scaled"],
               kind=est["kind"], by_kind=est["by_kind"])
    # the busier of the tensor and FP pipes sets the compute estimate
    tflops, bw = est["tflops"], est["dram_gbps"]
    out["tensor_tflops_est"] = _r(est["tensor_tflops"])
    out["tflops_est_per_gpu"] = _r(tflops)
    out["tflops_est_job"] = _r(est["tflops_job"])
    out["dram_gbps"] = _r(bw)
    if tflops is not None and bw:
        intensity = tflops * 1e3 / bw                     # FLOP per byte of DRAM traffic
        attainable = min(spec.tensor_bf16_tflops, intensity * spec.mem_bw_gbps / 1e3)
        out["intensity_flop_per_byte"] = _r(intensity, 2)
        out["roofline_side"] = "memory" if intensity < out["ridge_flop_per_byte"] else "compute"
        out["attainable_tflops"] = _r(attainable)
        out["roofline_pct"] = _r(100.0 * tflops / attainable) if attainable > 0 else None
    return out, est
