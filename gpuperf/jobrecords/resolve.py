"""Job references (``8_3``, ``10+1``, ``12``) to Slurm's raw job ids, the ids gpuperf stores, and back.

Slurm decides: ``Slurm.job_ids`` asks sacct, then squeue. The choice among what they answer is pure
(``choose``) and tested on their lines. When Slurm cannot be asked (no sacct on this host) a plain
number is taken as the raw id, as before; anything else is an error, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.model import jobref
from gpuperf.model.jobref import JobRef


@dataclass(frozen=True)
class Job:
    """One allocation: Slurm's raw id (what gpuperf stores) and its name as users write it."""

    raw: int
    name: str
    state: str = ""


class JobLookupError(LookupError):
    """A reference that names no job, or several where one is needed; the message says which."""


def choose(ref: JobRef, lines: list[tuple[int, str, str]]) -> list[Job]:
    """The allocations of sacct/squeue ``lines`` (raw, shown, state) that ``ref`` names (pure).

    An array task or het component must match by name (``8_3`` is never raw id 83). A plain number
    names a job, every task of an array or every component of a het job (sacct's own reading), or
    the raw id of one task."""
    want = ref.without_step()
    out = []
    for raw, shown, state in lines:
        got = jobref.parse_shown(shown)
        if got is None:
            continue  # a pending range: no task to report yet
        if ref.is_plain:
            if got.job == ref.job or raw == ref.job:
                out.append(Job(raw, got.text(), state))
        elif got == want:
            out.append(Job(raw, got.text(), state))
    return sorted(out, key=_order)


def _order(job: Job) -> tuple[int, int, int]:
    ref = jobref.parse_shown(job.name)
    assert ref is not None  # choose keeps only names that parse
    return ref.job, ref.task if ref.task is not None else -1, ref.het if ref.het is not None else -1


def resolve(slurm: Slurm, ref: JobRef) -> list[Job]:
    """Every allocation ``ref`` names, through Slurm; [] when Slurm knows none.

    SlurmError reaches the caller only for a reference that is not a plain number."""
    try:
        lines = slurm.job_ids(ref.text(with_step=False))
    except SlurmError:
        if ref.is_plain:
            return [Job(ref.job, str(ref.job))]  # no Slurm here: the number is the raw id, as stored
        raise
    return choose(ref, lines)


def resolve_one(slurm: Slurm, ref: JobRef) -> Job:
    """The one allocation ``ref`` names; JobLookupError when none or several (an array, a het job)."""
    try:
        jobs = resolve(slurm, ref)
    except SlurmError as e:
        raise JobLookupError(f"cannot resolve job {ref}: Slurm did not answer ({e})") from None
    if not jobs:
        raise JobLookupError(f"Slurm knows no job {ref.text(with_step=False)}")
    if len(jobs) == 1:
        return jobs[0]
    names = ", ".join(j.name for j in jobs[:8]) + (", ..." if len(jobs) > 8 else "")
    kind = "heterogeneous job" if "+" in jobs[0].name else "array job"
    raise JobLookupError(f"job {ref.job} is an {kind} of {len(jobs)} allocations ({names}): name one, e.g. {jobs[0].name}")


MAX_ASKED = 2000  # ids named one by one (in sacct calls of ``chunk``) after the period's call: a bound on calls


def names(slurm: Slurm, raw_ids: list[int], since: str | None = None, chunk: int = 500) -> dict[int, str]:
    """raw id -> name as users write it (``8_3``) for the ids sacct knows; {} where it cannot answer.

    With ``since`` (sacct's time syntax) one sacct call over the period names most of them (a listing of
    100,000 jobs costs one call, not 200); the rest (jobs that started before it) are asked by id, at
    most ``MAX_ASKED``: past that a listing shows raw ids rather than wait."""
    out: dict[int, str] = {}
    want = set(raw_ids)
    if since is not None and want:
        try:
            for r in slurm.sacct_rows(("JobIDRaw", "JobID"), since, "ALL"):
                raw = r.get("JobIDRaw", "")
                if raw.isdigit() and int(raw) in want and jobref.parse_shown(r.get("JobID", "")) is not None:
                    out[int(raw)] = r["JobID"]
        except SlurmError:
            return out
    ids = sorted(want - set(out))[:MAX_ASKED]
    for i in range(0, len(ids), chunk):
        try:
            lines = slurm.sacct_names(ids[i:i + chunk])
        except SlurmError:
            return out
        for raw, shown in lines:
            if raw in want and jobref.parse_shown(shown) is not None:
                out[raw] = shown
    return out
