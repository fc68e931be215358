#!/usr/bin/env python3
"""Wall time of the real ``gpuperf-prolog`` executable on the hgx-h100-2s fixture (8 GPUs), interpreter start included.

Runs it N times (default 50) with a Slurm-like job environment, a config whose run/state/log
paths are in a temp dir, no daemon and drain off, and prints p50/p95 of the whole process and of
the health step alone (from the job record the hook leaves). Targets: p50 <= 300 ms, p95 <= 500 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROLOG = Path(sys.executable).with_name("gpuperf-prolog")


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=50, help="runs (default 50)")
    ap.add_argument("--node", default=str(REPO / "tests" / "data" / "nodes" / "hgx-h100-2s"))
    ap.add_argument("--gpus", default="0-7")
    args = ap.parse_args()
    if not PROLOG.exists():
        print(f"{PROLOG} not found: install gpuperf into this interpreter's venv", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuperf-bench-") as tmp:
        conf = Path(tmp) / "config.toml"
        conf.write_text(
            f'[general]\nrun_dir = "{tmp}/run"\nstate_dir = "{tmp}/state"\nlog_file = "{tmp}/gpuperf.log"\n'
            f'node_root = "{args.node}"\nslurm_bin_dir = "{tmp}/no-slurm"\n'
            f'[checks]\ndrain = false\n[daemon]\nsocket_dir = "{tmp}/daemon"\n')
        walls, health_ms, statuses = [], [], set()
        for i in range(args.n):
            job = 900000 + i
            env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root",
                   "SLURM_JOB_GPUS": args.gpus, "CUDA_VISIBLE_DEVICES": args.gpus, "SLURMD_NODENAME": "bench1",
                   "SLURM_NODELIST": "bench1", "SLURM_JOB_PARTITION": "gpu", "GPUPERF_CONFIG": str(conf)}
            t0 = time.perf_counter()
            p = subprocess.run([str(PROLOG)], env=env, capture_output=True, text=True)  # no PATH, like slurmd
            walls.append((time.perf_counter() - t0) * 1000)
            if p.returncode != 0:
                print(f"run {i}: exit {p.returncode}: {p.stderr.strip()[-300:]}", file=sys.stderr)
            rec = json.loads((Path(tmp) / "run" / "jobs" / str(job) / "prolog.json").read_text())
            health_ms.append(rec["steps"]["health"]["ms"])
            statuses.add(rec["data"].get("health", {}).get("status"))
    print(f"gpuperf-prolog, {args.n} runs, {Path(args.node).name}, GPUs {args.gpus}, health status {sorted(map(str, statuses))}")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"wall ms (process, interpreter start included): p50 {statistics.median(walls):.1f}  "
          f"p95 {pct(walls, 0.95):.1f}  max {max(walls):.1f}")
    print(f"health step ms: p50 {statistics.median(health_ms):.1f}  p95 {pct(health_ms, 0.95):.1f}  max {max(health_ms):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
