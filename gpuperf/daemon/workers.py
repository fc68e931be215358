"""The daemon's helper threads: deliveries of finalised jobs, the cached fast health checks (and the GPU
error counters of the node read they make), the opt-in idle-node probe."""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

from gpuperf.daemon import deliver as deliver_mod
from gpuperf.model import gpuerrors as errors

HealthFn = Callable[[], list[dict[str, Any]]]


class ErrorCounters:
    """The GPUs' error counters from the latest node read (``gpus.v1``); jobs are charged their growth."""

    def __init__(self) -> None:
        self.current: dict[str, dict[str, int]] = {}

    def note(self, snapshot: dict[str, Any]) -> None:
        """Keep the counters of a node read (from the health thread)."""
        self.current = errors.counters(snapshot)   # one assignment: the loop thread reads it whole

    def get(self) -> dict[str, dict[str, int]]:
        """The latest counters ({} before the first read)."""
        return self.current


def health_from_checks(cfg: Any, on_node: Callable[[Any], None] | None = None,
                       nvml_seen: Callable[[dict[str, Any]], Any] | None = None) -> HealthFn | None:
    """The fast checks over a fresh read of the node (None where the checks cannot be imported);
    ``on_node(node)`` sees each read (the daemon keeps the GPUs' error counters from it); ``nvml_seen``
    (``xids.seen_by``) corroborates the kernel log's XIDs with NVML's events."""
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
        return [r.to_dict() for r in checks.run_fast(node, cfg, [], nvml_seen=nvml_seen)]

    return run


RETRY_FIRST_S = 5.0       # a job whose summary the controller did not take: tried again after this,
RETRY_MAX_S = 300.0       # doubling up to this, for as long as its outbox entry is there
PROBE_EVERY_S = 5.0       # during that backoff a job that just ended is still tried, at most once per this
OUTBOX_GIVE_UP_S = 7 * 86400.0


class Deliveries:
    """Finalised jobs delivered by one thread, so neither a sweep nor the job's epilog waits for a slow or
    absent controller. A job's ``aggregates.json`` and ``node_summary.json`` are written at once; its
    summary is sent, and kept in the outbox (``deliver.write_outbox``) until the controller took it. While
    the controller fails, what waits is tried again after one backoff for all (no job pays it again); a job
    that just ended is still tried at once (one such try per ``PROBE_EVERY_S``: a controller that times
    out costs the thread little), and when it gets through, everything waiting goes next: a controller
    back from an outage hears from the node at its next job end, not a backoff later."""

    def __init__(self, cfg: Any, log: Any, send: bool, monotonic: Callable[[], float] = time.monotonic):
        self.cfg, self.log, self.send, self.monotonic = cfg, log, send, monotonic
        self._q: queue.Queue = queue.Queue()
        self._seq = itertools.count()
        self._fails = 0              # sends failed in a row (the controller's, not a job's)
        self._down_until = 0.0       # monotonic time before which no waiting summary is tried again
        self._tried = -PROBE_EVERY_S  # monotonic time of the last send
        self._later: list[tuple[float, int, tuple]] = []  # (when, seq, item): summaries waiting for a retry
        # (job id, node summary) as written, for the loop's thread to keep in the store (``Handover.keep_delivered``)
        self.kept: queue.SimpleQueue = queue.SimpleQueue()

    def thread(self) -> threading.Thread:
        """The delivering thread (not started)."""
        return threading.Thread(target=self._loop, name="deliver", daemon=True)

    def put(self, aggs: dict[str, Any], context: dict[str, Any], outbox: Path | None = None) -> Path | None:
        """Deliver this job's aggregates soon; kept in the outbox first (``outbox``: already there). The
        outbox entry, or None when it could not be written (then delivered from memory only)."""
        if outbox is None:
            try:
                outbox = deliver_mod.write_outbox(self.cfg.general.state_dir, aggs, context)
            except (OSError, TypeError, ValueError) as e:
                self.log.error("job %s: not kept in the outbox (%s): delivered from memory only", aggs.get("job_id"), e)
        self._q.put((aggs, context, outbox, None, True))
        return outbox

    def restore(self) -> int:
        """Queue what the outbox holds (jobs a previous run of the daemon had not delivered); how many."""
        got = deliver_mod.read_outbox(self.cfg.general.state_dir)
        for path, entry in got:
            # not fresh: a restart with a full outbox and the controller down tries one, not all
            self._q.put((entry["aggregates"], entry.get("context") or {}, path, None, False))
        return len(got)

    def close(self) -> None:
        """Let the thread finish what is queued now and return (what waits for a retry stays in the outbox)."""
        self._q.put(None)

    def _loop(self) -> None:
        while True:
            wait = max(0.0, self._later[0][0] - self.monotonic()) if self._later else None
            try:
                item = self._q.get(timeout=wait)
            except queue.Empty:
                item = heapq.heappop(self._later)[2]
            if item is None:
                return
            try:
                again = self._one(*item)
            except Exception as e:  # noqa: BLE001 - one job's delivery failing must not stop every other's
                again = None
                self._set_aside(item[0].get("job_id"), item[2], e)
            if again is not None:
                heapq.heappush(self._later, (again[0], next(self._seq), again[1]))

    def _one(self, aggs: dict[str, Any], context: dict[str, Any], outbox: Path | None,
             summary: dict[str, Any] | None, fresh: bool) -> tuple[float, tuple] | None:
        """One step of a job's delivery; (when, item) when its summary is to be sent later."""
        job_id = aggs.get("job_id")
        if summary is None:
            out, summary = deliver_mod.write(self.cfg, aggs, context)
            if out["errors"]:
                self.log.warning("job %s: delivery: %s", job_id, "; ".join(out["errors"]))
            if summary is not None:
                self.kept.put((job_id, {k: v for k, v in summary.items() if k not in deliver_mod.EVIDENCE_KEYS}))
            if summary is None or not self.send:
                return self._done(outbox)
        now = self.monotonic()
        backoff = now < self._down_until
        if backoff and (not fresh or now - self._tried < PROBE_EVERY_S):
            return self._down_until, (aggs, context, outbox, summary, False)
        self._tried = now
        res = deliver_mod.send_summary(self.cfg, summary, attempts=1)
        if res["sent"]:
            if self._fails:
                self.log.info("controller reachable again after %d failed send(s): delivering the %d summaries "
                              "that waited", self._fails, len(self._later))
                # due now, in the order they waited
                self._later = [(0.0, seq, item) for _, seq, item in sorted(self._later, key=lambda e: e[1])]
            self._fails, self._down_until = 0, 0.0
            return self._done(outbox)
        if not res["retry"] or outbox is None:
            self.log.warning("job %s: summary not delivered: %s", job_id, "; ".join(res["errors"]))
            return self._done(outbox)
        age = time.time() - _mtime(outbox)
        if age >= OUTBOX_GIVE_UP_S:
            self.log.error("job %s: summary not delivered for %.0f days; given up (%s)", job_id, age / 86400, outbox)
            return self._done(outbox)
        if not backoff:  # a fresh job failing during the backoff neither lengthens nor restarts it
            self._fails += 1
            self._down_until = now + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (self._fails - 1))
            if self._fails == 1:
                self.log.warning("controller did not take job %s's summary (%s): summaries wait in %s, sent again "
                                 "with backoff", job_id, "; ".join(res["errors"]), outbox.parent)
        return self._down_until, (aggs, context, outbox, summary, False)

    def _set_aside(self, job_id: Any, outbox: Path | None, e: Exception) -> None:
        """A delivery that raised: logged, and its outbox entry kept as ``.bad`` (not replayed at every start)."""
        self.log.error("job %s: delivery failed: %s: %s; %s", job_id, type(e).__name__, e,
                       f"its outbox entry kept as {outbox.with_suffix('.bad')}" if outbox else "not kept")
        if outbox is not None:
            try:
                os.replace(outbox, outbox.with_suffix(".bad"))
            except OSError:
                pass

    def _done(self, outbox: Path | None) -> None:
        if outbox is not None:
            try:
                outbox.unlink()
            except OSError:
                pass
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


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
        from gpuperf.checks import probe

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
