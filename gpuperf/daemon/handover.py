"""A finalised job handed to the delivery thread with its series, however it was finalised (its epilog, a
pending marker, a reboot): the coarse series the diagnosis reads its phases from, and the bounded one the
controller charts from, both read from the store here (under the daemon's state lock, whichever thread asks);
and back from it, the node summary it wrote, kept in the store (``keep_delivered``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from gpuperf.model import series as series_mod

# put(aggregates, context) -> the outbox entry (``workers.Deliveries.put``)
Put = Callable[[dict[str, Any], dict[str, Any]], "Path | None"]


class Handover:
    """Series of a finalised job from ``store`` and the job handed to ``put`` (``series_points``: the
    controller's bound, ``controller.series_points``; 0 sends none)."""

    def __init__(self, store: Any, put: Put, series_points: int, log: Any, delivered: Any = None, lock: Any = None):
        self.store, self.put, self.series_points, self.log = store, put, series_points, log
        self.delivered = delivered   # the delivery thread's (job id, node summary) queue (``Deliveries.kept``)
        # the daemon's state lock: the store's one connection is shared with the root channels' thread, whose
        # open transaction a commit or rollback here would otherwise end (``Daemon.state_lock``)
        self.lock = lock if lock is not None else threading.RLock()

    def keep_delivered(self) -> int:
        """The node summaries the delivery thread wrote since, kept in the store (its ``job`` op serves them for as
        long as it keeps the job); how many. A store error loses none: the job's dir still has each."""
        n = 0
        while self.delivered is not None and not self.delivered.empty():
            job_id, summary = self.delivered.get_nowait()
            with self.lock:
                try:
                    self.store.in_transaction(self.store.put_summary, int(job_id), summary)
                    n += 1
                except Exception as e:  # noqa: BLE001 - the job's dir keeps it; the daemon goes on
                    self.store.rollback_quietly()
                    self.log.warning("job %s: node summary not kept in the store: %s", job_id, e)
        return n

    def deliver_finalised(self, aggs: dict[str, Any], context: dict[str, Any]) -> Path | None:
        """Hand a finalised job to the delivery thread with its series; the outbox entry (``Deliveries.put``)."""
        ctx = dict(context)
        series = self.phase_series(aggs)
        if series is not None:
            ctx["series"] = series
        ctx["controller_series"] = self.controller_series(aggs)
        return self.put(aggs, ctx)

    def controller_series(self, aggs: dict[str, Any]) -> dict[str, Any] | None:
        """The job's bounded per-GPU series for the controller (gpuperf.series.v1); None when off or on error."""
        points = self.series_points
        if points <= 0:
            return None
        try:
            return series_mod.compact(self._stored_series(aggs, points), points)   # None: nothing to chart
        except Exception as e:  # noqa: BLE001 - no series makes the report chartless on the controller, nothing worse
            self.log.info("job %s: no series for the controller: %s", aggs.get("job_id"), e)
            return None

    def phase_series(self, aggs: dict[str, Any]) -> dict[str, Any] | None:
        """The job's series, coarse (diagnosis.phases.SERIES_POINTS points), for its phases; None on any error."""
        try:
            from gpuperf.diagnosis import phases

            ser = self._stored_series(aggs, phases.SERIES_POINTS, phases.SERIES_FIELDS)
            return phases.compact(ser) if ser is not None else None
        except Exception as e:  # noqa: BLE001 - phases are extra: the aggregates must go out regardless
            self.log.warning("job %s: no series for its phases: %s", aggs.get("job_id"), e)
            return None

    def _stored_series(self, aggs: dict[str, Any], points: int, fields: Any = None) -> dict[str, Any] | None:
        """The store's series of a finalised job's GPUs over its run (None: no GPUs or no span); raises on a
        malformed aggregate."""
        gpus = [int(g) for g in aggs.get("gpus") or {}]
        start, end = float(aggs["start"]), float(aggs.get("end") or aggs.get("last_sample_t") or 0.0)
        if not gpus or end <= start:
            return None
        return self.store.series(gpus, start, end, points, fields)
