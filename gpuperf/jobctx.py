"""The job as a Slurm hook sees it: one typed value read from the hook's environment."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Mapping


@dataclass
class JobContext:
    """What a Slurm hook knows about its job (FACTS.md: which variable reaches which hook)."""

    hook: str
    job_id: int | None
    uid: int | None
    user: str | None
    gpus: list[int] = field(default_factory=list)
    node: str | None = None
    nodelist: str | None = None
    exit_code: int | None = None
    derived_exit_code: int | None = None
    partition: str | None = None
    step_id: str | None = None
    local_rank: int | None = None
    ntasks_local: int | None = None
    cpus_per_task: int | None = None
    env_gpuperf: str | None = None  # the job's GPUPERF=... opt-out, where the hook can see it

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return asdict(self)


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
        env_gpuperf=e.get("GPUPERF") or e.get("SPANK_GPUPERF") or e.get("_SLURM_SPANK_OPTION_gpuperf_gpuperf"),
    )
