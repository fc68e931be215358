"""The node daemon: one thread samples and serves; helpers run health checks, deliveries and /metrics.

Channels (both pyzmq REP over IPC; the daemon reads the caller's uid from libzmq's ``Peer-Address``
property, which libzmq fills from ``SO_PEERCRED`` on Unix sockets as ``host:uid:gid:pid``):

- ``<socket_dir>/control.sock``, directory 0700 root: every op. Only root can even connect; the
  peer uid is checked as well (root or SlurmUser).
- ``<user_socket_dir>/user.sock``, directory 0755, socket 0666: read ops for anyone, answered for the
  caller's own jobs only (admins, ``general.admin_users``, see all); write ops (register, finalize)
  only from root or SlurmUser. A caller whose uid cannot be read gets nothing but ``ping``.
- ``<socket_dir>/hook.sock`` (``hooksock``): the control socket's protocol and rules over a plain
  SEQPACKET Unix socket, for the prolog's fast path (a fresh process cannot afford to import pyzmq).

The sampling loop ticks every ``interval_s`` (monotonic clock). A sweep that overruns the interval is
logged and the ticks it covered are skipped, never queued. Sweeps and requests share one thread, so
state needs no locks; the /metrics thread reads an immutable snapshot replaced after each change.
"""

from __future__ import annotations

import fcntl
import math
import os
import pwd
import queue
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil
import zmq

from gpuperf import log
from gpuperf.aggregates import GAP_FACTOR, JobAggregates
from gpuperf.daemon import deliver as deliver_mod
from gpuperf.daemon import hooksock, hostusage, jobcgroup, protocol
from gpuperf.daemon.protocol import control_endpoint, user_endpoint
from gpuperf.daemon.attribution import Attributor, mismatches
from gpuperf.daemon.pub import Publisher, sample_dict, sweep_message
from gpuperf.daemon.store import Store
from gpuperf.samplers.base import GpuSample, Sampler

HARD_MAX_BYTES = 1024 * 1024       # libzmq drops the connection above this (protocol.MAX_BYTES answers)
ROLLUP_EVERY_S = 60.0
PRUNE_EVERY_S = 3600.0
PENDING_EVERY_S = 10.0



def gpu_names(sampler: Any) -> dict[int, str | None]:
    """GPU model by index from a sampler that can describe its GPUs ({} when it cannot)."""
    try:
        return {int(d["index"]): d.get("name") for d in sampler.describe()}
    except Exception:  # noqa: BLE001 - a sampler without describe(), or NVML refusing: the report says "model unknown"
        return {}

class DaemonError(Exception):
    """The daemon cannot start (socket in use, another daemon running, store unusable)."""


@dataclass
class RunningJob:
    """A registered job and its live aggregates."""

    reg: dict[str, Any]
    agg: JobAggregates
    needs_energy: bool = True


def pub_endpoint(cfg: Any) -> str:
    """Endpoint of the PUB stream: root-only IPC, or TCP when ``pub_port`` is set."""
    if cfg.daemon.pub_port:
        return f"tcp://*:{cfg.daemon.pub_port}"
    return f"ipc://{os.path.join(cfg.daemon.socket_dir, 'pub.sock')}"


def store_path(cfg: Any) -> str:
    """The SQLite store's path."""
    return cfg.daemon.store or os.path.join(cfg.general.state_dir, "daemon.sqlite")


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _health_from_checks(cfg: Any) -> Callable[[], list[dict[str, Any]]] | None:
    try:
        from gpuperf import checks, topology
    except ImportError:
        return None

    def run() -> list[dict[str, Any]]:
        node = checks.read_node(cfg)
        # the prolog steps the daemon runs read the node through load_node_once: as fresh as this read
        topology.remember(node, topology.node_root(cfg))
        return [r.to_dict() for r in checks.run_fast(node, cfg, [])]

    return run


class Daemon:
    """The node daemon. ``run()`` blocks until ``stop()``; tests drive it from a thread."""

    def __init__(self, cfg: Any, sampler: Sampler, node: str | None = None,
                 health_fn: Callable[[], list[dict[str, Any]]] | None | bool = True,
                 attributor: Attributor | None = None, clock: Callable[[], float] = time.time,
                 metrics: bool = True, send_summaries: bool = True):
        self.cfg = cfg
        self.sampler = sampler
        self.gpu_names = gpu_names(sampler)
        self.node = node or os.uname().nodename.split(".")[0]
        self.clock = clock
        self.log = log.get("daemon")
        self.interval_s = float(getattr(sampler, "interval_s", None) or cfg.daemon.interval_s)
        self.health_fn = _health_from_checks(cfg) if health_fn is True else (health_fn or None)
        self.attr = attributor or Attributor()
        self.want_metrics = metrics and cfg.daemon.metrics_port > 0
        self.send_summaries = send_summaries
        self.slurm_uid = _uid_of(cfg.general.slurm_user)
        self.admin_uids = {u for u in (_uid_of(n) for n in cfg.general.admin_users) if u is not None} | {0}
        self.running: dict[int, RunningJob] = {}
        self.stats: dict[str, float] = {"sweeps": 0, "skipped": 0, "errors": 0, "mismatches": 0, "sweep_s": 0.0,
                                        "requests": 0, "bad_requests": 0}
        self.latest: list[GpuSample] = []
        self.latest_t: float | None = None
        self.health: dict[str, Any] | None = None
        self.started = self.clock()
        self._stop = threading.Event()
        self._view: dict[str, Any] = {"samples": [], "jobs": [], "stats": {}}
        self._seen_mismatch: set[tuple[int, int, int | None]] = set()
        self._nonjob_pids: set[int] = set()
        self._last = {"energy": 0.0, "host": 0.0, "ckpt": 0.0, "rollup": 0.0, "prune": 0.0, "pending": 0.0}
        self._deliveries: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self.ctx: zmq.Context | None = None
        self.store: Store | None = None
        self.ready = threading.Event()

    # lifecycle ------------------------------------------------------------------------
    def open(self) -> None:
        """Lock, open the store, resume running jobs, take pending work, bind the sockets."""
        self._lock()
        self.store = self._open_store()
        self.store.begin()
        self.store.add_event(self.clock(), None, "start", {"pid": os.getpid(), "backend": getattr(self.sampler, "name", "?")})
        self.store.commit()
        self.resume()
        self.take_pending()
        self.end_jobs_from_before_boot()
        self._bind()
        self._threads.append(threading.Thread(target=self._deliver_loop, name="deliver", daemon=True))
        if self.health_fn is not None:
            self._threads.append(threading.Thread(target=self._health_loop, name="health", daemon=True))
        for t in self._threads:
            t.start()
        self._warm_prolog()
        if self.want_metrics:
            from gpuperf.daemon import metrics

            try:
                metrics.serve(lambda: self._view, self.cfg.daemon.metrics_port, self.cfg.daemon.metrics_address)
            except OSError as e:
                self.log.error("metrics: cannot listen on %s:%s: %s", self.cfg.daemon.metrics_address,
                               self.cfg.daemon.metrics_port, e)
        self._publish_view()

    def _warm_prolog(self) -> None:
        """Import the prolog's steps now, so the first job's prolog does not wait for them."""
        try:
            from gpuperf.prolog import affinityplan, envplan, indaemon  # noqa: F401
        except Exception as e:  # noqa: BLE001 - the fast path then fails per request and the prolog runs it
            self.log.error("prolog fast path unavailable: %s: %s", type(e).__name__, e)

    def _open_store(self) -> Store:
        """The store; a file that is not a usable database is moved aside (kept) and a new one started."""
        path = store_path(self.cfg)

        def make() -> Store:
            return Store(path, full_res_s=self.cfg.daemon.full_res_s, retention_days=self.cfg.daemon.retention_days)

        try:
            return make()
        except sqlite3.DatabaseError as e:
            aside = f"{path}.corrupt-{int(time.time())}"
            self.log.error("store %s is unusable (%s): moved to %s, starting a new one", path, e, aside)
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.replace(path + suffix, aside + suffix)
                except OSError:
                    pass
        except OSError as e:
            raise DaemonError(f"cannot open store {path}: {e}") from None
        try:
            return make()
        except (sqlite3.Error, OSError) as e:
            raise DaemonError(f"cannot open store {path}: {e}") from None

    def _lock(self) -> None:
        d = Path(self.cfg.daemon.socket_dir)
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
        self._lockfile = open(d / "daemon.lock", "a+")
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DaemonError(f"another gpuperf daemon holds {d / 'daemon.lock'}") from None
        self._lockfile.seek(0)
        self._lockfile.truncate()
        self._lockfile.write(str(os.getpid()))
        self._lockfile.flush()

    def _bind(self) -> None:
        self.ctx = zmq.Context()
        self.control = self._rep(control_endpoint(self.cfg))
        ud = Path(self.cfg.daemon.user_socket_dir)
        ud.mkdir(parents=True, exist_ok=True)
        os.chmod(ud, 0o755)
        self.user = self._rep(user_endpoint(self.cfg))
        os.chmod(ud / "user.sock", 0o666)
        try:
            self.pub: Publisher | None = Publisher(self.ctx, pub_endpoint(self.cfg))
        except zmq.ZMQError as e:
            self.log.error("PUB stream: cannot bind %s: %s", pub_endpoint(self.cfg), e)
            self.pub = None
        self.poller = zmq.Poller()
        self.poller.register(self.control, zmq.POLLIN)
        self.poller.register(self.user, zmq.POLLIN)
        self.hooks: hooksock.Listener | None = None
        self._hook_fds: set[int] = set()
        try:
            self.hooks = hooksock.Listener(self.cfg.daemon.socket_dir)
        except OSError as e:  # the prolog then uses the control socket, only slower
            self.log.error("hook socket: cannot bind in %s: %s", self.cfg.daemon.socket_dir, e)
        self._sync_hook_fds()

    def _sync_hook_fds(self) -> None:
        """Poll exactly the hook socket's listening fd and its connections waiting for a request."""
        if self.hooks is None:
            return
        want = set(self.hooks.fds())
        for fd in self._hook_fds - want:
            self.poller.unregister(fd)
        for fd in want - self._hook_fds:
            self.poller.register(fd, zmq.POLLIN)
        self._hook_fds = want

    def _rep(self, endpoint: str) -> zmq.Socket:
        s = self.ctx.socket(zmq.REP)  # type: ignore[union-attr]
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, HARD_MAX_BYTES)
        s.setsockopt(zmq.SNDTIMEO, 1000)
        try:
            s.bind(endpoint)
        except zmq.ZMQError as e:
            raise DaemonError(f"cannot bind {endpoint}: {e}") from None
        return s

    def stop(self) -> None:
        """Ask run() to return (thread- and signal-safe)."""
        self._stop.set()

    def close(self) -> None:
        """Checkpoint every running job and release sockets and store."""
        if self.store is not None:
            self.checkpoint()
            self.store.close()
            self.store = None
        if self.ctx is not None:
            for s in (self.control, self.user):
                s.close(0)
            if self.hooks is not None:
                self.hooks.close()
                self.hooks = None
            if self.pub:
                self.pub.close()
            self.ctx.term()
            self.ctx = None
        self._deliveries.put(None)
        try:
            self._lockfile.close()
        except (AttributeError, OSError):
            pass

    def run(self) -> None:
        """Open, then sample and serve until stop(); always closes."""
        self.open()
        try:
            self.loop()
        finally:
            self.close()

    def loop(self) -> None:
        """The main loop: requests between ticks, one sweep per tick, overruns skip ticks."""
        self.ready.set()
        next_tick = time.monotonic()
        while not self._stop.is_set():
            # whole milliseconds, rounded up: a sub-millisecond timeout polls with 0 and would spin to the tick
            wait_ms = math.ceil(max(0.0, (next_tick - time.monotonic()) * 1000.0))
            for sock, _ in self.poller.poll(min(wait_ms, 500)):
                if isinstance(sock, int):
                    self._serve_hook(sock)
                else:
                    self._serve_one(sock)
            if self.hooks is not None and self.hooks.conns:
                self.hooks.expire()
                self._sync_hook_fds()
            now = time.monotonic()
            if now < next_tick:
                continue
            self.sweep()
            took = time.monotonic() - now
            self.stats["sweep_s"] = took
            next_tick += self.interval_s
            if time.monotonic() > next_tick:
                skipped = 0
                while time.monotonic() > next_tick:
                    next_tick += self.interval_s
                    skipped += 1
                self.stats["skipped"] += skipped
                self.log.warning("sweep took %.3f s (interval %.3f s): %d tick(s) skipped", took, self.interval_s, skipped)

    # requests -------------------------------------------------------------------------
    def _serve_one(self, sock: zmq.Socket) -> None:
        try:
            frames = sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            return
        uid = None
        try:
            uid = protocol.parse_peer(frames[0].get("Peer-Address"))
        except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
            uid = None
        channel = "control" if sock is self.control else "user"
        if len(frames) != 1:
            reply = protocol.error("one frame per request")
            self.stats["bad_requests"] += 1
        else:
            reply = self.handle(frames[0].bytes, uid, channel)
        try:
            sock.send(self._reply_bytes(reply))
        except zmq.ZMQError as e:
            self.log.warning("cannot send reply: %s", e)
            try:  # a REP socket must answer before it can receive again: try the short error reply
                sock.send(protocol.encode(protocol.error("reply could not be sent")))
            except zmq.ZMQError:
                pass

    def _reply_bytes(self, reply: dict[str, Any]) -> bytes:
        """The encoded reply; an error reply when it cannot be encoded (every request gets an answer)."""
        try:
            return protocol.encode(reply)
        except ValueError as e:
            self.log.warning("cannot encode reply: %s", e)
            return protocol.encode(protocol.error("reply could not be encoded"))

    def _serve_hook(self, fd: int) -> None:
        got = self.hooks.ready(fd) if self.hooks is not None else None
        self._sync_hook_fds()
        if got is None:
            return
        conn, frame, uid = got
        if frame is None:
            self.stats["requests"] += 1
            self.stats["bad_requests"] += 1
            reply = protocol.error(f"request exceeds the {protocol.MAX_BYTES}-byte limit")
        else:
            reply = self.handle(frame, uid, "hook")
        hooksock.Listener.reply(conn, self._reply_bytes(reply))

    def may_write(self, uid: int | None) -> bool:
        """Root and SlurmUser may register and finalise."""
        return uid is not None and (uid == 0 or uid == self.slurm_uid)

    def is_admin(self, uid: int | None) -> bool:
        """Root, SlurmUser and general.admin_users read every job."""
        return uid is not None and (uid in self.admin_uids or uid == self.slurm_uid)

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
        return self.register(req.job)

    def op_prolog(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The prolog's fast path: run its steps here, or say why not (the prolog then runs them)."""
        from gpuperf.prolog import indaemon

        def register(job: dict[str, Any]) -> dict[str, Any]:
            try:
                return self.register(protocol.validate_job("register", job))
            except protocol.ProtocolError as e:
                return protocol.error(str(e))

        t0 = time.perf_counter()
        out = indaemon.run(self.cfg, req.job, self.health, register, now=self.clock())
        out["daemon_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if not out["done"]:
            self.log.info("prolog left to the hook: %s", out["why"])
        return protocol.ok(**out)

    def register(self, job: dict[str, Any]) -> dict[str, Any]:
        """Register a validated job (``protocol.validate_job('register', ...)``); idempotent."""
        job_id = int(job["job_id"])
        if job_id in self.running:
            return protocol.ok(job_id=job_id, already=True)
        now = self.clock()
        start = job.get("start") or now
        reg = {"job_id": job_id, "uid": job["uid"], "user": job.get("user"), "gpus": job["gpus"],
               "cpus": job.get("cpus"), "node": job.get("node") or self.node, "start": start,
               "partial": job.get("partial", False)}
        agg = JobAggregates.new(job_id, reg["node"], reg["gpus"], start, self.interval_s, reg["cpus"], self.gpu_names)
        agg.partial = bool(reg["partial"])
        if now - start > GAP_FACTOR * self.interval_s:
            agg.add_gap(start, now)        # registered late (pending marker): nothing sampled before now
        self._registered(reg, agg, now)
        return protocol.ok(job_id=job_id)

    def _registered(self, reg: dict[str, Any], agg: JobAggregates, now: float) -> None:
        st = self.store
        st.begin()  # type: ignore[union-attr]
        st.put_job(reg, now)  # type: ignore[union-attr]
        st.put_aggregates(reg["job_id"], now, agg.to_state())  # type: ignore[union-attr]
        st.add_event(now, reg["job_id"], "register", {"gpus": reg["gpus"], "partial": reg["partial"]})  # type: ignore[union-attr]
        st.commit()  # type: ignore[union-attr]
        self.running[reg["job_id"]] = RunningJob(reg, agg)
        self._publish_view()

    def op_finalize(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """A job ended on this node (epilog): its aggregates, final."""
        aggs = self.finalize(int(req.job["job_id"]), req.job.get("end"), bool(req.job.get("partial")))
        if aggs is None:
            return protocol.error(f"job {req.job['job_id']} is not registered on this node")
        return protocol.ok(aggregates=aggs)

    def finalize(self, job_id: int, end: float | None, partial: bool) -> dict[str, Any] | None:
        """Finalise a running job (or return a finalised one's aggregates); None if unknown."""
        rj = self.running.get(job_id)
        if rj is None:
            row = self.store.job(job_id)  # type: ignore[union-attr]
            state = self.store.aggregates(job_id) if row else None  # type: ignore[union-attr]
            if row and row["state"] == "finalized" and state:
                return JobAggregates.from_state(state).to_dict()
            return None
        now = self.clock()
        agg = rj.agg
        if not partial:
            # the end reading of the energy counter: only when finalising live, at the job's end
            agg.energy_reading(self._read_energy(), now)
        agg.end = end if end is not None else now
        agg.partial = agg.partial or partial
        st = self.store
        st.begin()  # type: ignore[union-attr]
        st.put_aggregates(job_id, now, agg.to_state())  # type: ignore[union-attr]
        st.finish_job(job_id, agg.end, agg.partial, now)  # type: ignore[union-attr]
        st.add_event(now, job_id, "finalize", {"partial": agg.partial, "gaps": len(agg.gaps)})  # type: ignore[union-attr]
        st.commit()  # type: ignore[union-attr]
        del self.running[job_id]
        self._publish_view()
        return agg.to_dict()

    def _may_read(self, uid: int | None, job_uid: int | None) -> bool:
        return self.is_admin(uid) or (uid is not None and uid == job_uid)

    def op_job(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Aggregates of one job, live while it runs."""
        job_id = int(req.job["job_id"])
        rj = self.running.get(job_id)
        if rj is not None:
            if not self._may_read(uid, rj.reg["uid"]):
                return protocol.error(f"job {job_id} is not yours")
            return protocol.ok(state="running", job=_public_reg(rj.reg), aggregates=rj.agg.to_dict())
        row = self.store.job(job_id)  # type: ignore[union-attr]
        if row is None or not self._may_read(uid, row["uid"]):
            # the same answer for "absent" and "not yours": job ids of others are not disclosed
            return protocol.error(f"job {job_id} is not known here" if row is None or self.is_admin(uid)
                                  else f"job {job_id} is not yours")
        state = self.store.aggregates(job_id)  # type: ignore[union-attr]
        aggs = JobAggregates.from_state(state).to_dict() if state else None
        return protocol.ok(state=row["state"], job=_public_reg(row), aggregates=aggs)

    def op_jobs(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Registrations on this node (the caller's own unless admin), newest first."""
        rows = self.store.jobs(uid=None if self.is_admin(uid) else uid, limit=500)  # type: ignore[union-attr]
        return protocol.ok(jobs=[_public_reg(r) for r in rows])

    def op_series(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """Downsampled per-GPU series of one job, for the report's charts."""
        job_id = int(req.job["job_id"])
        row = self.store.job(job_id)  # type: ignore[union-attr]
        if row is None or not self._may_read(uid, row["uid"]):
            return protocol.error(f"job {job_id} is not known here")
        t1 = row["end"] if row["end"] is not None else self.clock()
        return protocol.ok(series=self.store.series(row["gpus"], row["start"], t1, req.job["max_points"]))  # type: ignore[union-attr]

    def op_live(self, req: protocol.Request, uid: int | None) -> dict[str, Any]:
        """The latest sweep and the running jobs (the caller's own GPUs unless admin)."""
        admin = self.is_admin(uid)
        jobs = [rj.reg for rj in self.running.values() if admin or rj.reg["uid"] == uid]
        visible = None if admin else {g for r in jobs for g in r["gpus"]}
        gpus = []
        for s in self.latest:
            if visible is None or s.gpu in visible:
                gpus.append(sample_dict(s))
        now = self.clock()
        return protocol.ok(t=self.latest_t, node=self.node, gpus=gpus,
                           jobs=[{**_public_reg(r), "elapsed_s": round(now - r["start"], 1)} for r in jobs])

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

    # sampling -------------------------------------------------------------------------
    def sweep(self) -> None:
        """One sampling sweep: sample, store, attribute, fold, and the periodic chores."""
        try:
            samples = self.sampler.sample()
        except Exception as e:  # noqa: BLE001 - a failing backend costs this sweep, not the daemon
            self.stats["errors"] += 1
            if self.stats["errors"] <= 10 or self.stats["errors"] % 600 == 0:
                self.log.error("sweep failed (%d so far): %s: %s", self.stats["errors"], type(e).__name__, e)
            return
        if not samples:
            return
        t = max(s.t for s in samples)
        self.stats["sweeps"] += 1
        self.latest, self.latest_t = samples, t
        try:
            self.fold(t, samples)
            self._periodic(t)
        except Exception as e:  # noqa: BLE001 - disk full, a locked store: this sweep is lost, not the daemon
            self.stats["errors"] += 1
            if self.stats["errors"] <= 10 or self.stats["errors"] % 600 == 0:
                self.log.error("sweep at %.0f not kept (%d errors so far): %s: %s", t, self.stats["errors"],
                               type(e).__name__, e)
            self._rollback()
        if self.pub is not None and self.pub.wanted():
            self.pub.publish(sweep_message(t, samples, self._gpu_jobs()))
        self._publish_view()

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
        st.begin()  # type: ignore[union-attr]
        if store:
            st.add_samples(samples)  # type: ignore[union-attr]
        self._attribute(t, samples, gpu_jobs)
        for rj in self.running.values():
            if rj.agg.end is None or t <= rj.agg.end:
                rj.agg.add_sweep(t, [s for s in samples if s.gpu in rj.agg.gpus], sharing)
        need = [rj for rj in self.running.values() if rj.needs_energy]
        due = bool(self.running) and t - self._last["energy"] >= self.cfg.daemon.energy_interval_s
        if need or due:
            readings = self._read_energy()
            for rj in (list(self.running.values()) if due else need):
                rj.agg.energy_reading(readings, t)
                rj.needs_energy = False
            if due:
                self._last["energy"] = t
        st.commit()  # type: ignore[union-attr]

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
                    self.store.add_event(t, registered[0] if registered else m.job_id, "mismatch",  # type: ignore[union-attr]
                                         {"gpu": m.gpu, "pid": m.pid, "process_job": m.job_id, "registered": list(m.registered)})

    def _periodic(self, t: float) -> None:
        st = self.store
        last = self._last
        if self.running and t - last["host"] >= self.cfg.daemon.host_interval_s:
            last["host"] = t
            self.scan_host()
        if t - last["ckpt"] >= self.cfg.daemon.checkpoint_s:
            last["ckpt"] = t
            self.checkpoint()
        if t - last["rollup"] >= ROLLUP_EVERY_S:
            last["rollup"] = t
            st.begin()  # type: ignore[union-attr]
            st.rollup(t)  # type: ignore[union-attr]
            st.commit()  # type: ignore[union-attr]
        if t - last["prune"] >= PRUNE_EVERY_S:
            last["prune"] = t
            st.begin()  # type: ignore[union-attr]
            st.prune(t)  # type: ignore[union-attr]
            st.commit()  # type: ignore[union-attr]
        if t - last["pending"] >= PENDING_EVERY_S:
            last["pending"] = t
            self.take_pending()

    def scan_host(self) -> None:
        """Fold the running jobs' process usage and the node's NIC/IB counters."""
        try:
            usage = hostusage.scan_jobs(self.attr, set(self.running), self._nonjob_pids)
            net = hostusage.net_counters(self._sys_root())
        except Exception as e:  # noqa: BLE001 - host figures are a bonus; sampling goes on
            self.log.warning("host scan failed: %s: %s", type(e).__name__, e)
            return
        io_known = hostusage.delay_accounting(self.attr.proc_root)
        for jid, rj in self.running.items():
            u = usage.get(jid)
            host = rj.agg.host
            host.iowait_known = host.iowait_known and io_known
            if u is not None and u.procs:
                host.update_procs(u.procs, u.rss_mib)
                if host.cgroup is None:
                    host.cgroup = self._job_cgroup(u.procs)
            if host.cgroup is not None:
                host.update_cgroup(jobcgroup.read_cpu_s(host.cgroup))
            host.update_net(net)

    def _job_cgroup(self, procs: dict[str, Any]) -> str | None:
        """The job's CPU-counter cgroup, found from one of its live processes (None: not tracked by cgroup)."""
        for key in procs:
            try:
                with open(os.path.join(self.attr.proc_root, key.split(":", 1)[0], "cgroup")) as f:
                    found = jobcgroup.locate(f.read(), self.attr.cgroup_root)
            except OSError:
                continue
            return found
        return None

    def _sys_root(self) -> str:
        root = self.cfg.general.node_root
        return os.path.join(root, "sys") if root else "/sys"

    def checkpoint(self) -> None:
        """Write every running job's aggregates state to the store."""
        if not self.running or self.store is None:
            return
        now = self.clock()
        self.store.begin()
        for jid, rj in self.running.items():
            self.store.put_aggregates(jid, now, rj.agg.to_state())
        self.store.commit()

    # restart and pending work ---------------------------------------------------------
    def resume(self) -> None:
        """Take back every job the store says is running; re-fold samples stored after its checkpoint."""
        rows = self.store.jobs(state="running")  # type: ignore[union-attr]
        for row in rows:
            state = self.store.aggregates(row["job_id"])  # type: ignore[union-attr]
            try:
                agg = JobAggregates.from_state(state) if state else None
            except (ValueError, KeyError, TypeError) as e:
                self.log.error("job %s: stored aggregates unreadable (%s); restarting them", row["job_id"], e)
                agg = None
            if agg is None:
                agg = JobAggregates.new(row["job_id"], row["node"], row["gpus"], row["start"], self.interval_s, row["cpus"],
                                        self.gpu_names)
                agg.partial = True
            agg.interval_s = self.interval_s
            self.running[row["job_id"]] = RunningJob(dict(row), agg, needs_energy=False)
        if not self.running:
            return
        gpus = sorted({g for rj in self.running.values() for g in rj.agg.gpus})
        t0 = min((rj.agg.last_t if rj.agg.last_t is not None else rj.agg.start - 1e-6) for rj in self.running.values())
        by_t: dict[float, list[GpuSample]] = {}
        for s in self.store.samples_since(gpus, t0):  # type: ignore[union-attr]
            by_t.setdefault(s.t, []).append(s)
        sharing = {g: len(j) for g, j in self._gpu_jobs().items()}
        for t in sorted(by_t):
            for rj in self.running.values():
                if rj.agg.last_t is None or t > rj.agg.last_t:
                    rj.agg.add_sweep(t, [s for s in by_t[t] if s.gpu in rj.agg.gpus], sharing)
        self.store.begin()  # type: ignore[union-attr]
        for jid, rj in self.running.items():
            self.store.add_event(self.clock(), jid, "resume", {"last_sample_t": rj.agg.last_t})  # type: ignore[union-attr]
        self.store.commit()  # type: ignore[union-attr]
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
                self._deliveries.put((aggs, ctx))

    def take_pending(self) -> None:
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
                self.op_register(req, 0)
            else:
                aggs = self.finalize(int(job["job_id"]), req.job.get("end"), True)
                if aggs is not None:
                    self._deliveries.put((aggs, marker.get("context") or {}))
                else:
                    self.log.warning("pending finalize of job %s: job not registered here; dropped", job["job_id"])
            try:
                path.unlink()
            except OSError:
                pass
            self.log.info("pending %s of job %s done (partial)", req.op, job.get("job_id"))

    # helper threads -------------------------------------------------------------------
    def _deliver_loop(self) -> None:
        while True:
            item = self._deliveries.get()
            if item is None:
                return
            aggs, context = item
            res = deliver_mod.deliver(self.cfg, aggs, context, send=self.send_summaries)
            if res["errors"]:
                self.log.warning("job %s: delivery: %s", aggs.get("job_id"), "; ".join(res["errors"]))

    def _health_loop(self) -> None:
        while not self._stop.is_set():
            self.refresh_health()
            self._stop.wait(self.cfg.daemon.health_interval_s)

    def refresh_health(self) -> None:
        """Run the fast checks now and cache the result."""
        try:
            results = self.health_fn()  # type: ignore[misc]
            self.health = {"t": self.clock(), "results": results}
        except Exception as e:  # noqa: BLE001 - a check failure is "no health", never a crash
            self.health = {"t": self.clock(), "error": f"{type(e).__name__}: {e}"}

    def _publish_view(self) -> None:
        self._view = {"samples": list(self.latest),
                      "jobs": [(jid, rj.reg.get("user"), sorted(rj.agg.gpus)) for jid, rj in self.running.items()],
                      "stats": dict(self.stats)}


def _public_reg(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in ("job_id", "uid", "user", "gpus", "cpus", "node", "start", "end", "state", "partial")}


def serve(cfg: Any, backend: str | None = None) -> int:
    """Run the node daemon until SIGTERM/SIGINT (``gpuperf daemon``)."""
    from gpuperf.samplers import SamplerUnavailable, open_sampler

    lg = log.get("daemon")
    try:
        sampler = open_sampler(backend or cfg.daemon.backend, cfg)
    except SamplerUnavailable as e:
        lg.error("no sampler: %s", e)
        return 2
    d = Daemon(cfg, sampler)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: d.stop())
    try:
        lg.info("gpuperf daemon on %s: backend %s, %d GPU(s), interval %.3f s", d.node,
                getattr(sampler, "name", "?"), sampler.gpu_count(), d.interval_s)
        d.run()
    except DaemonError as e:
        lg.error("%s", e)
        return 2
    finally:
        try:
            sampler.close()
        except Exception:  # noqa: BLE001
            pass
    return 0
