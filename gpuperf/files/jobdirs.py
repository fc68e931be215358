"""Forgetting ``<run_dir>/jobs/<id>`` directories of jobs long over.

Every job leaves a directory of hook records in ``run_dir`` (tmpfs: RAM) on each of its nodes, and
the controller one per job of the cluster (EpilogSlurmctld's and the merge's records). Nothing else
removes them, so a node running thousands of short jobs a day, and the controller of a busy cluster,
would fill ``/run`` within weeks. The node daemon and the controller service each prune theirs:
a directory goes once it has been untouched for ``general.job_dir_keep_days`` and its job is not one the
caller knows as still here (``keep``); the controller only removes jobs its queue saw end (``only``).
The reports read these records while the job runs and soon after; the stores keep the summaries.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Any, Callable, Iterable


def stale(entries: Iterable[tuple[int, float]], now: float, keep_s: float, keep: set[int]) -> list[int]:
    """Pure: the job ids (of ``(job_id, mtime)`` entries) whose directories may go, oldest first."""
    return [j for t, j in sorted((t, j) for j, t in entries if now - t >= keep_s and j not in keep)]


def _entries(jobs_dir: str) -> list[tuple[int, float]]:
    """(job id, mtime) of each real directory named by a job id (links and files are not ours: skipped)."""
    out = []
    try:
        with os.scandir(jobs_dir) as it:
            for e in it:
                if e.name.isdigit() and e.is_dir(follow_symlinks=False):
                    try:
                        out.append((int(e.name), e.stat(follow_symlinks=False).st_mtime))
                    except OSError:
                        continue
    except FileNotFoundError:
        return []
    return out


def prune(run_dir: str, now: float, keep_days: float, keep: set[int] | None = None,
          only: Callable[[list[int]], set[int]] | None = None, limit: int = 10_000) -> list[int]:
    """Remove the stale job directories under ``<run_dir>/jobs`` (at most ``limit`` a call); the ids removed.

    ``only``: given the candidate ids, those that may go (the controller: jobs its queue saw end)."""
    jobs_dir = os.path.join(run_dir, "jobs")
    entries = _entries(jobs_dir)
    keep_s = keep_days * 86400.0
    candidates = stale(entries, now, keep_s, keep or set())
    if only is not None and candidates:
        allowed = only(candidates)
        candidates = [j for j in candidates if j in allowed]
    removed = []
    for j in candidates[:limit]:
        path = os.path.join(jobs_dir, str(j))
        # rmtree works through file descriptors here (shutil.rmtree.avoids_symlink_attacks): a link a job
        # user planted inside a record directory is removed, never followed
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(j)
    return removed


def prune_logged(log: logging.Logger, run_dir: str, keep_days: float, errors: tuple[type[BaseException], ...] = (OSError,),
                 **kw: Any) -> list[int]:
    """``prune`` now (the wall clock's time: directory times are), with what it did or why not in ``log``."""
    try:
        gone = prune(run_dir, time.time(), keep_days, **kw)
    except errors as e:
        log.warning("job directories in %s not pruned: %s", run_dir, e)
        return []
    if gone:
        log.info("removed the run_dir records of %d jobs over for %.0f days (%s%s)", len(gone), keep_days,
                 ",".join(map(str, gone[:10])), " ..." if len(gone) > 10 else "")
    return gone
