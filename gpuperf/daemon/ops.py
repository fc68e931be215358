"""Protocol ops: who may ask what (``Access``), and ``Ops``: one ``op_<name>`` method per op.

``Ops.handle(frame, uid, channel)`` parses a request, applies the socket rules (daemon/README.md, "Who
may do what") and calls the op; it never raises. Its collaborators come in its constructor: the jobs
(``jobs.Jobs``), the store, the latest sweep (``view.LiveView``), the cached health, the hand-over of a
finalised job (``handover.Handover``).
"""

from __future__ import annotations

import os
import pwd
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuperf.daemon import deliver as deliver_mod
from gpuperf.daemon import protocol, ratelimit
from gpuperf.daemon.handover import Handover
from gpuperf.daemon.jobs import Jobs, NodeFacts
from gpuperf.daemon.pub import sample_dict
from gpuperf.daemon.store import Store
from gpuperf.daemon.view import LiveView
from gpuperf.model.aggregates import JobAggregates
from gpuperf.samplers.base import Sampler


# the prolog's steps run here for its fast path (``gpuperf.prolog.indaemon.run``): (cfg, the forwarded job,
# the cached health result, a registration callback, now=) -> the reply's members
PrologSteps = Callable[..., dict[str, Any]]
# the epilog's step for the compiled hook client (``gpuperf.epilog.indaemon.run``): (cfg, the forwarded job,
# a finalise callback, now=) -> the reply's members
EpilogSteps = Callable[..., dict[str, Any]]
# a TaskProlog's answer for the compiled hook client (``gpuperf.prolog.taskdaemon.run``): (cfg, the job, the
# caller's uid, whether an admin asks) -> the reply's members
TaskEnv = Callable[..., dict[str, Any]]

# ops that hold no lock while they run: the hooks' steps (files of one job, the cached health) take it only
# for the registration or finalisation they ask for, so a TaskProlog or a prolog never waits for a sweep's
# fold of every job, only for the part that changes the jobs
UNLOCKED = frozenset({"ping", "prolog", "epilog", "taskenv"})


def public_reg(row: dict[str, Any]) -> dict[str, Any]:
    """The registration fields a reply shows."""
    return {k: row.get(k) for k in ("job_id", "uid", "user", "gpus", "cpus", "node", "start", "end", "state", "partial")}


def failure_line(e: BaseException) -> str:
    """An exception in one line: its type, its text cut and escaped, and where in gpuperf's code it was
    raised (file:line, innermost first), never a traceback holding the data of a request or a user's file."""
    where = " < ".join(f"{os.path.basename(f.filename)}:{f.lineno}"
                       for f in reversed(traceback.extract_tb(e.__traceback__)[-4:]))
    return f"{type(e).__name__}: {ratelimit.one_line(str(e))} (at {where})"


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


@dataclass(frozen=True)
class Access:
    """Who may do what: root and SlurmUser write; they and ``admin_uids`` read every job; others their own."""

    slurm_uid: int | None
    admin_uids: frozenset[int] = field(default_factory=lambda: frozenset({0}))

    @classmethod
    def from_config(cls, cfg: Any) -> "Access":
        """``general.slurm_user`` and ``general.admin_users`` by uid (names unknown here are left out); root is an admin."""
        admins = {u for u in (_uid_of(n) for n in cfg.general.admin_users) if u is not None} | {0}
        return cls(_uid_of(cfg.general.slurm_user), frozenset(admins))

    def may_write(self, uid: int | None) -> bool:
        """Root and SlurmUser may register and finalise."""
        return uid is not None and (uid == 0 or uid == self.slurm_uid)

    def is_admin(self, uid: int | None) -> bool:
        """Root, SlurmUser and general.admin_users read every job."""
        return uid is not None and (uid in self.admin_uids or uid == self.slurm_uid)

    def may_read(self, uid: int | None, job_uid: int | None) -> bool:
        """The caller may read a job of ``job_uid``."""
        return self.is_admin(uid) or (uid is not None and uid == job_uid)

    def refusal(self, op: str, uid: int | None, channel: str) -> str | None:
        """Why ``uid`` may not ask ``op`` on ``channel`` (None: it may)."""
        if channel in ("control", "hook") and not self.may_write(uid):
            return f"refused: uid {uid} may not use the {channel} socket"
        if op in protocol.WRITE_OPS and not self.may_write(uid):
            return f"refused: {op} needs root or SlurmUser (caller uid {uid})"
        if uid is None and op != "ping":
            return "refused: caller's uid unknown"
        return None


class Ops:
    """The protocol's ops over the daemon's parts (each given here, none reached through another)."""

    def __init__(self, *, access: Access, jobs: Jobs, store: Store, handover: Handover, view: LiveView,
                 health: Callable[[], "dict[str, Any] | None"], facts: NodeFacts, sampler: Sampler,
                 clock: Callable[[], float], started: float, stats: dict[str, float], cfg: Any, log: Any,
                 prolog: PrologSteps | None = None, epilog: EpilogSteps | None = None,
                 taskenv: TaskEnv | None = None, lock: Any = None):
        self.access, self.jobs, self.store, self.handover, self.view = access, jobs, store, handover, view
        self.health, self.facts, self.sampler, self.clock, self.started = health, facts, sampler, clock, started
        self.stats, self.cfg, self.log = stats, cfg, log
        self.prolog = prolog   # the prolog's steps, for its fast path; None: every prolog runs them itself
        self.epilog, self.taskenv = epilog, taskenv   # likewise for the compiled client's epilog and TaskProlog
        self.later: list[Callable[[], None]] = []      # work an op left for after its reply (``run_later``)
        self.log_budget = ratelimit.LogBudget()         # root's log lines each user's failed requests may cost
        # the daemon's state (jobs, store, view) is shared by the loop and the root channels' thread: every op
        # holds this lock but those that only run steps (``UNLOCKED``), which take it for what they change
        self.lock = lock if lock is not None else threading.RLock()

    def handle(self, frame: bytes, uid: int | None, channel: str = "control") -> dict[str, Any]:
        """One request frame from caller ``uid`` on ``channel`` -> the reply (never raises)."""
        self.stats["requests"] += 1
        try:
            req = protocol.parse_request(frame)
        except protocol.ProtocolError as e:
            self.stats["bad_requests"] += 1
            return protocol.error(str(e))
        why = self.access.refusal(req.op, uid, channel)
        if why is not None:
            return protocol.error(why)
        try:
            if req.op in UNLOCKED:
                return getattr(self, f"op_{req.op}")(req, uid)
            with self.lock:
                try:
                    return getattr(self, f"op_{req.op}")(req, uid)
                except Exception:
                    self.store.rollback_quietly()   # under the lock: never another thread's transaction
                    raise
        except Exception as e:  # noqa: BLE001 - a bug in one op must not stop the daemon
            self.log_failure(req.op, uid, channel, e)
            return protocol.error(f"internal error: {type(e).__name__}: {ratelimit.one_line(str(e), 200)}")

    def log_failure(self, op: str, uid: int | None, channel: str, e: BaseException) -> None:
        """One line for an op that raised: its text cut and escaped (the request's data is its sender's), the
        code's place instead of a traceback, at most ``ratelimit.LOG_LINES`` a minute per user of the user
        socket (the rest counted in one line)."""
        if channel == "user" and not self.access.is_admin(uid):
            ok, held = self.log_budget.take(uid, time.monotonic())
            if held:
                self.log.warning("uid %s: %d more failed request(s) not logged", uid, held)
            if not ok:
                return
        self.log.error("op %s from uid %s failed: %s", op, uid, failure_line(e))

    def op_ping(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Liveness and what this daemon is."""
        return protocol.ok(pid=os.getpid(), node=self.facts.node, backend=getattr(self.sampler, "name", None),
                           gpus=self.sampler.gpu_count(), interval_s=self.facts.interval_s,
                           uptime_s=round(self.clock() - self.started, 3), running=len(self.jobs.running), uid=uid,
                           sweeps=int(self.stats["sweeps"]), skipped=int(self.stats["skipped"]),
                           sweep_s=round(self.stats["sweep_s"], 6))

    def op_register(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """A job starts on this node (prolog)."""
        return self.jobs.register(req.job)

    def op_prolog(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The prolog's fast path: run its steps here, or say why not (the prolog then runs them)."""
        if self.prolog is None:
            return protocol.ok(done=False, why="this daemon was started without the prolog's steps")

        def register(job: dict[str, Any]) -> dict[str, Any]:
            try:
                checked = protocol.validate_job("register", job)
            except protocol.ProtocolError as e:
                return protocol.error(str(e))
            with self.lock:
                try:
                    return self.jobs.register(checked)
                except Exception:
                    self.store.rollback_quietly()
                    raise

        t0 = time.perf_counter()
        out = self.prolog(self.cfg, req.job, self.health(), register, now=self.clock())
        out["daemon_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if not out["done"]:
            self.log.info("prolog left to the hook: %s", out["why"])
        return protocol.ok(**out)

    def op_epilog(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The compiled client's epilog: finalise the job here and record the hook, or say why not."""
        if self.epilog is None:
            return protocol.ok(done=False, why="this daemon was started without the epilog's step")

        def finalise(job: dict[str, Any]) -> dict[str, Any]:
            try:
                checked = protocol.validate_job("finalize", job)
            except protocol.ProtocolError as e:
                return protocol.error(str(e))
            with self.lock:
                try:
                    return self.op_finalize(protocol.Request("finalize", job.get("job_id"), checked), uid)
                except Exception:
                    self.store.rollback_quietly()
                    raise

        t0 = time.perf_counter()
        out = self.epilog(self.cfg, req.job, finalise, now=self.clock())
        out["daemon_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if not out["done"]:
            self.log.info("epilog left to the hook: %s", out["why"])
        return protocol.ok(**out)

    def op_taskenv(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The compiled client's TaskProlog: this task's exports from the job's plan, for its owner."""
        if self.taskenv is None:
            return protocol.ok(done=False, why="this daemon was started without the TaskProlog's step")
        return protocol.ok(**self.taskenv(self.cfg, req.job, uid, self.access.is_admin(uid), now=self.clock()))

    def op_finalize(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """A job ended on this node (epilog): its aggregates, final; with ``deliver``, the daemon keeps
        them in its outbox and writes and sends the node summary after replying (``Deliveries``)."""
        job_id = int(req.job["job_id"])
        rj = self.jobs.running.get(job_id)
        reg = dict(rj.reg) if rj is not None else (self.store.job(job_id) or {})
        aggs = self.jobs.finalize(job_id, req.job.get("end"), bool(req.job.get("partial")))
        if aggs is None:
            return protocol.error(f"job {req.job['job_id']} is not registered on this node")
        if not req.job.get("deliver"):
            return protocol.ok(aggregates=aggs, series=self.handover.phase_series(aggs))
        context = {"job_id": job_id, "user": reg.get("user"), "uid": reg.get("uid"),
                   "node": reg.get("node") or aggs.get("node"), "exit_code": req.job.get("exit_code")}
        # the hand-over reads the job's series from the store and writes the outbox: milliseconds the job's
        # end need not wait for. A pending marker written first stands for it until it is done: a daemon
        # killed in between finalises and delivers the job again when it starts (Jobs.take_pending)
        try:
            marker = deliver_mod.write_pending(self.cfg.general.state_dir, "finalize",
                                               {"job_id": job_id, "end": aggs.get("end"),
                                                "exit_code": req.job.get("exit_code")}, context)
        except OSError as e:
            self.log.warning("job %s: no pending marker (%s): handed over before replying", job_id, e)
            outbox = self.handover.deliver_finalised(aggs, context)
            return protocol.ok(queued=True, outbox=str(outbox) if outbox is not None else None)
        self.later.append(lambda: self._hand_over(aggs, context, marker))
        return protocol.ok(queued=True, outbox=str(deliver_mod.outbox_dir(self.cfg.general.state_dir) / f"{job_id}.json"))

    def _hand_over(self, aggs: dict[str, Any], context: dict[str, Any], marker: Any) -> None:
        self.handover.deliver_finalised(aggs, context)
        try:
            marker.unlink()
        except OSError:
            pass

    def run_later(self) -> None:
        """What ops left for after their replies went out (the daemon's loop calls it after serving)."""
        while True:
            try:
                work = self.later.pop(0)     # both threads serve requests: whichever comes first does it
            except IndexError:
                return
            with self.lock:
                try:
                    work()
                except Exception as e:  # noqa: BLE001 - one job's hand-over must not stop the daemon (its marker stays)
                    self.log.error("deferred work failed: %s", failure_line(e))
                    self.store.rollback_quietly()

    def op_job(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Aggregates of one job, live while it runs; once finished, with the node summary kept at its end."""
        job_id = int(req.job["job_id"])
        rj = self.jobs.running.get(job_id)
        if rj is not None:
            if not self.access.may_read(uid, rj.reg["uid"]):
                return protocol.error(f"job {job_id} is not known here")
            return protocol.ok(state="running", job=public_reg(rj.reg), aggregates=rj.agg.to_dict())
        row = self.store.job(job_id)
        if row is None or not self.access.may_read(uid, row["uid"]):
            # one answer for "absent", "not yours" and "someone else's, running": which jobs ran on the node is
            # not disclosed (finding 4 of issue 36: it matters under PrivateData=jobs)
            return protocol.error(f"job {job_id} is not known here")
        state = self.store.aggregates(job_id)
        aggs = JobAggregates.from_state(state).to_dict() if state else None
        # a finished job's judgement is the one this node made at its end, with its series: served as kept
        # (issue 35), so its owner never reads a weaker one rebuilt from the aggregates without them
        summary = None if row["state"] == "running" else (self.store.summary(job_id)
                                                         or deliver_mod.stored_summary(self.cfg.general.run_dir, job_id))
        return protocol.ok(state=row["state"], job=public_reg(row), aggregates=aggs, summary=summary)

    def op_jobs(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Registrations on this node (the caller's own unless admin), newest first."""
        rows = self.store.jobs(uid=None if self.access.is_admin(uid) else uid, limit=500)
        return protocol.ok(jobs=[public_reg(r) for r in rows])

    def op_series(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Downsampled per-GPU series of one job, for the report's charts."""
        job_id = int(req.job["job_id"])
        row = self.store.job(job_id)
        if row is None or not self.access.may_read(uid, row["uid"]):
            return protocol.error(f"job {job_id} is not known here")
        t1 = row["end"] if row["end"] is not None else self.clock()
        return protocol.ok(series=self.store.series(row["gpus"], row["start"], t1, req.job["max_points"]))

    def op_live(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The latest sweep and the running jobs (the caller's own GPUs unless admin)."""
        admin = self.access.is_admin(uid)
        jobs = [rj.reg for rj in self.jobs.running.values() if admin or rj.reg["uid"] == uid]
        visible = None if admin else {g for r in jobs for g in r["gpus"]}
        gpus = [sample_dict(s) for s in self.view.latest if visible is None or s.gpu in visible]
        now = self.clock()
        return protocol.ok(t=self.view.latest_t, node=self.facts.node, gpus=gpus,
                           jobs=[{**public_reg(r), "elapsed_s": round(now - r["start"], 1)} for r in jobs])

    def op_health(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The cached fast health checks (refreshed every health_interval_s)."""
        h = self.health()
        if h is None:
            return protocol.error("no health")
        if "error" in h:
            return protocol.error(f"no health: {h['error']}")
        age = self.clock() - h["t"]
        max_age = req.job.get("max_age_s")
        if max_age is not None and age > max_age:
            return protocol.error(f"no health: cached result is {age:.0f} s old (max {max_age:.0f} s)")
        # the cached run covers every GPU of the node (checked_gpus null), whatever the request names
        return protocol.ok(t=h["t"], age_s=round(age, 3), results=h["results"], checked_gpus=None)
