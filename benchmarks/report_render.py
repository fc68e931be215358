"""Render time of ``gpuperf report`` (terminal) and ``--html`` for a 7-day 8-GPU job.

    /opt/gpuperf/venv/bin/python benchmarks/report_render.py [--repeat 5]

The job: the real recordings (GPU i plays recording i mod 5) looped for 7 days at the daemon's
1-minute rollup resolution, folded through the daemon's streaming aggregates (so the summary is
a 7-day one), and the per-GPU series the daemon's store keeps for 7 days (1-minute means:
10,080 points per GPU and field), which the page averages down to ``report.html_max_points``.
Prints the in-process render times (median of --repeat) and the whole ``gpuperf report`` command
(new Python process, summary from the controller store) for the terminal report.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.model.aggregates import JobAggregates
from gpuperf.controller import clusterstore
from gpuperf.report import html, terminal
from gpuperf.samplers.replay import ReplaySampler

ROOT = Path(__file__).resolve().parents[1]
DAYS = 7
STEP_S = 60.0
FIELDS = ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "power_w", "nvlink_tx_bps", "nvlink_rx_bps")


def seven_day_job(paths: list[str], gpus: int = 8, job_id: int = 4242) -> tuple[dict, dict]:
    """(summary, series) of a 7-day job whose 1-minute points cycle through the recordings' sweeps."""
    samplers = [ReplaySampler(paths[i % len(paths)], clock="virtual", loop=True, gpus=1) for i in range(gpus)]
    t0 = 1.7630e9
    agg = JobAggregates.new(job_id, "n1", range(gpus), t0, STEP_S)
    for i, g in agg.gpus.items():
        g.name = samplers[i].rec.header["gpus"][0]["name"]
    series = {str(i): {"t": [], **{f: [] for f in FIELDS}} for i in range(gpus)}
    n = int(DAYS * 86400 / STEP_S)
    for k in range(n):
        t = t0 + k * STEP_S
        sweep = []
        for i, s in enumerate(samplers):
            smp = s.sample()[0]
            smp.gpu, smp.t = i, t
            sweep.append(smp)
            ser = series[str(i)]
            ser["t"].append(t)
            for f in FIELDS:
                ser[f].append(getattr(smp, f))
        agg.add_sweep(t, sweep)
    agg.end = t0 + (n - 1) * STEP_S
    ctx = {"job_id": job_id, "node": "n1", "user": "alice", "uid": 1000}
    return summary.node_summary(agg.to_dict(), ctx), series


def median_s(fn, repeat: int) -> float:
    """The median wall seconds of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    """Build the job, time the renderers, print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    paths = [str(p) for p in sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))]
    if not paths:
        print("no recordings in tests/data/recordings", file=sys.stderr)
        return 2
    t = time.perf_counter()
    s, series = seven_day_job(paths)
    built = time.perf_counter() - t
    points = len(series["0"]["t"])
    print(f"7-day 8-GPU job: {points} points per GPU and field ({STEP_S:.0f} s), built in {built:.1f} s; "
          f"class {s['diagnosis']['class']}, {s['job']['gpu_hours']:.0f} GPU-hours")
    term = median_s(lambda: terminal.render(s, width=120), a.repeat)
    page_len = [0]

    def _html() -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".html") as f:
            page = html.render(s, series, max_points=2000)
            f.write(page)
            page_len[0] = len(page)

    htm = median_s(_html, a.repeat)
    print(f"terminal report render:      {term * 1000:7.1f} ms (median of {a.repeat})")
    print(f"--html render + write:       {htm * 1000:7.1f} ms (median of {a.repeat}; page {page_len[0] / 1e6:.1f} MB, "
          f"6 charts, 8 lines of 2000 points each)")
    with tempfile.TemporaryDirectory() as d:
        conf = Path(d) / "gpuperf.toml"
        conf.write_text(f'[general]\nstate_dir = "{d}"\nrun_dir = "{d}/run"\nlog_file = ""\n'
                        f'[daemon]\nsocket_dir = "{d}/none"\n')
        with clusterstore.ClusterStore(Path(d) / "cluster.sqlite") as st:
            st.put_job(s)
        env = dict(os.environ, GPUPERF_CONFIG=str(conf))
        cmd = [sys.executable, "-m", "gpuperf", "report", str(s["job_id"]), "--source", "controller"]

        def _cli() -> None:
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)

        cli = median_s(_cli, a.repeat)
        print(f"gpuperf report (whole command, new process, from the controller store): {cli * 1000:7.1f} ms")
        out = Path(d) / "r.html"

        def _cli_html() -> None:
            subprocess.run(cmd + ["--html", str(out)], env=env, stderr=subprocess.DEVNULL, check=True)

        cli_h = median_s(_cli_html, a.repeat)
        print(f"gpuperf report --html (whole command; no daemon here, so no series: roofline only): {cli_h * 1000:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
