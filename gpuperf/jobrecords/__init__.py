"""Job records: one lookup below every front end (``gpuperf report``, ``jobs``, the HTML page, the end mail).

A job reference as Slurm users write it goes in (``12``, ``8_3``, ``10+1``, ``12.batch``:
``gpuperf.model.jobref``), Slurm resolves it to the raw id gpuperf stores (``resolve``), and a
summary and its series come out, from sources tried in a stated order (``summaries``, ``series``).
"""

from __future__ import annotations

from typing import Any

from gpuperf.access.slurm import Slurm
from gpuperf.jobrecords import resolve as resolve_mod, series as series_mod, summaries
from gpuperf.jobrecords.resolve import Job, JobLookupError
from gpuperf.jobrecords.series import Series
from gpuperf.jobrecords.summaries import Found, is_admin
from gpuperf.model import jobref
from gpuperf.model.jobref import JobRef, JobRefError

__all__ = ["JobRecords", "Job", "JobLookupError", "JobRef", "JobRefError", "Found", "Series", "is_admin"]


class JobRecords:
    """The lookup, with its dependencies (the config, a Slurm handle) given once."""

    def __init__(self, cfg: Any, slurm: Slurm | None = None):
        self.cfg = cfg
        self.slurm = slurm or Slurm(cfg.general.slurm_bin_dir)

    def job(self, ref: str | JobRef) -> Job:
        """The one allocation ``ref`` names; JobRefError (malformed) or JobLookupError (none, several)."""
        return resolve_mod.resolve_one(self.slurm, ref if isinstance(ref, JobRef) else jobref.parse(ref))

    def jobs(self, ref: str | JobRef) -> list[Job]:
        """Every allocation ``ref`` names (the tasks of an array, the components of a het job)."""
        return resolve_mod.resolve(self.slurm, ref if isinstance(ref, JobRef) else jobref.parse(ref))

    def names(self, raw_ids: list[int], since: str | None = None) -> dict[int, str]:
        """raw id -> the name users know (``8_3``), for the ids Slurm knows (``since``: one sacct call
        over that period first, for long listings)."""
        return resolve_mod.names(self.slurm, raw_ids, since)

    def summary(self, job: Job, source: str = "auto") -> Found | None:
        """The job's summary from the first source that has it, named as users name the job."""
        found = summaries.find(self.cfg, job.raw, source)
        if found is not None and found.summary:
            found.summary = dict(found.summary, job_ref=job.name)
        return found

    def series(self, job: Job, summary: dict, max_points: int, which: str = "auto") -> Series:
        """The job's per-GPU series from the first source that has them."""
        return series_mod.job_series(self.cfg, job.raw, summary, max_points, which)

    def owner_uid(self, job: Job, summary: dict) -> int | None:
        """The job's uid: from its summary, else from sacct."""
        return summaries.owner_uid(self.cfg, job.raw, summary)
