"""The job as a Slurm hook sees it: one typed value read from the hook's environment."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # collections.abc would import collections: the TaskProlog runs this in every task
if TYPE_CHECKING:
    from collections.abc import Mapping


_FIELDS: dict[str, object] = {
    "hook": None, "job_id": None, "uid": None, "user": None, "gpus": list, "node": None, "nodelist": None,
    "exit_code": None, "derived_exit_code": None, "partition": None, "step_id": None, "local_rank": None,
    "ntasks_local": None, "cpus_per_task": None,
    "sluid": None,  # SLURM_JOB_SLUID (25.11+): 26.05 names the job's cgroup v2 directory by it
    "env_gpuperf": None,  # the job's GPUPERF=... opt-out, where the hook can see it
}


class JobContext:
    """What a Slurm hook knows about its job (FACTS.md: which variable reaches which hook).

    A plain slotted class, not a dataclass: the TaskProlog runs in every task and importing
    dataclasses (with inspect) costs it about 6 ms.
    """

    __slots__ = tuple(_FIELDS)
    hook: str
    job_id: int | None
    uid: int | None
    user: str | None
    gpus: list[int]
    node: str | None
    nodelist: str | None
    exit_code: int | None
    derived_exit_code: int | None
    partition: str | None
    step_id: str | None
    local_rank: int | None
    ntasks_local: int | None
    cpus_per_task: int | None
    sluid: str | None
    env_gpuperf: str | None

    def __init__(self, **values: object) -> None:
        unknown = set(values) - set(_FIELDS)
        if unknown:
            raise TypeError(f"JobContext: unknown fields {sorted(unknown)}")
        for name, default in _FIELDS.items():
            v = values.get(name, default() if callable(default) else default)
            setattr(self, name, v)

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return {name: getattr(self, name) for name in _FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobContext) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "JobContext(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


def parse_gpu_list(value: str | None) -> list[int]:
    """'0,1' or '0-3' or '' -> indices; names that are not indices (MIG UUIDs) are skipped."""
    out: list[int] = []
    if not value or value.strip().lower() in ("", "n/a", "none", "nodevs"):
        return out
    for part in value.split(","):
        part = part.strip()
        if "-" in part and part.replace("-", "").isdigit():
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return sorted(set(out))


def _int(v: str | None) -> int | None:
    if v is None or v == "":
        return None
    try:
        # "256", "0:0" (derived exit code: status:signal), "4294967294(...)"
        return int(v.split("(")[0].split(":")[0])
    except ValueError:
        return None


def from_env(hook: str, env: Mapping[str, str] | None = None) -> JobContext:
    """Read the hook's environment into a JobContext; absent values are None, never guessed."""
    e = os.environ if env is None else env
    gpus = e.get("SLURM_JOB_GPUS") or e.get("SLURM_STEP_GPUS") or e.get("CUDA_VISIBLE_DEVICES")
    return JobContext(
        hook=hook,
        job_id=_int(e.get("SLURM_JOB_ID") or e.get("SLURM_JOBID")),
        uid=_int(e.get("SLURM_JOB_UID")),
        user=e.get("SLURM_JOB_USER"),
        gpus=parse_gpu_list(gpus),
        node=e.get("SLURMD_NODENAME"),
        nodelist=e.get("SLURM_JOB_NODELIST") or e.get("SLURM_NODELIST"),
        exit_code=_int(e.get("SLURM_JOB_EXIT_CODE")),
        derived_exit_code=_int(e.get("SLURM_JOB_DERIVED_EC")),
        partition=e.get("SLURM_JOB_PARTITION"),
        step_id=e.get("SLURM_STEP_ID") or e.get("SLURM_STEPID"),
        local_rank=_int(e.get("SLURM_LOCALID")),
        ntasks_local=_int(e.get("SLURM_NTASKS_PER_NODE") or e.get("SLURM_TASKS_PER_NODE")),
        cpus_per_task=_int(e.get("SLURM_CPUS_PER_TASK")),
        sluid=e.get("SLURM_JOB_SLUID") or None,
        env_gpuperf=e.get("GPUPERF") or e.get("SPANK_GPUPERF") or e.get("_SLURM_SPANK_OPTION_gpuperf_gpuperf"),
    )
