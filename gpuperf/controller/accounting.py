"""AdminComment writers of the controller service: a batch of jobs in, per job written or why not.

``SacctWriter`` reads the batch's AdminComments with one ``sacct`` call, writes with one ``sacctmgr``
process (one command per stdin line) and checks with one ``sacct`` call: three processes per batch
instead of three per job and try (the database lowercases the value, FACTS.md, so the check compares
case-insensitively). What another tool wrote in the field (jobstats' ``JS1:``) is kept beside gpuperf's
part (``acshare``); since such a tool may write after gpuperf and erase it, a job that ended less than
``recheck_s`` ago is reported not yet final (``RECHECK``) and read again on the queue's next tries, its
part put back beside theirs if gone. A job the database does not know yet is simply not written in this
batch; the service retries it with backoff.
Benchmarks replace the writer with a stub of set latency (``StubWriter``); the real path is tested
on the real cluster.
"""

from __future__ import annotations

import threading
import time
import zlib
from datetime import datetime
from typing import Protocol

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.model import acshare, admincomment, jobref

NOT_IN_DB = "sacct does not show it yet (job not in the database)"
# slurmdbd records a job's end and its final AdminComment in one message from slurmctld, which lags the job's end by
# a second or two: text another tool set while the job ran (scontrol) is in the database only from then on
NOT_ENDED = "sacct does not show the job's end yet (its final AdminComment is not in the database)"
NO_ROOM = "another tool's AdminComment leaves no room for gpuperf's headline (theirs is kept)"
RECHECK = "written; read again until other tools' end-of-job writes are due (they may erase it)"


class Writer(Protocol):
    """Writes AdminComments; never raises."""

    def write(self, items: list[tuple[int, str]]) -> dict[int, str | None]:
        """job id -> None when sacct shows the comment, else the reason it does not."""

    def allocated_gpus(self, job_ids: list[int]) -> dict[int, bool]:
        """job id -> whether the job was allocated GPUs, for the jobs the database knows."""


def judge(items: list[tuple[int, str]], shown: dict[int, str], error: str | None) -> dict[int, str | None]:
    """Which of a batch sacct shows as written (pure): the rest get the batch error or 'not in the database'."""
    out: dict[int, str | None] = {}
    for job_id, text in items:
        if acshare.same(shown.get(job_id), text):
            out[job_id] = None
        else:
            out[job_id] = error or NOT_IN_DB
    return out


def names(items: list[tuple[int, str]]) -> dict[int, str]:
    """job id -> ``8_3`` / ``10+1`` of the array tasks and het components of a batch (pure), from their
    comments' headlines (``job=``): sacctmgr must select those by name, not by raw id (FACTS.md)."""
    out = {}
    for job_id, text in items:
        if not admincomment.is_admincomment(text):
            continue
        name = jobref.task_or_component(admincomment.decode_headline(acshare.ours(text).partition(" z=")[0]).get("job"))
        if name:
            out[job_id] = name
    return out


def ended_s(end: str) -> float | None:
    """sacct's End (``2026-11-27T18:00:00`` local, or epoch seconds) as epoch seconds; None while running."""
    try:
        return float(end) if end.isdigit() else datetime.fromisoformat(end).timestamp()
    except ValueError:
        return None


def settled(results: dict[int, str | None], ends: dict[int, str], now: float, recheck_s: float) -> dict[int, str | None]:
    """Written jobs that ended less than ``recheck_s`` ago become ``RECHECK`` (pure)."""
    out = dict(results)
    for j, err in results.items():
        end = ended_s(ends.get(j, ""))
        if err is None and recheck_s > 0 and (end is None or now - end < recheck_s):
            out[j] = RECHECK
    return out


class SacctWriter:
    """The real writer: sacct (what the field holds), sacctmgr (batch on stdin), then sacct to see what took."""

    FIELDS = ("JobID", "End", "AdminComment%65535")  # the comment last: another tool's text may hold '|'

    def __init__(self, slurm_bin_dir: str, timeout_s: float = 30.0, recheck_s: float = 0.0):
        self.slurm = Slurm(slurm_bin_dir, timeout_s=timeout_s)
        self.recheck_s = recheck_s

    def write(self, items: list[tuple[int, str]]) -> dict[int, str | None]:
        """Write a batch beside what other tools wrote; never raises."""
        try:
            rows = self.slurm.sacct_jobs([j for j, _ in items], self.FIELDS)
        except SlurmError as e:
            return {j: f"sacct: {e}"[:300] for j, _ in items}
        res: dict[int, str | None] = {j: NOT_IN_DB for j, _ in items}
        todo: list[tuple[int, str]] = []
        for j, mine in items:
            if j not in rows:
                continue
            if ended_s(rows[j]["End"]) is None:
                res[j] = NOT_ENDED      # what the field holds is not final: reading it now could erase theirs
                continue
            text = acshare.join(rows[j]["AdminComment"], mine)
            if text is None:
                res[j] = NO_ROOM
            elif acshare.same(rows[j]["AdminComment"], text):
                res[j] = None  # the field holds it already (a recheck that found it in place)
            else:
                todo.append((j, text))
        if todo:
            error = None
            try:
                self.slurm.set_admin_comments_db(todo, names(todo))
            except SlurmError as e:
                error = f"sacctmgr: {e}"[:300]
            try:
                after = self.slurm.sacct_jobs([j for j, _ in todo], self.FIELDS)
            except SlurmError as e:
                after, error = {}, error or f"sacct: {e}"[:300]
            rows.update(after)
            res.update(judge(todo, {j: r["AdminComment"] for j, r in after.items()}, error))
        return settled(res, {j: r["End"] for j, r in rows.items()}, time.time(), self.recheck_s)

    def allocated_gpus(self, job_ids: list[int]) -> dict[int, bool]:
        """One sacct call; {} when sacct cannot answer (the caller asks again later)."""
        try:
            rows = self.slurm.sacct_jobs(job_ids, ("JobID", "AllocTRES"))
        except SlurmError:
            return {}
        return {j: "gres/gpu" in r.get("AllocTRES", "") for j, r in rows.items()}


class StubWriter:
    """For load and fault tests only: each batch takes ``call_s`` + ``latency_s`` (per job line when
    ``per_job``, as a real sacctmgr batch does: benchmarks/sacctmgr_batch_cost.py); ``failing`` makes
    every write fail.

    Counts every successful write per job, so a test can prove no AdminComment was written twice."""

    def __init__(self, latency_s: float = 0.05, failing: bool = False, per_job: bool = False, log_path: str = "",
                 call_s: float = 0.0):
        self.latency_s, self.failing, self.per_job, self.call_s = latency_s, failing, per_job, call_s
        self.lock = threading.Lock()
        self.written: dict[int, list[tuple[float, str]]] = {}
        # another process (a test that kills this one) reads the writes here: "time job_id crc32 partial" lines
        # (partial: 1 when the headline says the job's summary lacks a node's)
        self.log = open(log_path, "a", buffering=1) if log_path else None

    def write(self, items: list[tuple[int, str]]) -> dict[int, str | None]:
        """Sleep the call's and the lines' latency, then succeed or fail every job of the batch."""
        time.sleep(self.call_s + self.latency_s * (len(items) if self.per_job else 1))
        if self.failing:
            return {j: "stub: database unreachable" for j, _ in items}
        with self.lock:
            for j, text in items:
                self.written.setdefault(j, []).append((time.time(), text))
                if self.log:
                    partial = int(" partial=1" in text.partition(" z=")[0])
                    self.log.write(f"{time.time():.3f} {j} {zlib.crc32(text.encode())} {partial}\n")
        return {j: None for j, _ in items}

    def allocated_gpus(self, job_ids: list[int]) -> dict[int, bool]:
        """Every job had GPUs (unless failing: the database is down, nothing is known)."""
        return {} if self.failing else {j: True for j in job_ids}
