"""gpu_probe (deep): the fleet's active probe (GEMM, memory and P2P bandwidth per GPU) in the admin's
CUDA-capable Python (``fleet.probe_python``); a GPU far below the node's best of its model is a warning.
Without that Python the check is skipped, never failed; the figures join the fleet fingerprints."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register

CODE = "gpu_probe"


@register(CODE, severity="warn", cost="deep", help="GEMM/memory/P2P probe in fleet.probe_python; only with --deep")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Probes the selected GPUs (all when none), keeps the figures, warns on a GPU slower than its peers."""
    if not env.live:
        return CheckResult(CODE, "skip", "reading a recorded node: no hardware to probe")
    from gpuperf.checks import probe

    res = probe.run(cfg, job_gpus or None)
    if res.status == "unavailable":
        return CheckResult(CODE, "skip", f"probe cannot run here: {res.why}")
    if res.status == "error":
        return CheckResult(CODE, "error", f"probe failed: {res.why}")
    try:
        probe.save(cfg.general.state_dir, res)
    except OSError as e:  # the verdict stands; only the figures' trip to the fleet is lost
        res.why = f"figures not kept: {e}"
    verdict = probe.judge(res.gpus)
    slow = [v for v in verdict if v["slow"]]
    broken = [v for v in verdict if v.get("error")]
    figs = "; ".join(f"GPU {g['index']}: {g.get('gemm_tflops', 0):.0f} TFLOP/s, {g.get('membw_gbs', 0):.0f} GB/s"
                     for g in res.gpus if "error" not in g)
    if slow or broken:
        parts = [f"GPU {v['index']} ({v['uuid']}): " + "; ".join(v["evidence"]) for v in slow]
        parts += [f"GPU {v['index']}: {v['error']}" for v in broken]
        return CheckResult(CODE, "warn", "; ".join(parts))
    return CheckResult(CODE, "ok", f"probe in {res.seconds:.1f} s: {figs}")
