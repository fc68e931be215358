"""driver_mismatch: the NVIDIA driver differs from the version the site configured."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register

CODE = "driver_mismatch"


def matches(actual: str, wanted: str) -> bool:
    """'580.159' matches '580.159.04' (whole components only); '580.15' does not."""
    a, w = actual.split("."), wanted.split(".")
    return a[: len(w)] == w


@register(CODE, severity="fail", help="driver version differs from checks.driver_version (only when set)")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Skipped unless ``checks.driver_version`` is set."""
    wanted = str(cfg.checks.driver_version).strip()
    if not wanted:
        return CheckResult(CODE, "skip", "checks.driver_version not set")
    actual = snap.get("driver_version") or topo.get("driver_version")
    if not actual:
        return CheckResult(CODE, "skip", "driver version unknown")
    if matches(str(actual), wanted):
        return CheckResult(CODE, "ok", f"driver {actual} (configured {wanted})")
    return CheckResult(CODE, "fail", f"driver {actual}, configured {wanted} (checks.driver_version)")
