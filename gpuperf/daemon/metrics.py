"""Prometheus exposition of the node's GPUs: one gauge per metric labelled ``gpu``, and one
``gpuperf_job_gpu_info{jobid,gpu,user}`` series per job and GPU (joined in PromQL; a job label on
every metric would multiply the series count, FACTS.md). ``jobid``, not ``job``: Prometheus gives every
scraped series its own ``job`` label (the scrape's), which would rename ours to ``exported_job``."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from gpuperf.model.aggregates import FOLDED_FIELDS, THROTTLE_BITS
from gpuperf.samplers.base import GpuSample

# a View: what the daemon's main thread last published (immutable snapshot, read from the HTTP thread)
# {"samples": [GpuSample], "jobs": [(job_id, user, [gpus])], "stats": {name: value}}
View = dict[str, Any]


def _unit_name(field: str) -> tuple[str, float]:
    """Prometheus base units: MiB -> bytes, MHz -> hertz, pct stays a ratio 0..1."""
    if field.endswith("_mib"):
        return field[:-4] + "_bytes", 1024.0 * 1024.0
    if field.endswith("_mhz"):
        return field[:-4] + "_hertz", 1e6
    if field.endswith("_pct"):
        return field[:-4] + "_ratio", 0.01
    if field.endswith("_bps"):
        return field[:-4] + "_bytes_per_second", 1.0
    if field.endswith("_w"):
        return field[:-2] + "_watts", 1.0
    if field.endswith("_c"):
        return field[:-2] + "_celsius", 1.0
    return field, 1.0


_GAUGES = [(f, *_unit_name(f)) for f in FOLDED_FIELDS + ("mem_total_mib", "power_limit_w")]


class DaemonCollector:
    """A custom collector reading the daemon's latest snapshot at scrape time."""

    def __init__(self, view: Callable[[], View]):
        self.view = view

    def collect(self) -> Iterator[Metric]:
        """Metric families for one scrape."""
        v = self.view()
        samples: list[GpuSample] = v.get("samples", [])
        for field, name, scale in _GAUGES:
            fam = GaugeMetricFamily(f"gpuperf_gpu_{name}", f"GPU {field.replace('_', ' ')}", labels=["gpu"])
            for s in samples:
                val = getattr(s, field)
                if val is not None:
                    fam.add_metric([str(s.gpu)], float(val) * scale)
            yield fam
        thr = GaugeMetricFamily("gpuperf_gpu_throttled", "1 while the clock is held down for a reason",
                                labels=["gpu", "reason"])
        for s in samples:
            if s.throttle_reasons is not None:
                for reason, bit in THROTTLE_BITS.items():
                    thr.add_metric([str(s.gpu), reason], 1.0 if s.throttle_reasons & bit else 0.0)
        yield thr
        info = InfoMetricFamily("gpuperf_job_gpu", "job holding a GPU (join on gpu)", labels=["jobid", "gpu", "user"])
        for job_id, user, gpus in v.get("jobs", []):
            for g in gpus:
                info.add_metric([str(job_id), str(g), user or ""], {})
        yield info
        stats = v.get("stats", {})
        yield _counter("gpuperf_daemon_sweeps", "sampling sweeps done", stats.get("sweeps", 0))
        yield _counter("gpuperf_daemon_sweeps_skipped", "ticks skipped because a sweep overran", stats.get("skipped", 0))
        yield _counter("gpuperf_daemon_sweep_errors", "sweeps that failed", stats.get("errors", 0))
        yield _counter("gpuperf_daemon_attribution_mismatches", "processes on a GPU not of its registered job",
                       stats.get("mismatches", 0))
        g = GaugeMetricFamily("gpuperf_daemon_sweep_seconds", "duration of the last sweep")
        g.add_metric([], float(stats.get("sweep_s", 0.0)))
        yield g
        g = GaugeMetricFamily("gpuperf_daemon_running_jobs", "jobs registered and not finalised")
        g.add_metric([], float(len(v.get("jobs", []))))
        yield g


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc)
    c.add_metric([], float(value))
    return c


def serve(view: Callable[[], View], port: int, address: str = "0.0.0.0") -> CollectorRegistry:
    """Serve GET /metrics on ``address:port`` from a thread; returns the registry (for tests)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(view))
    start_http_server(port, addr=address, registry=registry)
    return registry
