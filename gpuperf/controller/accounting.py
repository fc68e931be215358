"""AdminComment writers of the controller service: a batch of jobs in, per job written or why not.

``SacctWriter`` writes a batch with one ``sacctmgr`` process (one command per stdin line) and checks
it with one ``sacct`` call: two processes per batch instead of two per job and try (the database
lowercases the value, FACTS.md, so the check compares case-insensitively). A job the database
does not know yet is simply not written in this batch; the service retries it with backoff.
Benchmarks replace the writer with a stub of set latency (``StubWriter``); the real path is tested
on the real cluster.
"""

from __future__ import annotations

import threading
import time
import zlib
from typing import Protocol

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.model import admincomment, jobref

NOT_IN_DB = "sacct does not show it yet (job not in the database)"


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
        if shown.get(job_id, "").strip().lower() == text.lower():
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
        name = jobref.task_or_component(admincomment.decode_headline(text.partition(" z=")[0]).get("job"))
        if name:
            out[job_id] = name
    return out


class SacctWriter:
    """The real writer: sacctmgr (batch on stdin), then sacct to see what took."""

    def __init__(self, slurm_bin_dir: str, timeout_s: float = 30.0):
        self.slurm = Slurm(slurm_bin_dir, timeout_s=timeout_s)

    def write(self, items: list[tuple[int, str]]) -> dict[int, str | None]:
        """Write a batch; never raises."""
        error = None
        try:
            self.slurm.set_admin_comments_db(items, names(items))
        except SlurmError as e:
            error = f"sacctmgr: {e}"[:300]
        try:
            shown = self.slurm.admin_comments([j for j, _ in items])
        except SlurmError as e:
            return {j: error or f"sacct: {e}"[:300] for j, _ in items}
        return judge(items, shown, error)

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
        # another process (a test that kills this one) reads the writes here: "time job_id crc32" lines
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
                    self.log.write(f"{time.time():.3f} {j} {zlib.crc32(text.encode())}\n")
        return {j: None for j, _ in items}

    def allocated_gpus(self, job_ids: list[int]) -> dict[int, bool]:
        """Every job had GPUs (unless failing: the database is down, nothing is known)."""
        return {} if self.failing else {j: True for j in job_ids}
