#!/usr/bin/env python3
"""False drains: run N jobs (default 200) through the real test cluster on a healthy node and count drains.

Uses the test cluster of tests/cluster (instance ``$GPUPERF_TEST_CLUSTER``, default ``falsedrains``;
started if needed, left running with ``--keep``). The node reads the healthy ``pcie-l40s-2s``
fixture; jobs are one array of ``--gres=gpu:1`` jobs. Prints jobs finished by state, drains seen
(sinfo polled during the run), the prolog health statuses and the health step's time.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from cluster.slurmcluster import SlurmCluster, can_run  # noqa: E402 - the test cluster lives under tests/


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200, help="jobs (default 200)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    why = can_run()
    if why:
        print(f"cannot run the test cluster here: {why}", file=sys.stderr)
        return 2
    c = SlurmCluster(os.environ.get("GPUPERF_TEST_CLUSTER", "falsedrains"))
    c.up()
    try:
        c.reset_gpuperf_config()
        cfg = c.gpuperf_config()
        cfg.setdefault("general", {})["node_root"] = str(REPO / "tests" / "data" / "nodes" / "pcie-l40s-2s")
        c.write_gpuperf_config(cfg)
        c.resume_all()
        node = c.node_names[0]
        t0 = time.time()
        p = c.run("sbatch", "--parsable", f"--array=0-{args.n - 1}", "--gres=gpu:1", "--job-name=false-drains",
                  "-o", "/dev/null", "--wrap", "true", check=True)
        array_id = p.stdout.strip().split(";")[0]
        drains: list[str] = []
        deadline = time.monotonic() + 60 + 3 * args.n
        while time.monotonic() < deadline:
            state = c.node_states().get(node, "")
            if "drain" in state:
                reason = c.node_reason(node)
                drains.append(reason)
                print(f"DRAIN seen: {reason}", file=sys.stderr)
                c.resume_all()
            left = c.run("squeue", "-h", "-r", "-j", array_id, "-o", "%i").stdout.split()
            if not left:
                break
            time.sleep(0.5)
        wall = time.time() - t0
        rows = c.run("sacct", "-n", "-X", "-P", "-j", array_id, "-o", "JobID,State").stdout.splitlines()
        states = collections.Counter(r.split("|")[1].split(" ")[0] for r in rows if "|" in r)
        statuses: collections.Counter[str] = collections.Counter()
        health_ms = []
        for rec_path in (c.run_dir / "jobs").glob("*/prolog.json"):
            if rec_path.stat().st_mtime < t0:
                continue
            rec = json.loads(rec_path.read_text())
            statuses[rec["data"].get("health", {}).get("status", "absent")] += 1
            if "health" in rec["steps"]:
                health_ms.append(rec["steps"]["health"]["ms"])
        print(f"{args.n} jobs in {wall:.0f} s on {node} (fixture pcie-l40s-2s, healthy)")
        print(f"job states: {dict(states)}")
        print(f"drains observed: {len(drains)}")
        print(f"prolog health status: {dict(statuses)}")
        if health_ms:
            health_ms.sort()
            print(f"health step ms: p50 {statistics.median(health_ms):.1f}  p95 {health_ms[int(0.95 * (len(health_ms) - 1))]:.1f}")
        return 0 if not drains else 1
    finally:
        c.run("scancel", "--name=false-drains")
        if not args.keep:
            c.down()


if __name__ == "__main__":
    sys.exit(main())
