"""nvlink_down: an NVLink expected active is inactive, or its error counters grew since the last clean check.

Replay and recovery errors fail on any growth (past ``checks.nvlink_max_error_growth``): a link retrained.
CRC errors (flit, data) are corrected by a replay and counted by a rate, as DCGM's health watch does
(``DCGM_LIMIT_MAX_NVLINK_CRC_ERROR``: "CRC errors only matter at rates of 100+ per second"): a link at
``checks.nvlink_crc_max_per_s`` or more since the previous clean check fails, fewer only warn. The
rate is per link, not DCGM's sum over a GPU's links: on a healthy 2x H200 (NV18) a 256 MiB all-reduce
raised crc_data by up to 282 on one link in a 17 s window (benchmarks/results/multi_gpu), and eighteen
links' sum would count a healthy fabric's corrected errors as one failing link's.
"""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register, selected_gpus

CODE = "nvlink_down"


CRC_COUNTERS = ("crc_flit", "crc_data")


def growth(links: list[dict[str, Any]], baseline: dict[str, dict[str, int]]) -> list[tuple[str, str, int]]:
    """(link, counter, increase) for each counter above its baseline (a counter below it was reset: no growth)."""
    grown = []
    for link in links:
        before = baseline.get(str(link.get("link"))) or {}
        for name, value in (link.get("errors") or {}).items():
            if value is None or before.get(name) is None:
                continue
            delta = int(value) - int(before[name])
            if delta > 0:
                grown.append((str(link.get("link")), name, delta))
    return grown


def judge_errors(grown: list[tuple[str, str, int]], window_s: float | None, max_growth: int,
                 crc_max_per_s: float) -> tuple[str, str] | None:
    """Pure: ("fail"|"warn", what) for the counters' growth over ``window_s`` seconds (None: unknown), or None."""
    hard = [g for g in grown if g[1] not in CRC_COUNTERS]
    crc = [g for g in grown if g[1] in CRC_COUNTERS]
    problems: list[str] = []
    status = None
    if sum(d for _, _, d in hard) > max_growth:
        status = "fail"
        problems.append("NVLink replay/recovery errors since last clean check: " + _listed(hard))
    if crc:
        # the window never counts as under a second: a burst read right after a baseline is not a rate
        secs = max(1.0, window_s) if window_s is not None else None
        fast = [g for g in crc if secs is not None and g[2] / secs >= crc_max_per_s]
        if fast:
            status = "fail"
            problems.append(f"NVLink CRC errors at {crc_max_per_s:g}/s or more on a link over {secs:.0f} s: "
                            + _listed(fast, secs))
        else:
            status = status or "warn"
            rate = (f"at most {max(d for _, _, d in crc) / secs:.1f}/s on a link over {secs:.0f} s, "
                    f"under the {crc_max_per_s:g}/s that fails") if secs is not None else "over an unknown time"
            problems.append(f"corrected NVLink CRC errors since last clean check ({rate}): " + _listed(crc))
    return (status, "; ".join(problems)) if status else None


def _listed(grown: list[tuple[str, str, int]], secs: float | None = None) -> str:
    items = [f"link {l} {n} +{d}" + (f" ({d / secs:.0f}/s)" if secs else "") for l, n, d in grown]
    return ", ".join(items[:8]) + (f" ... ({len(items)} counters)" if len(items) > 8 else "")


@register(CODE, severity="fail", help="NVLink inactive, or NVLink errors grew since the last clean check")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Expected active links: ``checks.nvlink_expected`` per GPU, or every link NVML reports (0)."""
    expected_cfg = int(cfg.checks.nvlink_expected)
    max_growth = int(cfg.checks.nvlink_max_error_growth)
    crc_max = float(cfg.checks.nvlink_crc_max_per_s)
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
        bus = str(g.get("bus_id"))
        since = env.nvlink_since.get(bus)
        window = env.now - since if since is not None and env.now is not None else None
        errors = judge_errors(growth(links, env.nvlink_baseline.get(bus, {})), window, max_growth, crc_max)
        status = "fail" if problems else None
        if errors:
            status = "fail" if errors[0] == "fail" else status or "warn"
            problems.append(errors[1])
        return (status, f"{gpu_label(g)}: " + "; ".join(problems)) if status else None

    return over_gpus(CODE, snap, job_gpus, judge, "all expected NVLinks active on {n} GPUs, no new errors")
