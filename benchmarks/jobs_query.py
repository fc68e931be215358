"""``gpuperf jobs`` over 100,000 stored jobs: the whole command, as an admin would run it.

    /opt/gpuperf/venv/bin/python benchmarks/jobs_query.py [--jobs 100000] [--repeat 5]

Fills a controller store with N jobs ending over the last 90 days (summaries built from the real
recordings: 1, 2, 4 or 8 GPUs, 50 users, each job's own times and figures), then times the
``gpuperf jobs`` command (new process each run) for the default view (last 7 days, top 50 by
waste), each sort, one user, and every job as JSON.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuperf import summary
from gpuperf.controller import clusterstore
from gpuperf.report import fromrecording

ROOT = Path(__file__).resolve().parents[1]


def templates() -> list[dict]:
    """Node summaries of 1/2/4/8 GPUs for each recording."""
    out = []
    for p in sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*")):
        for gpus in (1, 2, 4, 8):
            aggs, _ = fromrecording.replay_job(str(p), job_id=1, node="n1", gpus=gpus)
            out.append(summary.node_summary(aggs, {"job_id": 1, "node": "n1"}))
    return out


def fill(path: Path, n: int, seed: int = 0) -> float:
    """Store n jobs; seconds taken."""
    rng = random.Random(seed)
    tpl = templates()
    now = time.time()
    t = time.perf_counter()
    with clusterstore.ClusterStore(path) as st:
        batch = []
        for j in range(1, n + 1):
            s = copy.deepcopy(rng.choice(tpl))
            wall = rng.uniform(60, 2 * 86400)
            end = now - rng.uniform(0, 90 * 86400)
            s.update(job_id=j, user=f"user{rng.randrange(50):02d}", uid=10000 + j % 50, start=end - wall, end=end,
                     nodes=[f"gpu{rng.randrange(64):03d}"])
            k = wall / 3600 * s["job"]["gpu_count"]
            s["job"].update(gpu_hours=round(k, 3), wasted_gpu_hours=round(k * rng.random(), 3),
                            energy_j=round(k * 3600 * rng.uniform(80, 700)))
            batch.append(s)
            if len(batch) == 5000:
                st.put_jobs(batch)
                batch = []
        st.put_jobs(batch)
    return time.perf_counter() - t


def main() -> int:
    """Fill the store, time the command, print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "cluster.sqlite"
        took = fill(store, a.jobs)
        print(f"{a.jobs} jobs stored in {took:.1f} s ({store.stat().st_size / 1e6:.0f} MB)")
        conf = Path(d) / "gpuperf.toml"
        conf.write_text(f'[general]\nstate_dir = "{d}"\nlog_file = ""\n')
        env = dict(os.environ, GPUPERF_CONFIG=str(conf))
        for args in (["--since", "7d"], ["--since", "30d", "--sort", "energy"], ["--since", "90d", "--sort", "gpu-hours"],
                     ["--since", "90d", "--user", "user07", "--limit", "0"], ["--since", "91d", "--limit", "0", "--json"]):
            times, lines = [], 0
            for _ in range(a.repeat):
                t = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "gpuperf", "jobs", *args], env=env, capture_output=True,
                                   text=True, check=True)
                times.append(time.perf_counter() - t)
                lines = p.stdout.count("\n") if "--json" not in args else p.stdout.count('"job_id"')
            print(f"gpuperf jobs {' '.join(args):<42} {statistics.median(times) * 1000:7.0f} ms  ({lines} rows out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
