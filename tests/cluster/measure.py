"""Measure the test cluster's start and stop times on this machine and print them (not a test).

    /opt/gpuperf/venv/bin/python tests/cluster/measure.py [--nodes N] [--name NAME]

Cold: a fresh instance directory (MariaDB initialised, accounts created; packages installed if
missing, shown as install_s). Warm: the same instance stopped and started again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

try:
    from .slurmcluster import SlurmCluster
except ImportError:  # run as a script
    from slurmcluster import SlurmCluster  # type: ignore[no-redef]


def first_job_s(c: SlurmCluster) -> float:
    """Seconds from sbatch to COMPLETED for a one-GPU job (includes the first scheduler pass)."""
    t0 = time.monotonic()
    job = c.sbatch("true\n", "--gres=gpu:1")
    c.wait(job, timeout=120)
    return time.monotonic() - t0


def main() -> None:
    """Cold up + first job, warm down/up + job, final down; one JSON line per phase."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="measure")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    c = SlurmCluster(a.name, nodes=a.nodes)
    c.down(purge=True)
    print(json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "nodes": a.nodes}))
    cold = c.up()
    print(json.dumps({"phase": "cold", **{k: round(v, 2) for k, v in cold.items()},
                      "first_job_s": round(first_job_s(c), 2)}))
    for _ in range(a.rounds):
        down_s = c.down()
        warm = c.up()
        print(json.dumps({"phase": "warm", "down_s": round(down_s, 2), "up_s": round(warm["up_s"], 2),
                          "job_s": round(first_job_s(c), 2)}))
    print(json.dumps({"phase": "purge", "down_s": round(c.down(purge=True), 2)}))


if __name__ == "__main__":
    main()
