"""The TaskProlog answered by the node daemon, for the compiled hook client (``gpuperf-hook``).

The client runs as the job's user in each task and sends what the task sees (its environment, its CPU
count, the NCCL libraries in its directories) over the user socket; the daemon finishes the job's plan
for that task (``envtask.task_output``: the same decision the Python TaskProlog makes) and returns the
lines to print and the records for the client to write as the user. The daemon reads the job's plan
only through ``safeio`` and only when the caller owns it (or is an admin), never lists a directory the
task named, and writes nothing.

A request names nothing root looks at (issue 36, finding 3): the job id must be one (``model/jobref.py``),
the step id one of Slurm's forms (``jobref.step_id``), and the only file read is the plan at a path built
from the job id. Whether the step's record exists is not looked at: the client creates it with ``O_EXCL``,
so the first task of a step writes it, as before, and no reply says what is in a directory. The plan is
bounded (``PLAN_MAX_BYTES``, and ``EnvPlan.from_dict``'s bounds) and parsed once per version of the file
(cached by device, inode, size and mtime); a plan that is not one is a refusal of one line, and a refusal
is said in the reply, never in root's log.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any, Mapping

from gpuperf.env.ncclver import Listing
from gpuperf.env.plan import EnvPlan
from gpuperf.files import jobstate, jsonlite, safeio
from gpuperf.hookbase import hookconf, jobctx
from gpuperf.hookbase.hook import TASKS_DIR
from gpuperf.model import jobref
from gpuperf.prolog import envtask

PLAN_MAX_BYTES = 128 << 10     # a real plan is ~20 KiB; 941 KB ones cost the daemon 70 ms each (finding 5)
PLANS_KEPT = 256               # parsed plans cached (a node's running jobs)

# (st_dev, st_ino, st_size, st_mtime_ns) of a plan file -> the plan, or why it is not one
_plans: dict[tuple[int, int, int, int], "dict[str, Any] | str"] = {}


class _Quiet(safeio.Ignored):
    """Refusals kept for the reply only: a user asking at the request rate must not write root's log."""

    __slots__ = ()

    def add(self, name: str, why: str) -> None:
        """Keep one refusal (not logged)."""
        if len(self.reasons) < safeio.SHOWN:
            self.reasons.append(f"record ignored: {name}: {why}")


def _refusal(why: str) -> dict[str, Any]:
    return {"done": False, "why": why[:200]}


def read_plan(path: str, uid: int | None) -> "dict[str, Any] | str | None":
    """The job's plan at ``path`` (owned by ``uid``; None: any owner), why it was refused, or None when absent.
    Parsed and checked once per version of the file."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"the job's plan was not read: {e.strerror}"
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _plans.get(key)
    if hit is not None and stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and (uid is None or st.st_uid == uid):
        return hit
    ignored = _Quiet()
    cache = safeio.read_json(path, uid=uid, ignored=ignored, max_bytes=PLAN_MAX_BYTES, name="env.json")
    if cache is None:
        return f"the job's plan was not read: {'; '.join(ignored.reasons)}" if ignored.reasons else None
    try:
        EnvPlan.from_dict(cache)
        got: dict[str, Any] | str = cache
    except (ValueError, TypeError) as e:
        got = f"the job's plan is not one: {str(e)[:120]}"
    if len(_plans) >= PLANS_KEPT:
        _plans.clear()
    _plans[key] = got
    return got


def _ids(env: Mapping[str, str]) -> str | None:
    """Why the job or step id the task sent is not one of Slurm's (None: both are, or absent)."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if job is not None:
        try:
            ref = jobref.parse(job[:32])
        except jobref.JobRefError:
            ref = None
        if ref is None or len(job) > 32 or not ref.is_plain or ref.step is not None:
            return "SLURM_JOB_ID is not a job id"
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if step is not None and jobref.step_id(step) is None:
        return "SLURM_STEP_ID is not a step id (a number, batch, extern or interactive)"
    return None


def run(cfg: Any, job: Mapping[str, Any], uid: int | None, admin: bool, now: float | None = None) -> dict[str, Any]:
    """The reply's members for one task: ``out`` (what the TaskProlog prints) and the records to write."""
    now = time.time() if now is None else now
    t0 = time.perf_counter()
    env = job["env"]
    why = hookconf.config_mismatch(cfg, job["config"], env, os.environ) or _ids(env)
    if why:
        return _refusal(why)
    ctx = jobctx.from_env("taskprolog", env)
    cache = None
    if ctx.job_id is not None and not envtask.off_reason(ctx, cfg):
        # the job's user owns its plan: another user's request reads nothing (uid=None: root, admins)
        got = read_plan(os.fspath(envtask.cache_path(cfg, ctx.job_id)), None if admin else uid)
        if isinstance(got, str):
            return _refusal(got)
        cache = got
    nccl = job.get("nccl") or {}
    try:
        out = envtask.task_output(ctx, cfg, env, cache, job.get("cpus"),
                                  Listing(nccl.get("dirs", {}), nccl.get("wheels", [])))
    except (ValueError, TypeError, KeyError) as e:  # what the task sent, against a plan that passed its bounds
        return _refusal(f"the task's request was not answered: {type(e).__name__}")
    reply: dict[str, Any] = {"done": True, "out": out.text}
    if out.step_path and out.step_record is not None:
        reply.update(record_path=out.step_path, record=jsonlite.dumps(out.step_record, sort_keys=True))
    if ctx.job_id is not None and isinstance(job.get("pid"), int):
        ms = round((time.perf_counter() - t0) * 1000, 3)
        record = {"context": ctx.to_dict(), "steps": {"env": {"ok": True, "ms": ms}},
                  "data": {"env": out.data, "via": "daemon"}, "config": cfg.source, "started": now,
                  "elapsed_s": round(ms / 1000, 3), "maxrss_kib": None}
        reply.update(hook_record_path=os.path.join(jobstate.job_path(cfg.general.run_dir, ctx.job_id), TASKS_DIR,
                                                   f"taskprolog.{job['pid']}.json"),
                     hook_record=jsonlite.dumps(record, sort_keys=True))
    return reply
