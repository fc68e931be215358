"""How long the real ``gpuperf-taskprolog`` takes per task, interpreter start included.

Bars and the side-by-side figures with a bare interpreter start: benchmarks/hook_latency.py.

Prepares a job as the prolog would (its env step on a recorded node writes the cache), then runs
the installed ``gpuperf-taskprolog`` N times with that job's environment and prints p50/p95/max.

    python3 benchmarks/taskprolog_latency.py [-n 50] [--root tests/data/nodes/hgx-h100-2s]
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

REPO = Path(__file__).resolve().parents[1]


def prepare(tmp: Path, root: str) -> dict[str, str]:
    """A config, a cached plan for job 1 and the task environment that goes with them."""
    cfg = tmp / "config.toml"
    cfg.write_text(f'[general]\nrun_dir = "{tmp}/run"\nlog_file = ""\nnode_root = "{root}"\n')
    env = {"GPUPERF_CONFIG": str(cfg), "SLURM_JOB_ID": "1", "SLURM_JOB_UID": str(os.getuid()),
           "SLURM_JOB_USER": "bench", "SLURM_JOB_GPUS": "0,1,2,3", "SLURMD_NODENAME": "n1",
           "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": "8",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(tmp)}
    code = ("from gpuperf.prolog import envplan; from gpuperf.hookbase.hook import run_hook; "
            "import sys; sys.exit(run_hook('prolog', [('env', 'gpuperf.prolog.envplan:step')]))")
    subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)}, check=True,
                   capture_output=True, cwd="/")  # not the caller's directory: that may hold another checkout
    return env


def main() -> int:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="runs (default 50)")
    ap.add_argument("--root", default=str(REPO / "tests/data/nodes/hgx-h100-2s"), help="recorded node for the plan")
    ap.add_argument("--exe", default=str(Path(sys.executable).with_name("gpuperf-taskprolog")),
                    help="the TaskProlog to time (default: beside this interpreter)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        env = prepare(Path(d), args.root)
        times_ms, out = [], ""
        for _ in range(args.n + 3):
            t0 = time.perf_counter()
            p = subprocess.run([args.exe], env=env, capture_output=True, text=True, cwd="/")
            times_ms.append((time.perf_counter() - t0) * 1000)
            out = p.stdout
        times_ms = sorted(times_ms[3:])  # first runs warm the page cache
    exports = [line for line in out.splitlines() if line.startswith("export ")]
    q = statistics.quantiles(times_ms, n=20)
    print(f"gpuperf-taskprolog, {args.n} runs, {len(exports)} exports per run, {os.cpu_count()} CPUs")
    print(f"p50 {statistics.median(times_ms):.1f} ms  p95 {q[18]:.1f} ms  max {times_ms[-1]:.1f} ms"
          "  (the bars, beside a bare start: benchmarks/hook_latency.py)")
    py = os.path.join(os.path.dirname(args.exe), "python3")
    for label, code in (("bare interpreter start", "pass"),
                        ("import gpuperf.hookbase.hook (the hook runner's floor)", "import gpuperf.hookbase.hook"),
                        ("import gpuperf.hookbase.hook + the env step", "import gpuperf.hookbase.hook, gpuperf.prolog.envtask")):
        print(f"{label}: p50 {_p50([py, '-c', code], env, 20):.1f} ms")
    return 0 if exports else 1


def _p50(argv: list[str], env: dict[str, str], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
