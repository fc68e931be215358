"""Node health checks: small pure functions over topology + GPU state, registered by code, and the
opt-in active GPU probe (``probe``, ``probe_script``) that the deep check ``gpu_probe`` and the idle
daemon run (its figures join the fleet fingerprints).

Public API::

    from gpuperf import checks
    checks.registry()                         # code -> CheckSpec (every check module loaded)
    checks.run_fast(node, cfg, gpus)          # list[CheckResult]; node from gpuperf.topology.load_node
    checks.read_node(cfg, root=None)          # load_node with a time limit (NVML can hang on a lost GPU)
    checks.validate_codes(names)              # ValueError naming unknown codes (config validation)
"""

from __future__ import annotations

from typing import Any, Iterable

from gpuperf.checks.base import CheckEnv, CheckResult, CheckSpec, registry, worst
from gpuperf.checks.runner import run_deep, run_fast

__all__ = ["CheckEnv", "CheckResult", "CheckSpec", "registry", "run_fast", "run_deep", "read_node",
           "validate_codes", "worst"]


def validate_codes(names: Iterable[str]) -> None:
    """ValueError naming each unknown check code and the known ones."""
    known = registry()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown check {', '.join(map(repr, unknown))} (known: {', '.join(sorted(known))})")


def read_node(cfg: Any, root: str | None = None, once: bool = False) -> Any:
    """The node (``gpuperf.topology.Node``) from ``root`` or the config's node root, within ``checks.timeout_s``.

    ``once``: for short processes (the prolog), whose later steps reuse the same read.
    Raises ``runner.CheckTimeout`` when NVML or sysfs does not answer in time.
    """
    from gpuperf import topology
    from gpuperf.checks.runner import call_with_timeout

    where = root if root is not None else topology.node_root(cfg)
    load = topology.load_node_once if once else topology.load_node
    return call_with_timeout(lambda: load(where or None), float(cfg.checks.timeout_s))
