"""gdr_missing: RDMA NICs present but the GPUDirect RDMA module not loaded (NCCL then copies through host memory)."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register

CODE = "gdr_missing"
_RDMA = ("ib", "roce", "efa")


@register(CODE, severity="warn", help="RDMA NICs but no nvidia_peermem/GPUDirect RDMA module", needs_gpus=False)
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Warns when RDMA-capable NICs exist and the topology says the GDR module is not loaded."""
    rdma = [str(n.get("name")) for n in topo.get("nics") or [] if isinstance(n, dict) and n.get("kind") in _RDMA]
    if not rdma:
        return CheckResult(CODE, "skip", "no RDMA NIC")
    gdr = topo.get("gdr") or {}
    if gdr.get("loaded") is None:
        return CheckResult(CODE, "skip", "GPUDirect RDMA module state unknown")
    if gdr["loaded"]:
        return CheckResult(CODE, "ok", f"{gdr.get('module')} loaded for {len(rdma)} RDMA NICs")
    return CheckResult(CODE, "fail", f"{len(rdma)} RDMA NICs ({', '.join(rdma[:4])}{' ...' if len(rdma) > 4 else ''}) "
                                     f"but {gdr.get('module') or 'nvidia_peermem'} not loaded")
