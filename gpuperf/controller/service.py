"""The controller service (``gpuperf daemon --controller``): node summaries in, AdminComments out.

Three kinds of thread, none waiting on another:

- the collector (``collector.Collector``) takes node summaries off its socket into the store and
  replies; it never touches the accounting database, so nodes deliver as fast while it is down;
- the scheduler (this module's loop, every ``TICK_S``) reads job-end notices into the durable queue
  (``queue.JobQueue``), folds arrived summaries into the fleet view (``gpuperf.fleet.ingest``), merges jobs
  whose nodes all reported or whose wait is over (a job of hundreds of nodes on a thread of its own:
  ``mergework.LargeMerges``), flags node summaries of jobs slurmctld never reported ending, and hands due
  AdminComment batches to
- ``controller.writers`` writer threads (``accounting.SacctWriter``: one sacctmgr + one sacct per batch);
  a job whose write fails is retried with its own backoff until ``admin_comment_wait_s`` after its
  end, then marked ``unavailable``.

Everything the scheduler decides is in the store before it acts, so a kill -9 loses nothing: on
restart the queue, the notices still in the spool and the nodes' own retries carry on. Over 400 lines: the
scheduler's loop and the wiring of its three kinds of thread, start and stop, read as one.
"""

from __future__ import annotations

import gc
import queue as queue_mod
import signal
import sqlite3
import sys
import threading
import time
from typing import Callable

from gpuperf.files import config as config_mod, jobdirs, log
from gpuperf.controller import accounting, clusterstore, merge, mergework, notices
from gpuperf.controller.collector import Collector
from gpuperf.controller.queue import LATE_GRACE_S, JobQueue, batch_sizes
from gpuperf.fleet import ingest as fleet_ingest
from gpuperf.fleet.fingerprint import FleetStore, default_path as fleet_path


class ServiceError(OSError):
    """The service cannot run as configured (its collector did not start): ``gpuperf daemon --controller`` exits 2."""


TICK_S = 0.2
MERGE_CHUNK, CHUNK_S = 50, 0.5   # merges (or seconds of them) between commits: the collector's writes wait that long
PARSED_KEEP = 2000      # node summaries kept parsed from the collector until their job merges
GPU_CHECK_EVERY_S, STATUS_EVERY_S, ORPHAN_SCAN_S = 10.0, 60.0, 1.0
JOBDIRS_EVERY_S = 60.0   # run_dir records of jobs long over: looked for this often, at most JOBDIRS_MAX removed
JOBDIRS_MAX, WRITERS_JOIN_S = 5000, 20.0   # ...; how long a stopping service waits for its writers' Slurm calls
GC_THRESHOLD = 50_000  # net allocations between cyclic collections (default 700)


class Service:
    """The scheduler's state; ``serve`` runs it with the collector and the writers."""

    def __init__(self, cfg, writer: accounting.Writer | None = None, clock: Callable[[], float] = time.time):
        self.cfg, self.clock = cfg, clock
        self.path = clusterstore.default_path(cfg)
        self.store = clusterstore.ClusterStore(self.path)
        self.queue = JobQueue(self.store.db)
        self.store.db.commit()
        self.writer = writer or accounting.SacctWriter(cfg.general.slurm_bin_dir,
                                                       recheck_s=cfg.controller.admin_comment_recheck_s)
        self.spool = notices.default_dir(cfg)
        problem = notices.prepare(self.spool, cfg.general.slurm_user)
        if problem:
            # every job would end without a notice: say so loudly at start, not once per job
            log.get("controller").error("job-end notices: %s", problem)
        self.arrived: queue_mod.Queue[dict] = queue_mod.Queue()
        self.work: queue_mod.Queue[list[tuple[int, str]] | None] = queue_mod.Queue()
        self.results: queue_mod.Queue[dict[int, str | None]] = queue_mod.Queue()
        self.in_flight: set[int] = set()
        self.batches_out = 0
        self.started = clock()
        self._gpu_check_after: dict[int, float] = {}
        self._fleet: FleetStore | None = None
        self.cpu_s: dict[str, float] = {}
        self._jobdirs_at = 0.0
        self._orphan_mark = 0.0  # node summaries received before this were looked at for orphans
        # jobs to look at for completeness at the next tick: at start every job waiting (nodes that reported
        # before a restart), then those a summary or notice came for
        self._check: set[int] = self.queue.waiting()
        self._large = mergework.LargeMerges(cfg, self.path)
        self._upkeep = clusterstore.Upkeep(self.store, cfg.controller.series_keep_days, LATE_GRACE_S + 60.0)
        # (job, node) -> the summary as the collector parsed it: a merge need not read and decode it again
        self._parsed: dict[tuple[int, str], dict] = {}
        self.log = log.get("controller")

    # one tick of the scheduler ---------------------------------------------------------------
    def tick(self) -> None:
        """Notices -> queue, arrived summaries, merges, orphans, write results, new write batches; one commit."""
        now = self.clock()
        for name, step in (("notices", self._take_notices), ("fleet", self._take_arrived),
                           ("merge", lambda: self._merge_due(now)), ("large", self._take_large), ("orphans", lambda: self._orphans(now)),
                           ("results", lambda: self._take_results(now)), ("commit", self.store.db.commit),
                           ("dispatch", lambda: self._dispatch(now)), ("jobdirs", lambda: self._prune_job_dirs(now)),
                           ("upkeep", lambda: self._upkeep.run(now))):
            t0 = time.thread_time()
            step()
            # where the scheduler's CPU goes, for the status line and the benchmarks
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + time.thread_time() - t0

    def _take_notices(self) -> None:
        got = notices.read(self.spool)
        for _, n in got:
            if self.queue.add(n.job_id, n.nodes, n.user, n.uid, n.ended, job_ref=n.job_ref):
                self._check.add(n.job_id)   # its nodes may all have reported already
        if got:
            self.store.db.commit()  # queued for good before the files go
            notices.remove([p for p, _ in got])

    def _take_arrived(self) -> None:
        """The summaries stored since the last tick: into the fleet view (one transaction), kept parsed for
        their merge, their jobs looked at for completeness; a job merged without that node: one late merge."""
        seen: set[int] = set()
        got: list[dict] = []
        while True:
            try:
                s = self.arrived.get_nowait()
            except queue_mod.Empty:
                break
            seen.add(s["job_id"])
            got.append(s)
            if not s.get("_light"):     # a light one (the collector's queue was long): its merge reads the store
                self._parsed[(s["job_id"], s["nodes"][0])] = {k: v for k, v in s.items() if k != "series"}
        while len(self._parsed) > PARSED_KEEP:
            # bounded: the oldest go (a job whose nodes never all report); the store still has them
            del self._parsed[next(iter(self._parsed))]
        if got:
            # never raises; may drain under fleet.policy = "drain"
            fleet_ingest.on_node_summaries(self.cfg, got, store=self._fleet_store())
        self._check |= seen
        for j in seen:   # merged without this node: one late merge (``queue``: when its last node came, or later)
            self.queue.note_late(j, self.clock())

    def _fleet_store(self) -> FleetStore | None:
        """The fleet store, opened once (None, and the fold opens its own, when it cannot be opened)."""
        if self._fleet is None:
            try:
                self._fleet = FleetStore(fleet_path(self.cfg))
            except (OSError, sqlite3.Error) as e:
                self.log.warning("fleet store not opened: %s", e)
        return self._fleet

    def _merge_due(self, now: float) -> None:
        wait = self.cfg.controller.merge_wait_s
        # just (re)started: nodes that could not deliver meanwhile are retrying; give them the wait again
        effective_wait = wait if now >= self.started + wait else float("inf")
        # jobs a summary or notice came for since the last tick: merged now if complete, wherever they wait
        check, self._check = self._check, set()
        due = self.queue.due_merges(now, effective_wait, check)
        due += [e for e in self.queue.due_late(now, exclude=self.in_flight) if e.job_id not in {d.job_id for d in due}]
        empty, chunk_t0 = [], time.monotonic()
        for i, e in enumerate(due):
            if len(e.nodes) > mergework.LARGE_NODES:
                # seconds of work: on its own thread, so every other job's merge and write goes on meanwhile
                if e.job_id not in self._large.running:
                    self._large.submit(e, self.store.node_copies(e.job_id), self.store.has_job(e.job_id))
                continue
            parts = self._parts(e.job_id, e.nodes)
            if not parts:
                empty.append(e)
                continue
            self._merge(e, parts, now)
            if i % MERGE_CHUNK == MERGE_CHUNK - 1 or time.monotonic() - chunk_t0 > CHUNK_S:
                # a backlog (a burst of job ends): hand what is merged to the writers at once and let
                # the collector's commits in, rather than after the whole batch
                self.store.db.commit()
                self._dispatch(now)
                chunk_t0 = time.monotonic()
        if empty:
            self._merge_empty(empty, now)

    def _parts(self, job_id: int, nodes: list[str]) -> dict[str, dict]:
        """node -> summary of a job's nodes that reported: as the collector parsed them, else from the store.
        Of a job of several nodes, without what the join does not read (``mergework.JOIN_UNUSED``)."""
        drop = mergework.JOIN_UNUSED if len(nodes) > 1 else ()
        mine = {n: self._parsed[(job_id, n)] for n in nodes if (job_id, n) in self._parsed}
        if len(mine) == len(nodes):
            return {n: {k: v for k, v in s.items() if k not in drop} for n, s in mine.items()} if drop else mine
        # a node not seen parsed (sent before a restart, evicted, or not in the notice's list): read the store
        return self.store.node_summaries(job_id, trim=mergework.trim_for(nodes) if drop else None)

    def _merge_empty(self, jobs: list, now: float) -> None:
        """No node reported: a job without GPUs is skipped, one with GPUs merged as partial (one sacct call)."""
        ask = [e for e in jobs if self._gpu_check_after.get(e.job_id, 0.0) <= now]
        if not ask:
            return
        gpus = self.writer.allocated_gpus([e.job_id for e in ask])
        for e in ask:
            has = gpus.get(e.job_id)
            if has is None:
                if now - e.ended >= self.cfg.controller.admin_comment_wait_s:
                    self.queue.set_merged(e.job_id, None, "unavailable", now)
                else:
                    self._gpu_check_after[e.job_id] = now + GPU_CHECK_EVERY_S
                continue
            self._gpu_check_after.pop(e.job_id, None)
            if not has:
                self.queue.set_merged(e.job_id, None, "skipped", now)
            else:
                self._merge(e, {}, now)

    def _merge(self, e, parts: dict[str, dict], now: float, orphan: bool = False) -> None:
        self._apply(e, mergework.compute(self.cfg, e, parts, self.store.node_copies(e.job_id),
                                         self.store.has_job(e.job_id), orphan), now, orphan)

    def _apply(self, e, m: mergework.Merged, now: float, orphan: bool = False) -> None:
        """A merge's result into the store and the queue (committed with the tick's or chunk's other changes)."""
        for n in e.nodes:
            self._parsed.pop((e.job_id, n), None)
        if m.summary is None:
            self.queue.set_merged(e.job_id, None, "skipped", now)
            return
        self.store.put_job(m.summary, commit=False, blob=m.raw)
        if orphan:
            self.queue.set_merged(e.job_id, None, "orphan", now)
        elif m.text is not None:
            self.queue.set_merged(e.job_id, m.text, "write", now)
        else:
            if m.error:
                # not even the reduced form fits (it never has): the summary is stored, nothing written, not retried
                self.log.error("job %s: no AdminComment: %s", e.job_id, m.error)
            self.queue.set_merged(e.job_id, None, "skipped", now)
        merge.record(self.cfg.general.run_dir, e.job_id, mergework.record(e, m, now), now)

    def _take_large(self) -> None:
        """Large jobs merged on their own thread (``mergework.LargeMerges``): into the store and the queue."""
        now, got = self.clock(), self._large.take()
        for e, m in got:
            if m is not None and m.error and m.summary is None:
                self.log.error("job %s: not merged (%s); merged again only if a late summary comes", e.job_id, m.error)
                self.queue.set_merged(e.job_id, None, "unavailable", now)
            elif m is not None:
                self._apply(e, m, now)
        if any(m is None for _, m in got):
            self._merge_empty([e for e, m in got if m is None], now)

    def _orphans(self, now: float) -> None:
        """Jobs whose summaries came in ``orphan_after_s`` ago without slurmctld's notice (a moving window)."""
        until = now - self.cfg.controller.orphan_after_s
        if until - self._orphan_mark < ORPHAN_SCAN_S and self._orphan_mark > 0:
            return
        since, self._orphan_mark = self._orphan_mark, until
        for job_id, nodes in self.queue.orphans(since, until):
            parts = self.store.node_summaries(job_id)
            first = next(iter(parts.values()), {})
            self.queue.add(job_id, nodes, first.get("user"), first.get("uid"), now, state="merge")
            e = self.queue.get(job_id)
            if e is not None:
                self._merge(e, parts, now, orphan=True)
                self.log.warning("job %s: node summaries from %s but slurmctld never reported it ending",
                                 job_id, ",".join(nodes))

    def _prune_job_dirs(self, now: float) -> None:
        """The run_dir records (EpilogSlurmctld's, the merge's) of jobs this queue is done with, once
        untouched for ``general.job_dir_keep_days`` (``gpuperf.jobdirs``); never a job it has not seen end."""
        if now - self._jobdirs_at < JOBDIRS_EVERY_S:
            return
        self._jobdirs_at = now
        g = self.cfg.general
        jobdirs.prune_logged(self.log, g.run_dir, g.job_dir_keep_days, errors=(OSError, sqlite3.Error),
                             only=self.queue.over, limit=JOBDIRS_MAX)

    def _take_results(self, now: float) -> None:
        c = self.cfg.controller
        while True:
            try:
                res = self.results.get_nowait()
            except queue_mod.Empty:
                break
            self.batches_out -= 1
            for job_id, err in res.items():
                self.in_flight.discard(job_id)
                if err is None:
                    self.queue.set_written(job_id, now)
                elif self.queue.set_failed(job_id, err, now, c.admin_comment_wait_s, c.retry_max_s) == "unavailable":
                    self.log.warning("job %s: AdminComment not written within %.0f s of its end (%s): "
                                     "accounting unavailable", job_id, c.admin_comment_wait_s, err)

    def _dispatch(self, now: float) -> None:
        """Due AdminComments to idle writers, spread over as many as the backlog needs (``queue.batch_sizes``)."""
        c = self.cfg.controller
        free = c.writers - self.batches_out
        if free <= 0:
            return
        items = self.queue.due_writes(now, c.write_batch * free, exclude=self.in_flight)
        for n in batch_sizes(len(items), free, c.write_batch):
            batch, items = items[:n], items[n:]
            self.in_flight.update(j for j, _ in batch)
            self.batches_out += 1
            self.work.put(batch)

    # threads ------------------------------------------------------------------------------
    def _writer_loop(self) -> None:
        while True:
            items = self.work.get()
            if items is None:
                return
            try:
                res = self.writer.write(items)
            except Exception as e:  # noqa: BLE001 - a writer bug must not lose the batch: retried with backoff
                res = {j: f"writer: {type(e).__name__}: {e}" for j, _ in items}
            self.results.put(res)

    def serve(self, stop: threading.Event, on_ready: Callable[[str], None] | None = None) -> None:
        """Run the collector, the writers and the scheduler until ``stop`` is set."""
        collector = Collector(self.cfg, self.path, self.arrived)
        ready = threading.Event()
        endpoint: list[str] = []
        failed: list[BaseException] = []

        def _ready(ep: str) -> None:
            endpoint.append(ep)
            ready.set()

        def _collect() -> None:
            try:
                collector.run(stop, _ready)
            except BaseException as e:  # noqa: BLE001 - handed to serve(), which stops and says why
                failed.append(e)
                ready.set()
                stop.set()  # a service deaf to every node must end (and be restarted), not tick on

        writers = [threading.Thread(target=self._writer_loop, name=f"writer-{i}", daemon=True)
                   for i in range(self.cfg.controller.writers)]
        threads = [threading.Thread(target=_collect, name="collector", daemon=True), *writers]
        for t in threads:
            t.start()
        ready.wait(10)
        if not endpoint:
            # without its collector the service would run on, deaf to every node (a port in use, a bad bind)
            stop.set()
            why = f"{type(failed[0]).__name__}: {failed[0]}" if failed else "no answer in 10 s"
            raise ServiceError(f"controller service: the collector did not start ({why}); "
                               f"controller.bind {self.cfg.controller.bind}:{self.cfg.controller.port}")
        self.log.info("controller service: spool %s, %d writers, batches of %d", self.spool,
                      self.cfg.controller.writers, self.cfg.controller.write_batch)
        if on_ready and endpoint:
            on_ready(endpoint[0])
        last_status = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    self.tick()
                except Exception as e:  # noqa: BLE001 - the next tick retries; nothing is lost from the store
                    self.log.error("scheduler tick failed: %s: %s", type(e).__name__, e)
                    self.store.db.rollback()
                if time.monotonic() - last_status >= STATUS_EVERY_S:
                    last_status = time.monotonic()
                    self.log.info("controller: %s, %d summaries received, scheduler CPU s %s, collector CPU s %.1f",
                                  self.queue.counts(), collector.received,
                                  {k: round(v, 1) for k, v in self.cpu_s.items()}, collector.cpu_s)
                stop.wait(TICK_S)
            if failed:
                raise ServiceError(f"controller service: the collector stopped ({type(failed[0]).__name__}: "
                                   f"{failed[0]}); nothing spooled is lost")
        finally:
            for _ in writers:
                self.work.put(None)
            until = time.monotonic() + WRITERS_JOIN_S   # a writer inside sacct/sacctmgr: no child outlives the service
            for w in writers:
                w.join(max(0.0, until - time.monotonic()))
            self._large.close()
            self.store.close()
            if self._fleet is not None:
                self._fleet.close()
            self.cpu_s["collector"] = collector.cpu_s


def serve(cfg, stop: threading.Event, on_ready: Callable[[str], None] | None = None,
          writer: accounting.Writer | None = None) -> Service:
    """Run the controller service until ``stop`` is set; the service (its ``cpu_s`` figures) when it ended."""
    svc = Service(cfg, writer)
    svc.serve(stop, on_ready)
    return svc


def tune_gc() -> None:
    """The service process's cyclic garbage collector, paced for what it allocates (its ``main`` calls it)."""
    # trees of parsed JSON, freed by reference counting: the default pace (a pass every 700 allocations)
    # found nothing to free and cost ~1 % of a core at 50 job ends/s; cycles are still collected, less often
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 100)


def main() -> int:
    """``python -m gpuperf.controller.service``: the service with the config's settings, until SIGTERM/SIGINT."""
    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as e:
        print(f"gpuperf controller: {e}", file=sys.stderr)
        return 2
    log.setup("controller", cfg.general.log_file, cfg.general.log_level, stderr=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tune_gc()
    serve(cfg, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
