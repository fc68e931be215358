#!/usr/bin/env python3
"""Prolog latency with the daemon up: the register round trip, and the whole ``gpuperf-prolog``.

Starts a daemon (replay of a real recording as 8 GPUs at 1 Hz, sampling while measured), then
  1. times ``register`` requests over the control socket (the prolog's daemon step), ``--n`` times;
  2. runs the real ``gpuperf-prolog`` executable ``--runs`` times with a Slurm prolog's environment
     and reads each step's time from the record the hook leaves, twice: on the fast path (the daemon
     runs health, register, env and affinity steps; the process sends one request over the hook
     socket) and on the full path (``daemon.prolog_fast_path = false``: every step in the process,
     health from the daemon's cache and register over the pyzmq control socket).

  python3 benchmarks/prolog_daemon_latency.py [--n 300] [--runs 20]

The bars (fast path p50 <= 25 ms and <= 2x a bare interpreter start) are measured side by side with
that start, in one interleaved run, by benchmarks/hook_latency.py.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon_cpu import BenchDaemon, default_backend  # noqa: E402

from gpuperf.daemon import client  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300, help="register round trips")
    ap.add_argument("--runs", type=int, default=20, help="whole gpuperf-prolog runs")
    ap.add_argument("--backend", help="sampler spec (default: replay of a real recording as 8 GPUs)")
    args = ap.parse_args()
    d = BenchDaemon(args.backend or default_backend(8), 1.0, "[checks]\ndrain = false")
    try:
        rt = []
        for i in range(args.n):
            w = time.perf_counter()
            client.request(d.cfg, "register", {"job_id": 500000 + i, "uid": 0, "gpus": [i % 8], "cpus": 2})
            rt.append(1000 * (time.perf_counter() - w))
            client.request(d.cfg, "finalize", {"job_id": 500000 + i})
        exe = Path(sys.executable).with_name("gpuperf-prolog")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from gpuperf.prolog import main; sys.exit(main())"]
        full_cfg = d.base / "full-path.toml"
        full_cfg.write_text(d.cfg_path.read_text().replace("[daemon]", "[daemon]\nprolog_fast_path = false", 1))
        results = {}
        for label, cfg_path, first_job in (("fast path", d.cfg_path, 600000), ("full path", full_cfg, 700000)):
            whole, steps, via = [], {}, set()
            for i in range(args.runs):
                job = first_job + i
                env = {"GPUPERF_CONFIG": str(cfg_path), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "SLURM_JOB_ID": str(job),
                       "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1",
                       "SLURMD_NODENAME": "bench", "SLURM_JOB_CPUS_PER_NODE": "8", "PATH": os.environ.get("PATH", "")}
                w = time.perf_counter()
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
                whole.append(1000 * (time.perf_counter() - w))
                rec = json.loads((Path(d.cfg.general.run_dir) / "jobs" / str(job) / "prolog.json").read_text())
                via.add(rec["data"].get("via") or f"process ({rec['data'].get('fast_path')})")
                for name, st in rec["steps"].items():
                    steps.setdefault(name, []).append(st["ms"])
                if p.returncode != 0:
                    print(f"gpuperf-prolog exited {p.returncode}: {p.stderr.strip()[-300:]}")
                if not rec["data"].get("register", {}).get("ok"):
                    print(f"job {job}: not registered: {rec['data'].get('register')}")
                client.request(d.cfg, "finalize", {"job_id": job})
            results[label] = (whole, steps, via)
    finally:
        d.stop()
    print(f"register round trip (daemon up, sampling 8 GPUs at 1 Hz): p50 {pct(rt, 0.5):.2f} ms, "
          f"p95 {pct(rt, 0.95):.2f} ms, max {max(rt):.2f} ms over {len(rt)}")
    for label, (whole, steps, via) in results.items():
        print(f"gpuperf-prolog, whole process, {label}: p50 {pct(whole, 0.5):.0f} ms, p95 {pct(whole, 0.95):.0f} ms "
              f"over {len(whole)} runs; steps ran in: {', '.join(sorted(via))}")
        print("  steps (p50 ms): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in steps.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
