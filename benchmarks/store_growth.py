#!/usr/bin/env python3
"""Daemon store growth per GPU-hour: 8 GPUs replayed at 1 Hz on a virtual clock with 8 running jobs,
through the daemon's own sweep (full-resolution window, 1-minute roll-up, aggregate checkpoints).

  python3 benchmarks/store_growth.py [--hours 4] [--gpus 8]

Prints the size after the first hour (the full-resolution window is full then), the size at the end,
and the growth per GPU-hour between the two (the long-run cost), plus the window's fixed cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon_cpu import default_backend, write_config  # noqa: E402

from gpuperf.files import config  # noqa: E402
from gpuperf.daemon import protocol  # noqa: E402
from gpuperf.daemon.server import Daemon  # noqa: E402
from gpuperf.samplers import open_sampler  # noqa: E402


def db_bytes(d: Daemon) -> int:
    """Store size on disk after folding the WAL into the main file."""
    d.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    p = Path(d.store.path)
    return sum(os.path.getsize(x) for x in (p, Path(str(p) + "-wal")) if x.exists())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuperf-store-"))
    try:
        backend = default_backend(args.gpus) + "&clock=virtual"
        cfg = config.load(str(write_config(base, backend, 1.0, "host_interval_s = 3600.0")))
        sampler = open_sampler(backend, cfg)
        d = Daemon(cfg, sampler, node="bench", health_fn=None, metrics=False, send_summaries=False)
        d.open()
        first = sampler.sample()
        t0 = first[0].t
        d.clock = lambda: d.latest_t or t0
        for g in range(args.gpus):
            d.handle(protocol.encode(protocol.request("register", {"job_id": 1000 + g, "uid": 0, "gpus": [g], "start": t0})), 0)
        sweeps_per_hour = 3600
        wall0 = time.time()
        size_1h = None
        total = int(args.hours * sweeps_per_hour)
        for i in range(total):
            d.sweep()
            if i + 1 == sweeps_per_hour + 120:     # one hour plus the roll-up delay: window full
                size_1h = db_bytes(d)
        size_end = db_bytes(d)
        wall = time.time() - wall0
        fine_rows = d.store.db.execute("SELECT count(*) FROM samples").fetchone()[0]
        coarse_rows = d.store.db.execute("SELECT count(*) FROM samples_1m").fetchone()[0]
        d.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    hours_after = (total - sweeps_per_hour - 120) / sweeps_per_hour
    growth = (size_end - size_1h) / (hours_after * args.gpus)
    print(f"store after 1 h (full-resolution window full): {size_1h / 1024:.0f} KiB for {args.gpus} GPUs "
          f"({size_1h / args.gpus / 1024:.0f} KiB per GPU, a fixed cost)")
    print(f"store after {args.hours:g} h: {size_end / 1024:.0f} KiB ({fine_rows} full-resolution rows, {coarse_rows} 1-minute rows)")
    print(f"store growth: {growth / 1000:.1f} KB per GPU-hour (after the first hour; target <= 100 KB)")
    print(f"({total} sweeps of {args.gpus} GPUs with {args.gpus} running jobs folded in {wall:.1f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
