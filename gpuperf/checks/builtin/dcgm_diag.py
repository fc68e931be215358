"""dcgm_diag (deep): NVIDIA DCGM's quick diagnostic, ``dcgmi diag -r 1``; never in the prolog."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register

CODE = "dcgm_diag"
_DCGMI = ("/usr/bin/dcgmi", "/usr/local/bin/dcgmi", "/usr/local/dcgm/bin/dcgmi")


def find_dcgmi() -> str | None:
    """dcgmi's absolute path (hooks get no PATH), or None when DCGM is not installed."""
    return next((p for p in _DCGMI if os.access(p, os.X_OK)), None)


def failing_lines(output: str) -> list[str]:
    """The lines of a ``dcgmi diag`` table that report a failure or warning."""
    return [" ".join(l.replace("|", " ").split()) for l in output.splitlines()
            if "fail" in l.lower() or "warn" in l.lower()]


@register(CODE, severity="fail", cost="deep", help="dcgmi diag -r 1 (seconds); only with --deep")
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Runs the diagnostic on the selected GPUs; skipped when dcgmi is absent or the node is a recording."""
    if not env.live:
        return CheckResult(CODE, "skip", "reading a recorded node: no hardware to diagnose")
    exe = find_dcgmi()
    if exe is None:
        return CheckResult(CODE, "skip", f"DCGM not installed (no dcgmi in {', '.join(os.path.dirname(p) for p in _DCGMI)})")
    args = [exe, "diag", "-r", "1"]
    if job_gpus:
        args += ["-i", ",".join(map(str, job_gpus))]
    p = subprocess.run(args, capture_output=True, text=True, timeout=float(cfg.checks.deep_timeout_s))
    bad = failing_lines(p.stdout)
    if p.returncode == 0 and not bad:
        return CheckResult(CODE, "ok", "dcgmi diag -r 1 passed")
    if p.returncode != 0 and not bad:
        return CheckResult(CODE, "error", f"dcgmi diag exit {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}")
    failed = any("fail" in l.lower() for l in bad)
    return CheckResult(CODE, "fail" if failed else "warn", "dcgmi diag -r 1: " + "; ".join(bad[:6]))
