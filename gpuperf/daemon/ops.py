"""Protocol ops (a mixin of ``Daemon``): who may ask what, and one ``op_<name>`` method per op.

``handle(frame, uid, channel)`` parses a request, applies the socket rules (daemon/README.md, "Who
may do what") and calls the op; it never raises.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from gpuperf.model import series as series_mod
from gpuperf.model.aggregates import JobAggregates
from gpuperf.daemon import protocol
from gpuperf.daemon.pub import sample_dict


# the prolog's steps run here for its fast path (``gpuperf.prolog.indaemon.run``): (cfg, the forwarded job,
# the cached health result, a registration callback, now=) -> the reply's members
PrologSteps = Callable[..., dict[str, Any]]


def public_reg(row: dict[str, Any]) -> dict[str, Any]:
    """The registration fields a reply shows."""
    return {k: row.get(k) for k in ("job_id", "uid", "user", "gpus", "cpus", "node", "start", "end", "state", "partial")}


class OpsMixin:
    """Needs: stats, store, running, latest, latest_t, node, sampler, health_fn, health, cfg, log, uids, prolog."""

    stats: dict[str, float]
    store: Any
    running: dict[int, Any]
    slurm_uid: int | None
    admin_uids: set[int]
    node: str
    cfg: Any
    log: Any
    sampler: Any
    interval_s: float
    clock: Callable[[], float]
    started: float
    latest: list[Any]
    latest_t: float | None
    health_fn: Any
    health: dict[str, Any] | None
    prolog: PrologSteps | None

    def may_write(self, uid: int | None) -> bool:
        """Root and SlurmUser may register and finalise."""
        return uid is not None and (uid == 0 or uid == self.slurm_uid)

    def is_admin(self, uid: int | None) -> bool:
        """Root, SlurmUser and general.admin_users read every job."""
        return uid is not None and (uid in self.admin_uids or uid == self.slurm_uid)

    def _may_read(self, uid: int | None, job_uid: int | None) -> bool:
        return self.is_admin(uid) or (uid is not None and uid == job_uid)

    def handle(self, frame: bytes, uid: int | None, channel: str = "control") -> dict[str, Any]:
        """One request frame from caller ``uid`` on ``channel`` -> the reply (never raises)."""
        self.stats["requests"] += 1
        try:
            req = protocol.parse_request(frame)
        except protocol.ProtocolError as e:
            self.stats["bad_requests"] += 1
            return protocol.error(str(e))
        if channel in ("control", "hook") and not self.may_write(uid):
            return protocol.error(f"refused: uid {uid} may not use the {channel} socket")
        if req.op in protocol.WRITE_OPS and not self.may_write(uid):
            return protocol.error(f"refused: {req.op} needs root or SlurmUser (caller uid {uid})")
        if uid is None and req.op != "ping":
            return protocol.error("refused: caller's uid unknown")
        try:
            return getattr(self, f"op_{req.op}")(req, uid)
        except Exception as e:  # noqa: BLE001 - a bug in one op must not stop the daemon
            self.log.exception("op %s failed", req.op)
            self._rollback()
            return protocol.error(f"internal error: {type(e).__name__}: {e}")

    def _rollback(self) -> None:
        if self.store is not None:
            try:
                self.store.rollback()
            except Exception:  # noqa: BLE001 - nothing open, or the store is gone
                pass

    def op_ping(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Liveness and what this daemon is."""
        return protocol.ok(pid=os.getpid(), node=self.node, backend=getattr(self.sampler, "name", None),
                           gpus=self.sampler.gpu_count(), interval_s=self.interval_s,
                           uptime_s=round(self.clock() - self.started, 3), running=len(self.running), uid=uid,
                           sweeps=int(self.stats["sweeps"]), skipped=int(self.stats["skipped"]),
                           sweep_s=round(self.stats["sweep_s"], 6))

    def op_register(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """A job starts on this node (prolog)."""
        return self.register(req.job)  # type: ignore[attr-defined]

    def op_prolog(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The prolog's fast path: run its steps here, or say why not (the prolog then runs them)."""
        if self.prolog is None:
            return protocol.ok(done=False, why="this daemon was started without the prolog's steps")

        def register(job: dict[str, Any]) -> dict[str, Any]:
            try:
                return self.register(protocol.validate_job("register", job))  # type: ignore[attr-defined]
            except protocol.ProtocolError as e:
                return protocol.error(str(e))

        t0 = time.perf_counter()
        out = self.prolog(self.cfg, req.job, self.health, register, now=self.clock())
        out["daemon_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if not out["done"]:
            self.log.info("prolog left to the hook: %s", out["why"])
        return protocol.ok(**out)

    def op_finalize(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """A job ended on this node (epilog): its aggregates, final; with ``deliver``, the daemon keeps
        them in its outbox and writes and sends the node summary after replying (``Deliveries``)."""
        job_id = int(req.job["job_id"])
        rj = self.running.get(job_id)  # type: ignore[attr-defined]
        reg = dict(rj.reg) if rj is not None else (self.store.job(job_id) or {})  # type: ignore[attr-defined]
        aggs = self.finalize(job_id, req.job.get("end"), bool(req.job.get("partial")))  # type: ignore[attr-defined]
        if aggs is None:
            return protocol.error(f"job {req.job['job_id']} is not registered on this node")
        if not req.job.get("deliver"):
            return protocol.ok(aggregates=aggs, series=self._phase_series(aggs))
        outbox = self.deliver_finalised(aggs, {"job_id": job_id, "user": reg.get("user"), "uid": reg.get("uid"),
                                               "node": reg.get("node") or aggs.get("node"),
                                               "exit_code": req.job.get("exit_code")})
        return protocol.ok(queued=True, outbox=str(outbox) if outbox is not None else None)

    def deliver_finalised(self, aggs: dict[str, Any], context: dict[str, Any]) -> Path | None:
        """Hand a finalised job to the delivery thread with its series (the coarse one for the diagnosis's
        phases, the bounded one the controller charts from), however it was finalised: by its epilog, a
        pending marker, or a reboot; the outbox entry (``Deliveries.put``)."""
        ctx = dict(context)
        series = self._phase_series(aggs)
        if series is not None:
            ctx["series"] = series
        ctx["controller_series"] = self._controller_series(aggs)
        return self.deliveries.put(aggs, ctx)  # type: ignore[attr-defined]

    def _controller_series(self, aggs: dict[str, Any]) -> dict[str, Any] | None:
        """The job's bounded per-GPU series for the controller (gpuperf.series.v1); None when off or on error."""
        points = self.cfg.controller.series_points
        if points <= 0:
            return None
        try:
            return series_mod.compact(self._stored_series(aggs, points), points)   # None: nothing to chart
        except Exception as e:  # noqa: BLE001 - no series makes the report chartless on the controller, nothing worse
            self.log.info("job %s: no series for the controller: %s", aggs.get("job_id"), e)  # type: ignore[attr-defined]
            return None

    def _phase_series(self, aggs: dict[str, Any]) -> dict[str, Any] | None:
        """The job's series, coarse (diagnosis.phases.SERIES_POINTS points), for its phases; None on any error."""
        try:
            from gpuperf.diagnosis import phases

            ser = self._stored_series(aggs, phases.SERIES_POINTS, phases.SERIES_FIELDS)
            return phases.compact(ser) if ser is not None else None
        except Exception as e:  # noqa: BLE001 - phases are extra: the aggregates must go out regardless
            self.log.warning("job %s: no series for its phases: %s", aggs.get("job_id"), e)  # type: ignore[attr-defined]
            return None

    def _stored_series(self, aggs: dict[str, Any], points: int, fields: Any = None) -> dict[str, Any] | None:
        """The store's series of a finalised job's GPUs over its run (None: no GPUs or no span); raises on a
        malformed aggregate."""
        gpus = [int(g) for g in aggs.get("gpus") or {}]
        start, end = float(aggs["start"]), float(aggs.get("end") or aggs.get("last_sample_t") or 0.0)
        if not gpus or end <= start:
            return None
        return self.store.series(gpus, start, end, points, fields)  # type: ignore[attr-defined]

    def op_job(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Aggregates of one job, live while it runs."""
        job_id = int(req.job["job_id"])
        rj = self.running.get(job_id)
        if rj is not None:
            if not self._may_read(uid, rj.reg["uid"]):
                return protocol.error(f"job {job_id} is not yours")
            return protocol.ok(state="running", job=public_reg(rj.reg), aggregates=rj.agg.to_dict())
        row = self.store.job(job_id)
        if row is None or not self._may_read(uid, row["uid"]):
            # the same answer for "absent" and "not yours": job ids of others are not disclosed
            return protocol.error(f"job {job_id} is not known here" if row is None or self.is_admin(uid)
                                  else f"job {job_id} is not yours")
        state = self.store.aggregates(job_id)
        aggs = JobAggregates.from_state(state).to_dict() if state else None
        return protocol.ok(state=row["state"], job=public_reg(row), aggregates=aggs)

    def op_jobs(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Registrations on this node (the caller's own unless admin), newest first."""
        rows = self.store.jobs(uid=None if self.is_admin(uid) else uid, limit=500)
        return protocol.ok(jobs=[public_reg(r) for r in rows])

    def op_series(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Downsampled per-GPU series of one job, for the report's charts."""
        job_id = int(req.job["job_id"])
        row = self.store.job(job_id)
        if row is None or not self._may_read(uid, row["uid"]):
            return protocol.error(f"job {job_id} is not known here")
        t1 = row["end"] if row["end"] is not None else self.clock()
        return protocol.ok(series=self.store.series(row["gpus"], row["start"], t1, req.job["max_points"]))

    def op_live(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The latest sweep and the running jobs (the caller's own GPUs unless admin)."""
        admin = self.is_admin(uid)
        jobs = [rj.reg for rj in self.running.values() if admin or rj.reg["uid"] == uid]
        visible = None if admin else {g for r in jobs for g in r["gpus"]}
        gpus = [sample_dict(s) for s in self.latest if visible is None or s.gpu in visible]
        now = self.clock()
        return protocol.ok(t=self.latest_t, node=self.node, gpus=gpus,
                           jobs=[{**public_reg(r), "elapsed_s": round(now - r["start"], 1)} for r in jobs])

    def op_health(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The cached fast health checks (refreshed every health_interval_s)."""
        h = self.health
        if self.health_fn is None or h is None:
            return protocol.error("no health")
        if "error" in h:
            return protocol.error(f"no health: {h['error']}")
        age = self.clock() - h["t"]
        max_age = req.job.get("max_age_s")
        if max_age is not None and age > max_age:
            return protocol.error(f"no health: cached result is {age:.0f} s old (max {max_age:.0f} s)")
        # the cached run covers every GPU of the node (checked_gpus null), whatever the request names
        return protocol.ok(t=h["t"], age_s=round(age, 3), results=h["results"], checked_gpus=None)
