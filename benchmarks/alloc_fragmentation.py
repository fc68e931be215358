"""Does PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True help? A workload that fragments GPU memory.

Variable-length steps (like training on sequences of varying length): each step allocates six
activation buffers sized by that step's length, keeps a smaller buffer alive for the next eight
steps (a cache, a gradient bucket), and frees the activations. The caching allocator's segments then
hold live small blocks between freed large ones, which a longer step cannot reuse.

Each setting runs in its own process (the allocator reads the variable once), twice:
  uncapped   peak reserved vs peak allocated (the fragmentation overhead), allocator retries
  capped     the same steps with the process limited to 1.15x the uncapped peak allocated: OOMs or not
Settings: default (unset) and expandable_segments:True.

    python3 benchmarks/alloc_fragmentation.py --out $OUT            # GPU 0
    python3 benchmarks/alloc_fragmentation.py --device cpu --out /tmp/x --steps 20   # logic only, no GPU
Writes OUT/alloc_fragmentation.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {"default": None, "expandable_segments": "expandable_segments:True"}
GIB = 1 << 30


def workload(torch, dev, steps: int, unit: int, seed: int = 0) -> dict:
    """Run the fragmenting steps once; counts OOMs instead of stopping at the first."""
    rng = random.Random(seed)
    keep: collections.deque = collections.deque()
    ooms = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        length = rng.randint(40, 160)
        try:
            acts = [torch.empty(length * unit * (1 + i % 3), dtype=torch.uint8, device=dev) for i in range(6)]
            keep.append(torch.empty(length * unit // 2, dtype=torch.uint8, device=dev))
            del acts
        except torch.OutOfMemoryError:
            ooms += 1
        if len(keep) > 8:
            keep.popleft()
    keep.clear()
    return {"ooms": ooms, "seconds": round(time.perf_counter() - t0, 3)}


def child(args: argparse.Namespace) -> int:
    """One setting in this process: uncapped, then capped at 1.15x the uncapped peak allocated."""
    import torch

    cuda = args.device == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    out = {"setting": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "(unset)"}

    def stats() -> dict:
        if not cuda:
            return {}
        s = torch.cuda.memory_stats(dev)
        return {"peak_reserved_gib": round(s.get("reserved_bytes.all.peak", 0) / GIB, 3),
                "peak_allocated_gib": round(s.get("allocated_bytes.all.peak", 0) / GIB, 3),
                "alloc_retries": s.get("num_alloc_retries", 0), "device_ooms": s.get("num_ooms", 0)}

    out["uncapped"] = {**workload(torch, dev, args.steps, args.unit), **stats()}
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        torch.cuda.reset_accumulated_memory_stats(dev)
        total = torch.cuda.get_device_properties(dev).total_memory
        cap = 1.15 * out["uncapped"]["peak_allocated_gib"] * GIB
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), dev)
        out["cap_gib"] = round(cap / GIB, 3)
        out["capped"] = {**workload(torch, dev, args.steps, args.unit), **stats()}
    print(json.dumps(out))
    return 0


def main() -> int:
    """Run every setting in a fresh process, write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for alloc_fragmentation.{md,json}")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--unit", type=int, default=8 << 20, help="bytes per unit of step length (default 8 MiB)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    rows = {}
    for name, value in SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        if value:
            env["PYTORCH_CUDA_ALLOC_CONF"] = value
        p = subprocess.run([sys.executable, __file__, "--child", "--device", args.device, "--steps", str(args.steps),
                            "--unit", str(args.unit)], env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            rows[name] = {"error": p.stderr.strip()[-500:]}
        else:
            rows[name] = json.loads(p.stdout.strip().splitlines()[-1])
    lines = [f"## GPU memory fragmentation, {args.steps} variable-length steps ({args.unit >> 20} MiB per length unit)",
             "", "| setting | peak allocated GiB | peak reserved GiB | reserved/allocated | allocator retries | "
             "capped at GiB | OOMs capped | retries capped | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:200]} |")
            continue
        u, c = r.get("uncapped", {}), r.get("capped", {})
        ratio = u["peak_reserved_gib"] / u["peak_allocated_gib"] if u.get("peak_allocated_gib") else None
        lines.append(f"| {name} | {u.get('peak_allocated_gib')} | {u.get('peak_reserved_gib')} | "
                     f"{'n/a' if ratio is None else f'{ratio:.2f}'} | {u.get('alloc_retries')} | {r.get('cap_gib')} | "
                     f"{c.get('ooms')} | {c.get('alloc_retries')} | {u.get('seconds')} / {c.get('seconds')} |")
    md = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "alloc_fragmentation.md").write_text(md)
        Path(args.out, "alloc_fragmentation.json").write_text(json.dumps(rows, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
