"""ecc_uncorrectable: volatile uncorrectable ECC errors on a GPU."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "ecc_uncorrectable"


@register(CODE, severity="fail", help="volatile uncorrectable ECC errors > 0")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Fails when a GPU counted an uncorrectable ECC error since the driver loaded."""

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        ecc = g.get("ecc")
        if not ecc or ecc.get("volatile_uncorrected") is None:
            return "skip", f"{gpu_label(g)}: ECC counters unknown"
        if ecc.get("enabled") is False:
            return "skip", f"{gpu_label(g)}: ECC disabled"
        n = int(ecc["volatile_uncorrected"])
        if n > 0:
            return "fail", (f"{gpu_label(g)}: {n} volatile uncorrectable ECC errors "
                            f"(aggregate {ecc.get('aggregate_uncorrected')})")
        return None

    return over_gpus(CODE, snap, job_gpus, judge, "0 volatile uncorrectable ECC errors on {n} GPUs")
