"""Sampling and attribution (a mixin of ``Daemon``): one sweep is sampled, stored, checked against the
registered jobs, folded into each running job's aggregates, energy counters are read when due, and
NVML's XID events are polled (``xids``)."""

from __future__ import annotations

from typing import Any

from gpuperf.daemon import xids
from gpuperf.daemon.attribution import mismatches
from gpuperf.samplers.base import GpuSample


class SamplingMixin:
    """Needs: sampler, store, running, attr, stats, cfg, log, chores, channels; provides sweep() and fold()."""

    sampler: Any
    store: Any
    running: dict[int, Any]
    attr: Any
    stats: dict[str, float]
    cfg: Any
    log: Any
    latest: list[GpuSample]
    latest_t: float | None
    _seen_mismatch: set[tuple[int, int, int | None]]
    _energy_t: float
    xid_source: Any

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
        self.stats["sweeps"] += 1
        self.latest, self.latest_t = samples, t
        try:
            self.fold(t, samples)
            self.chores.run_due(t)  # type: ignore[attr-defined]
            got = xids.poll(self.xid_source, self.log)
            if got:  # a transaction only when NVML reported something
                self._in_store(xids.record, got, t, self.running, self.store, self.log)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - disk full, a locked store: this sweep is lost, not the daemon
            self._count_error(f"sweep at {t:.0f} not kept", e)
            self._rollback()  # type: ignore[attr-defined]
        self._publish_sweep(t, samples)  # type: ignore[attr-defined]

    def _count_error(self, what: str, e: Exception) -> None:
        self.stats["errors"] += 1
        n = self.stats["errors"]
        if n <= 10 or n % 600 == 0:  # a broken backend would otherwise log every tick
            self.log.error("%s (%d errors so far): %s: %s", what, n, type(e).__name__, e)

    def _gpu_jobs(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for jid, rj in self.running.items():
            for g in rj.agg.gpus:
                out.setdefault(g, []).append(jid)
        return out

    def fold(self, t: float, samples: list[GpuSample], store: bool = True) -> None:
        """Store one sweep, check attribution, and fold it into every running job."""
        gpu_jobs = self._gpu_jobs()
        sharing = {g: len(j) for g, j in gpu_jobs.items()}
        st = self.store
        st.begin()
        if store:
            st.add_samples(samples)
        self._attribute(t, samples, gpu_jobs)
        for rj in self.running.values():
            if rj.agg.end is None or t <= rj.agg.end:
                rj.agg.add_sweep(t, [s for s in samples if s.gpu in rj.agg.gpus], sharing)
        need = [rj for rj in self.running.values() if rj.needs_energy]
        due = bool(self.running) and t - self._energy_t >= self.cfg.daemon.energy_interval_s
        if need or due:
            readings = self._read_energy()
            for rj in (list(self.running.values()) if due else need):
                rj.agg.energy_reading(readings, t)
                rj.needs_energy = False
            if due:
                self._energy_t = t
        st.commit()

    def _read_energy(self) -> dict[int, float | None]:
        try:
            return self.sampler.read_energy()
        except Exception as e:  # noqa: BLE001 - energy then comes from integrated power
            self.log.warning("energy counter read failed: %s: %s", type(e).__name__, e)
            return {}

    def _attribute(self, t: float, samples: list[GpuSample], gpu_jobs: dict[int, list[int]]) -> None:
        for s in samples:
            if not s.processes:
                continue
            pairs = []
            for p in s.processes:
                pid = p.get("pid") if isinstance(p, dict) else None
                if isinstance(pid, int):
                    pairs.append((pid, self.attr.job_of(pid)))
            registered = gpu_jobs.get(s.gpu, [])
            for m in mismatches(s.gpu, pairs, registered):
                for jid in registered:
                    self.running[jid].agg.gpus[s.gpu].note_foreign(m.pid, m.job_id, t)
                key = (m.gpu, m.pid, m.job_id)
                if key not in self._seen_mismatch:
                    if len(self._seen_mismatch) > 10000:
                        self._seen_mismatch.clear()
                    self._seen_mismatch.add(key)
                    self.stats["mismatches"] += 1
                    self.store.add_event(t, registered[0] if registered else m.job_id, "mismatch",
                                         {"gpu": m.gpu, "pid": m.pid, "process_job": m.job_id, "registered": list(m.registered)})
