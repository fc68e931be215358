#!/usr/bin/env python3
"""Daemon CPU (user+sys) per GPU-sample and RSS, with jobs running on every GPU.

Starts ``gpuperf daemon`` as a subprocess with a private config (sockets, store under a temp dir,
no /metrics port), registers one job per GPU (8 GPUs: 8 jobs), lets it warm up, then reads the
daemon's CPU time from /proc/PID/stat over ``--seconds`` and divides by the GPU-samples it took.

  python3 benchmarks/daemon_cpu.py                       # replay of a real recording, 8 GPUs, 1 Hz, 60 s
  python3 benchmarks/daemon_cpu.py --backend nvml --seconds 180   # on a GPU node (run a load beside it)

Self-contained: needs only this checkout and Python with pyzmq, psutil, prometheus_client,
nvidia-ml-py (for nvml). Prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.files import config  # noqa: E402
from gpuperf.daemon import client  # noqa: E402

RECORDINGS = ROOT / "tests" / "data" / "recordings"


def default_backend(gpus: int) -> str:
    """Replay of the richest real recording (a matmul on an H100), looped, as ``gpus`` GPUs."""
    recs = sorted(RECORDINGS.glob("matmul*.jsonl*")) or sorted(RECORDINGS.glob("*.jsonl*"))
    if not recs:
        raise SystemExit(f"no recording in {RECORDINGS}: pass --backend")
    return f"replay:{recs[0]}?loop=1&gpus={gpus}"


def write_config(base: Path, backend: str, interval_s: float, extra: str = "") -> Path:
    """A private gpuperf config for a benchmark daemon under ``base``."""
    path = base / "gpuperf.toml"
    path.write_text(f"""
[general]
run_dir = "{base}/run"
state_dir = "{base}/state"
log_file = "{base}/gpuperf.log"
[daemon]
backend = "{backend}"
interval_s = {interval_s}
socket_dir = "{base}/sock"
user_socket_dir = "{base}/usock"
metrics_port = 0
{extra}
""")
    return path


class BenchDaemon:
    """A ``gpuperf daemon`` subprocess on a private config."""

    def __init__(self, backend: str, interval_s: float = 1.0, extra: str = ""):
        self.base = Path(tempfile.mkdtemp(prefix="gpuperf-bench-"))
        self.cfg_path = write_config(self.base, backend, interval_s, extra)
        self.cfg = config.load(str(self.cfg_path))
        env = dict(os.environ, GPUPERF_CONFIG=str(self.cfg_path),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "gpuperf.cli", "daemon"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        end = time.time() + 60
        while time.time() < end:
            if self.proc.poll() is not None:
                raise SystemExit(f"daemon exited: {self.proc.stderr.read()}")
            try:
                self.info = client.request(self.cfg, "ping", timeout_s=1.0)
                return
            except (client.DaemonUnavailable, client.DaemonRefused):
                time.sleep(0.2)
        self.stop()
        raise SystemExit("daemon did not answer within 60 s")

    def call(self, op: str, job: dict | None = None) -> dict:
        return client.request(self.cfg, op, job, timeout_s=10.0)

    def cpu_s(self) -> tuple[float, float]:
        """user+sys CPU seconds of the daemon: (all threads, the main thread that samples and serves).

        The other threads run the periodic health checks, deliveries and /metrics."""
        total = main = 0.0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                f = (task / "stat").read_text()
            except OSError:
                continue
            rest = f[f.rfind(")") + 2:].split()
            s = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
            total += s
            if task.name == str(self.proc.pid):
                main = s
        return total, main

    def mem_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB."""
        vals = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024
        return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", help="sampler spec (default: replay of a real recording as --gpus GPUs)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs replayed (replay default only)")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured time after the warm-up")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    backend = args.backend or default_backend(args.gpus)
    d = BenchDaemon(backend, args.interval)
    try:
        n = int(d.info["gpus"])
        for g in range(n):
            d.call("register", {"job_id": 900000 + g, "uid": 0, "user": "bench", "gpus": [g], "cpus": 2})
        time.sleep(args.warmup)
        (c0, m0), s0, t0 = d.cpu_s(), d.call("ping")["sweeps"], time.time()
        time.sleep(args.seconds)
        (c1, m1), p1, t1 = d.cpu_s(), d.call("ping"), time.time()
        rss, hwm = d.mem_mib()
        sweeps = p1["sweeps"] - s0
        gpu_samples = sweeps * n
        out = {
            "backend": backend.split("?")[0] if backend.startswith("replay:") else backend,
            "gpus": n, "jobs": n, "interval_s": args.interval, "seconds": round(t1 - t0, 1),
            "sweeps": sweeps, "skipped_ticks": p1["skipped"],
            "cpu_ms_per_gpu_sample": round(1000.0 * (c1 - c0) / gpu_samples, 4) if gpu_samples else None,
            "cpu_pct_of_core": round(100.0 * (c1 - c0) / (t1 - t0), 3),
            "main_thread_ms_per_gpu_sample": round(1000.0 * (m1 - m0) / gpu_samples, 4) if gpu_samples else None,
            "other_threads_ms_per_s": round(1000.0 * ((c1 - c0) - (m1 - m0)) / (t1 - t0), 3),
            "last_sweep_ms": round(1000.0 * p1["sweep_s"], 3),
            "rss_mib": round(rss, 1), "rss_peak_mib": round(hwm, 1),
            "python": sys.version.split()[0], "cpu": _cpu_model(),
        }
    finally:
        d.stop()
    print(f"daemon CPU per GPU-sample: {out['cpu_ms_per_gpu_sample']} ms  ({out['cpu_pct_of_core']}% of one core for "
          f"{n} GPUs at {1 / args.interval:g} Hz, {sweeps} sweeps, {out['skipped_ticks']} ticks skipped)")
    print(f"  of which the sampling/serving thread: {out['main_thread_ms_per_gpu_sample']} ms per GPU-sample; "
          f"health checks (every {d.cfg.daemon.health_interval_s:g} s), deliveries, /metrics: "
          f"{out['other_threads_ms_per_s']} ms per second")
    print(f"daemon RSS with {n} GPUs and {n} running jobs: {out['rss_mib']} MiB (peak {out['rss_peak_mib']} MiB)")
    print(f"backend {out['backend']}; host CPU {out['cpu']}")
    if args.json:
        print(json.dumps(out))
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    sys.exit(main())
