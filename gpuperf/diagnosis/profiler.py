"""A job that ran a profiler on its GPUs (Nsight Compute, Nsight Systems, a CUPTI injection tool): the daemon
kept the profiled samples' activity figures out (``model/profiled.py``), so no class is made from them.

Most of the GPU time under a profiler (``profiler_share_pct``): no class (``no_data``), the reason said,
and no advice drawn from the profiler's figures (a job under Nsight Compute reads as input-bound: the
replays leave the GPU waiting between kernels). Less: the class from the rest of the time, its series'
profiled points left out of the phases. Either way a note per GPU says what ran and for how long.
"""

from __future__ import annotations

from gpuperf.diagnosis.signals import num

# why a tool's time has no figures of the job's, by tool (the daemon's names, daemon/attribution.PROFILERS)
_WHY = {
    "Nsight Compute": "its counters counted the profiler's kernel replays (one kernel at a time, each replayed "
                      "per metric pass), not the job's work",
    "Nsight Systems": "a tracing profiler in the job's process takes the GPU's performance counters and adds its "
                      "own work to every kernel launch it traces",
}
_WHY_OTHER = ("a CUPTI tool injected into the job's process can replay kernels and take the GPU's performance "
              "counters, so the readings are not the job's alone")
RECOMMENDATION = ("for gpuperf's diagnosis, run the job (or a representative part) once without the profiler; "
                  "the profiler's own report has the profiled kernels' figures")


def profiled_s(gpus: list[dict]) -> float:
    """GPU-seconds under a profiler over the summary's GPUs."""
    return sum(max(0.0, num(g.get("profiled_s")) or 0.0) for g in gpus if isinstance(g, dict))


def share_pct(gpus: list[dict]) -> float:
    """The share of the GPU-seconds under a profiler, percent (0 with no GPU time)."""
    total = sum(num(g.get("seconds")) or 0.0 for g in gpus if isinstance(g, dict))
    return 100.0 * min(1.0, profiled_s(gpus) / total) if total > 0 else 0.0


def _tool(g: dict) -> str:
    tools = {str(k): num(v) or 0.0 for k, v in (g.get("profilers") or {}).items()} if isinstance(
        g.get("profilers"), dict) else {}
    return max(tools, key=lambda k: tools[k]) if tools else "a profiler"


def notes(gpus: list[dict]) -> list[str]:
    """One note per GPU that ran under a profiler: which, how long, and why its figures then are missing."""
    multi = len({g.get("node") for g in gpus if isinstance(g, dict)}) > 1
    out = []
    for g in gpus:
        sec = num(g.get("profiled_s")) if isinstance(g, dict) else None
        if not sec or sec <= 0:
            continue
        tool = _tool(g)
        where = f"{g.get('node')}:{g.get('gpu')}" if multi else str(g.get("gpu"))
        of = num(g.get("seconds"))
        span = f"{sec:.0f} s" + (f" of its {of:.0f} s" if of else "")
        out.append(f"a profiler ({tool}) ran on GPU {where} for {span}: {_WHY.get(tool, _WHY_OTHER)}, so its SM, "
                   "tensor, DRAM, pipe, PCIe/NVLink and utilization figures for that time are missing, not zero "
                   "(power, memory and energy are the GPU's and stay)")
    return out


def evidence(gpus: list[dict], share: float) -> list[str]:
    """Why a job mostly under a profiler gets no class."""
    tools = sorted({_tool(g) for g in gpus if isinstance(g, dict) and (num(g.get("profiled_s")) or 0) > 0})
    return [f"{share:.0f}% of the job's GPU time ran under a profiler ({', '.join(tools)}): its figures are the "
            "profiler's, so no class is given from them"]

