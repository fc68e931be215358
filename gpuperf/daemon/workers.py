"""The daemon's helper threads: deliveries of finalised jobs, and the cached fast health checks."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from gpuperf.daemon import deliver as deliver_mod

HealthFn = Callable[[], list[dict[str, Any]]]


def health_from_checks(cfg: Any, on_node: Callable[[Any], None] | None = None) -> HealthFn | None:
    """The fast checks over a fresh read of the node (None where the checks cannot be imported);
    ``on_node(node)`` sees each read (the daemon keeps the GPUs' error counters from it)."""
    try:
        from gpuperf import checks, topology
    except ImportError:
        return None

    def run() -> list[dict[str, Any]]:
        node = checks.read_node(cfg)
        # the prolog steps the daemon runs read the node through load_node_once: as fresh as this read
        topology.remember(node, topology.node_root(cfg))
        if on_node is not None:
            on_node(node)
        return [r.to_dict() for r in checks.run_fast(node, cfg, [])]

    return run


class Deliveries:
    """A queue of (aggregates, context) delivered by one thread, so a slow controller never holds a sweep."""

    def __init__(self, cfg: Any, log: Any, send: bool):
        self.cfg, self.log, self.send = cfg, log, send
        self._q: queue.Queue = queue.Queue()

    def thread(self) -> threading.Thread:
        """The delivering thread (not started)."""
        return threading.Thread(target=self._loop, name="deliver", daemon=True)

    def put(self, aggs: dict[str, Any], context: dict[str, Any]) -> None:
        """Deliver this job's aggregates soon."""
        self._q.put((aggs, context))

    def close(self) -> None:
        """Let the thread finish what is queued and return."""
        self._q.put(None)

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            aggs, context = item
            res = deliver_mod.deliver(self.cfg, aggs, context, send=self.send)
            if res["errors"]:
                self.log.warning("job %s: delivery: %s", aggs.get("job_id"), "; ".join(res["errors"]))


class Health:
    """The fast checks, run every ``interval_s`` by one thread; ``result`` is the latest, or None."""

    def __init__(self, fn: HealthFn, interval_s: float, clock: Callable[[], float], stop: threading.Event):
        self.fn, self.interval_s, self.clock, self._stop = fn, interval_s, clock, stop
        self.result: dict[str, Any] | None = None

    def thread(self) -> threading.Thread:
        """The checking thread (not started)."""
        return threading.Thread(target=self._loop, name="health", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval_s)

    def refresh(self) -> None:
        """Run the fast checks now and cache the result."""
        try:
            self.result = {"t": self.clock(), "results": self.fn()}
        except Exception as e:  # noqa: BLE001 - a check failure is "no health", never a crash
            self.result = {"t": self.clock(), "error": f"{type(e).__name__}: {e}"}


class ProbeLoop:
    """The opt-in active probe (``fleet.probe_every_s`` > 0 and ``fleet.probe_python`` set): every period,
    when no job runs on the node, probe its GPUs and keep the figures; a job that starts stops the probe."""

    def __init__(self, cfg: Any, idle: Callable[[], bool], log: Any, stop: threading.Event):
        self.cfg, self.idle, self.log, self._stop = cfg, idle, log, stop
        self.last: dict[str, Any] | None = None

    @staticmethod
    def wanted(cfg: Any) -> bool:
        """The admin asked for idle-time probes."""
        return cfg.fleet.probe_every_s > 0 and bool(cfg.fleet.probe_python)

    def thread(self) -> threading.Thread:
        """The probing thread (not started)."""
        return threading.Thread(target=self._loop, name="probe", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.cfg.fleet.probe_every_s):
            if self.idle():
                self.probe_once()

    def probe_once(self) -> None:
        """One probe of every GPU, kept when it ran to the end."""
        from gpuperf.fleet import probe

        res = probe.run(self.cfg, keep_going=lambda: self.idle() and not self._stop.is_set())
        self.last = res.to_dict()
        if res.status == "ok":
            try:
                probe.save(self.cfg.general.state_dir, res)
            except OSError as e:
                self.log.warning("probe: figures not kept: %s", e)
            for v in probe.judge(res.gpus):
                if v["slow"]:
                    self.log.warning("probe: GPU %s (%s) slower than its peers: %s", v["index"], v["uuid"], "; ".join(v["evidence"]))
        else:
            self.log.info("probe %s: %s", res.status, res.why)
