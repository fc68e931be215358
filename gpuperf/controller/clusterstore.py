"""The controller's store (SQLite, WAL): node summaries as they arrive and merged job summaries.

Jobs carry the columns ``gpuperf jobs`` filters and sorts on (end time, user, waste, energy,
GPU-hours), each indexed; the zlib-compressed summaries live in a table of their own, so a
listing reads narrow rows only (100,000 jobs: benchmarks/jobs_query.py). The file (and its -wal/-shm) is 0600 and a directory created for it
0700 (``gpuperf.statefiles``): job summaries are private to their owners, and users read theirs
through ``gpuperf report`` (sacct) instead. A store of a newer layout (``PRAGMA user_version`` above
``SCHEMA_VERSION``: a downgrade) is refused with ``statefiles.StoreVersionError`` and left untouched.
"""

from __future__ import annotations

import os
import sqlite3
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from gpuperf.files import jsoncodec, statefiles
from gpuperf.model import admincomment
from gpuperf.model import series as series_mod

_SCHEMA = """
CREATE TABLE IF NOT EXISTS node_summaries (
  job_id INTEGER NOT NULL, node TEXT NOT NULL, received REAL NOT NULL, sender_uid INTEGER,
  summary BLOB NOT NULL, copies INTEGER NOT NULL DEFAULT 1, series BLOB, PRIMARY KEY (job_id, node));
CREATE TABLE IF NOT EXISTS jobs (
  job_id INTEGER PRIMARY KEY, user TEXT, uid INTEGER, start REAL, end REAL, nodes TEXT,
  gpus INTEGER, gpu_hours REAL, wasted_gpu_hours REAL, energy_j REAL, class TEXT,
  imbalanced INTEGER, partial INTEGER, stored REAL NOT NULL);
CREATE TABLE IF NOT EXISTS job_summaries (job_id INTEGER PRIMARY KEY, summary BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS node_series_kept (job_id INTEGER NOT NULL, node TEXT NOT NULL, received REAL NOT NULL,
  series BLOB NOT NULL, PRIMARY KEY (job_id, node));
CREATE INDEX IF NOT EXISTS node_series_kept_received ON node_series_kept (received);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs (end);
CREATE INDEX IF NOT EXISTS jobs_user_end ON jobs (user, end);
CREATE INDEX IF NOT EXISTS jobs_waste ON jobs (wasted_gpu_hours);
CREATE INDEX IF NOT EXISTS jobs_energy ON jobs (energy_j);
CREATE INDEX IF NOT EXISTS jobs_gpu_hours ON jobs (gpu_hours);
"""

SCHEMA_VERSION = 2
SORTS = {"waste": "wasted_gpu_hours", "energy": "energy_j", "gpu-hours": "gpu_hours", "end": "end"}


def default_path(cfg) -> str:
    """``controller.store``, or ``<state_dir>/cluster.sqlite``."""
    return cfg.controller.store or os.path.join(cfg.general.state_dir, "cluster.sqlite")


DONE_STATES = ("done", "unavailable", "skipped", "orphan")   # the queue's final states (``queue.FINAL_STATES``)
KEEP_POINTS = 48         # a compacted node series: points a column, twice what phases read (diagnosis.phases: 24)
KEEP_LEVELS = 100        # and steps of its peak (1 %: phases are told apart by tens of percent)
UPKEEP_EVERY_S = 60.0


def thinned(value: dict, points: int) -> dict:
    """A series.v1 value with each column averaged into at most ``points`` equal-count buckets (pure)."""
    def cols(c: dict) -> dict:
        out = {}
        for k, vals in c.items():
            if not isinstance(vals, list) or len(vals) <= points:
                out[k] = vals
                continue
            step = len(vals) / points
            out[k] = []
            for b in range(points):
                got = [v for v in vals[int(b * step):int((b + 1) * step)] if isinstance(v, (int, float))]
                out[k].append(int(round(sum(got) / len(got))) if got else None)
        return out

    out = dict(value)
    if isinstance(value.get("t"), list):
        out["t"] = cols({"t": value["t"]})["t"]
    out["gpus"] = {g: cols(c) for g, c in (value.get("gpus") or {}).items() if isinstance(c, dict)}
    return out


def _pack(summary: dict) -> bytes:
    return zlib.compress(jsoncodec.dumps(summary), 6)


def _unpack(blob: bytes) -> dict:
    # a job's blob is its AdminComment payload's bytes (``admincomment.compressed``: preset dictionary)
    return jsoncodec.loads(admincomment.inflate(blob, 1 << 30))


class Upkeep:
    """What keeps the store small, run by the service's scheduler (``run`` each tick, working once a minute):
    node summaries ``after_s`` after they came (the job's late window over) lose the summary the merged job
    holds, and their series go to ``KEEP_POINTS`` points in ``KEEP_LEVELS`` steps; series older than
    ``keep_days`` (``controller.series_keep_days``, 0: kept) are deleted."""

    def __init__(self, store: "ClusterStore", keep_days: float, after_s: float):
        self.store, self.keep_days, self.after_s = store, keep_days, after_s
        self.mark = 0.0      # node summaries received before this were compacted (or not done with then)
        self.at = 0.0

    def run(self, now: float) -> None:
        """Compact and expire what is due, at most once per ``UPKEEP_EVERY_S``; the caller commits."""
        if now - self.at < UPKEEP_EVERY_S:
            return
        self.at = now
        _, self.mark = self.store.compact(self.mark, now - self.after_s, KEEP_POINTS, KEEP_LEVELS)
        if self.keep_days > 0:
            self.store.drop_series(now - self.keep_days * 86400.0)


class ClusterStore:
    """Node summaries and merged job summaries of the whole cluster."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = str(path)
        if readonly:
            self.db = statefiles.connect_readonly(self.path)
            self._refuse_newer()
            return
        statefiles.private_db(self.path)  # 0600 before SQLite writes anything; its directory 0700
        self.db = sqlite3.connect(self.path, timeout=10)
        self._refuse_newer()  # before anything is written: a newer gpuperf's store is left as it was
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self.db.executescript(_SCHEMA)
        self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _refuse_newer(self) -> None:
        try:
            statefiles.refuse_newer(self.db, SCHEMA_VERSION, self.path)
        except statefiles.StoreVersionError:
            self.db.close()
            raise

    def _migrate(self) -> None:
        """Older layouts: summaries inside ``jobs`` move to ``job_summaries``; resends get counted (``copies``)."""
        ns_cols = [r[1] for r in self.db.execute("PRAGMA table_info(node_summaries)")]
        if ns_cols and "copies" not in ns_cols:
            self.db.execute("ALTER TABLE node_summaries ADD COLUMN copies INTEGER NOT NULL DEFAULT 1")
        if ns_cols and "series" not in ns_cols:
            self.db.execute("ALTER TABLE node_summaries ADD COLUMN series BLOB")
        cols = [r[1] for r in self.db.execute("PRAGMA table_info(jobs)")]
        if "summary" not in cols:
            return
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS job_summaries (job_id INTEGER PRIMARY KEY, summary BLOB NOT NULL)")
            self.db.execute("INSERT OR REPLACE INTO job_summaries SELECT job_id, summary FROM jobs")
            self.db.execute("ALTER TABLE jobs DROP COLUMN summary")

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def __enter__(self) -> "ClusterStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # node summaries --------------------------------------------------------------------------
    def put_node_summary(self, summary: dict, sender_uid: int | None = None, blob: bytes | None = None,
                         series: bytes | None = None, commit: bool = True) -> None:
        """Keep one node's summary of a job; a resend replaces the earlier one and is counted.

        ``blob``: the summary as received (zlib JSON), kept as is rather than compressed again; its time
        series are kept apart (``series``: ``series.pack`` bytes as received, or packed here) so merges
        never read them."""
        job_id = int(summary["job_id"])
        node = str((summary.get("nodes") or [""])[0])
        if "series" in summary:
            summary = dict(summary)
            value = summary.pop("series")
            series, blob = (series_mod.pack(value) if isinstance(value, dict) else None), None
        self.db.execute(
            "INSERT INTO node_summaries (job_id, node, received, sender_uid, summary, copies, series) "
            "VALUES (?,?,?,?,?,1,?) ON CONFLICT (job_id, node) DO UPDATE SET received=excluded.received, "
            "sender_uid=excluded.sender_uid, summary=excluded.summary, copies=copies+1, series=excluded.series",
            (job_id, node, time.time(), sender_uid, blob if blob is not None else _pack(summary), series))
        if commit:
            self.db.commit()

    def compact(self, since: float, until: float, points: int, levels: int, limit: int = 2000) -> tuple[int, float]:
        """Node summaries received in [since, until) of jobs the queue is done with (``DONE_STATES``, no late merge
        pending) leave ``node_summaries`` (the merged job's summary holds what they said); their series move to
        ``node_series_kept`` at ``points`` a column in ``levels`` steps (the resolution phases need, not the
        charts of the job's first minutes): rows written afresh pack their pages, where shrinking them in place
        left pages part empty (12.3 KB a job against 6.2). (rows compacted, where the next call starts: ``until``,
        or the last row's time when ``limit`` stopped it.)"""
        rows = self.db.execute(
            "SELECT n.job_id, n.node, n.series, n.received FROM node_summaries n JOIN ended e ON e.job_id=n.job_id "
            f"WHERE n.received >= ? AND n.received < ? AND e.state IN ({','.join('?' * len(DONE_STATES))}) "
            "AND (e.late IS NULL OR e.late < 0) ORDER BY n.received LIMIT ?", (since, until, *DONE_STATES, limit)).fetchall()
        for job_id, node, blob, received in rows:
            value = series_mod.unpack(blob) if blob else None
            small = series_mod.pack(thinned(value, points), levels) if value is not None else None
            if small is not None:
                self.db.execute("INSERT OR REPLACE INTO node_series_kept VALUES (?,?,?,?)",
                                (job_id, node, received, small if len(small) < len(blob) else blob))
            self.db.execute("DELETE FROM node_summaries WHERE job_id=? AND node=?", (job_id, node))
        return len(rows), (rows[-1][3] if len(rows) >= limit else until)

    def drop_series(self, before: float, limit: int = 5000) -> int:
        """Kept series of node summaries received before ``before`` deleted (``controller.series_keep_days``)."""
        return self.db.execute("DELETE FROM node_series_kept WHERE rowid IN (SELECT rowid FROM node_series_kept "
                               "WHERE received < ? LIMIT ?)", (before, limit)).rowcount

    def node_summaries(self, job_id: int, trim: Callable[[str, dict], Any] | None = None) -> dict[str, dict]:
        """node -> summary of every node that reported for a job; ``trim(node, summary)`` takes out what the
        caller does not need as each is read (a merge of thousands of nodes holds only what it joins)."""
        rows = self.db.execute("SELECT node, summary FROM node_summaries WHERE job_id=?", (int(job_id),))
        out = {}
        for node, blob in rows:
            s = _unpack(blob)
            if trim is not None:
                trim(node, s)
            out[node] = s
        return out

    def node_series(self, job_id: int) -> dict[str, dict]:
        """node -> the gpuperf.series.v1 value it sent with its summary (nodes that sent one)."""
        rows = self.db.execute("SELECT node, series FROM node_summaries WHERE job_id=? AND series IS NOT NULL "
                               "UNION ALL SELECT node, series FROM node_series_kept WHERE job_id=?",
                               (int(job_id), int(job_id)))
        out = {}
        for node, blob in rows:
            value = series_mod.unpack(blob)
            if value is not None:
                out[node] = value
        return out

    def node_copies(self, job_id: int) -> dict[str, int]:
        """node -> how many times it delivered its summary of a job (more than 1: resent)."""
        return dict(self.db.execute("SELECT node, copies FROM node_summaries WHERE job_id=?", (int(job_id),)))

    # jobs --------------------------------------------------------------------------------------
    def put_job(self, s: dict, commit: bool = True, blob: bytes | None = None) -> None:
        """Store a job's merged summary (replacing an earlier, e.g. partial, one); ``commit=False``: the
        caller commits it with its other changes; ``blob``: the summary already as zlib JSON."""
        if not commit:
            self._insert_job(s, s.get("job") or {}, blob)
            return
        with self.db:
            self._insert_job(s, s.get("job") or {}, blob)

    def put_jobs(self, summaries: list[dict]) -> None:
        """Store many summaries in one transaction (imports, benchmarks)."""
        with self.db:
            for s in summaries:
                self._insert_job(s, s.get("job") or {})

    def _insert_job(self, s: dict, job: dict, blob: bytes | None = None) -> None:
        diag = s.get("diagnosis") or {}
        self.db.execute(
            "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (int(s["job_id"]), s.get("user"), s.get("uid"), s.get("start"), s.get("end"), ",".join(s.get("nodes") or []),
             job.get("gpu_count"), job.get("gpu_hours"), job.get("wasted_gpu_hours"), job.get("energy_j"),
             diag.get("class"), int(bool(diag.get("imbalanced"))), int(bool((s.get("quality") or {}).get("partial"))),
             time.time()))
        self.db.execute("INSERT OR REPLACE INTO job_summaries VALUES (?,?)",
                        (int(s["job_id"]), blob if blob is not None else _pack(s)))

    def has_job(self, job_id: int) -> bool:
        """Whether a merged summary of the job is stored (a merge now is a late one)."""
        return self.db.execute("SELECT 1 FROM jobs WHERE job_id=?", (int(job_id),)).fetchone() is not None

    def job(self, job_id: int) -> dict | None:
        """A job's merged summary, or None."""
        row = self.db.execute("SELECT summary FROM job_summaries WHERE job_id=?", (int(job_id),)).fetchone()
        return _unpack(row[0]) if row else None

    def jobs(self, since: float | None = None, user: str | None = None, sort: str = "waste",
             limit: int | None = None, job_ids: list[int] | None = None,
             cpu_jobs: bool = False) -> list[dict[str, Any]]:
        """Rows of ``gpuperf jobs`` (no summaries): ended since ``since``, of ``user``, among ``job_ids``
        (raw ids) when given, largest first; jobs that held no GPU only with ``cpu_jobs``."""
        col = SORTS[sort]
        where: list[str] = []
        args: list[Any] = []
        if job_ids is not None:
            where.append(f"job_id IN ({','.join('?' * len(job_ids))})" if job_ids else "0")
            args += [int(j) for j in job_ids]
        if not cpu_jobs:
            where.append("COALESCE(gpus, 0) > 0")
        if since is not None:
            where.append("end >= ?")
            args.append(since)
        if user is not None:
            where.append("user = ?")
            args.append(user)
        # the accounting state comes from the service's queue, when this store has one
        has_queue = self.db.execute("SELECT 1 FROM sqlite_master WHERE name='ended'").fetchone() is not None
        acct = "(SELECT state FROM ended e WHERE e.job_id=jobs.job_id)" if has_queue else "NULL"
        sql = ("SELECT job_id, user, uid, start, end, nodes, gpus, gpu_hours, wasted_gpu_hours, energy_j, class, "
               f"imbalanced, partial, {acct} FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
               + f" ORDER BY {col} DESC, job_id DESC")
        if limit:
            sql += f" LIMIT {int(limit)}"
        names = ("job_id", "user", "uid", "start", "end", "nodes", "gpus", "gpu_hours", "wasted_gpu_hours",
                 "energy_j", "class", "imbalanced", "partial", "accounting")
        out = []
        for row in self.db.execute(sql, args):
            d = dict(zip(names, row))
            d["imbalanced"], d["partial"] = bool(d["imbalanced"]), bool(d["partial"])
            out.append(d)
        return out
