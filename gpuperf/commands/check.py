"""``gpuperf check``: run the node health checks; exit 0 healthy (warnings allowed), 1 unhealthy, 2 could not check."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

EXIT_OK, EXIT_UNHEALTHY, EXIT_CANNOT = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf check``."""
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--gpus", metavar="LIST", help="GPU indices to check ('0,1' or '0-3'); default all")
    p.add_argument("--root", metavar="DIR", help="check a recorded node (DIR/sys, DIR/gpus.json) instead of the live one")
    p.add_argument("--deep", action="store_true", help="also run the deep checks (dcgmi diag -r 1; seconds to minutes)")
    p.add_argument("--resume", action="store_true",
                   help="resume this node in Slurm if gpuperf drained it and every check passes now")
    p.add_argument("--node", metavar="NAME", help="Slurm node name for --resume (default $SLURMD_NODENAME or the short hostname)")


def exit_code(results: list[Any]) -> int:
    """1 when a check fails, else 2 when one could not run, else 0."""
    statuses = {r.status for r in results}
    if "fail" in statuses:
        return EXIT_UNHEALTHY
    return EXIT_CANNOT if "error" in statuses or not results else EXIT_OK


def render(results: list[Any]) -> str:
    """One line per check, worst first, and a verdict line."""
    order = {"fail": 0, "error": 1, "warn": 2, "ok": 3, "skip": 4}
    lines = [f"{r.status.upper():5} {r.code:18} {r.detail}" for r in sorted(results, key=lambda r: (order[r.status], r.code))]
    verdict = {EXIT_OK: "healthy", EXIT_UNHEALTHY: "UNHEALTHY", EXIT_CANNOT: "could not check"}[exit_code(results)]
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in order if any(r.status == s for r in results))
    return "\n".join(lines + [f"{verdict} ({counts})"])


def _resume(cfg: Any, node: str, results: list[Any]) -> tuple[int, str]:
    from gpuperf.checks import policy
    from gpuperf.access.slurm import Slurm, SlurmError

    slurm = Slurm(cfg.general.slurm_bin_dir)
    try:
        state, reason = slurm.node_reasons()[node]
    except KeyError:
        return EXIT_CANNOT, f"resume: Slurm does not know node {node!r} (use --node)"
    except SlurmError as e:
        return EXIT_CANNOT, f"resume: cannot read node state: {e}"
    ok, why = policy.resume_decision(state, reason, results)
    if not ok:
        # the exit code stays the health verdict: a healthy node that is not ours to resume is still healthy
        return exit_code(results), f"resume: {node} not resumed: {why}"
    try:
        slurm.resume(node)
    except SlurmError as e:
        return EXIT_CANNOT, f"resume: {node}: {e}"
    return EXIT_OK, f"resume: {node} returned to service ({why})"


def run(args: argparse.Namespace) -> int:
    """Entry of ``gpuperf check``."""
    from gpuperf import checks
    from gpuperf.files import config
    from gpuperf.hookbase.jobctx import parse_gpu_list

    cfg = config.load()  # a ConfigError is reported by gpuperf.cli (exit 2, EXIT_CANNOT)
    gpus = parse_gpu_list(args.gpus) if args.gpus else []
    try:
        node = checks.read_node(cfg, args.root)
    except Exception as e:  # noqa: BLE001 - could not check, said plainly
        print(f"gpuperf check: cannot read the node: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CANNOT
    results = checks.run_fast(node, cfg, gpus)
    if args.deep:
        results += checks.run_deep(node, cfg, gpus)
    code = exit_code(results)
    note = None
    if args.resume:
        name = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        code, note = _resume(cfg, name, results)
    if args.json:
        out: dict[str, Any] = {"source": node.root or "live", "gpus": gpus, "status": checks.worst(results),
                               "exit_code": code, "results": [r.to_dict() for r in results]}
        if note:
            out["resume"] = note
        print(json.dumps(out, indent=2))
    else:
        print(render(results))
        if note:
            print(note)
    return code
