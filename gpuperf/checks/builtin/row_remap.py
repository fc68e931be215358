"""row_remap: row remapping pending or failed; on GPUs without it, retired pages pending."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, gpu_label, over_gpus, register

CODE = "row_remap"


@register(CODE, severity="fail", help="row remap pending/failed, or page retirement pending")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """A pending remap needs a GPU reset; a failed one needs the GPU replaced."""

    def judge(g: dict[str, Any]) -> tuple[str, str] | None:
        rr = g.get("row_remap")
        if rr:
            if rr.get("failure"):
                return "fail", f"{gpu_label(g)}: row remapping failed (uncorrectable rows {rr.get('uncorrectable')})"
            if rr.get("pending"):
                return "fail", (f"{gpu_label(g)}: row remap pending, GPU reset needed "
                                f"(uncorrectable rows {rr.get('uncorrectable')}, correctable {rr.get('correctable')})")
            if rr.get("pending") is None and rr.get("failure") is None:
                return "skip", f"{gpu_label(g)}: row remap state unknown"
            return None
        rp = g.get("retired_pages")  # pre-Ampere GPUs retire pages instead
        if rp and rp.get("pending"):
            return "fail", f"{gpu_label(g)}: page retirement pending, GPU reset needed (dbe {rp.get('dbe')}, sbe {rp.get('sbe')})"
        if rp and rp.get("pending") is False:
            return None
        return "skip", f"{gpu_label(g)}: neither row remap nor page retirement reported"

    return over_gpus(CODE, snap, job_gpus, judge, "no pending or failed row remap on {n} GPUs")
