"""Cost of the diagnosis with phases per job: diagnose(summary, series) for 8 GPUs and series of N points.

    PYTHONPATH=. python benchmarks/diag_phases_cost.py [--out benchmarks/results/diag_phases_cost.md]

The series is the phases recording (input-bound, then compute) replayed on 8 GPUs: for N=24 (what the
daemon handed the diagnosis before issue 35) one pass averaged into 24 points, for N=120 (``phases.SERIES_POINTS``,
what it hands now) the first 120 sweeps of the recording looped; for 500 and 2000 (what `gpuperf report
--html` reads) the recording looped, so input and compute alternate every ~20 s.
Prints the median of repeated calls (process CPU time) and the phases found.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpuperf import diagnosis  # noqa: E402
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import fromrecording  # noqa: E402

REC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "recordings",
                   "phases-h100-80gb-hbm3.jsonl.gz")


def _means(vals: list, n: int) -> list:
    """``vals`` averaged into ``n`` equal runs (as the daemon's store averages into max_points buckets)."""
    out = []
    for i in range(n):
        part = [v for v in vals[i * len(vals) // n:(i + 1) * len(vals) // n] if v is not None]
        out.append(sum(part) / len(part) if part else None)
    return out


def series_of(points: int) -> tuple[dict, dict]:
    """(summary, series) of an 8-GPU job whose series has ``points`` points per GPU: one pass of the
    recording averaged down when it has more sweeps, the recording looped when it has fewer."""
    loops = max(1, -(-points // 51))
    aggs, series = fromrecording.replay_job(REC, gpus=8, loops=loops, with_series=True)
    series = {g: {k: _means(v, points) if loops == 1 else v[:points] for k, v in ser.items()}
              for g, ser in series.items()}
    return summary.node_summary(aggs, {"job_id": 1, "node": "n1"}), series


def main(argv: list[str] | None = None) -> int:
    """Print (and with --out write) the cost table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--repeats", type=int, default=30)
    a = p.parse_args(argv)
    lines = ["| points per GPU (8 GPUs) | diagnose() without series, ms | with series (phases), ms | phases |",
             "|---|---|---|---|"]
    for n in (24, 120, 500, 2000):
        s, ser = series_of(n)
        times = {}
        for label, arg in (("plain", None), ("series", ser)):
            t = []
            for _ in range(a.repeats):
                t0 = time.process_time()
                d = diagnosis.diagnose(s, arg)
                t.append(time.process_time() - t0)
            times[label] = 1000 * statistics.median(t)
        phases = ", ".join(f"{p['class']} {p['share_pct']:.0f}%" for p in d.phases) or "one phase"
        lines.append(f"| {n} | {times['plain']:.2f} | {times['series']:.2f} | {phases} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(f"diagnose() cost, median of {a.repeats} calls, process CPU time; machine: {os.uname().nodename}, "
                    f"{os.cpu_count()} CPUs (shared)\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
