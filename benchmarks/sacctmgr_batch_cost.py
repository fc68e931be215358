"""What one AdminComment write costs against a real slurmdbd, per ``sacctmgr`` call and per job line.

    GPUPERF_TEST_CLUSTER=NAME python benchmarks/sacctmgr_batch_cost.py [--jobs 100] [--lines 10]
        [--parallel-only] [--json OUT]

The controller service's writer (``accounting.SacctWriter``) writes a batch of AdminComments with one
``sacctmgr -i`` process (one ``modify job`` line per job on stdin) and checks them with one ``sacct``
call. The load benchmark stubs that write with a model of its cost; this measures the model's two
numbers on the real test cluster (``tests/cluster``: slurmdbd + MariaDB on this machine): ``--jobs``
finished jobs get realistic AdminComments (an 8-GPU summary, ~3.6 KB) in batches of 1, 10, 50 and
``--jobs`` lines; wall time of each sacctmgr and sacct call. A straight line through (lines, wall)
gives the per-call and the per-line cost; then 1, 4, 8, 16, 32 such processes at once (``--lines``
each, on distinct jobs, as far as ``--jobs`` goes), to see
whether more writers write more per second. The machine is shared: its load average is printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from gpuperf.model import admincomment  # noqa: E402
from gpuperf.diagnosis import jobsummary as summary  # noqa: E402
from gpuperf.access.slurm import Slurm  # noqa: E402
import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script


def comment_text() -> str:
    """The AdminComment of an 8-GPU job from a real recording."""
    from gpuperf.report import fromrecording

    rec = sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))[0]
    aggs, _ = fromrecording.replay_job(str(rec), job_id=1, node="n1", gpus=8)
    return admincomment.encode(summary.node_summary(aggs, {"job_id": 1, "node": "n1"}))


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of wall seconds over lines."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> int:
    """Start the test cluster, run finished jobs, time the writes, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--lines", type=int, default=10, help="lines per process in the parallel part")
    ap.add_argument("--parallel-only", action="store_true", help="only the parallel part")
    ap.add_argument("--json")
    args = ap.parse_args()
    from cluster.slurmcluster import SlurmCluster

    c = SlurmCluster(name=os.environ.get("GPUPERF_TEST_CLUSTER", "pytest"))
    c.up()
    load0 = os.getloadavg()[0]
    jobs = [c.sbatch("true\n") for _ in range(args.jobs)]
    for j in jobs:
        c.wait_sacct(j)
    os.environ["SLURM_CONF"] = c.env["SLURM_CONF"]
    slurm = Slurm("/usr/bin", timeout_s=120)
    base = comment_text()
    calls: dict[int, list[float]] = {}
    checks: dict[int, list[float]] = {}
    points: list[tuple[int, float]] = []
    n = 0
    for size, repeat in () if args.parallel_only else ((1, 20), (10, 5), (50, 3), (args.jobs, 3)):
        for r in range(repeat):
            n += 1
            batch = [(j, f"{base} run={n}") for j in jobs[r * size % args.jobs:][:size]]
            t0 = time.perf_counter()
            slurm.set_admin_comments_db(batch)
            t1 = time.perf_counter()
            shown = slurm.admin_comments([j for j, _ in batch])
            t2 = time.perf_counter()
            assert all(shown.get(j, "").lower() == t.lower() for j, t in batch), "a write did not take"
            calls.setdefault(size, []).append(t1 - t0)
            checks.setdefault(size, []).append(t2 - t1)
            points.append((size, t1 - t0))
    per_call, per_line = fit(points) if points else (None, None)
    # parallel writers: K sacctmgr processes at once, each on its own jobs (does slurmdbd take them side by side?)
    parallel = {}
    lines = args.lines
    for k in (1, 4, 8, 16, 32):
        if k * lines > args.jobs:
            break
        n += 1
        groups = [[(j, f"{base} run={n}") for j in jobs[i * lines:(i + 1) * lines]] for i in range(k)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(k) as ex:
            list(ex.map(slurm.set_admin_comments_db, groups))
        wall = time.perf_counter() - t0
        parallel[k] = {"wall_s": round(wall, 2), "lines_per_s": round(lines * k / wall, 1)}
    figures = {
        "comment_bytes": len(base), "load_avg_1m_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "sacctmgr_ms_by_lines": {k: {"median": round(1000 * statistics.median(v), 1), "runs": len(v)}
                                 for k, v in calls.items()},
        "sacct_check_ms_by_jobs": {k: round(1000 * statistics.median(v), 1) for k, v in checks.items()},
        "fit_per_call_ms": per_call and round(1000 * per_call, 1),
        "fit_per_line_ms": per_line and round(1000 * per_line, 2),
        f"parallel_processes_{lines}_lines_each": parallel,
    }
    figures_out.emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
