"""The node daemon: one thread samples and serves; helper threads run health checks, deliveries and /metrics.

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

Where each concern lives: ``channels`` (sockets), ``ops`` (protocol ops and who may ask), ``jobs`` (job
lifecycle, checkpoints, resume, pending markers), ``sampling`` (sweep, attribution, energy), ``hostscan``,
``chores`` (ticks and periodic chores), ``workers`` (delivery, health and idle-probe threads), ``startup``.
"""

from __future__ import annotations

import os
import pwd
import signal
import threading
import time
from typing import IO, Any, Callable

from gpuperf.files import jobdirs, log
from gpuperf.daemon import hostscan, xids
from gpuperf.daemon.attribution import Attributor
from gpuperf.daemon.channels import Channels, pub_endpoint  # noqa: F401 - part of this module's interface
from gpuperf.daemon.chores import Chore, Chores, Ticks
from gpuperf.daemon.jobs import JobsMixin, RunningJob  # noqa: F401 - part of this module's interface
from gpuperf.daemon.ops import OpsMixin, PrologSteps
from gpuperf.daemon.pub import sweep_message
from gpuperf.daemon.sampling import SamplingMixin
from gpuperf.daemon.startup import DaemonError, open_store, serve_metrics, store_path, take_lock  # noqa: F401
from gpuperf.daemon.workers import Deliveries, Health, HealthFn, ProbeLoop, health_from_checks
from gpuperf.model import gpuerrors as errors
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


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


class Daemon(OpsMixin, JobsMixin, SamplingMixin):
    """The node daemon. ``run()`` blocks until ``stop()``; tests drive it from a thread.

    ``prolog``: the prolog's steps for its fast path (``gpuperf.prolog.indaemon.run``), handed in by
    ``gpuperf daemon``: the hooks sit above the daemon and the daemon imports none of them. Without
    it the daemon declines every fast-path request and each prolog runs its steps itself.
    """

    def __init__(self, cfg: Any, sampler: Sampler, node: str | None = None,
                 health_fn: HealthFn | None | bool = True,
                 attributor: Attributor | None = None, clock: Callable[[], float] = time.time,
                 metrics: bool = True, send_summaries: bool = True, xid_source: Any = True,
                 prolog: PrologSteps | None = None):
        self.cfg = cfg
        self.prolog = prolog
        self.sampler = sampler
        self.gpu_names = gpu_names(sampler)
        self.gpu_uuids = gpu_names(sampler, "uuid")
        self.node = node or os.uname().nodename.split(".")[0]
        self.clock = clock
        self.log = log.get("daemon")
        self.interval_s = float(getattr(sampler, "interval_s", None) or cfg.daemon.interval_s)
        self.health_fn = (health_from_checks(cfg, lambda node: self.note_node_snapshot(node.gpus)) if health_fn is True
                          else (health_fn or None))
        self.error_counters: dict[str, dict[str, int]] = {}   # per GPU, from the latest health read
        self.attr = attributor or Attributor()
        # NVML's XID events for an NVML sampler; tests hand in their own source (or None)
        self.xid_source = xids.open_source(sampler, self.log) if xid_source is True else xid_source
        self.want_metrics = metrics and cfg.daemon.metrics_port > 0
        self.slurm_uid = _uid_of(cfg.general.slurm_user)
        self.admin_uids = {u for u in (_uid_of(n) for n in cfg.general.admin_users) if u is not None} | {0}
        self.running: dict[int, RunningJob] = {}
        # a process's SLURM_JOB_ID is believed only from the registered job's user (attribution.py)
        self.attr.job_uid = lambda j: self.running[j].reg.get("uid") if j in self.running else None
        self.stats: dict[str, float] = {"sweeps": 0, "skipped": 0, "errors": 0, "mismatches": 0, "sweep_s": 0.0,
                                        "requests": 0, "bad_requests": 0}
        self.latest: list[GpuSample] = []
        self.latest_t: float | None = None
        self.started = self.clock()
        self._stop = threading.Event()
        self._view: dict[str, Any] = {"samples": [], "jobs": [], "stats": {}}
        self._seen_mismatch: set[tuple[int, int, int | None]] = set()
        self._nonjob_pids: set[int] = set()
        self._energy_t = 0.0
        self.deliveries = Deliveries(cfg, self.log, send_summaries)
        self._health = (Health(self.health_fn, cfg.daemon.health_interval_s, lambda: self.clock(), self._stop)
                        if self.health_fn is not None else None)
        self.prober = ProbeLoop(cfg, lambda: not self.running, self.log, self._stop)
        self.chores = Chores([
            Chore("host", cfg.daemon.host_interval_s, lambda t: self.scan_host(), only_if=lambda: bool(self.running)),
            Chore("checkpoint", cfg.daemon.checkpoint_s, self.checkpoint),
            Chore("rollup", ROLLUP_EVERY_S, lambda t: self._in_store(self.store.rollup, t)),
            Chore("prune", PRUNE_EVERY_S, lambda t: self._in_store(self.store.prune, t)),
            Chore("pending", PENDING_EVERY_S, self.take_pending),
            Chore("jobdirs", JOBDIRS_EVERY_S, lambda t: self.prune_job_dirs()),
        ])
        self._pruner: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._lockfile: IO[str] | None = None
        self.channels: Channels | None = None
        self.store: Any = None
        self.ready = threading.Event()

    @property
    def health(self) -> dict[str, Any] | None:
        """The latest cached fast-check result ({t, results} or {t, error}); None before the first."""
        return self._health.result if self._health is not None else None

    # lifecycle ------------------------------------------------------------------------
    def open(self) -> None:
        """Lock, open the store, resume running jobs, take pending work, bind the sockets, start helpers."""
        self._lockfile = take_lock(self.cfg.daemon.socket_dir)
        self.store = open_store(self.cfg, self.log)
        self._in_store(self.store.add_event, self.clock(), None, "start",
                       {"pid": os.getpid(), "backend": getattr(self.sampler, "name", "?")})
        self.resume()
        restored = self.deliveries.restore()   # before the pending markers: those add to the outbox
        if restored:
            self.log.info("%d finalised job(s) in the outbox from before: delivering", restored)
        self.take_pending()
        self.end_jobs_from_before_boot()
        self.channels = Channels(self.cfg, self.log, self.stats)
        self._threads.append(self.deliveries.thread())
        if self._health is not None:
            self._threads.append(self._health.thread())
        if ProbeLoop.wanted(self.cfg):
            self._threads.append(self.prober.thread())
        for t in self._threads:
            t.start()
        if self.want_metrics:
            serve_metrics(self.cfg, lambda: self._view, self.log)
        self._publish_view()

    def stop(self) -> None:
        """Ask run() to return (thread- and signal-safe)."""
        self._stop.set()

    def close(self) -> None:
        """Checkpoint every running job and release sockets and store."""
        if self.store is not None:
            self.checkpoint()
            self.store.close()
            self.store = None
        if self.channels is not None:
            self.channels.close()
            self.channels = None
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
        self.ready.set()
        ticks = Ticks(self.interval_s)
        while not self._stop.is_set():
            self.channels.serve(ticks.wait_ms(POLL_CAP_MS), self.handle)  # type: ignore[union-attr]
            if not ticks.due():
                continue
            began = time.monotonic()
            self.sweep()
            self.stats["sweep_s"] = took = time.monotonic() - began
            skipped = ticks.advance()
            if skipped:
                self.stats["skipped"] += skipped
                self.log.warning("sweep took %.3f s (interval %.3f s): %d tick(s) skipped", took, self.interval_s, skipped)

    # small pieces the mixins share -------------------------------------------------------
    def prune_job_dirs(self) -> None:
        """Remove the run_dir records of jobs long over (``gpuperf.jobdirs``), never a registered job's; in a
        thread of its own, so a record directory a job filled with files cannot stall sampling."""
        if self._pruner is not None and self._pruner.is_alive():
            return
        keep = set(self.running)
        cfg = self.cfg.general

        def run() -> None:
            jobdirs.prune_logged(self.log, cfg.run_dir, cfg.job_dir_keep_days, keep=keep)

        self._pruner = threading.Thread(target=run, name="jobdirs", daemon=True)
        self._pruner.start()

    def _in_store(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` in one store transaction."""
        self.store.begin()
        fn(*args)
        self.store.commit()

    def scan_host(self) -> None:
        """Fold the running jobs' process usage and the node's NIC/IB counters."""
        hostscan.scan(self.running, self.attr, self._nonjob_pids, hostscan.sys_root(self.cfg), self.log)

    def note_node_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Keep the GPUs' error counters of a node read (``gpus.v1``); jobs are charged their growth."""
        self.error_counters = errors.counters(snapshot)   # one assignment: the loop thread reads it whole

    def refresh_health(self) -> None:
        """Run the fast checks now and cache the result."""
        if self._health is not None:
            self._health.refresh()

    def _publish_sweep(self, t: float, samples: list[GpuSample]) -> None:
        pub = self.channels.pub if self.channels is not None else None
        if pub is not None and pub.wanted():
            pub.publish(sweep_message(t, samples, self._gpu_jobs()))
        self._publish_view()

    def _publish_view(self) -> None:
        self._view = {"samples": list(self.latest),
                      "jobs": [(jid, rj.reg.get("user"), sorted(rj.agg.gpus)) for jid, rj in self.running.items()],
                      "stats": dict(self.stats)}


def serve(cfg: Any, backend: str | None = None, prolog: PrologSteps | None = None) -> int:
    """Run the node daemon until SIGTERM/SIGINT (``gpuperf daemon``); ``prolog`` as ``Daemon`` takes it."""
    from gpuperf.samplers import SamplerUnavailable, open_sampler

    lg = log.get("daemon")
    try:
        sampler = open_sampler(backend or cfg.daemon.backend, cfg)
    except SamplerUnavailable as e:
        lg.error("no sampler: %s", e)
        return 2
    d = Daemon(cfg, sampler, prolog=prolog)
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
