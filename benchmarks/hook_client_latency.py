#!/usr/bin/env python3
"""gpuperf-hook (the C client) against the Python prolog's fast path and a bare interpreter start.

Each round runs, one after the other, against the same stand-in hook socket that answers "done" at once
(so the figures are the hook processes' own cost, not the daemon's steps):
  c          ``gpuperf-prolog`` as a link to gpuperf-hook (built here with the packaging's flags)
  bare       ``python -c pass`` (this interpreter, no flags): what any Python hook pays before its first line
  python     the Python prolog entry (packaging/bin/gpuperf-prolog's two lines) on its fast path
Interleaving puts every row under the same load. Paired, round by round: geometric mean of c / bare and
c / python with a 95% interval (normal on the log ratios).

  python3 benchmarks/hook_client_latency.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "unit")]

from hookclient import Server, compile_hook, fell_back, make_prefix  # noqa: E402

PY_PROLOG = "from gpuperf.hookbase.guard import exit_now\nfrom gpuperf.prolog import main\nexit_now(main())"


def wall_ms(argv: list[str], env: dict[str, str]) -> float:
    """One run's wall time; a run that fails stops the benchmark (its figure would mean nothing)."""
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]}: exit {p.returncode}: {p.stderr.decode()[-500:]}")
    return ms


def paired(a: list[float], b: list[float]) -> str:
    """Geometric mean of a/b and its 95% interval."""
    logs = [math.log(x / y) for x, y in zip(a, b)]
    m, h = statistics.fmean(logs), 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"


def main() -> int:
    """Run the rounds and print one table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exe = compile_hook(t)
        if exe is None:
            raise SystemExit("gcc is not installed")
        prefix = make_prefix(t / "opt", exe)
        server = Server(t / "sock")
        cfg = t / "config.toml"
        cfg.write_text(f'[general]\nrun_dir = "{t / "run"}"\n'
                       f'[daemon]\nsocket_dir = "{t / "sock"}"\n')
        env = {"PATH": "/usr/bin:/bin", "GPUPERF_CONFIG": str(cfg), "SLURM_JOB_ID": "1", "SLURM_JOB_USER": "u",
               "CUDA_VISIBLE_DEVICES": "0,1", "PYTHONPATH": str(ROOT)}
        rows = {"c": [str(prefix / "bin" / "gpuperf-prolog")], "bare": [sys.executable, "-c", "pass"],
                "python": [sys.executable, "-c", PY_PROLOG]}
        wall: dict[str, list[float]] = {k: [] for k in rows}
        try:
            for r in range(args.rounds + 3):
                for label, argv in rows.items():
                    ms = wall_ms(argv, env)
                    if r >= 3:  # the first rounds warm the page cache
                        wall[label].append(ms)
            if fell_back(prefix, "prolog") is not None:
                raise SystemExit(f"the C client fell back: {fell_back(prefix, 'prolog')}")
        finally:
            server.close()
        served = len(server.requests)
    if served != 2 * (args.rounds + 3):  # else the python row timed its full prolog, not its fast path
        raise SystemExit(f"{served} requests served for {2 * (args.rounds + 3)} fast-path runs")
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()} ({sys.executable}); "
          f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds; {served} requests served")
    print("| what | p50 ms | p95 ms | min ms | c / this, paired (95% interval) |")
    print("|---|---|---|---|---|")
    for label, xs in wall.items():
        s = sorted(xs)
        ratio = "" if label == "c" else paired(wall["c"], xs)
        print(f"| {label} | {statistics.median(xs):.2f} | {s[int(0.95 * (len(s) - 1))]:.2f} | {s[0]:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
