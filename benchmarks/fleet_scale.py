"""Fleet fingerprints at scale: a synthetic fleet (default 500 nodes x 8 GPUs, 100 jobs per GPU) from the
real recordings (``fleet_synth.py``), with and without planted slow GPUs. Prints the update cost per job
(one node summary of 8 GPUs folded into SQLite), the time of ``gpuperf fleet --json`` over the whole
fleet, and whether exactly the planted GPUs are flagged and ranked on top.

    python benchmarks/fleet_scale.py [--nodes 500] [--jobs 100] [--out benchmarks/results/fleet_scale.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fleet_synth as fs  # noqa: E402

from gpuperf.fleet.fingerprint import FleetStore  # noqa: E402


def one(nodes: int, jobs: int, planted: dict, pools: dict, base: Path) -> dict:
    path = base / f"fleet-{len(planted)}.sqlite"
    st = FleetStore(path)
    per_job: list[float] = []
    t0 = time.perf_counter()
    for s in fs.fleet(nodes=nodes, jobs=jobs, planted=planted, pools=pools):
        a = time.perf_counter()
        st.ingest(s)
        per_job.append(time.perf_counter() - a)
    total = time.perf_counter() - t0
    st.close()
    env = dict(os.environ, GPUPERF_CONFIG=str(base / "none.toml"))
    runs = []
    for _ in range(3):
        a = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "gpuperf", "fleet", "--json", "--limit", "0", "--store", str(path)],
                           capture_output=True, text=True, env=env, check=True)
        runs.append(time.perf_counter() - a)
    out = json.loads(p.stdout)
    flagged = [(g["node"], g["gpu"]) for g in out["gpus"] if g["flagged"]]
    want = sorted((fs.node_name(n), g) for n, g in planted)
    top = sorted((g["node"], g["gpu"]) for g in out["gpus"][: len(planted)])
    per_job.sort()
    return {"gpus": out["total_gpus"], "jobs_per_gpu": jobs, "node_summaries": len(per_job),
            "planted": len(planted), "flagged": len(flagged), "exactly_planted_flagged": sorted(flagged) == want,
            "planted_on_top": top == want, "evidence": [g["headline"] for g in out["gpus"] if g["flagged"]],
            "update_ms_per_job_median": round(statistics.median(per_job) * 1e3, 3),
            "update_ms_per_job_p99": round(per_job[int(0.99 * (len(per_job) - 1))] * 1e3, 3),
            "update_ms_per_gpu_median": round(statistics.median(per_job) * 1e3 / 8, 3),
            "ingest_total_s": round(total, 1), "fleet_cmd_s": [round(r, 3) for r in runs],
            "store_mib": round(path.stat().st_size / 2**20, 2),
            "max_score_unflagged": max((g["score"] for g in out["gpus"] if not g["flagged"]), default=0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fleet_scale.json"))
    args = ap.parse_args()
    pools = fs.build_pools(random.Random(2))
    with tempfile.TemporaryDirectory(prefix="gpuperf-fleet-") as d:
        res = {"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs (shared)",
               "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "planted": {f"{fs.node_name(n)} idx {g}": v for (n, g), v in fs.PLANTED.items()},
               "with_planted": one(args.nodes, args.jobs, fs.PLANTED, pools, Path(d)),
               "none_planted": one(args.nodes, args.jobs, {}, pools, Path(d))}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    for k in ("with_planted", "none_planted"):
        r = res[k]
        print(f"{k:13} {r['gpus']} GPUs x {r['jobs_per_gpu']} jobs: flagged {r['flagged']} "
              f"(exactly planted: {r['exactly_planted_flagged']}, on top: {r['planted_on_top']}); "
              f"update {r['update_ms_per_job_median']} ms/job (p99 {r['update_ms_per_job_p99']}); "
              f"gpuperf fleet {min(r['fleet_cmd_s'])} s; store {r['store_mib']} MiB")
    for e in res["with_planted"]["evidence"]:
        print("  ", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
