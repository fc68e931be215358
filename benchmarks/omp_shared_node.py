"""Does OMP_NUM_THREADS help? Several ranks doing CPU-side work on the CPUs of one task.

A job task gets C CPUs and starts one process per GPU (mp.spawn, a hand-written launcher; torchrun
instead sets 1 when unset). Every process inherits the task's whole CPU set, so with OMP_NUM_THREADS
unset each one starts C OpenMP threads: P x C threads on C CPUs. Each rank here does the same fixed
CPU work (matrix products and elementwise maths on batches, like a data pipeline's transforms); the
figure is the wall time until the slowest rank is done. Settings, in interleaved rounds:
  unset      OpenMP's default (one thread per CPU of the set)
  C/P        gpuperf's value (the task's CPUs divided among its GPU processes)
  1          torchrun's default

    python3 benchmarks/omp_shared_node.py --ranks 4 --out $OUT          # all CPUs of this process
Writes OUT/omp_shared_node.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(iters: int) -> int:
    """One rank's CPU work; prints its seconds."""
    import torch

    torch.manual_seed(0)
    a = torch.randn(384, 384)
    x = torch.randn(64, 3, 64, 64)
    t0 = time.perf_counter()
    for _ in range(iters):
        b = a @ a
        y = torch.nn.functional.avg_pool2d((x - x.mean()) / (x.std() + 1e-6), 2).exp().clamp(max=4.0)
        a = b / (b.norm() + 1e-6) + y.mean()
    print(f"{time.perf_counter() - t0:.4f} {torch.get_num_threads()}")
    return 0


def one(ranks: int, threads: int | None, iters: int, limit_s: float) -> tuple[float | None, int]:
    """Wall seconds until every rank finished (None past ``limit_s``: killed), and the threads each rank used."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--iters", str(iters)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(ranks)]
    try:
        outs = [p.communicate(timeout=max(0.1, limit_s - (time.perf_counter() - t0)))[0].split() for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        return None, threads or len(os.sched_getaffinity(0))
    wall = time.perf_counter() - t0
    return wall, int(outs[0][1]) if outs and len(outs[0]) > 1 else -1


def main() -> int:
    """Interleaved rounds of every setting; the table of median wall times."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0, help="seconds one setting may take (slower: killed, '>limit')")
    ap.add_argument("--out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.iters)
    cpus = len(os.sched_getaffinity(0))
    settings = {f"C/P={max(1, cpus // args.ranks)}": max(1, cpus // args.ranks), "1": 1, "unset": None}
    walls: dict[str, list[float | None]] = {n: [] for n in settings}
    used: dict[str, int] = {}
    for r in range(args.rounds):
        order = list(settings) if r % 2 == 0 else list(reversed(settings))
        for name in order:
            wall, used[name] = one(args.ranks, settings[name], args.iters, args.limit)
            walls[name].append(wall)
            print(f"round {r + 1} {name}: {'killed at the limit' if wall is None else f'{wall:.2f} s'}", flush=True)

    def med(ws: list[float | None]) -> float:
        return statistics.median(args.limit if w is None else w for w in ws)  # a killed run counts as the limit
    base = med(walls["unset"])
    over = ">" if None in walls["unset"] else ""
    lines = [f"## OMP_NUM_THREADS on a shared node: {args.ranks} ranks on one task's {cpus} CPUs, {args.iters} "
             f"iterations of CPU work each, {args.rounds} interleaved rounds", "",
             "| OMP_NUM_THREADS | threads per rank | wall s (median) | min-max | speed-up vs unset |", "|---|---|---|---|---|"]
    for name, ws in walls.items():
        m = med(ws)
        cap = ">" if None in ws else ""
        done = [w for w in ws if w is not None]
        rng = f"{min(done):.2f}-{max(done):.2f}" if done else "-"
        lines.append(f"| {name} | {used.get(name)} | {cap}{m:.2f} | {rng}{' (+killed)' if cap else ''} | "
                     f"{over}{base / m:.2f}x |")
    md = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "omp_shared_node.md").write_text(md)
        Path(args.out, "omp_shared_node.json").write_text(json.dumps(
            {"cpus": cpus, "ranks": args.ranks, "iters": args.iters, "walls": walls, "threads": used}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
