"""acs_enabled: PCIe ACS redirect/source validation on a bridge in a GPU's or NIC's path (slows P2P and GPUDirect)."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register, selected_gpus

CODE = "acs_enabled"


@register(CODE, severity="warn", help="ACS enabled on a PCIe bridge between GPUs and NICs", needs_gpus=False)
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Peer traffic through a bridge with ACS redirect goes up to the root complex (or is blocked by the IOMMU)."""
    paths = topo.get("pcie_paths")
    if not isinstance(paths, dict) or not paths:
        return CheckResult(CODE, "skip", "no PCIe paths in the topology")
    keys = [f"gpu:{g.get('index')}" for g in selected_gpus(snap, job_gpus)]
    keys += [k for k in paths if k.startswith("nic:")]
    flagged: dict[str, list[str]] = {}  # bridge -> devices behind it
    known: set[str] = set()
    seen: set[str] = set()
    for key in keys:
        for br in paths.get(key) or []:
            seen.add(str(br.get("bus_id")))
            if br.get("acs_enabled") is None:
                continue
            known.add(str(br.get("bus_id")))
            if br["acs_enabled"]:
                bits = "+".join(br.get("acs_flags") or [])
                label = f"{br.get('bus_id')} (ACS ctl {br.get('acs_ctrl')}{': ' + bits if bits else ''})"
                flagged.setdefault(label, []).append(key.replace(":", " "))
    if flagged:
        parts = [f"bridge {b} above {', '.join(devs)}" for b, devs in flagged.items()]
        return CheckResult(CODE, "fail", "ACS enabled: " + "; ".join(parts))
    if not seen:
        return CheckResult(CODE, "skip", "no PCIe bridge above the GPUs and NICs")
    if not known:
        return CheckResult(CODE, "skip", f"ACS state of {len(seen)} bridges unknown")
    return CheckResult(CODE, "ok", f"ACS off on the {len(known)} bridges above the GPUs and NICs")
