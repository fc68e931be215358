"""The controller service's durable queue: ended jobs waiting to be merged, then to be written to sacct.

One row per job in the cluster store's ``ended`` table; it survives a kill -9 of the service, which
picks up where it was. States:

- ``merge``: slurmctld reported the job ended; waiting until every node reported or ``merge_wait_s``;
- ``write``: merged; its AdminComment (``comment``) waits for a writer, no earlier than ``next_try``;
- ``done``: sacct shows the AdminComment; ``unavailable``: the retry horizon passed first;
- ``skipped``: nothing to write (no GPUs, AdminComments off); ``orphan``: node summaries for a job
  slurmctld never reported ending (merged and stored, nothing written).

A job is merged as soon as its last node reported, whatever waits before it (the service hands
``due_merges`` the jobs a summary or notice just came for), or ``merge_wait_s`` after its end.

**A summary that comes after the job was merged** (``late``): the job is merged and written once more,
when its last missing node arrives or ``LATE_GRACE_S`` after its end, whichever comes first; that is the
job's last AdminComment. A summary later still is kept in the store (``gpuperf report`` as admin reads
it there) and never rewrites the AdminComment: a job's AdminComment is written at most twice, and
twice only when a node's summary missed the first merge.

Decisions (backoff, what is due) are pure functions; the class is the SQL at the edge.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS ended (
  job_id INTEGER PRIMARY KEY, nodes TEXT NOT NULL, user TEXT, uid INTEGER, ended REAL NOT NULL,
  state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_try REAL, last_error TEXT,
  comment BLOB, written REAL, notes TEXT, job_ref TEXT, late REAL);
CREATE INDEX IF NOT EXISTS ended_state_next ON ended (state, next_try);
CREATE INDEX IF NOT EXISTS ended_state_ended ON ended (state, ended);
CREATE INDEX IF NOT EXISTS node_summaries_received ON node_summaries (received);
"""
# columns added since the first schema: a store written by an older gpuperf gets them on open
ADDED_COLUMNS = (("job_ref", "TEXT"), ("late", "REAL"))

OPEN_STATES = ("merge", "write")
LATE_GRACE_S = 600.0   # a late summary's job is merged again at most this long after its end (nodes retry
                       # a refused delivery 5 s, doubling to 300 s: workers.RETRY_MAX_S)
LATE_DONE = -1.0       # ``late`` once the job's one late merge was made: later summaries are stored only
MERGED_STATES = ("write", "done", "unavailable")
FINAL_STATES = ("done", "unavailable", "skipped", "orphan")


def backoff_s(attempts: int, cap_s: float, job_id: int = 0) -> float:
    """Pause before the next try of one job: 1, 2, 4 ... s up to ``cap_s``, spread by job id (no herd)."""
    base = min(2.0 ** max(attempts - 1, 0), cap_s)
    return min(cap_s, base * (1.0 + (job_id % 7) / 20.0))


def after_failure(attempts: int, ended: float, now: float, horizon_s: float, cap_s: float, job_id: int) -> tuple[str, float | None]:
    """(state, next_try) after a failed write: retry later, or 'unavailable' once the horizon passed."""
    if now - ended >= horizon_s:
        return "unavailable", None
    return "write", now + backoff_s(attempts, cap_s, job_id)


MIN_BATCH = 5  # lines below which another sacctmgr process is not worth starting (one costs ~40-60 ms)


def batch_sizes(due: int, free_writers: int, most: int, least: int = MIN_BATCH) -> list[int]:
    """How many of ``due`` jobs each idle writer takes now (pure): as few sacctmgr processes as batches of
    ``least`` need, up to one per idle writer, at most ``most`` lines each; a job line costs the database
    time of its own that parallel processes overlap (benchmarks/sacctmgr_batch_cost.py), so a backlog is
    spread over every writer rather than queued behind one."""
    if due <= 0 or free_writers <= 0:
        return []
    k = max(1, min(free_writers, -(-due // least)))
    take = min(due, k * most)
    return [n for n in (take // k + (1 if i < take % k else 0) for i in range(k)) if n]


@dataclass
class Ended:
    """One row of the queue."""

    job_id: int
    nodes: list[str]
    user: str | None
    uid: int | None
    ended: float
    state: str
    attempts: int = 0
    notes: list[str] | None = None
    job_ref: str | None = None  # 8_3 / 10+1 from slurmctld's notice; None for a plain job or when unknown


class JobQueue:
    """The ``ended`` table on a store's connection (the caller owns the connection and its thread)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.executescript(SCHEMA)
        have = {r[1] for r in db.execute("PRAGMA table_info(ended)")}
        for name, kind in ADDED_COLUMNS:
            if name not in have:
                db.execute(f"ALTER TABLE ended ADD COLUMN {name} {kind}")

    def add(self, job_id: int, nodes: list[str], user: str | None, uid: int | None, ended: float,
            state: str = "merge", notes: list[str] | None = None, job_ref: str | None = None) -> bool:
        """Queue an ended job; False when already queued for this end (a notice seen twice)."""
        row = self.db.execute("SELECT ended, state FROM ended WHERE job_id=?", (job_id,)).fetchone()
        # a requeued job ends again under the same id: the later end replaces the earlier; slurmctld's
        # notice of a job flagged orphan (it came late) makes it an ordinary job again
        if row is not None and ended <= row[0] + 1.0 and not (row[1] == "orphan" and state == "merge"):
            return False
        self.db.execute("INSERT OR REPLACE INTO ended (job_id, nodes, user, uid, ended, state, notes, job_ref) "
                        "VALUES (?,?,?,?,?,?,?,?)", (job_id, json.dumps(nodes), user, uid, ended, state, json.dumps(notes or []), job_ref))
        return True

    def get(self, job_id: int) -> Ended | None:
        """One job's row, or None."""
        r = self.db.execute("SELECT job_id, nodes, user, uid, ended, state, attempts, notes, job_ref FROM ended WHERE job_id=?",
                            (job_id,)).fetchone()
        return _ended(r) if r else None

    def state(self, job_id: int) -> tuple[str, str | None] | None:
        """(state, last error) of a job, or None when it was never queued."""
        r = self.db.execute("SELECT state, last_error FROM ended WHERE job_id=?", (job_id,)).fetchone()
        return (r[0], r[1]) if r else None

    def due_merges(self, now: float, merge_wait_s: float, candidates: "set[int] | frozenset[int]" = frozenset(),
                   limit: int = 500) -> list[Ended]:
        """Jobs to merge now: those of ``candidates`` (jobs a node summary or notice just came for) whose every
        node reported, wherever they stand in the queue, then up to ``limit`` whose wait is over, oldest first."""
        cols = ("SELECT e.job_id, e.nodes, e.user, e.uid, e.ended, e.state, e.attempts, e.notes, e.job_ref, "
                "(SELECT count(*) FROM node_summaries n WHERE n.job_id=e.job_id) FROM ended e WHERE e.state='merge' ")
        out: dict[int, Ended] = {}
        ids = sorted(candidates)
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            for r in self.db.execute(cols + f"AND e.job_id IN ({','.join('?' * len(part))})", part):
                e = _ended(r[:9])
                if r[9] >= max(len(e.nodes), 1):
                    out[e.job_id] = e
        if now - merge_wait_s > 0:
            for r in self.db.execute(cols + "AND e.ended <= ? ORDER BY e.ended LIMIT ?", (now - merge_wait_s, limit)):
                out.setdefault(r[0], _ended(r[:9]))
        return list(out.values())

    def waiting(self) -> set[int]:
        """Every job waiting for its merge (the service checks them all once, when it starts)."""
        return {j for (j,) in self.db.execute("SELECT job_id FROM ended WHERE state='merge'")}

    def note_late(self, job_id: int, now: float) -> bool:
        """A node summary came for this job: when the job was merged without it, its one late merge is due when
        its last node has reported, else ``LATE_GRACE_S`` after its end. False when nothing is due (not merged,
        merged with that node, its late merge made or its window over: the summary is stored only)."""
        r = self.db.execute("SELECT nodes, ended, late, state FROM ended WHERE job_id=?", (job_id,)).fetchone()
        if r is None or r[3] not in MERGED_STATES or (r[2] is not None and r[2] <= LATE_DONE) or now > r[1] + LATE_GRACE_S:
            return False
        reported = {n for (n,) in self.db.execute("SELECT node FROM node_summaries WHERE job_id=?", (job_id,))}
        merged = self.db.execute("SELECT nodes FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if not reported - set((merged[0] or "").split(",") if merged else ()):
            return False
        due = now if set(json.loads(r[0])) <= reported else r[1] + LATE_GRACE_S
        if r[2] is None or due < r[2]:
            self.db.execute("UPDATE ended SET late=? WHERE job_id=?", (due, job_id))
        return True

    def due_late(self, now: float, exclude: "set[int] | frozenset[int]" = frozenset(), limit: int = 500) -> list[Ended]:
        """Merged jobs whose one late merge is due (not those whose write is in flight): they go back to 'merge'."""
        rows = self.db.execute("SELECT job_id, nodes, user, uid, ended, state, attempts, notes, job_ref FROM ended "
                               "WHERE late > 0 AND late <= ? ORDER BY late LIMIT ?", (now, limit + len(exclude))).fetchall()
        out = [_ended(r) for r in rows if r[0] not in exclude][:limit]
        for e in out:
            self.db.execute("UPDATE ended SET late=? WHERE job_id=?", (LATE_DONE, e.job_id))
        return out

    def set_merged(self, job_id: int, comment: str | None, state: str, now: float) -> None:
        """The job is merged: its comment waits for a writer (state 'write'), or nothing is written."""
        blob = zlib.compress(comment.encode()) if comment is not None else None
        self.db.execute("UPDATE ended SET state=?, comment=?, next_try=? WHERE job_id=?", (state, blob, now, job_id))

    def due_writes(self, now: float, limit: int, exclude: set[int] = frozenset()) -> list[tuple[int, str]]:
        """(job id, AdminComment) of jobs whose next try is due, oldest first, not already in flight."""
        rows = self.db.execute("SELECT job_id FROM ended WHERE state='write' AND next_try<=? "
                               "ORDER BY next_try LIMIT ?", (now, limit + len(exclude))).fetchall()
        ids = [j for (j,) in rows if j not in exclude][:limit]
        # the comments (a few KiB each) only of the jobs handed out, not of those already in flight
        text: dict[int, bytes] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            text.update(self.db.execute(f"SELECT job_id, comment FROM ended WHERE job_id IN ({','.join('?' * len(part))})",
                                        part).fetchall())
        return [(j, zlib.decompress(text[j]).decode()) for j in ids]

    def set_written(self, job_id: int, now: float) -> None:
        """sacct shows the job's AdminComment (its text leaves the queue: the job's summary is kept)."""
        # only a job still waiting for this write: one merged again meanwhile gets its new comment written
        self.db.execute("UPDATE ended SET state='done', written=?, attempts=attempts+1, last_error=NULL, comment=NULL "
                        "WHERE job_id=? AND state='write'",
                        (now, job_id))

    def set_failed(self, job_id: int, error: str, now: float, horizon_s: float, cap_s: float) -> str:
        """A failed try: back off, or give up past the horizon; the new state."""
        r = self.db.execute("SELECT attempts, ended FROM ended WHERE job_id=? AND state='write'", (job_id,)).fetchone()
        if r is None:
            return "gone"
        attempts = r[0] + 1
        state, next_try = after_failure(attempts, r[1], now, horizon_s, cap_s, job_id)
        self.db.execute("UPDATE ended SET state=?, attempts=?, next_try=?, last_error=? WHERE job_id=?",
                        (state, attempts, next_try, error[:500], job_id))
        return state

    def orphans(self, since: float, until: float) -> list[tuple[int, list[str]]]:
        """(job id, nodes) of node summaries received in [since, until) whose job slurmctld never reported
        ending and that got no summary after ``until`` (the caller moves the window on: no full scans)."""
        rows = self.db.execute(
            "SELECT n.job_id, group_concat(n.node) FROM node_summaries n LEFT JOIN ended e ON e.job_id=n.job_id "
            "WHERE n.received >= ? AND n.received < ? AND e.job_id IS NULL GROUP BY n.job_id",
            (since, until)).fetchall()
        out = []
        for j, nodes in rows:
            newer = self.db.execute("SELECT 1 FROM node_summaries WHERE job_id=? AND received >= ?", (j, until)).fetchone()
            if newer is None:
                out.append((j, sorted(nodes.split(","))))
        return out

    def over(self, job_ids: list[int]) -> set[int]:
        """Those of ``job_ids`` the queue saw end and is done with (a final state)."""
        out: set[int] = set()
        marks = ",".join("?" * len(FINAL_STATES))
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            q = f"SELECT job_id FROM ended WHERE state IN ({marks}) AND job_id IN ({','.join('?' * len(chunk))})"
            out.update(j for (j,) in self.db.execute(q, (*FINAL_STATES, *chunk)))
        return out

    def counts(self) -> dict[str, int]:
        """Jobs per state (for the service's log line and the benchmarks)."""
        return dict(self.db.execute("SELECT state, count(*) FROM ended GROUP BY state").fetchall())


def _ended(r: tuple) -> Ended:
    return Ended(job_id=r[0], nodes=json.loads(r[1]), user=r[2], uid=r[3], ended=r[4], state=r[5], attempts=r[6],
                 notes=json.loads(r[7]) if r[7] else [], job_ref=r[8])

