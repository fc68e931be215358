"""``gpuperf jobs`` for ordinary users: the cost of turning sacct's lines into rows, per job.

    python benchmarks/controller_jobs_sacct.py [--jobs 100000]

sacct itself is not run here (the test cluster holds a few hundred jobs, not a million): the figure is
what gpuperf adds on top of one ``sacct -P`` call, parsing its output and decoding each gpuperf
AdminComment (real summaries of 1, 2, 4 and 8 GPUs from the recordings), and the bytes sacct must
send. Prints jobs/s and the extrapolation to 1,000,000 jobs.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpuperf.model import admincomment  # noqa: E402
from gpuperf.diagnosis import jobsummary as summary  # noqa: E402
from gpuperf.report import sacctrows  # noqa: E402
from jobs_query import templates  # noqa: E402
import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--json")
    args = ap.parse_args()
    comments = [admincomment.encode(summary.merge([t], ["n1"])).lower() for t in templates()]
    rng = random.Random(14)
    text_lines = []
    for j in range(args.jobs):
        c = rng.choice(comments)
        text_lines.append(f"{j + 1}|alice|1000|2026-11-20T10:00:00|2026-11-20T11:00:00|n1|gres/gpu=8|{c}")
    out_bytes = sum(len(t) + 1 for t in text_lines)
    keys = [f.partition("%")[0] for f in sacctrows.FIELDS]
    t0 = time.perf_counter()
    lines = [dict(zip(keys, t.split("|", len(keys) - 1))) for t in text_lines]
    rows, _ = sacctrows.rows(lines, "waste", 50)
    dt = time.perf_counter() - t0
    figures = {"jobs": args.jobs, "seconds": round(dt, 2), "jobs_per_s": round(args.jobs / dt),
               "sacct_output_mib": round(out_bytes / 2**20, 1),
               "extrapolated_1M_jobs_s": round(dt * 1_000_000 / args.jobs, 1),
               "extrapolated_1M_sacct_output_mib": round(out_bytes * 1_000_000 / args.jobs / 2**20),
               "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    figures_out.emit(figures, args.json)
    return 0 if len(rows) == 50 else 1


if __name__ == "__main__":
    sys.exit(main())
