"""xid_fatal: an XID of the fatal set on an allocated GPU since its last clean check (or within the window)."""

from __future__ import annotations

import time
from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "xid_fatal"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def window_start(env: CheckEnv, bus_id: str, window_s: float) -> tuple[float | None, str]:
    """Where the XID window of one GPU starts, and how to say it."""
    since = env.xid_since.get(bus_id)
    if env.now is None:
        return since, f"since last clean check {_iso(since)}" if since else "all recorded events"
    start = env.now - window_s
    if since is not None and since > start:
        return since, f"since last clean check {_iso(since)}"
    return start, f"last {window_s:g} s, since {_iso(start)}"


@register(CODE, severity="fail", help="fatal XID on the GPU since its last clean check")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Fails on any XID in ``checks.xid_fatal`` newer than the window start of that GPU."""
    if env.xid_error:
        return CheckResult(CODE, "error", f"XIDs unknown: {env.xid_error}")
    fatal = set(cfg.checks.xid_fatal)
    window_s = float(cfg.checks.xid_window_s)

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        events = g.get("xid_events")
        if events is None:
            return None  # no event recorded for this GPU
        start, how = window_start(env, str(g.get("bus_id") or ""), window_s)
        hits = sorted((float(e["t"]), int(e["xid"])) for e in events
                      if int(e["xid"]) in fatal and (start is None or float(e["t"]) >= start))
        if not hits:
            return None
        listed = ", ".join(f"XID {x} at {_iso(t)}" for t, x in hits[-5:])
        more = f" (+{len(hits) - 5} earlier)" if len(hits) > 5 else ""
        return "fail", f"{gpu_label(g)}: {listed}{more} (window: {how}; source: {env.xid_source})"

    return over_gpus(CODE, snap, job_gpus, judge, f"no fatal XID on {{n}} GPUs (source: {env.xid_source})")
