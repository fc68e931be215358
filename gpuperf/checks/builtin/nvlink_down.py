"""nvlink_down: an NVLink expected active is inactive, or its error counters grew since the last clean check."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register, selected_gpus

CODE = "nvlink_down"


def error_growth(links: list[dict[str, Any]], baseline: dict[str, dict[str, int]]) -> list[str]:
    """'link 3 crc_flit +12' for each counter above its baseline (a counter below it was reset: no growth)."""
    grown = []
    for link in links:
        before = baseline.get(str(link.get("link"))) or {}
        for name, value in (link.get("errors") or {}).items():
            if value is None or before.get(name) is None:
                continue
            delta = int(value) - int(before[name])
            if delta > 0:
                grown.append((str(link.get("link")), name, delta))
    return [f"link {l} {n} +{d}" for l, n, d in grown]


@register(CODE, severity="fail", help="NVLink inactive, or NVLink errors grew since the last clean check")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Expected active links: ``checks.nvlink_expected`` per GPU, or every link NVML reports (0)."""
    expected_cfg = int(cfg.checks.nvlink_expected)
    max_growth = int(cfg.checks.nvlink_max_error_growth)
    # a node where no GPU has an active link has no NVLink fabric (PCIe cards report links, all inactive)
    fabric = any((g.get("nvlink") or {}).get("links_active") for g in selected_gpus(snap, None))
    if not any((g.get("nvlink") or {}).get("links_total") for g in selected_gpus(snap, job_gpus)) and not expected_cfg:
        return CheckResult(CODE, "skip", "no NVLink reported on the GPUs")

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        nv = g.get("nvlink")
        if not nv or not nv.get("links_total"):
            return "skip", f"{gpu_label(g)}: no NVLink"
        links = [l for l in nv.get("links") or [] if isinstance(l, dict)]
        active = nv.get("links_active")
        if active is None:
            active = sum(1 for l in links if l.get("active"))
        if not fabric and not expected_cfg:
            return "skip", f"{gpu_label(g)}: no active NVLink on any GPU of the node (no NVLink fabric)"
        expected = expected_cfg or int(nv["links_total"])
        problems = []
        if int(active) < expected:
            down = [str(l.get("link")) for l in links if l.get("active") is False]
            problems.append(f"{active} of {expected} NVLinks active" + (f" (down: {', '.join(down)})" if down else ""))
        grown = error_growth(links, env.nvlink_baseline.get(str(g.get("bus_id")), {}))
        total = sum(int(s.rsplit("+", 1)[1]) for s in grown)
        if total > max_growth:
            problems.append("NVLink errors since last clean check: " + ", ".join(grown[:8]) + (" ..." if len(grown) > 8 else ""))
        return ("fail", f"{gpu_label(g)}: " + "; ".join(problems)) if problems else None

    return over_gpus(CODE, snap, job_gpus, judge, "all expected NVLinks active on {n} GPUs, no new errors")
