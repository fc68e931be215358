#!/usr/bin/env python3
"""Finalising a 30-day 8-GPU job: the daemon's finalize request, after 30 days of a real recording
replayed at accelerated speed (one sweep stands for ``--step`` seconds of job time).

  python3 benchmarks/finalize_time.py [--days 30] [--gpus 8] [--step 60]

The aggregates are streaming, so finalising costs the same for a 1-minute and a 30-day job; this
prints the time of the finalize request handled by the daemon (parse, end energy reading, aggregates
to the contract, checkpoint to SQLite, reply encoding) and of the same request over the control
socket, for a 1-minute job and for the 30-day job.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon_cpu import default_backend, write_config  # noqa: E402

from gpuperf.files import config  # noqa: E402
from gpuperf.daemon import client, protocol  # noqa: E402
from gpuperf.daemon.server import Daemon  # noqa: E402
from gpuperf.samplers import open_sampler  # noqa: E402


class Accelerated:
    """A replay whose sweeps are ``step_s`` apart in (virtual) time."""

    name = "replay-accelerated"

    def __init__(self, inner, step_s: float, t0: float):
        self.inner, self.interval_s, self.t = inner, step_s, t0

    def gpu_count(self) -> int:
        return self.inner.gpu_count()

    def sample(self):
        self.t += self.interval_s
        out = self.inner.sample()
        for s in out:
            s.t = self.t
        return out

    def read_energy(self):
        return self.inner.read_energy()

    def close(self) -> None:
        self.inner.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--step", type=float, default=60.0, help="job seconds per replayed sweep")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuperf-finalize-"))
    try:
        backend = default_backend(args.gpus) + "&clock=virtual"
        cfg = config.load(str(write_config(base, backend, args.step,
                                           "host_interval_s = 1e9\ncheckpoint_s = 3600.0\nenergy_interval_s = 3600.0")))
        t0 = 1.7e9
        sampler = Accelerated(open_sampler(backend, cfg), args.step, t0)
        d = Daemon(cfg, sampler, node="bench", health_fn=None, metrics=False, send_summaries=False)
        d.open()
        d.clock = lambda: d.latest_t or t0
        gpus = list(range(args.gpus))

        def reg(job_id: int) -> None:
            d.handle(protocol.encode(protocol.request("register", {"job_id": job_id, "uid": 0, "gpus": gpus,
                                                                   "start": d.clock()})), 0)

        def fin_frame(job_id: int) -> bytes:
            return protocol.encode(protocol.request("finalize", {"job_id": job_id}))

        # a 1-minute job, for comparison
        reg(1)
        reg(2)
        for _ in range(max(1, int(60 / args.step))):
            d.sweep()
        short_ms = _timed(lambda: d.handle(fin_frame(1), 0))
        d.handle(fin_frame(2), 0)
        # the long jobs: 30 days of sweeps
        reg(10)
        reg(11)
        n = int(args.days * 86400 / args.step)
        w0 = time.time()
        for _ in range(n):
            d.sweep()
        fold_s = time.time() - w0
        long_ms = _timed(lambda: d.handle(fin_frame(10), 0))
        reply = d.handle(fin_frame(10), 0)
        # the same over the control socket, with the daemon's loop serving it
        th = threading.Thread(target=d.loop, daemon=True)
        th.start()
        d.ready.wait(5)
        w = time.perf_counter()
        r = client.request(cfg, "finalize", {"job_id": 11}, timeout_s=30)
        sock_ms = 1000 * (time.perf_counter() - w)
        d.stop()
        th.join(10)
        d.close()
        samples = r["aggregates"]["gpus"]["0"]["samples"]
        reply_kib = len(protocol.encode(reply)) / 1024
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"finalize, 1-minute {args.gpus}-GPU job (one accelerated sweep): {short_ms:.1f} ms (daemon side)")
    print(f"finalize, {args.days:g}-day {args.gpus}-GPU job: {long_ms:.1f} ms (daemon side), {sock_ms:.1f} ms "
          f"over the control socket (target <= 100 ms); reply {reply_kib:.0f} KiB")
    print(f"({n} sweeps x {args.gpus} GPUs, {samples} samples per GPU in the aggregates, folded in {fold_s:.1f} s wall)")
    return 0


def _timed(fn) -> float:
    w = time.perf_counter()
    rep = fn()
    assert rep["ok"], rep
    return 1000 * (time.perf_counter() - w)


if __name__ == "__main__":
    sys.exit(main())
