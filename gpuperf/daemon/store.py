"""The daemon's durable store: SQLite in WAL mode on local disk.

Tables:
- ``jobs``: registrations and their state (running / finalized), the partial flag.
- ``aggregates``: each job's full aggregates state (zlib JSON), checkpointed every few seconds, so a
  ``kill -9`` loses at most one checkpoint interval of folding (and the resume re-folds it from
  ``samples``).
- ``samples``: one row per GPU and sweep, full resolution, kept ``full_res_s`` (an hour); the values
  are packed float32 (``SERIES_FIELDS``, NaN = unknown): about 100 bytes a row.
- ``samples_1m``: 1-minute means rolled up from ``samples`` before they age out: about 6 KB per
  GPU-hour, kept ``retention_days``.
- ``events``: daemon starts, gaps, attribution mismatches, pending finalisations.

Every sweep is one transaction (WAL, synchronous=NORMAL: committed rows survive a process kill).

The file and its -wal/-shm are 0600, or 0640 to ``general.state_group`` (``gpuperf.statefiles``): they hold
every job's user and metrics.
The layout is versioned (``PRAGMA user_version`` = ``SCHEMA_VERSION``) and migrated forward on open, so
a package upgrade keeps running jobs' aggregates; a store newer than this code is refused, not changed.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

from gpuperf.files import statefiles
from gpuperf.model.aggregates import FOLDED_FIELDS
from gpuperf.samplers.base import GpuSample

SERIES_FIELDS: tuple[str, ...] = FOLDED_FIELDS + ("throttle_reasons",)
_PACK = struct.Struct("<" + "f" * len(SERIES_FIELDS))
_NAN = float("nan")
ROLLUP_S = 60

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS jobs(job_id INTEGER PRIMARY KEY, uid INTEGER, user TEXT, gpus TEXT, cpus INTEGER,
    node TEXT, start REAL, end REAL, state TEXT NOT NULL, partial INTEGER NOT NULL DEFAULT 0, updated REAL);
CREATE TABLE IF NOT EXISTS aggregates(job_id INTEGER PRIMARY KEY, t REAL, state BLOB);
CREATE TABLE IF NOT EXISTS samples(gpu INTEGER, t REAL, v BLOB, PRIMARY KEY(gpu, t)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS samples_1m(gpu INTEGER, t INTEGER, v BLOB, PRIMARY KEY(gpu, t)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(t REAL, job_id INTEGER, kind TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS summaries(job_id INTEGER PRIMARY KEY, summary BLOB);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
"""

# ``summaries`` (a finished job's node summary as delivered: its judgement, kept as long as the job) came without
# a new version: a table more is created on open (``CREATE ... IF NOT EXISTS``) and an older gpuperf ignores it.
# Layout version of this code. Version 0 is a store of gpuperf 0.1.0 (no version set): the same tables.
# A change of layout appends (new_version, SQL) here and raises SCHEMA_VERSION; the steps run in order
# in one transaction, so an interrupted upgrade leaves the old version whole.
SCHEMA_VERSION = 1
MIGRATIONS: tuple[tuple[int, str], ...] = ((1, ""),)


StoreVersionError = statefiles.StoreVersionError  # a store of a newer gpuperf: refused, left untouched


def migrate(db: sqlite3.Connection, target: int = SCHEMA_VERSION,
            steps: tuple[tuple[int, str], ...] = MIGRATIONS) -> int:
    """Bring an open store to ``target`` (tables created, then each newer step); returns the old version."""
    old = statefiles.refuse_newer(db, target, db.execute("PRAGMA database_list").fetchone()[2])
    if old == target:
        db.executescript(_SCHEMA)  # idempotent: a table added by hand-deleted files comes back
        return old
    db.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _SCHEMA.split(";"):
            if stmt.strip():
                db.execute(stmt)
        for version, sql in steps:
            if old < version <= target:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
        db.execute(f"PRAGMA user_version={int(target)}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return old


def pack(s: GpuSample) -> bytes:
    """A sample's series values as packed float32 (None -> NaN)."""
    vals = []
    for f in SERIES_FIELDS:
        v = getattr(s, f)
        vals.append(_NAN if v is None else float(v))
    return _PACK.pack(*vals)


def unpack(gpu: int, t: float, blob: bytes) -> GpuSample:
    """Inverse of pack (NaN -> None)."""
    vals = _PACK.unpack(blob)
    d: dict[str, Any] = {f: (None if math.isnan(v) else v) for f, v in zip(SERIES_FIELDS, vals)}
    if d["throttle_reasons"] is not None:
        d["throttle_reasons"] = int(d["throttle_reasons"])
    return GpuSample(gpu=gpu, t=t, **d)


def _mean_blob(blobs: list[bytes]) -> bytes:
    """1-minute roll-up: mean of each field over the rows that have it; throttle reasons OR-ed."""
    rows = [_PACK.unpack(b) for b in blobs]
    out = []
    for i, f in enumerate(SERIES_FIELDS):
        vals = [r[i] for r in rows if not math.isnan(r[i])]
        if not vals:
            out.append(_NAN)
        elif f == "throttle_reasons":
            acc = 0
            for v in vals:
                acc |= int(v)
            out.append(float(acc))
        else:
            out.append(sum(vals) / len(vals))
    return _PACK.pack(*out)


class Store:
    """One SQLite store: one connection, shared by the daemon's loop and root channels' threads under its state lock
    (``begin``/``commit`` are the connection's, not a thread's: used outside the lock they end the other's)."""

    def __init__(self, path: str | Path, full_res_s: float = 3600.0, retention_days: float = 90.0):
        self.path = Path(statefiles.private_db(path))
        self.full_res_s = full_res_s
        self.retention_s = retention_days * 86400.0
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=2000")
        self.migrated_from = migrate(self.db)
        self._in_tx = False

    # transactions ---------------------------------------------------------------------
    def begin(self) -> None:
        """Start a transaction (one per sweep)."""
        if not self._in_tx:
            self.db.execute("BEGIN")
            self._in_tx = True

    def commit(self) -> None:
        """Commit the open transaction, if any."""
        if self._in_tx:
            self.db.execute("COMMIT")
            self._in_tx = False

    def rollback(self) -> None:
        """Abandon the open transaction, if any."""
        if self._in_tx:
            self._in_tx = False
            self.db.execute("ROLLBACK")

    def rollback_quietly(self) -> None:
        """Abandon the open transaction, if any, whatever state the connection is in (after an error)."""
        try:
            self.rollback()
        except Exception:  # noqa: BLE001 - nothing open, or the connection is gone
            pass

    def in_transaction(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` in one transaction (committed; on an error the caller rolls back)."""
        self.begin()
        fn(*args)
        self.commit()

    def close(self) -> None:
        """Commit and close."""
        self.commit()
        self.db.close()

    # meta -----------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        """A value of the meta table."""
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the meta table."""
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # jobs -----------------------------------------------------------------------------
    def put_job(self, job: dict[str, Any], now: float) -> None:
        """Insert or replace a registration (state running)."""
        self.db.execute(
            "INSERT OR REPLACE INTO jobs(job_id, uid, user, gpus, cpus, node, start, end, state, partial, updated)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'running', ?, ?)",
            (job["job_id"], job.get("uid"), job.get("user"), json.dumps(job.get("gpus", [])), job.get("cpus"),
             job.get("node"), job["start"], int(bool(job.get("partial"))), now))

    def finish_job(self, job_id: int, end: float, partial: bool, now: float) -> None:
        """Mark a job finalized."""
        self.db.execute("UPDATE jobs SET state='finalized', end=?, partial=?, updated=? WHERE job_id=?",
                        (end, int(partial), now, job_id))

    def job(self, job_id: int) -> dict[str, Any] | None:
        """One registration, or None."""
        cur = self.db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,))
        row = cur.fetchone()
        return self._job_row(cur, row) if row else None

    def jobs(self, state: str | None = None, uid: int | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """Registrations, newest first, optionally of one state and one uid."""
        q, args = "SELECT * FROM jobs WHERE 1=1", []
        if state:
            q += " AND state=?"
            args.append(state)
        if uid is not None:
            q += " AND uid=?"
            args.append(uid)
        cur = self.db.execute(q + " ORDER BY start DESC LIMIT ?", (*args, limit))
        return [self._job_row(cur, r) for r in cur.fetchall()]

    @staticmethod
    def _job_row(cur: sqlite3.Cursor, row: tuple) -> dict[str, Any]:
        d = {c[0]: v for c, v in zip(cur.description, row)}
        d["gpus"] = json.loads(d["gpus"] or "[]")
        d["partial"] = bool(d["partial"])
        return d

    # aggregates -----------------------------------------------------------------------
    def put_aggregates(self, job_id: int, t: float, state: dict[str, Any]) -> None:
        """Checkpoint a job's aggregates state."""
        blob = zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 6)
        self.db.execute("INSERT OR REPLACE INTO aggregates(job_id, t, state) VALUES (?, ?, ?)", (job_id, t, blob))

    def aggregates(self, job_id: int) -> dict[str, Any] | None:
        """A job's last checkpointed aggregates state, or None."""
        row = self.db.execute("SELECT state FROM aggregates WHERE job_id=?", (job_id,)).fetchone()
        return json.loads(zlib.decompress(row[0])) if row else None

    # samples --------------------------------------------------------------------------
    def put_summary(self, job_id: int, summary: dict[str, Any]) -> None:
        """Keep a finished job's node summary (its judgement, as delivered; zlib JSON)."""
        self.db.execute("INSERT OR REPLACE INTO summaries(job_id, summary) VALUES (?, ?)",
                        (int(job_id), zlib.compress(json.dumps(summary, separators=(",", ":")).encode(), 6)))

    def summary(self, job_id: int) -> dict[str, Any] | None:
        """A finished job's node summary as kept, or None."""
        row = self.db.execute("SELECT summary FROM summaries WHERE job_id=?", (int(job_id),)).fetchone()
        return json.loads(zlib.decompress(row[0])) if row else None

    def add_samples(self, samples: Iterable[GpuSample]) -> None:
        """Store one sweep at full resolution."""
        self.db.executemany("INSERT OR REPLACE INTO samples(gpu, t, v) VALUES (?, ?, ?)",
                            [(s.gpu, s.t, pack(s)) for s in samples])

    def samples_since(self, gpus: Iterable[int], t0: float) -> list[GpuSample]:
        """Full-resolution samples of ``gpus`` after ``t0``, in time order (resume after a crash)."""
        gl = list(gpus)
        if not gl:
            return []
        marks = ",".join("?" * len(gl))
        rows = self.db.execute(f"SELECT gpu, t, v FROM samples WHERE t > ? AND gpu IN ({marks}) ORDER BY t, gpu",
                               (t0, *gl)).fetchall()
        return [unpack(g, t, v) for g, t, v in rows]

    def last_sample_t(self) -> float | None:
        """Time of the newest stored sample."""
        row = self.db.execute("SELECT max(t) FROM samples").fetchone()
        return row[0] if row and row[0] is not None else None

    def rollup(self, now: float) -> int:
        """Roll finished minutes into ``samples_1m`` and drop full-resolution rows older than full_res_s."""
        done = float(self.get_meta("rolled_until") or 0.0)
        upto = math.floor((now - 5.0) / ROLLUP_S) * ROLLUP_S      # whole minutes, a few seconds settled
        n = 0
        if upto > done:
            rows = self.db.execute("SELECT gpu, t, v FROM samples WHERE t >= ? AND t < ? ORDER BY gpu, t",
                                   (done, upto)).fetchall()
            groups: dict[tuple[int, int], list[bytes]] = {}
            for gpu, t, v in rows:
                groups.setdefault((gpu, int(t // ROLLUP_S) * ROLLUP_S), []).append(v)
            self.db.executemany("INSERT OR REPLACE INTO samples_1m(gpu, t, v) VALUES (?, ?, ?)",
                                [(g, m, _mean_blob(b)) for (g, m), b in groups.items()])
            n = len(groups)
            self.set_meta("rolled_until", repr(float(upto)))
        self.db.execute("DELETE FROM samples WHERE t < ? AND t < ?", (now - self.full_res_s, upto))
        return n

    def prune(self, now: float) -> None:
        """Forget what is older than the retention: coarse series, finished jobs, events."""
        cutoff = now - self.retention_s
        self.db.execute("DELETE FROM samples_1m WHERE t < ?", (cutoff,))
        self.db.execute("DELETE FROM aggregates WHERE job_id IN (SELECT job_id FROM jobs WHERE state='finalized' AND end < ?)",
                        (cutoff,))
        self.db.execute("DELETE FROM summaries WHERE job_id IN (SELECT job_id FROM jobs WHERE state='finalized' AND end < ?)",
                        (cutoff,))
        self.db.execute("DELETE FROM jobs WHERE state='finalized' AND end < ?", (cutoff,))
        self.db.execute("DELETE FROM events WHERE t < ?", (cutoff,))

    def series(self, gpus: Iterable[int], t0: float, t1: float, max_points: int = 500,
               fields: Iterable[str] | None = None) -> dict[str, dict[str, list]]:
        """Series of ``gpus`` over [t0, t1]: 1-minute means where full resolution has aged out, then full
        resolution; averaged into at most ``max_points`` buckets. gpu -> {"t": [...], field: [...]}."""
        want = list(fields) if fields is not None else list(SERIES_FIELDS)
        idx = [SERIES_FIELDS.index(f) for f in want]
        out: dict[str, dict[str, list]] = {}
        for gpu in gpus:
            fine = self.db.execute("SELECT t, v FROM samples WHERE gpu=? AND t>=? AND t<=? ORDER BY t",
                                   (gpu, t0, t1)).fetchall()
            first_fine = fine[0][0] if fine else t1 + 1
            coarse = self.db.execute("SELECT t + 30.0, v FROM samples_1m WHERE gpu=? AND t>=? AND t+60<=? ORDER BY t",
                                     (gpu, math.floor(t0 / ROLLUP_S) * ROLLUP_S, first_fine)).fetchall()
            rows = [(t, _PACK.unpack(v)) for t, v in coarse + fine]
            out[str(gpu)] = _downsample(rows, idx, want, t0, t1, max_points)
        return out

    # events ---------------------------------------------------------------------------
    def add_event(self, t: float, job_id: int | None, kind: str, detail: dict[str, Any] | None = None) -> None:
        """Record an event (start, gap, mismatch, pending)."""
        self.db.execute("INSERT INTO events(t, job_id, kind, detail) VALUES (?, ?, ?, ?)",
                        (t, job_id, kind, json.dumps(detail or {})))

    def events(self, job_id: int | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Recorded events, oldest first."""
        q, args = "SELECT t, job_id, kind, detail FROM events WHERE 1=1", []
        if job_id is not None:
            q += " AND job_id=?"
            args.append(job_id)
        if kind is not None:
            q += " AND kind=?"
            args.append(kind)
        return [{"t": t, "job_id": j, "kind": k, "detail": json.loads(d)}
                for t, j, k, d in self.db.execute(q + " ORDER BY t", args).fetchall()]


def _downsample(rows: list[tuple[float, tuple]], idx: list[int], names: list[str], t0: float, t1: float,
                max_points: int) -> dict[str, list]:
    """Average rows into at most max_points equal time buckets (NaN-aware; None where nothing)."""
    if len(rows) > max_points:
        width = max((t1 - t0) / max_points, 1e-9)
        buckets: dict[int, list[tuple[float, tuple]]] = {}
        for t, v in rows:
            buckets.setdefault(min(int((t - t0) / width), max_points - 1), []).append((t, v))
        merged = []
        for _, items in sorted(buckets.items()):
            tm = sum(t for t, _ in items) / len(items)
            vals = []
            for i in range(len(SERIES_FIELDS)):
                xs = [v[i] for _, v in items if not math.isnan(v[i])]
                vals.append(sum(xs) / len(xs) if xs else _NAN)
            merged.append((tm, tuple(vals)))
        rows = merged
    out: dict[str, list] = {"t": [round(t, 3) for t, _ in rows]}
    for name, i in zip(names, idx):
        out[name] = [None if math.isnan(v[i]) else v[i] for _, v in rows]
    return out
