"""Job lifecycle (a mixin of ``Daemon``): register, finalise, checkpoint, resume after a restart, end jobs
from before this boot, act on pending markers left by hooks that could not reach the daemon."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil

from gpuperf.model.aggregates import GAP_FACTOR, JobAggregates
from gpuperf.daemon import deliver as deliver_mod
from gpuperf.daemon import protocol
from gpuperf.samplers.base import GpuSample


@dataclass
class RunningJob:
    """A registered job and its live aggregates."""

    reg: dict[str, Any]
    agg: JobAggregates
    needs_energy: bool = True


class JobsMixin:
    """Needs: store, running, clock, interval_s, gpu_names, node, cfg, log, deliveries."""

    store: Any
    running: dict[int, RunningJob]
    interval_s: float
    gpu_names: dict[int, str | None]
    gpu_uuids: dict[int, str | None]
    error_counters: dict[str, dict[str, int]]
    node: str
    cfg: Any
    log: Any
    deliveries: Any

    def register(self, job: dict[str, Any]) -> dict[str, Any]:
        """Register a validated job (``protocol.validate_job('register', ...)``); idempotent."""
        job_id = int(job["job_id"])
        if job_id in self.running:
            return protocol.ok(job_id=job_id, already=True)
        now = self.clock()  # type: ignore[attr-defined]
        start = job.get("start") or now
        reg = {"job_id": job_id, "uid": job["uid"], "user": job.get("user"), "gpus": job["gpus"],
               "cpus": job.get("cpus"), "node": job.get("node") or self.node, "start": start,
               "partial": job.get("partial", False)}
        agg = JobAggregates.new(job_id, reg["node"], reg["gpus"], start, self.interval_s, reg["cpus"], self.gpu_names,
                                self.gpu_uuids)
        agg.partial = bool(reg["partial"])
        agg.error_counters(self.error_counters, at_end=False)
        if now - start > GAP_FACTOR * self.interval_s:
            agg.add_gap(start, now)        # registered late (pending marker): nothing sampled before now
        st = self.store
        st.begin()
        st.put_job(reg, now)
        st.put_aggregates(job_id, now, agg.to_state())
        st.add_event(now, job_id, "register", {"gpus": reg["gpus"], "partial": reg["partial"]})
        st.commit()
        self.running[job_id] = RunningJob(reg, agg)
        self._publish_view()  # type: ignore[attr-defined]
        return protocol.ok(job_id=job_id)

    def finalize(self, job_id: int, end: float | None, partial: bool) -> dict[str, Any] | None:
        """Finalise a running job (or return a finalised one's aggregates); None if unknown."""
        rj = self.running.get(job_id)
        if rj is None:
            row = self.store.job(job_id)
            state = self.store.aggregates(job_id) if row else None
            if row and row["state"] == "finalized" and state:
                return JobAggregates.from_state(state).to_dict()
            return None
        now = self.clock()  # type: ignore[attr-defined]
        agg = rj.agg
        if not partial:
            # the end reading of the energy counter: only when finalising live, at the job's end
            agg.energy_reading(self._read_energy(), now)  # type: ignore[attr-defined]
        agg.end = end if end is not None else now
        agg.partial = agg.partial or partial
        agg.error_counters(self.error_counters, at_end=True)
        st = self.store
        st.begin()
        st.put_aggregates(job_id, now, agg.to_state())
        st.finish_job(job_id, agg.end, agg.partial, now)
        st.add_event(now, job_id, "finalize", {"partial": agg.partial, "gaps": len(agg.gaps)})
        st.commit()
        del self.running[job_id]
        self._publish_view()  # type: ignore[attr-defined]
        return agg.to_dict()

    def checkpoint(self, t: float | None = None) -> None:
        """Write every running job's aggregates state to the store."""
        if not self.running or self.store is None:
            return
        now = self.clock()  # type: ignore[attr-defined]
        self.store.begin()
        for jid, rj in self.running.items():
            self.store.put_aggregates(jid, now, rj.agg.to_state())
        self.store.commit()

    def resume(self) -> None:
        """Take back every job the store says is running; re-fold samples stored after its checkpoint."""
        for row in self.store.jobs(state="running"):
            state = self.store.aggregates(row["job_id"])
            try:
                agg = JobAggregates.from_state(state) if state else None
            except (ValueError, KeyError, TypeError) as e:
                self.log.error("job %s: stored aggregates unreadable (%s); restarting them", row["job_id"], e)
                agg = None
            if agg is None:
                agg = JobAggregates.new(row["job_id"], row["node"], row["gpus"], row["start"], self.interval_s, row["cpus"],
                                        self.gpu_names, self.gpu_uuids)
                agg.partial = True
            agg.interval_s = self.interval_s
            self.running[row["job_id"]] = RunningJob(dict(row), agg, needs_energy=False)
        if not self.running:
            return
        gpus = sorted({g for rj in self.running.values() for g in rj.agg.gpus})
        t0 = min((rj.agg.last_t if rj.agg.last_t is not None else rj.agg.start - 1e-6) for rj in self.running.values())
        by_t: dict[float, list[GpuSample]] = {}
        for s in self.store.samples_since(gpus, t0):
            by_t.setdefault(s.t, []).append(s)
        sharing = {g: len(j) for g, j in self._gpu_jobs().items()}  # type: ignore[attr-defined]
        for t in sorted(by_t):
            for rj in self.running.values():
                if rj.agg.last_t is None or t > rj.agg.last_t:
                    rj.agg.add_sweep(t, [s for s in by_t[t] if s.gpu in rj.agg.gpus], sharing)
        self.store.begin()
        for jid, rj in self.running.items():
            self.store.add_event(self.clock(), jid, "resume", {"last_sample_t": rj.agg.last_t})  # type: ignore[attr-defined]
        self.store.commit()
        self.checkpoint()
        self.log.info("resumed %d running job(s): %s", len(self.running), ", ".join(map(str, sorted(self.running))))

    def end_jobs_from_before_boot(self) -> None:
        """A job registered before this boot cannot still run (its epilog never came): finalise it at
        its last sample, partial, and deliver it."""
        try:
            boot = psutil.boot_time()
        except (OSError, RuntimeError):
            return
        for jid in [j for j, rj in self.running.items() if rj.reg["start"] < boot]:
            rj = self.running[jid]
            end = rj.agg.last_t if rj.agg.last_t is not None else rj.reg["start"]
            aggs = self.finalize(jid, min(end, boot), True)
            if aggs is not None:
                self.log.warning("job %s was registered before this boot: finalised at its last sample (partial)", jid)
                ctx = {"job_id": jid, "user": rj.reg.get("user"), "uid": rj.reg.get("uid"), "node": rj.reg.get("node")}
                self.deliver_finalised(aggs, ctx)  # type: ignore[attr-defined]

    def take_pending(self, t: float | None = None) -> None:
        """Act on markers left by hooks that could not reach the daemon (partial flag set)."""
        for path, marker in deliver_mod.read_pending(self.cfg.general.state_dir):
            job = dict(marker["job"])
            job["partial"] = True
            try:
                req = protocol.Request(op=marker["op"], job_id=job.get("job_id"),
                                       job=protocol.validate_job(marker["op"], job))
            except protocol.ProtocolError as e:
                self.log.error("pending marker %s: %s; kept as .bad", path, e)
                os.replace(path, path.with_suffix(".bad"))
                continue
            if req.op == "register":
                self.register(req.job)
            else:
                aggs = self.finalize(int(job["job_id"]), req.job.get("end"), True)
                if aggs is not None:
                    self.deliver_finalised(aggs, marker.get("context") or {})  # type: ignore[attr-defined]
                else:
                    self.log.warning("pending finalize of job %s: job not registered here; dropped", job["job_id"])
            try:
                path.unlink()
            except OSError:
                pass
            self.log.info("pending %s of job %s done (partial)", req.op, job.get("job_id"))
