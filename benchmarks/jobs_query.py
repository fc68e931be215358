"""``gpuperf jobs`` over 100,000 (or 1,000,000) stored jobs: the whole command, as an admin would run it.

    /opt/gpuperf/venv/bin/python benchmarks/jobs_query.py [--jobs 100000] [--repeat 5] [--json OUT]

Fills a controller store with N jobs ending over the last 90 days (summaries built from the real
recordings: 1, 2, 4 or 8 GPUs, 50 users, each job's own times and figures), then times the
``gpuperf jobs`` command (new process each run: median wall and CPU time) for the default view
(last 7 days, top 50 by waste), each sort, the top 50 as JSON, one user's jobs, and every job as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.controller import clusterstore, queue
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
    """Store n jobs (and their queue rows, as the controller service leaves them); seconds taken.

    Rows are built directly and inserted in one transaction (``executemany``): each job has its own
    times, user, node and figures; its summary blob is its template's (``gpuperf jobs`` never reads
    it, and the bytes are a real summary's), so a million jobs take a minute, not a quarter hour of
    re-encoding."""
    rng = random.Random(seed)
    tpl = [(s, clusterstore._pack(s)) for s in templates()]
    now = time.time()
    t = time.perf_counter()

    def rows():
        for j in range(1, n + 1):
            s, blob = rng.choice(tpl)
            wall = rng.uniform(60, 2 * 86400)
            end = now - rng.uniform(0, 90 * 86400)
            k = wall / 3600 * s["job"]["gpu_count"]
            diag = s.get("diagnosis") or {}
            yield (j, f"user{rng.randrange(50):02d}", 10000 + j % 50, end - wall, end, f"gpu{rng.randrange(64):03d}",
                   s["job"]["gpu_count"], round(k, 3), round(k * rng.random(), 3), round(k * 3600 * rng.uniform(80, 700)),
                   diag.get("class"), int(bool(diag.get("imbalanced"))), 0, now, blob)

    with clusterstore.ClusterStore(path) as st:
        queue.JobQueue(st.db)  # the service's queue table: `gpuperf jobs` shows each job's accounting state
        with st.db:
            gen = rows()
            while chunk := list(itertools.islice(gen, 50_000)):
                st.db.executemany("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [r[:14] for r in chunk])
                st.db.executemany("INSERT INTO job_summaries VALUES (?,?)", [(r[0], r[14]) for r in chunk])
                st.db.executemany("INSERT INTO ended (job_id, nodes, user, uid, ended, state, written) "
                                  "VALUES (?,?,?,?,?,'done',?)",
                                  [(r[0], f'["{r[5]}"]', r[1], r[2], r[4], r[4] + 5) for r in chunk])
    return time.perf_counter() - t


def main() -> int:
    """Fill the store, time the command, print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    figures: dict = {"jobs": a.jobs, "cpus": os.cpu_count(), "load_avg_1m_start": round(os.getloadavg()[0], 2),
                     "commands": []}
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "cluster.sqlite"
        took = fill(store, a.jobs)
        size = sum(p.stat().st_size for p in Path(d).glob("cluster.sqlite*"))
        figures.update(fill_s=round(took, 1), store_mb=round(size / 1e6))
        print(f"{a.jobs} jobs stored in {took:.1f} s ({size / 1e6:.0f} MB)")
        conf = Path(d) / "gpuperf.toml"
        conf.write_text(f'[general]\nstate_dir = "{d}"\nlog_file = ""\n')
        env = dict(os.environ, GPUPERF_CONFIG=str(conf))
        for args in (["--since", "7d"], ["--since", "30d", "--sort", "energy"], ["--since", "90d", "--sort", "gpu-hours"],
                     ["--since", "91d", "--json"], ["--since", "90d", "--user", "user07", "--limit", "0"],
                     ["--since", "90d", "--user", "user07", "--limit", "0", "--json"],
                     ["--since", "91d", "--limit", "0", "--json"]):
            times, cpus, lines = [], [], 0
            for _ in range(a.repeat):
                c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "gpuperf", "jobs", *args], env=env, capture_output=True,
                                   text=True, check=True)
                times.append(time.perf_counter() - t)
                c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
                lines = p.stdout.count("\n") if "--json" not in args else p.stdout.count('"job_id"')
            row = {"args": " ".join(args), "wall_ms_median": round(statistics.median(times) * 1000),
                   "cpu_ms_median": round(statistics.median(cpus) * 1000), "rows_out": lines, "runs": a.repeat}
            figures["commands"].append(row)
            print(f"gpuperf jobs {row['args']:<50} {row['wall_ms_median']:7d} ms wall {row['cpu_ms_median']:7d} ms CPU"
                  f"  ({lines} rows out)")
    figures["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
