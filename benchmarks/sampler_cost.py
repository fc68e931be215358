"""Measure what sampling costs: CPU (user+sys) per GPU-sample of a backend's sample(), and read_energy().

    PYTHONPATH=. python benchmarks/sampler_cost.py --backend nvml --sweeps 30 --interval 1 --table
    PYTHONPATH=. python benchmarks/sampler_cost.py --backend "replay:FILE?gpus=8&loop&clock=virtual" --sweeps 100000 --interval 0

Prints figures; asserts nothing. ``--calls`` also times single NVML calls (nvml backend only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpuperf.samplers import open_sampler  # noqa: E402
from gpuperf.samplers.base import METRIC_FIELDS  # noqa: E402


def cpu_per_sample(sampler: Any, sweeps: int, interval_s: float) -> dict[str, float]:
    """CPU seconds and wall seconds of each sample() call, summarised per GPU-sample."""
    cpu, wall = [], []
    for _ in range(sweeps):
        c0, w0 = time.process_time(), time.perf_counter()
        sampler.sample()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        if interval_s:
            time.sleep(max(0.0, interval_s - wall[-1]))
    n = sampler.gpu_count()
    return {"gpus": n, "sweeps": sweeps,
            "cpu_ms_per_gpu_sample_mean": 1e3 * sum(cpu) / len(cpu) / n,
            "cpu_ms_per_gpu_sample_p95": 1e3 * sorted(cpu)[int(0.95 * (len(cpu) - 1))] / n,
            "wall_ms_per_sweep_mean": 1e3 * sum(wall) / len(wall),
            "wall_ms_per_sweep_max": 1e3 * max(wall)}


def time_call(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call, median of n calls."""
    walls, cpus = [], []
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return 1e3 * statistics.median(walls), 1e3 * statistics.median(cpus)


def nvml_calls(sampler: Any) -> dict[str, tuple[float, float]]:
    """Per-call cost of the NVML queries a sweep makes, plus the ones kept out of it."""
    from gpuperf.access import nvmlq

    m, h = sampler.m, sampler.gpus[0].handle
    q = nvmlq.query
    calls: dict[str, tuple[Callable[[], Any], int]] = {
        "utilization": (lambda: q(m.nvmlDeviceGetUtilizationRates, h), 500),
        "memory_info": (lambda: q(m.nvmlDeviceGetMemoryInfo, h), 500),
        "power": (lambda: q(m.nvmlDeviceGetPowerUsage, h), 500),
        "temperature": (lambda: q(m.nvmlDeviceGetTemperature, h, 0), 500),
        "clock_sm": (lambda: q(m.nvmlDeviceGetClockInfo, h, 1), 500),
        "clocks_event_reasons": (lambda: q(sampler._throttle_fn, h), 500),
        "compute_processes": (lambda: q(m.nvmlDeviceGetComputeRunningProcesses, h), 200),
        "field_values nvlink 138,139 all links": (lambda: q(m.nvmlDeviceGetFieldValues, h, [(138, 0xFFFFFFFF), (139, 0xFFFFFFFF)]), 200),
        "field_values pcie 197,198": (lambda: q(m.nvmlDeviceGetFieldValues, h, [197, 198]), 200),
        "total_energy (read_energy only)": (lambda: q(m.nvmlDeviceGetTotalEnergyConsumption, h), 50),
        "pcie_throughput (never called)": (lambda: q(m.nvmlDeviceGetPcieThroughput, h, 0), 10),
    }
    g = sampler.gpus[0].gpm
    if g is not None:
        calls["gpm_sample_get"] = (lambda: q(m.nvmlGpmSampleGet, h, g.cur), 100)
        calls[f"gpm_metrics_get ({len(g.ids)} metrics)"] = (lambda: q(m.nvmlGpmMetricsGet, g.req), 100)
        calls["gpm_sweep (get + metrics + python)"] = (g.sweep, 100)
    return {k: time_call(fn, n) for k, (fn, n) in calls.items()}


def sparse_calls(sampler: Any, sweeps: int, interval_s: float) -> dict[str, float]:
    """Median CPU ms of each query when called once per interval, in sweep order (cold, as the daemon calls)."""
    from gpuperf.access import nvmlq

    m, h, q = sampler.m, sampler.gpus[0].handle, nvmlq.query
    order: list[tuple[str, Callable[[], Any]]] = [
        ("utilization (1st)", lambda: q(m.nvmlDeviceGetUtilizationRates, h)),
        ("utilization (2nd)", lambda: q(m.nvmlDeviceGetUtilizationRates, h)),
        ("memory_info", lambda: q(m.nvmlDeviceGetMemoryInfo, h)),
        ("power", lambda: q(m.nvmlDeviceGetPowerUsage, h)),
        ("power_limit", lambda: q(m.nvmlDeviceGetEnforcedPowerLimit, h)),
        ("temperature", lambda: q(m.nvmlDeviceGetTemperature, h, 0)),
        ("clock_sm", lambda: q(m.nvmlDeviceGetClockInfo, h, 1)),
        ("clock_mem", lambda: q(m.nvmlDeviceGetClockInfo, h, 2)),
        ("clocks_event_reasons", lambda: q(sampler._throttle_fn, h)),
        ("compute_processes", lambda: q(m.nvmlDeviceGetComputeRunningProcesses, h)),
    ]
    if sampler.gpus[0].gpm is not None:
        order.append(("gpm_sweep", sampler.gpus[0].gpm.sweep))
    cpu: dict[str, list[float]] = {k: [] for k, _ in order}
    for _ in range(sweeps):
        for k, fn in order:
            c0 = time.process_time()
            fn()
            cpu[k].append(1e3 * (time.process_time() - c0))
        time.sleep(interval_s)
    return {k: statistics.median(v) for k, v in cpu.items()}


def table(sampler: Any) -> str:
    """One sample per GPU, one metric per row."""
    samples = sampler.sample()
    rows = [f"{'metric':<20}" + "".join(f"{'gpu ' + str(s.gpu):>16}" for s in samples)]
    for f in METRIC_FIELDS + ("throttle_reasons",):
        vals = [getattr(s, f) for s in samples]
        rows.append(f"{f:<20}" + "".join(f"{_fmt(v):>16}" for v in vals))
    rows.append(f"{'processes':<20}" + "".join(f"{len(s.processes):>16}" for s in samples))
    return "\n".join(rows)


def _fmt(v: Any) -> str:
    if v is None:
        return "None"
    if isinstance(v, float):
        return f"{v:.4g}"
    return hex(v) if isinstance(v, int) and v > 9 else str(v)


def main() -> int:
    """Command line entry."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="nvml", help="sampler spec (nvml, dcgm, replay:FILE...)")
    p.add_argument("--sweeps", type=int, default=30)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps (0: back to back)")
    p.add_argument("--table", action="store_true", help="print one sample per metric first")
    p.add_argument("--calls", action="store_true", help="time single NVML calls (nvml backend)")
    p.add_argument("--sparse-calls", action="store_true", help="time each NVML call once per interval")
    p.add_argument("--no-gpm", action="store_true", help="nvml without GPM (to isolate GPM's cost)")
    a = p.parse_args()
    if a.no_gpm:
        from gpuperf.samplers.nvml import NvmlSampler

        s = NvmlSampler(gpm=False)
    else:
        s = open_sampler(a.backend)
    try:
        for _ in range(2):  # the first sweeps set up GPM samples and counters
            s.sample()
            time.sleep(min(a.interval, 1.0))
        if a.table:
            print(table(s))
            if hasattr(s, "gpm_offered"):
                print("gpm metrics offered:", json.dumps(s.gpm_offered()))
            time.sleep(min(a.interval, 1.0))
        res = cpu_per_sample(s, a.sweeps, a.interval)
        w, c = time_call(lambda: s.read_energy(), 5)
        res["read_energy_wall_ms"], res["read_energy_cpu_ms"] = w, c
        print(json.dumps({"backend": a.backend + (" (no GPM)" if a.no_gpm else ""), **{k: round(v, 4) if isinstance(v, float) else v
                                                    for k, v in res.items()}}))
        if a.sparse_calls and s.name == "nvml":
            for k, c in sparse_calls(s, max(5, a.sweeps // 2), a.interval or 1.0).items():
                print(f"  1/interval {k:<24} cpu {c:8.3f} ms")
        if a.calls and s.name == "nvml":
            for k, (w, c) in nvml_calls(s).items():
                print(f"  {k:<34} wall {w:8.3f} ms   cpu {c:8.3f} ms")
    finally:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
