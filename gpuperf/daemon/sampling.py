"""One sweep (``Sweeper``): sampled, stored, checked against the registered jobs (``attribution.Mismatches``,
which also names the GPUs where a job's process runs under a profiler), folded into each running job's
aggregates, energy counters read when due (``Energy``), the due chores run,
NVML's XID events polled (``xids``), the sweep published (``view.LiveView``, the PUB stream)."""

from __future__ import annotations

import threading
from typing import Any, Callable

from gpuperf.daemon import xids
from gpuperf.daemon.attribution import Mismatches
from gpuperf.daemon.jobs import Registry
from gpuperf.daemon.pub import Publisher, sweep_message
from gpuperf.daemon.store import Store
from gpuperf.daemon.view import LiveView
from gpuperf.samplers.base import GpuSample, Sampler


def read_energy(sampler: Any, log: Any) -> dict[int, float | None]:
    """The GPUs' energy counters ({} when the read fails: energy then comes from integrated power)."""
    try:
        return sampler.read_energy()
    except Exception as e:  # noqa: BLE001 - energy then comes from integrated power
        log.warning("energy counter read failed: %s: %s", type(e).__name__, e)
        return {}


class Energy:
    """When the energy counters are read: in the first sweep after a job registers, and every ``every_s``
    for all running jobs (a reading costs ~4 ms; the end reading is the finalisation's, ``Jobs.finalize``)."""

    def __init__(self, read: Callable[[], dict[int, float | None]], every_s: float):
        self.read, self.every_s = read, every_s
        self.last_t = 0.0

    def fold(self, t: float, running: dict[int, Any]) -> None:
        """Give the jobs that need one (or all, when due) a counter reading at sample time ``t``."""
        need = [rj for rj in running.values() if rj.needs_energy]
        due = bool(running) and t - self.last_t >= self.every_s
        if not (need or due):
            return
        readings = self.read()
        for rj in (list(running.values()) if due else need):
            rj.agg.energy_reading(readings, t)
            rj.needs_energy = False
        if due:
            self.last_t = t


class Sweeper:
    """Sample, store, attribute, fold, run the due chores, poll XIDs, publish: one sweep per call."""

    def __init__(self, *, sampler: Sampler, store: Store, registry: Registry, mismatches: Mismatches, energy: Energy,
                 chores: Callable[[float], None], xid_source: xids.XidSource | None, view: LiveView,
                 pub: Publisher | None,
                 stats: dict[str, float], log: Any, lock: Any = None):
        self.sampler, self.store, self.registry, self.mismatches = sampler, store, registry, mismatches
        self.energy, self.chores, self.xid_source, self.view, self.pub = energy, chores, xid_source, view, pub
        self.stats, self.log = stats, log
        # the daemon's state, shared with the root channels' thread (``ops.Ops.lock``): held for the fold,
        # the XIDs and the publishing, not for the sampling or the procfs reads, so a hook waits for the
        # part of a sweep that changes the jobs only (the chores take it themselves)
        self.lock = lock if lock is not None else threading.RLock()

    def sweep(self) -> None:
        """One sampling sweep: sample, store, attribute, fold, the due chores, then publish."""
        try:
            samples = self.sampler.sample()
        except Exception as e:  # noqa: BLE001 - a failing backend costs this sweep, not the daemon
            self._count_error("sweep failed", e)
            return
        if not samples:
            return
        t = max(s.t for s in samples)
        try:
            attributed = self.mismatches.attribute(samples)
        except Exception as e:  # noqa: BLE001 - procfs reads are a bonus; the samples are kept
            self._count_error("attribution failed", e)
            attributed = {}
        try:
            with self.lock:
                self.stats["sweeps"] += 1
                self.view.note_sweep(t, samples)
                self._undone_on_error(self.fold, t, samples, attributed)
            self.chores(t)
            got = xids.poll(self.xid_source, self.log)
            if got:  # a transaction only when NVML reported something
                with self.lock:
                    self._undone_on_error(self.store.in_transaction, xids.record, got, t, self.registry.running,
                                          self.store, self.log)
        except Exception as e:  # noqa: BLE001 - disk full, a locked store: this sweep is lost, not the daemon
            self._count_error(f"sweep at {t:.0f} not kept", e)
        with self.lock:
            if self.pub is not None and self.pub.wanted():
                self.pub.publish(sweep_message(t, samples, self.registry.gpu_jobs()))
            self.view.publish()

    def _undone_on_error(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)``, its open transaction rolled back if it raises, while the caller still holds the lock: once
        the lock is let go, the hooks thread's next commit (a registration) would keep the half-done sweep."""
        try:
            fn(*args)
        except Exception:
            self.store.rollback_quietly()
            raise

    def _count_error(self, what: str, e: Exception) -> None:
        self.stats["errors"] += 1
        n = self.stats["errors"]
        if n <= 10 or n % 600 == 0:  # a broken backend would otherwise log every tick
            self.log.error("%s (%d errors so far): %s: %s", what, n, type(e).__name__, e)

    def fold(self, t: float, samples: list[GpuSample], attributed: dict[int, Any] | None = None) -> None:
        """Store one sweep, check attribution (``attributed``: the procfs reads done before the lock), and fold
        it into every running job (one transaction)."""
        running = self.registry.running
        gpu_jobs = self.registry.gpu_jobs()
        sharing = {g: len(j) for g, j in gpu_jobs.items()}
        st = self.store
        st.begin()
        st.add_samples(samples)
        # job -> {gpu: profiler}: those samples' activity figures are the profiler's, folded as missing
        profiled = self.mismatches.check(t, samples, gpu_jobs, attributed) or {}
        for jid, rj in running.items():
            if rj.agg.end is None or t <= rj.agg.end:
                rj.agg.add_sweep(t, [s for s in samples if s.gpu in rj.agg.gpus], sharing, profiled.get(jid))
        self.energy.fold(t, running)
        st.commit()
