"""Time to read a job's per-GPU series from Prometheus, against its size (``report.prometheus_url``).

    /opt/gpuperf/venv/bin/python benchmarks/report_prometheus.py [--repeat 5] [--out FILE]

A real Prometheus (Debian's 2.42, ``tests/promserver.py``) over a TSDB backfilled with ``promtool tsdb
create-blocks-from openmetrics``: the daemon's six charted gauges (names as exported) of N nodes x
8 GPUs at a 15 s scrape for --days (7), values synthetic (a slow wave per GPU: the query's cost does not
depend on them). For jobs of 1 h, 1 day and 7 days on 1 node and on all N nodes, prints the time of
``promseries.job_series`` (six ``query_range`` POSTs, <= 500 points per line; median of --repeat) and
of the whole ``gpuperf report JOBID`` (terminal, new process, series from Prometheus) next to the
same command with the series from the controller store. Loopback, one Prometheus, no other load.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import promserver  # noqa: E402
from report_render import median_s  # noqa: E402
from report_fixtures import aggregates, context  # noqa: E402

from gpuperf.model import series  # noqa: E402
from gpuperf.diagnosis import jobsummary as summary  # noqa: E402
from gpuperf.controller import clusterstore, merge  # noqa: E402
from gpuperf.report import promseries  # noqa: E402

SCRAPE_S = 15
DAYS = 7
GPUS = 8
GPUPERF = str(Path(sys.executable).with_name("gpuperf"))


def write_openmetrics(path: Path, nodes: list[str], t0: int, t1: int) -> int:
    """The gauges of every node's GPUs every SCRAPE_S over [t0, t1) as OpenMetrics text; samples written."""
    n = 0
    times = range(t0, t1, SCRAPE_S)
    with open(path, "w") as f:
        for field, (metric, factor) in promseries.METRICS.items():
            top = 700.0 if field == "power_w" else (5e10 if "bps" in field else 100.0)
            f.write(f"# TYPE {metric} gauge\n")
            for node in nodes:
                for g in range(GPUS):
                    lab = f'{metric}{{instance="{node}:9402",job="gpuperf",gpu="{g}"}}'
                    phase = hash((node, g)) % 1000 / 1000 * 2 * math.pi
                    # in the exported (base) unit: the field's value divided by the reader's factor
                    f.writelines(f"{lab} {top * (0.5 + 0.4 * math.sin(t / 3600 + phase)) / factor:.4f} {t}\n" for t in times)
                    n += len(times)
        f.write("# EOF\n")
    return n


def store_with_jobs(path: Path, jobs: list[tuple[int, list[str], float, float]]) -> None:
    """A controller store holding each job's summary and (for the comparison) a 500-point series per GPU."""
    with clusterstore.ClusterStore(path) as st:
        for job_id, nodes, start, end in jobs:
            parts = {}
            for node in nodes:
                a = aggregates(job_id=job_id, node=node, ngpus=GPUS, seconds=end - start)
                a["start"], a["end"] = start, end
                ns = summary.node_summary(a, context(job_id=job_id, node=node))
                t = [start + (end - start) * i / 499 for i in range(500)]
                cols = {str(g): {"t": t, **{f: [50.0] * 500 for f in series.FIELDS}} for g in range(GPUS)}
                st.put_node_summary(ns, 0, series=series.pack(series.compact(cols)))
                parts[node] = ns
            st.put_job(merge.merge_job(parts, nodes, {"job_id": job_id, "user": "bench", "uid": 0}, end))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--days", type=int, default=DAYS, help="days of backfilled data (jobs up to that long)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", help="also write the table (markdown) here")
    args = ap.parse_args()
    exe = promserver.binary()
    promtool = shutil.which("promtool")
    if not exe or not promtool:
        print("Debian's prometheus (with promtool) is needed", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="gpuperf-bench-prom-"))
    try:
        nodes = [f"n{i:02d}" for i in range(1, args.nodes + 1)]
        t1 = int(time.time()) // 3600 * 3600 - 3600   # whole hours, ending an hour ago (backfill needs the past)
        t0 = t1 - args.days * 86400
        t = time.perf_counter()
        n = write_openmetrics(tmp / "data.om", nodes, t0, t1)
        made = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "data.om"), str(tmp / "tsdb")],
                       check=True, capture_output=True, timeout=3600)
        backfill = time.perf_counter() - t
        (tmp / "data.om").unlink()
        print(f"backfilled {n:,} samples ({len(nodes)} nodes x {GPUS} GPUs x 6 gauges, {args.days} d at {SCRAPE_S} s): "
              f"text {made:.0f} s, promtool {backfill:.0f} s", flush=True)
        spans = [(f"{d} d" if d else "1 h", d * 86400 - 60 if d else 3600) for d in (0, 1, 7) if d <= args.days]
        jobs, job_id = [], 900
        for label, span in spans:
            for ns in ([nodes[0]], nodes) if len(nodes) > 1 else ([nodes[0]],):
                job_id += 1
                jobs.append((job_id, ns, float(t1 - span), float(t1 - 1), label))
        store_with_jobs(tmp / "cluster.sqlite", [j[:4] for j in jobs])
        rows = []
        with promserver.running(exe, tmp / "prom", {}, tsdb=tmp / "tsdb",
                                extra_args=("--storage.tsdb.retention.time=30d",)) as prom:
            conf = tmp / "gpuperf.toml"
            base = (f'[general]\nstate_dir = "{tmp}"\nrun_dir = "{tmp}/run"\nlog_file = ""\nslurm_bin_dir = "{tmp}/noslurm"\n'
                    f'[daemon]\nsocket_dir = "{tmp}/nodaemon"\n[controller]\nstore = "{tmp}/cluster.sqlite"\n')
            conf.write_text(base + f'[report]\nprometheus_url = "{prom.url}"\nprometheus_scrape_s = {SCRAPE_S}.0\n')
            env = dict(os.environ, GPUPERF_CONFIG=str(conf), COLUMNS="120")
            with clusterstore.ClusterStore(tmp / "cluster.sqlite", readonly=True) as st:
                sums = {j[0]: st.job(j[0]) for j in jobs}
            for job_id, ns, start, end, label in jobs:
                s = sums[job_id]
                got = promseries.job_series(prom.url, s, 500, "instance", SCRAPE_S, 30.0)
                points = max(len(v["t"]) for v in got.values())
                q = median_s(lambda: promseries.job_series(prom.url, s, 500, "instance", SCRAPE_S, 30.0), args.repeat)
                cmd = [GPUPERF, "report", str(job_id)]
                whole = median_s(lambda: subprocess.run(cmd, env=env, capture_output=True, check=True), max(args.repeat // 2, 1))
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                assert "series from Prometheus" in out, out[-300:]
                store = median_s(lambda: subprocess.run(cmd + ["--series-source", "controller"], env=env, capture_output=True,
                                                         check=True), max(args.repeat // 2, 1))
                rows.append((label, len(ns) * GPUS, len(got), points, q * 1e3, whole * 1e3, store * 1e3))
                print(f"job {label:>4}, {len(ns) * GPUS:3d} GPUs: {len(got)} lines x {points} points; query {q * 1e3:7.1f} ms; "
                      f"gpuperf report {whole * 1e3:6.0f} ms (store series: {store * 1e3:6.0f} ms)", flush=True)
        table = ["| job span | GPUs | lines x points | promseries.job_series (6 query_range) | `gpuperf report` (Prometheus) | `gpuperf report` (controller store) |",
                 "|---|---|---|---|---|---|"]
        table += [f"| {r[0]} | {r[1]} | {r[2]} x {r[3]} | {r[4]:.1f} ms | {r[5]:.0f} ms | {r[6]:.0f} ms |" for r in rows]
        text = "\n".join(table)
        print(text)
        if args.out:
            load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
            Path(args.out).write_text(f"dev VM, {os.cpu_count()} vCPU shared with other sessions (load average {load} at the end). "
                                      f"{n:,} samples backfilled ({len(nodes)} nodes x {GPUS} GPUs x 6 gauges, {args.days} d at "
                                      f"{SCRAPE_S} s); median of {args.repeat} (whole commands: of {max(args.repeat // 2, 1)})\n\n"
                                      + text + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
