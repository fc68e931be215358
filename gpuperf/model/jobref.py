"""A job as Slurm users write it: ``12``, ``8_3`` (array task), ``10+1`` (het component), ``12.0`` (step).

Pure: parsing and formatting only; resolving a reference to Slurm's raw job id is
``gpuperf.jobrecords`` (through sacct/squeue). Python's ``int()`` must never see these strings:
it reads ``8_3`` as 83 and ``1_0`` as 10, another job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FORMS = ("12 (a job, or a whole array or het job where a listing is asked for)", "8_3 (task 3 of array job 8)",
         "10+1 (component 1 of heterogeneous job 10)", "12.0, 12.batch, 12.extern, 8_3.0 (a step)")

_STEP = r"(?:\d+|batch|extern|interactive)"
_RE = re.compile(rf"(?P<job>[1-9]\d{{0,9}})(?:_(?P<task>\d{{1,9}})|\+(?P<het>\d{{1,5}}))?(?:\.(?P<step>{_STEP}))?", re.ASCII)
_STEP_RE = re.compile(_STEP, re.ASCII)
# what sacct and squeue print: also pending array ranges such as 8_[4-9%2]
_SHOWN = re.compile(r"(?P<job>\d+)(?:_(?P<task>\d+|\[[^\]]*\])|\+(?P<het>\d+))?(?:\.(?P<step>[A-Za-z0-9_-]+))?", re.ASCII)


class JobRefError(ValueError):
    """Text that is not a job reference; the message lists the forms accepted."""


@dataclass(frozen=True)
class JobRef:
    """One job reference: a job id with at most one of an array task and a het offset, and maybe a step."""

    job: int
    task: int | None = None
    het: int | None = None
    step: str | None = None

    def __str__(self) -> str:
        return self.text()

    def text(self, with_step: bool = True) -> str:
        """As users write it: ``8_3``, ``10+1``, ``12.batch``."""
        out = str(self.job)
        if self.task is not None:
            out += f"_{self.task}"
        elif self.het is not None:
            out += f"+{self.het}"
        if with_step and self.step is not None:
            out += f".{self.step}"
        return out

    @property
    def is_plain(self) -> bool:
        """Only a number: a job, or the whole of an array or het job."""
        return self.task is None and self.het is None

    def without_step(self) -> "JobRef":
        """The allocation this reference names (its step dropped)."""
        return JobRef(self.job, self.task, self.het)


def accepted() -> str:
    """The forms a job reference may take, for error messages."""
    return "; ".join(FORMS)


def parse(text: str) -> JobRef:
    """A job reference from the command line; JobRefError (naming the accepted forms) otherwise."""
    t = str(text).strip()
    m = _RE.fullmatch(t)
    if not m:
        raise JobRefError(f"{text!r} is not a job id; accepted: {accepted()}")
    task, het = m.group("task"), m.group("het")
    return JobRef(int(m.group("job")), int(task) if task is not None else None,
                  int(het) if het is not None else None, m.group("step"))


def step_id(text: str) -> str | None:
    """A step id as Slurm names steps (``0``, ``batch``, ``extern``, ``interactive``), else None."""
    t = str(text)
    return t if len(t) <= 10 and _STEP_RE.fullmatch(t) else None


def parse_shown(text: str) -> JobRef | None:
    """A JobID as sacct/squeue print it (``8_3``, ``10+1``, ``12.batch``); None for a pending range
    (``8_[4-9]``) or anything else."""
    m = _SHOWN.fullmatch(text.strip())
    if not m or (m.group("task") or "").startswith("["):
        return None
    task, het = m.group("task"), m.group("het")
    return JobRef(int(m.group("job")), int(task) if task is not None else None,
                  int(het) if het is not None else None, m.group("step"))


def task_or_component(text: object) -> str | None:
    """``8_3`` or ``10+1`` as written (what the AdminComment headline's ``job=`` carries); None for a plain
    job (its id is its name), a step, or text that is no job reference. Lengths are ``parse``'s bounds."""
    try:
        ref = parse(str(text)) if text else None
    except JobRefError:
        return None
    return ref.text() if ref is not None and not ref.is_plain and ref.step is None else None


def is_pending_range(text: str) -> bool:
    """sacct's and squeue's line for array tasks not yet started (``8_[4-9%2]``)."""
    m = _SHOWN.fullmatch(text.strip())
    return bool(m and (m.group("task") or "").startswith("["))
