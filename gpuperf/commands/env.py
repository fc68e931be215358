"""``gpuperf env``: the NCCL/CUDA environment gpuperf would inject here, and why."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf env``."""
    p.add_argument("--explain", action="store_true", help="say why each variable is set, what was skipped and why")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (gpuperf.env.v1 + exports)")
    p.add_argument("--root", metavar="DIR", help="plan for a recorded node (DIR/sys, DIR/gpus.json)")
    p.add_argument("--gpus", type=int, metavar="N", help="the job has the first N GPUs of the node (default: "
                   "the job's GPUs inside a job, else all)")
    p.add_argument("--nodes", type=int, metavar="N", help="the job spans N nodes (default: the job's, else 1)")
    p.add_argument("--cpus-per-task", type=int, metavar="N", help="CPUs per task (default: the job's, else this "
                   "process's CPUs)")


def plan_here(args: argparse.Namespace, cfg: Any, environ: dict[str, str]) -> tuple[Any, Any, dict[str, Any]]:
    """(final plan for one task, job shape, topology) for this node and the options given."""
    from gpuperf.hookbase import jobctx
    from gpuperf.prolog import envplan, envtask

    topo = envplan.load_topology(cfg, args.root)
    ctx = jobctx.from_env("env", environ)
    all_gpus = [g.get("index") for g in topo.get("gpus") or []]
    gpus = all_gpus[: args.gpus] if args.gpus is not None else (list(ctx.gpus) or all_gpus)
    plan, shape = envplan.compute(ctx, cfg, topo, environ=environ, gpus=gpus, nodes=args.nodes)
    cache = plan.to_dict()
    v, src = envplan.nccl_system()
    cache.update(nccl_system=".".join(map(str, v)) if v else None, nccl_system_source=src)
    task_env = dict(environ)
    if args.cpus_per_task:
        task_env["SLURM_CPUS_PER_TASK"] = str(args.cpus_per_task)
    task_env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus)))
    return envtask.task_plan(cache, cfg, task_env, len(gpus) or 1), shape, topo


def render_text(plan: Any, explain: bool) -> str:
    """``export`` lines, with reasons, skips and notes when explaining."""
    lines = []
    if plan.disabled:
        lines.append(f"# nothing injected: {plan.disabled}")
    for v in plan.vars:
        if explain:
            lines.append(f"# {v.reason}  [{v.rule}]")
        lines.append(f"export {v.name}={v.value}")
    if explain:
        for s in plan.skipped:
            lines.append(f"# not set: {s.name}: {s.reason}  [{s.rule}]")
        for n in plan.notes:
            lines.append(f"# note: {n}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Entry of ``gpuperf env``."""
    from gpuperf.files import config
    from gpuperf.env.rules import RuleError

    cfg = config.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    if args.root and not os.path.isdir(os.path.join(args.root, "sys")):
        print(f"gpuperf env: {args.root} is not a recorded node (no sys/ in it)", file=sys.stderr)
        return 2
    try:
        plan, shape, topo = plan_here(args, cfg, dict(os.environ))
    except RuleError as e:
        print(f"gpuperf env: {e}", file=sys.stderr)
        return 2
    if args.json:
        out = plan.to_dict()
        out["exports"] = [[v.name, v.value] for v in plan.vars]
        out["topology_source"] = topo.get("source")
        out["shape"] = None if shape is None else {
            "gpus": list(shape.gpus), "nodes": shape.nodes, "node": shape.node_name,
            "node_addrs": list(shape.node_addrs), "user_set": sorted(shape.user_set), "partition": shape.partition}
        print(json.dumps(out, indent=1))
    else:
        sys.stdout.write(render_text(plan, args.explain))
    return 0
