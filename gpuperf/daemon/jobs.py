"""The jobs registered on this node: ``Registry`` (in memory, what every other part reads) and ``Jobs``
(their lifecycle in the store: register, finalise, checkpoint, resume after a restart, end jobs from before
this boot, act on pending markers left by hooks that could not reach the daemon)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from gpuperf.daemon import deliver as deliver_mod
from gpuperf.daemon import protocol
from gpuperf.model.aggregates import GAP_FACTOR, JobAggregates
from gpuperf.samplers.base import GpuSample

# hand a finalised job (aggregates, context) on for delivery; its outbox entry, or None
HandOver = Callable[[dict[str, Any], dict[str, Any]], "Path | None"]


@dataclass
class RunningJob:
    """A registered job and its live aggregates."""

    reg: dict[str, Any]
    agg: JobAggregates
    needs_energy: bool = True


class Registry:
    """The jobs registered and not finalised, by id (changed under the daemon's state lock only: the loop and the
    root channels' thread share it)."""

    def __init__(self) -> None:
        self.running: dict[int, RunningJob] = {}

    def gpu_jobs(self) -> dict[int, list[int]]:
        """GPU index -> the running jobs registered on it."""
        out: dict[int, list[int]] = {}
        for jid, rj in self.running.items():
            for g in rj.agg.gpus:
                out.setdefault(g, []).append(jid)
        return out

    def sharing(self) -> dict[int, int]:
        """GPU index -> how many running jobs share it."""
        return {g: len(j) for g, j in self.gpu_jobs().items()}

    def uid_of(self, job_id: int) -> int | None:
        """A running job's uid (None: not registered here); attribution believes a job's claim only from it."""
        rj = self.running.get(job_id)
        return rj.reg.get("uid") if rj is not None else None

    def listing(self) -> list[tuple[int, str | None, list[int]]]:
        """(job id, user, GPUs) of each running job, for /metrics."""
        return [(jid, rj.reg.get("user"), sorted(rj.agg.gpus)) for jid, rj in self.running.items()]


@dataclass(frozen=True)
class NodeFacts:
    """What a job's aggregates take from the node: its name, the sampling interval, each GPU's model and UUID."""

    node: str
    interval_s: float
    gpu_names: dict[int, str | None] = field(default_factory=dict)
    gpu_uuids: dict[int, str | None] = field(default_factory=dict)


class Jobs:
    """Job lifecycle over the store; every change lands in ``registry`` and is announced by ``on_change()``."""

    def __init__(self, store: Any, registry: Registry, facts: NodeFacts, *, clock: Callable[[], float],
                 read_energy: Callable[[], dict[int, float | None]],
                 error_counters: Callable[[], dict[str, dict[str, int]]],
                 hand_over: HandOver, on_change: Callable[[], None], state_dir: str, log: Any):
        self.store, self.registry, self.facts = store, registry, facts
        self.clock, self.read_energy, self.error_counters = clock, read_energy, error_counters
        self.hand_over, self.on_change, self.state_dir, self.log = hand_over, on_change, state_dir, log

    @property
    def running(self) -> dict[int, RunningJob]:
        """The registry's running jobs."""
        return self.registry.running

    def _new_aggregates(self, job_id: int, node: str, gpus: list[int], start: float, cpus: Any) -> JobAggregates:
        f = self.facts
        return JobAggregates.new(job_id, node, gpus, start, f.interval_s, cpus, f.gpu_names, f.gpu_uuids)

    def register(self, job: dict[str, Any]) -> dict[str, Any]:
        """Register a validated job (``protocol.validate_job('register', ...)``); idempotent."""
        job_id = int(job["job_id"])
        if job_id in self.running:
            return protocol.ok(job_id=job_id, already=True)
        now = self.clock()
        start = job.get("start") or now
        reg = {"job_id": job_id, "uid": job["uid"], "user": job.get("user"), "gpus": job["gpus"],
               "cpus": job.get("cpus"), "node": job.get("node") or self.facts.node, "start": start,
               "partial": job.get("partial", False)}
        agg = self._new_aggregates(job_id, reg["node"], reg["gpus"], start, reg["cpus"])
        agg.partial = bool(reg["partial"])
        agg.error_counters(self.error_counters(), at_end=False)
        if now - start > GAP_FACTOR * self.facts.interval_s:
            agg.add_gap(start, now)        # registered late (pending marker): nothing sampled before now
        st = self.store
        st.begin()
        st.put_job(reg, now)
        st.put_aggregates(job_id, now, agg.to_state())
        st.add_event(now, job_id, "register", {"gpus": reg["gpus"], "partial": reg["partial"]})
        st.commit()
        self.running[job_id] = RunningJob(reg, agg)
        self.on_change()
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
        now = self.clock()
        agg = rj.agg
        if not partial:
            # the end reading of the energy counter: only when finalising live, at the job's end
            agg.energy_reading(self.read_energy(), now)
        agg.end = end if end is not None else now
        agg.partial = agg.partial or partial
        agg.error_counters(self.error_counters(), at_end=True)
        st = self.store
        st.begin()
        st.put_aggregates(job_id, now, agg.to_state())
        st.finish_job(job_id, agg.end, agg.partial, now)
        st.add_event(now, job_id, "finalize", {"partial": agg.partial, "gaps": len(agg.gaps)})
        st.commit()
        del self.running[job_id]
        self.on_change()
        return agg.to_dict()

    def checkpoint(self, t: float | None = None) -> None:
        """Write every running job's aggregates state to the store."""
        if not self.running:
            return
        now = self.clock()
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
                agg = self._new_aggregates(row["job_id"], row["node"], row["gpus"], row["start"], row["cpus"])
                agg.partial = True
            agg.interval_s = self.facts.interval_s
            self.running[row["job_id"]] = RunningJob(dict(row), agg, needs_energy=False)
        if not self.running:
            return
        gpus = sorted({g for rj in self.running.values() for g in rj.agg.gpus})
        t0 = min((rj.agg.last_t if rj.agg.last_t is not None else rj.agg.start - 1e-6) for rj in self.running.values())
        by_t: dict[float, list[GpuSample]] = {}
        for s in self.store.samples_since(gpus, t0):
            by_t.setdefault(s.t, []).append(s)
        sharing = self.registry.sharing()
        for t in sorted(by_t):
            for rj in self.running.values():
                if rj.agg.last_t is None or t > rj.agg.last_t:
                    rj.agg.add_sweep(t, [s for s in by_t[t] if s.gpu in rj.agg.gpus], sharing)
        self.store.begin()
        for jid, rj in self.running.items():
            self.store.add_event(self.clock(), jid, "resume", {"last_sample_t": rj.agg.last_t})
        self.store.commit()
        self.checkpoint()
        self.log.info("resumed %d running job(s): %s", len(self.running), ", ".join(map(str, sorted(self.running))))

    def end_jobs_from_before_boot(self, boot: float | None = None) -> None:
        """A job registered before this boot (``boot``: psutil's) cannot still run (its epilog never came):
        finalise it at its last sample, partial, and deliver it."""
        if boot is None:
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
                self.hand_over(aggs, ctx)

    def take_pending(self, t: float | None = None) -> None:
        """Act on markers left by hooks that could not reach the daemon (partial flag set)."""
        for path, marker in deliver_mod.read_pending(self.state_dir):
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
                    self.hand_over(aggs, marker.get("context") or {})
                else:
                    self.log.warning("pending finalize of job %s: job not registered here; dropped", job["job_id"])
            try:
                path.unlink()
            except OSError:
                pass
            self.log.info("pending %s of job %s done (partial)", req.op, job.get("job_id"))
