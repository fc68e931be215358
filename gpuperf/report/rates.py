"""The job's estimated rates in words, the same for every renderer (terminal, HTML, mail): pure.

The stored judgement carries two rates (``diagnosis.roofline``): the rate while the job worked (over its
working phases, ``covers``) and the job's average (``job_average``, start-up and idle stretches included).
Each is said with what it covers, the kind of math it counts, that kind's peak and the kind's stated error,
so no reader quotes a job average as the rate of the work, nor an FP32 rate against the bf16 tensor peak.
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis import roofline

METHOD = "estimate: each kind of math's activity x that kind's dense peak at the clock the GPU ran; DRAM activity x its peak"

def _n(x: Any) -> str:
    return "n/a" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.0f}"


def _peak(e: dict[str, Any], kind: str | None) -> float | None:
    """The dense peak of ``kind`` from the stored estimates (None where the summary does not carry it)."""
    if kind in ("hmma", "tensor"):
        return e.get("peak_tensor_tflops")
    if kind == "fp32":
        return e.get("peak_fp32_tflops")
    return None


def working_and_average(s: dict) -> tuple[str, str | None] | None:
    """(the rate while the job worked, the job's average or None when the two cover the same time), in words;
    None when the summary has no estimate (unknown GPU model, no GPUs)."""
    e = s.get("estimates") or {}
    if not e.get("model"):
        return None
    roof = (s.get("diagnosis") or {}).get("roofline") or {}
    kind = roof.get("kind") or e.get("kind")
    unit = roofline.KINDS[kind][3] if kind in roofline.KINDS else "TFLOP/s"
    what = roofline.DTYPES.get(kind, "math") if kind else "math"
    err = roof.get("kind_error_pct", e.get("error_pct"))
    tf = roof.get("tflops", e.get("tflops_est_per_gpu"))
    bw = roof.get("dram_gbps", e.get("dram_gbps"))
    peak = _peak(e, kind)
    covers = roof.get("covers") or "the whole job"
    work = (f"{_n(tf)} {unit} per GPU of {what} work" + (f" (of {_n(peak)} peak)" if peak else "")
            + f", DRAM {_n(bw)} of {_n(e.get('peak_mem_bw_gbps'))} GB/s, ±{_n(err)}%, over {covers}")
    avg = roof.get("job_average")
    if not isinstance(avg, dict):
        return work, None
    return work, (f"{_n(avg.get('rate', avg.get('tflops')))} {unit} per GPU, DRAM {_n(avg.get('dram_gbps'))} GB/s, "
                  f"over {avg.get('covers') or 'the whole job'}")


def lines(s: dict) -> list[str]:
    """'While working: …' and, where it differs, 'Job average: …'; empty without an estimate."""
    got = working_and_average(s)
    if got is None:
        return []
    work, avg = got
    return [f"While working: ≈ {work}"] + ([f"Job average: ≈ {avg}"] if avg else [])
