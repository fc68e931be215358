"""Prometheus exposition of the node's GPUs: one gauge per metric labelled ``gpu``, and, where the admin
turns it on (``daemon.metrics_job_labels``), one ``gpuperf_job_gpu_info{jobid,gpu,user}`` series per job
and GPU (joined in PromQL; a job label on every metric would multiply the series count, FACTS.md).
``jobid``, not ``job``: Prometheus gives every scraped series its own ``job`` label (the scrape's), which
would rename ours to ``exported_job``. Off by default: whoever reaches the port would read every job id
and user name of the node.

The HTTP server (``serve``) is bounded whatever the network does: it binds ``daemon.metrics_address``
(127.0.0.1 unless the admin exposes it), serves at most ``MAX_CONNS`` connections at once (one more is
closed at accept), gives each socket operation ``TIMEOUT_S`` and each connection ``DEADLINE_S`` in all
(a slow-loris peer is shut down then), so its threads never exceed ``MAX_CONNS``.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
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

    def __init__(self, view: Callable[[], View], job_labels: bool = False):
        self.view, self.job_labels = view, job_labels

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
        if self.job_labels:
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


MAX_CONNS = 8          # Prometheus scrapes one at a time; a few more for curl and a second scraper
TIMEOUT_S = 5.0        # each read or write on a connection
DEADLINE_S = 10.0      # a connection in all, however slowly it trickles bytes


class _Handler(BaseHTTPRequestHandler):
    timeout = TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        body = generate_latest(cast("BoundedServer", self.server).registry)  # only BoundedServer serves this handler
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _not_allowed(self) -> None:
        """405 for anything but GET (as prometheus_client's server answers: clients tell it from a Prometheus)."""
        self.send_response(405)
        self.send_header("Allow", "GET")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _not_allowed  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - a scrape per 15 s is not news
        pass


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most ``MAX_CONNS`` of them, each shut down at its deadline."""

    daemon_threads = True
    request_queue_size = 64    # the accept queue: connections past the cap are taken off it and closed

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self.registry = registry
        self.slots = threading.BoundedSemaphore(MAX_CONNS)
        self.deadlines: dict[socket.socket, float] = {}
        self.lock = threading.Lock()
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start a thread for the connection, or close it at once when every slot is taken."""
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        with self.lock:
            self.deadlines[request] = time.monotonic() + DEADLINE_S
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """The connection's thread: serve it, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self.lock:
            if self.deadlines.pop(request, None) is None:
                return
        self.slots.release()

    def service_actions(self) -> None:
        """Between accepts (every poll interval): shut down the connections past their deadline."""
        now = time.monotonic()
        with self.lock:
            late = [r for r, dl in self.deadlines.items() if dl < now]
        for r in late:
            try:
                r.shutdown(socket.SHUT_RDWR)   # its thread's blocked read returns, the thread ends
            except OSError:
                pass


def serve(view: Callable[[], View], port: int, address: str = "127.0.0.1", job_labels: bool = False) -> BoundedServer:
    """Serve GET /metrics on ``address:port`` from a thread; the server (tests read its registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(view, job_labels))
    server = BoundedServer((address, port), registry)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="metrics", daemon=True).start()
    return server
