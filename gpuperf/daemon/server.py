"""The node daemon: the loop samples and serves users, a thread answers hooks; helpers check health, deliver, metrics.

Channels (the caller's uid from ``SO_PEERCRED``: on the pyzmq control socket through libzmq's
``Peer-Address`` property, ``host:uid:gid:pid``):

- ``<socket_dir>/control.sock``, directory 0700 root: every op. Only root can even connect; the
  peer uid is checked as well (root or SlurmUser).
- ``<user_socket_dir>/user.sock`` (``usersock``: a plain stream socket, every buffer bounded), directory
  0755, socket 0666: read ops for anyone, answered for the
  caller's own jobs only (admins, ``general.admin_users``, see all); write ops (register, finalize)
  only from root or SlurmUser. A caller whose uid cannot be read gets nothing but ``ping``.
- ``<socket_dir>/hook.sock`` (``hooksock``): the control socket's protocol and rules over a plain
  SEQPACKET Unix socket, for the prolog's fast path (a fresh process cannot afford to import pyzmq).

The sampling loop ticks every ``interval_s`` (monotonic clock). A sweep that overruns the interval is
logged and the ticks it covered are skipped, never queued. Sweeps and the user socket share the loop's
thread; the root channels (control and hook sockets: prolog, epilog, registration) are answered by a
thread of their own (``channels.Channels.serve_root``), so neither a sweep nor a user's request delays a
hook (issue 36). The two share the daemon's state under one lock (``state_lock``), which a sweep holds
only to fold, never while it samples or reads procfs, and a hook only to register or finalise; the
/metrics thread reads an immutable snapshot replaced after each change.

The daemon is made of parts, each given its collaborators in its constructor; ``Daemon`` is the one place
that knows them all and composes them (daemon/README.md, "Parts"): the jobs (``jobs.Registry``,
``jobs.Jobs``), one sweep (``sampling.Sweeper``, ``attribution.Mismatches``, ``sampling.Energy``), the
latest view (``view.LiveView``), the ops (``ops.Ops``, ``ops.Access``), the hand-over of finalised jobs
(``handover.Handover``, ``workers.Deliveries``), the chores (``chores``, ``hostscan.HostScanner``), the
helper threads (``workers``) and the sockets (``channels``).
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable

from gpuperf.daemon import hostscan, xids
from gpuperf.daemon.attribution import Attributor, Mismatches
from gpuperf.daemon.channels import Channels, pub_endpoint  # noqa: F401 - part of this module's interface
from gpuperf.daemon.chores import Chore, Chores, JobDirPruner, Ticks
from gpuperf.daemon.handover import Handover
from gpuperf.daemon.jobs import Jobs, NodeFacts, Registry, RunningJob  # noqa: F401 - part of this module's interface
from gpuperf.daemon.ops import Access, EpilogSteps, Ops, PrologSteps, TaskEnv
from gpuperf.daemon.ops import failure_line as ops_failure_line
from gpuperf.daemon.sampling import Energy, Sweeper, read_energy
from gpuperf.daemon.startup import DaemonError, open_store, serve_metrics, store_path, take_lock  # noqa: F401
from gpuperf.daemon.store import Store
from gpuperf.daemon.view import LiveView
from gpuperf.daemon.workers import Deliveries, ErrorCounters, Health, HealthFn, ProbeLoop, health_from_checks
from gpuperf.files import log
from gpuperf.samplers.base import GpuSample, Sampler

ROLLUP_EVERY_S = 60.0
PRUNE_EVERY_S = 3600.0
PENDING_EVERY_S = 10.0
JOBDIRS_EVERY_S = 3600.0
POLL_CAP_MS = 500                  # the loop looks at its stop flag at least this often


def gpu_names(sampler: Any, key: str = "name") -> dict[int, str | None]:
    """GPU model (or another ``describe()`` fact, e.g. ``uuid``) by index ({} when the sampler cannot say)."""
    try:
        return {int(d["index"]): d.get(key) for d in sampler.describe()}
    except Exception:  # noqa: BLE001 - a sampler without describe(), or NVML refusing: the report says "model unknown"
        return {}


@dataclass
class Opened:
    """The parts that live while the daemon is open (they need its store and sockets)."""

    store: Store
    jobs: Jobs
    handover: Handover
    chores: Chores
    sweeper: Sweeper
    ops: Ops
    channels: Channels


class Daemon:
    """The node daemon: composes its parts. ``run()`` blocks until ``stop()``; tests drive it from a thread.

    ``prolog``: the prolog's steps for its fast path (``gpuperf.prolog.indaemon.run``), handed in by
    ``gpuperf daemon`` (``commands/daemon.py``): the hooks sit above the daemon and it imports none of
    them. Without them the daemon declines every fast-path request and each prolog runs its steps itself.
    ``epilog`` and ``taskenv`` likewise answer the compiled hook client's epilog and TaskProlog
    (``gpuperf.epilog.indaemon.run``, ``gpuperf.prolog.taskdaemon.run``).
    """

    def __init__(self, cfg: Any, sampler: Sampler, node: str | None = None,
                 health_fn: HealthFn | None | bool = True,
                 attributor: Attributor | None = None, clock: Callable[[], float] = time.time,
                 metrics: bool = True, send_summaries: bool = True, xid_source: Any = True,
                 prolog: PrologSteps | None = None, epilog: EpilogSteps | None = None, taskenv: TaskEnv | None = None):
        self.cfg = cfg
        self.prolog, self.epilog, self.taskenv = prolog, epilog, taskenv
        self.sampler = sampler
        self.clock = clock           # replaceable (benchmarks run on sample time): every part reads it through _now
        self.log = log.get("daemon")
        self.interval_s = float(getattr(sampler, "interval_s", None) or cfg.daemon.interval_s)
        self.facts = NodeFacts(node or os.uname().nodename.split(".")[0], self.interval_s,
                               gpu_names(sampler), gpu_names(sampler, "uuid"))
        self.node = self.facts.node
        self.errors = ErrorCounters()
        health_fn = (health_from_checks(cfg, lambda node: self.errors.note(node.gpus),
                                        lambda snap: xids.seen_by(self.xid_source, snap)) if health_fn is True
                     else (health_fn or None))
        self.registry = Registry()
        self.attr = attributor or Attributor()
        # a process's SLURM_JOB_ID is believed only from the registered job's user (attribution.py)
        self.attr.job_uid = self.registry.uid_of
        # NVML's XID events for an NVML sampler; tests hand in their own source (or None)
        # remembered (Witness): the health checks count a kernel-log XID only where these events saw it
        self.xid_source = xids.witnessed(xids.open_source(sampler, self.log) if xid_source is True else xid_source)
        self.want_metrics = metrics and cfg.daemon.metrics_port > 0
        self.access = Access.from_config(cfg)
        self.stats: dict[str, float] = {"sweeps": 0, "skipped": 0, "errors": 0, "mismatches": 0, "sweep_s": 0.0,
                                        "requests": 0, "bad_requests": 0}
        self.view = LiveView(self.registry, self.stats)
        self.started = self.clock()
        self._stop = threading.Event()
        self.deliveries = Deliveries(cfg, self.log, send_summaries)
        self._health = Health(health_fn, cfg.daemon.health_interval_s, self._now, self._stop) if health_fn else None
        self.prober = ProbeLoop(cfg, lambda: not self.registry.running, self.log, self._stop)
        self.pruner = JobDirPruner(cfg.general.run_dir, cfg.general.job_dir_keep_days, lambda: self.registry.running,
                                   self.log)
        # the jobs, the store and the view, shared by the loop and the root channels' thread
        self.state_lock = threading.RLock()
        self.host = hostscan.HostScanner(self.registry.running, self.attr, hostscan.sys_root(cfg), self.log,
                                         self.state_lock)
        self._threads: list[threading.Thread] = []
        self._lockfile: IO[str] | None = None
        self.opened: Opened | None = None
        self.ready = threading.Event()

    def _now(self) -> float:
        return self.clock()

    # what tests and tools read ----------------------------------------------------------
    @property
    def running(self) -> dict[int, RunningJob]:
        """The registered jobs, by id."""
        return self.registry.running

    @property
    def store(self) -> Store | None:
        """The store while the daemon is open (None before and after)."""
        return self.opened.store if self.opened is not None else None

    @property
    def ops(self) -> Ops:
        """The request handler (open daemon only)."""
        return self._parts().ops

    @property
    def latest(self) -> list[GpuSample]:
        """The latest sweep's samples."""
        return self.view.latest

    @property
    def latest_t(self) -> float | None:
        """The latest sweep's sample time."""
        return self.view.latest_t

    @property
    def health(self) -> dict[str, Any] | None:
        """The latest cached fast-check result ({t, results} or {t, error}); None before the first."""
        return self._health.result if self._health is not None else None

    def refresh_health(self) -> None:
        """Run the fast checks now and cache the result."""
        if self._health is not None:
            self._health.refresh()

    def note_node_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Keep the GPUs' error counters of a node read (``gpus.v1``); jobs are charged their growth."""
        self.errors.note(snapshot)

    def handle(self, frame: bytes, uid: int | None, channel: str = "control") -> dict[str, Any]:
        """One request frame -> its reply (``Ops.handle``)."""
        return self._parts().ops.handle(frame, uid, channel)

    def sweep(self) -> None:
        """One sampling sweep (``Sweeper.sweep``)."""
        self._parts().sweeper.sweep()

    def _parts(self) -> Opened:
        if self.opened is None:
            raise DaemonError("the daemon is not open")
        return self.opened

    # composition and lifecycle ------------------------------------------------------------
    def open(self) -> None:
        """Lock, open the store, resume running jobs, take pending work, bind the sockets, start helpers."""
        self._lockfile = take_lock(self.cfg.daemon.socket_dir)
        store = open_store(self.cfg, self.log)
        try:
            self.opened = self._compose(store)
        except BaseException:
            store.rollback_quietly()   # nothing half done is committed by the close
            store.close()
            raise
        for t in self._threads:
            t.start()
        if self.want_metrics:
            serve_metrics(self.cfg, self.view.current, self.log)
        self.view.publish()

    def _compose(self, store: Store) -> Opened:
        """The parts that need the store, composed; the jobs resumed and pending work taken before the sockets."""
        cfg, lg = self.cfg, self.log
        store.in_transaction(store.add_event, self.clock(), None, "start",
                             {"pid": os.getpid(), "backend": getattr(self.sampler, "name", "?")})
        handover = Handover(store, self.deliveries.put, cfg.controller.series_points, lg, self.deliveries.kept,
                            self.state_lock)
        energy = functools.partial(read_energy, self.sampler, lg)
        jobs = Jobs(store, self.registry, self.facts, clock=self._now, read_energy=energy,
                    error_counters=self.errors.get, hand_over=handover.deliver_finalised,
                    on_change=self.view.publish, state_dir=cfg.general.state_dir, log=lg)
        jobs.resume()
        restored = self.deliveries.restore()   # before the pending markers: those add to the outbox
        if restored:
            lg.info("%d finalised job(s) in the outbox from before: delivering", restored)
        jobs.take_pending()
        jobs.end_jobs_from_before_boot()
        locked = self._locked
        chores = Chores([   # the host scan takes the lock for its fold only (its procfs reads come first)
            Chore("host", cfg.daemon.host_interval_s, self.host.scan, only_if=lambda: bool(self.registry.running)),
            Chore("checkpoint", cfg.daemon.checkpoint_s, locked(jobs.checkpoint)),
            Chore("rollup", ROLLUP_EVERY_S, locked(lambda t: store.in_transaction(store.rollup, t))),
            Chore("prune", PRUNE_EVERY_S, locked(lambda t: store.in_transaction(store.prune, t))),
            Chore("pending", PENDING_EVERY_S, locked(jobs.take_pending)),
            Chore("jobdirs", JOBDIRS_EVERY_S, self.pruner.start),
        ])
        channels = Channels(cfg, lg, self.stats)
        sweeper = Sweeper(sampler=self.sampler, store=store, registry=self.registry,
                          mismatches=Mismatches(self.attr, self.registry.running, store, self.stats),
                          energy=Energy(energy, cfg.daemon.energy_interval_s), chores=chores.run_due,
                          xid_source=self.xid_source, view=self.view, pub=channels.pub, stats=self.stats, log=lg,
                          lock=self.state_lock)
        ops = Ops(access=self.access, jobs=jobs, store=store, handover=handover, view=self.view,
                  health=lambda: self.health, facts=self.facts, sampler=self.sampler, clock=self._now,
                  started=self.started, stats=self.stats, cfg=cfg, log=lg, prolog=self.prolog,
                  epilog=self.epilog, taskenv=self.taskenv, lock=self.state_lock)
        self._threads.append(self.deliveries.thread())
        if self._health is not None:
            self._threads.append(self._health.thread())
        if ProbeLoop.wanted(cfg):
            self._threads.append(self.prober.thread())
        return Opened(store, jobs, handover, chores, sweeper, ops, channels)

    def _locked(self, fn: Callable[[float], None]) -> Callable[[float], None]:
        """``fn`` run under the daemon's state lock; a transaction it leaves open on an error is rolled back
        before the lock is let go (else the hooks thread's next commit would keep the half of it)."""
        def run(t: float) -> None:
            with self.state_lock:
                try:
                    fn(t)
                except Exception:
                    self._parts().store.rollback_quietly()
                    raise
        return run

    def stop(self) -> None:
        """Ask run() to return (thread- and signal-safe)."""
        self._stop.set()

    def close(self) -> None:
        """Checkpoint every running job and release sockets and store."""
        with self.state_lock:   # a hook still being answered (its thread outlived the loop's join) ends first
            o, self.opened = self.opened, None
            if o is not None:
                o.jobs.checkpoint()
                o.store.close()
        if o is not None:
            o.channels.close()
        self.deliveries.close()
        if self.xid_source is not None and hasattr(self.xid_source, "close"):
            self.xid_source.close()
            self.xid_source = None
        if self._lockfile is not None:
            self._lockfile.close()
            self._lockfile = None

    def run(self) -> None:
        """Open, then sample and serve until stop(); always closes."""
        self.open()
        try:
            self.loop()
        finally:
            self.close()

    def loop(self) -> None:
        """The main loop: requests between ticks, one sweep per tick, overruns skip ticks."""
        o = self._parts()
        o.channels.split_root()
        root = threading.Thread(target=self._serve_root, args=(o,), name="gpuperf-hooks", daemon=True)
        root.start()
        self.ready.set()
        try:
            self._loop(o)
        finally:
            self._stop.set()
            root.join(5)

    def _serve_root(self, o: Opened) -> None:
        """The root channels' thread: control and hook requests, answered while the loop sweeps."""
        while not self._stop.is_set():
            try:
                o.channels.serve_root(POLL_CAP_MS, o.ops.handle)
                o.ops.run_later()
            except Exception as e:  # noqa: BLE001 - the hooks then time out to their Python path; the loop goes on
                self.log.error("root channels: %s", ops_failure_line(e))
                time.sleep(0.1)

    def _loop(self, o: Opened) -> None:
        ticks = Ticks(self.interval_s)
        while not self._stop.is_set():
            o.channels.serve(ticks.wait_ms(POLL_CAP_MS), o.ops.handle)
            o.ops.run_later()
            o.handover.keep_delivered()
            if not ticks.due():
                continue
            began = time.monotonic()
            o.sweeper.sweep()
            self.stats["sweep_s"] = took = time.monotonic() - began
            skipped = ticks.advance()
            if skipped:
                self.stats["skipped"] += skipped
                self.log.warning("sweep took %.3f s (interval %.3f s): %d tick(s) skipped", took, self.interval_s, skipped)


def serve(cfg: Any, backend: str | None = None, prolog: PrologSteps | None = None,
          epilog: EpilogSteps | None = None, taskenv: TaskEnv | None = None) -> int:
    """Run the node daemon until SIGTERM/SIGINT (``gpuperf daemon``); the hooks' steps as ``Daemon`` takes them."""
    from gpuperf.samplers import SamplerUnavailable, open_sampler

    lg = log.get("daemon")
    try:
        sampler = open_sampler(backend or cfg.daemon.backend, cfg)
    except SamplerUnavailable as e:
        lg.error("no sampler: %s", e)
        return 2
    d = Daemon(cfg, sampler, prolog=prolog, epilog=epilog, taskenv=taskenv)
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
