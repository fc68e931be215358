"""gpu_missing: fewer GPUs visible than Slurm allocated or the node is configured for."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register, snapshot_gpus

CODE = "gpu_missing"


@register(CODE, severity="fail", help="fewer GPUs visible than allocated or configured")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Every allocated index, every GPU on the PCI bus and the configured count must be visible to NVML."""
    gpus = snapshot_gpus(snap)
    visible = {g.get("index") for g in gpus}
    problems = []
    missing_alloc = [i for i in job_gpus if i not in visible]
    if missing_alloc:
        problems.append(f"allocated GPU {', '.join(map(str, missing_alloc))} not visible "
                        f"(NVML shows {len(gpus)}: indices {_indices(visible)})")
    expected = int(cfg.checks.expected_gpus or 0)
    if expected and len(gpus) < expected:
        problems.append(f"{len(gpus)} GPUs visible, {expected} expected (checks.expected_gpus)")
    # a GPU that sysfs sees on the bus but NVML does not is a GPU the driver lost
    seen_bus = {str(g.get("bus_id") or "").lower() for g in gpus}
    lost = [b for b in env.pci_gpus or () if b.lower() not in seen_bus]
    # a GPU NVML answered with an error has no bus id here: it may be any of the unmatched ones
    unnamed = sum(1 for g in gpus if not g.get("bus_id"))
    if len(lost) > unnamed:
        problems.append(f"on the PCI bus but not visible to NVML: {', '.join(lost)}")
    if problems:
        return CheckResult(CODE, "fail", "; ".join(problems))
    want = f", {expected} expected" if expected else ""
    return CheckResult(CODE, "ok", f"{len(gpus)} GPUs visible{want}; allocated {_indices(set(job_gpus)) or 'none named'}")


def _indices(s: set[Any]) -> str:
    return ",".join(str(i) for i in sorted(x for x in s if isinstance(x, int)))
