"""Bytes the controller's store keeps per job, as jobs end, merge, are written and age.

    python benchmarks/controller_store.py [--jobs 2000] [--json OUT]

Jobs as ``controller_load.py`` makes them (1 node for 70 %, 2, 4 or 8 for the rest; each node's 8-GPU summary
with its phase series and a 500-point series of stretches at one level with 1 % noise, as GPUs look, not white
noise) go through the service's real paths in one process: stored as the collector stores them, merged by the
scheduler (``service.Service.tick``), written (stub), then the store's upkeep (``clusterstore.Upkeep``) runs as
it would once their late window is over. Prints the bytes the store's pages hold per job (SQLite's used pages,
not the file: freed pages are reused by the next jobs) at each stage and per 100,000 jobs in GiB, the
compacted rows packed afresh (``VACUUM INTO``: pages part emptied by the compaction refilled), and the bytes
per job of each kept part.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script


def used_bytes(path: str) -> int:
    """Bytes in the store's used pages (a checkpoint first: the WAL's pages are the store's too)."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    n, free, size = (db.execute(f"PRAGMA {k}").fetchone()[0] for k in ("page_count", "freelist_count", "page_size"))
    db.close()
    return (n - free) * size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from controller_load import template
    from gpuperf.controller import accounting, clusterstore, service
    from gpuperf.controller.queue import LATE_GRACE_S
    from gpuperf.files import config, jsoncodec
    from gpuperf.model import series as series_mod

    tmp = Path(tempfile.mkdtemp(prefix="gp-store-"))
    cfg = config.parse(f'[general]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\nlog_file = ""\n'
                       '[controller]\nmerge_wait_s = 30.0\n')
    svc = service.Service(cfg, accounting.StubWriter(0.0))
    random.seed(14)
    t = template(500)
    ser = series_mod.pack(t.pop("series"))
    body0 = json.dumps(t)
    end = time.time()
    nodes_sent = 0
    for j in range(1, args.jobs + 1):
        nodes = [f"n{(j * 7 + i) % 20000:05d}" for i in range(random.choice([1] * 7 + [2, 4, 8]))]
        (Path(svc.spool) / f"{j}.ended").write_text(f"job_id={j}\nnodelist={','.join(nodes)}\nuser=u\nuid=1000\n"
                                                    "exit_code=0\nend\n")
        for node in nodes:
            s = jsoncodec.loads(body0.replace('"n1"', f'"{node}"'))
            s.update(job_id=j, nodes=[node], start=end - 3600, end=end)
            svc.store.put_node_summary(s, 0, blob=zlib.compress(jsoncodec.dumps(s), 6), series=ser, commit=False)
            svc.arrived.put(s)
            nodes_sent += 1
        if j % 200 == 0:
            svc.store.db.commit()
            svc.tick()
    svc.store.db.commit()
    while svc.queue.counts().get("merge"):
        svc.tick()
    received = used_bytes(svc.path)
    for job_id, _ in svc.queue.due_writes(time.time() + 1, args.jobs + 10):
        svc.queue.set_written(job_id, time.time())
    svc.store.db.commit()
    written = used_bytes(svc.path)
    up = clusterstore.Upkeep(svc.store, cfg.controller.series_keep_days, LATE_GRACE_S + 60.0)
    later = time.time() + LATE_GRACE_S + 120.0
    while True:
        before = up.mark
        up.at = 0.0
        up.run(later)
        svc.store.db.commit()
        if up.mark == before or up.mark >= later - LATE_GRACE_S - 60.0:
            break
    compacted = used_bytes(svc.path)
    # the same rows packed afresh: what the pages hold once freed space is reused (SQLite reuses a freed page
    # whole; rows that shrank leave their pages part empty until neighbours are rewritten)
    svc.store.db.execute("VACUUM INTO ?", (str(tmp / "packed.sqlite"),))
    packed = os.path.getsize(tmp / "packed.sqlite")
    q = svc.store.db.execute
    parts = {"node_summary_bytes": q("SELECT sum(length(summary)) FROM node_summaries").fetchone()[0],
             "node_series_bytes": q("SELECT sum(length(series)) FROM node_series_kept").fetchone()[0],
             "job_summary_bytes": q("SELECT sum(length(summary)) FROM job_summaries").fetchone()[0]}
    svc.store.close()
    subprocess.run(["rm", "-rf", str(tmp)])

    def per(b: int) -> dict:
        return {"bytes_per_job": round(b / args.jobs), "gib_per_100k_jobs": round(b / args.jobs * 1e5 / 2**30, 2)}

    figures_out.emit({"provenance": figures_out.provenance(ROOT), "jobs": args.jobs, "node_summaries": nodes_sent,
                      "series_points": 500, "series_bytes_per_node_as_sent": len(ser),
                      "received_and_merged": per(received), "written": per(written),
                      "after_late_window (compacted)": per(compacted), "compacted_rows_packed": per(packed),
                      "compacted_per_job_by_part": {k: round((v or 0) / args.jobs) for k, v in parts.items()},
                      "kept_points_levels": [clusterstore.KEEP_POINTS, clusterstore.KEEP_LEVELS],
                      "load_avg_1m": round(os.getloadavg()[0], 2)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
