#!/usr/bin/env python3
"""Time ``gpuperf.topology.load_node``: from a recorded node (default: the hgx-h100-2s fixture) or live.

Usage: ``python3 benchmarks/topology_time.py [--root DIR | --live] [-n N]``. Prints median, min and p90
in milliseconds over N loads (each a full re-read: no cache exists between calls).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from gpuperf.topology import load_node  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(HERE, "..", "tests", "data", "nodes", "hgx-h100-2s"))
    ap.add_argument("--live", action="store_true", help="read the live node (sysfs + NVML)")
    ap.add_argument("--no-health", action="store_true", help="live: skip the health part of the NVML snapshot")
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
    root = "" if args.live else os.path.abspath(args.root)
    first_t0 = time.perf_counter()
    node = load_node(root, health=not args.no_health)
    first_ms = (time.perf_counter() - first_t0) * 1e3
    times = []
    for _ in range(args.n):
        t0 = time.perf_counter()
        load_node(root, health=not args.no_health)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    what = "live" if args.live else root
    print(f"load_node({what}): {len(node.topology['gpus'])} GPUs, {len(node.topology['nics'])} NICs, "
          f"{len(node.topology['cpus']['online'] or [])} CPUs")
    print(f"first call (incl. NVML init when live): {first_ms:.2f} ms")
    print(f"n={args.n}  median {statistics.median(times):.2f} ms  min {times[0]:.2f} ms  "
          f"p90 {times[int(0.9 * (len(times) - 1))]:.2f} ms  "
          f"(python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
