"""pcie_downtrained: a GPU's PCIe link below its generation or width maximum."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "pcie_downtrained"
_THROTTLE_GPU_IDLE = 0x1  # nvmlClocksThrottleReasonGpuIdle


def link_in_use(g: dict[str, Any]) -> bool | None:
    """True when the GPU is busy (its link is not power-saving), False when idle, None when unknown."""
    util, reasons = g.get("util_gpu_pct"), g.get("throttle_reasons")
    if isinstance(reasons, int) and reasons & _THROTTLE_GPU_IDLE:
        return False
    if util is None:
        return None
    return float(util) > 0


@register(CODE, severity="fail", help="PCIe generation or width below the GPU's maximum")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """A narrower link always fails; a lower generation fails only when read with the link in use.

    GPUs lower the link generation (never the width) to save power when idle, so a lower
    generation read on an idle GPU is a warning (``checks.fail`` can make it a failure).
    """

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        p = g.get("pcie") or {}
        gen, width, max_gen, max_width = (p.get(k) for k in ("gen", "width", "max_gen", "max_width"))
        if None in (gen, width, max_gen, max_width):
            return "skip", f"{gpu_label(g)}: PCIe link state unknown"
        gen, width, max_gen, max_width = int(gen), int(width), int(max_gen), int(max_width)
        if gen >= max_gen and width >= max_width:
            return None
        in_use = link_in_use(g)
        util = g.get("util_gpu_pct")
        when = (f"read with the link in use: util {util}%" if in_use else
                "read with the link idle" if in_use is False else "read with the link's use unknown")
        text = f"{gpu_label(g)} PCIe gen{gen} x{width}, max gen{max_gen} x{max_width} ({when})"
        if width < max_width or in_use:
            return "fail", text
        return "warn", text[:-1] + "; an idle GPU may lower the generation to save power)"

    return over_gpus(CODE, snap, job_gpus, judge, "PCIe links of {n} GPUs at their maximum")
