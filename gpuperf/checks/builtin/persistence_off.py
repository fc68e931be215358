"""persistence_off: persistence mode disabled (every job pays driver init, clocks and state are lost)."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "persistence_off"


@register(CODE, severity="warn", help="persistence mode disabled")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Warns for each GPU whose persistence mode is off."""

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        pm = g.get("persistence_mode")
        if pm is None:
            return "skip", f"{gpu_label(g)}: persistence mode unknown"
        return None if pm else ("fail", f"{gpu_label(g)}: persistence mode off (start nvidia-persistenced)")

    return over_gpus(CODE, snap, job_gpus, judge, "persistence mode on for {n} GPUs")
