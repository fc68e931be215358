"""The lines gpuperf adds to Slurm's end-of-job mail (``gpuperf-mail``): pure, from summaries.

One job: its headline in words, its phases and estimated rate (the stored judgement every report shows) and
its top recommendation. A whole array (Slurm's "Array Summary"
mail): one line per task, the most wasteful first, at most ``MAX_TASKS``.
"""

from __future__ import annotations

from gpuperf.report import rates
from gpuperf.report.units import duration, energy, gpu_time, pct

MAX_TASKS = 10


def headline(name: str, s: dict) -> str:
    """'Job 8_3: compute-bound, 2 GPUs, 1.50 GPU-hours (12.0 GPU-minutes wasted), SM active 81%, 0.42 kWh'."""
    job, diag = s.get("job") or {}, s.get("diagnosis") or {}
    gpus = job.get("gpu_count") or 0
    cls = str(diag.get("class") or "unknown").replace("_", "-")
    parts = [f"{cls}", f"{gpus} GPU" + ("s" if gpus != 1 else ""),
             f"{gpu_time(job.get('gpu_hours'))}" + (f" ({gpu_time(job.get('wasted_gpu_hours'))} wasted)"
                                                     if (job.get("wasted_gpu_hours") or 0) > 0 else ""),
             f"SM active {pct(job.get('sm_active_pct'))}", energy(job.get("energy_kwh"))]
    if job.get("profiled_s"):
        parts.append("figures missing under a profiler")
    if (s.get("quality") or {}).get("partial"):
        parts.append("partial data")
    return f"Job {name}: " + ", ".join(parts)


def phases_line(s: dict) -> str | None:
    """'Phases: 25 s start-up 17%, 1.2 min compute-bound 83%' from the stored judgement; None for one phase."""
    got = [ph for ph in (s.get("diagnosis") or {}).get("phases") or [] if isinstance(ph, dict)]
    if not got:
        return None
    return "Phases: " + ", ".join(
        f"{duration((ph.get('end') or 0) - (ph.get('start') or 0))} {str(ph.get('class') or '?').replace('_', '-')} "
        f"{pct(ph.get('share_pct'))}" for ph in got)


def job_lines(name: str, s: dict) -> list[str]:
    """The headline, the phases and the estimated rate (as every report shows them), the top recommendation,
    and where the full report is."""
    recs = (s.get("diagnosis") or {}).get("recommendations") or []
    out = [headline(name, s)] + [x for x in (phases_line(s),) if x] + rates.lines(s)
    if recs:
        out.append(f"Top recommendation: {recs[0]}")
    out.append(f"Full report: gpuperf report {name}")
    return out


def body(found: list[tuple[str, dict]], missing: int = 0) -> str:
    """The block appended to the mail: one job's lines, or one headline per task of an array."""
    if len(found) == 1 and not missing:
        lines = job_lines(*found[0])
    else:
        ranked = sorted(found, key=lambda ns: -((ns[1].get("job") or {}).get("wasted_gpu_hours") or 0.0))
        lines = [headline(n, s) for n, s in ranked[:MAX_TASKS]]
        more = len(found) - MAX_TASKS + missing
        if more > 0:
            lines.append(f"... and {more} more task(s): gpuperf jobs {found[0][0].split('_')[0]}")
    return "\n".join(["", "-- gpuperf GPU efficiency --", *lines, ""])
