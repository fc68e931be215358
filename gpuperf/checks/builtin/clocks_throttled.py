"""clocks_throttled: hardware slowdown, thermal or power-brake throttling while the GPU is idle."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "clocks_throttled"
# nvmlClocksThrottleReason* bits that mean the hardware is unwell, not that software capped it
_BAD = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


@register(CODE, severity="warn", help="HW slowdown/thermal/power-brake throttling on an idle GPU")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """An idle GPU has no reason to be thermally or power-brake throttled: cooling or power is failing."""

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        reasons = g.get("throttle_reasons")
        if reasons is None:
            return "skip", f"{gpu_label(g)}: throttle reasons unknown"
        util = g.get("util_gpu_pct")
        names = [n for bit, n in _BAD.items() if int(reasons) & bit]
        if not names:
            return None
        if util is not None and float(util) > 0:
            return None  # busy GPUs throttle legitimately; this check looks at idle ones
        return "fail", (f"{gpu_label(g)}: throttled while idle: {'+'.join(names)} (reasons 0x{int(reasons):x}, "
                        f"util {util}%, temp {g.get('temp_c')} C)")

    return over_gpus(CODE, snap, job_gpus, judge, "no hardware throttling on {n} idle GPUs")
