"""The TaskProlog answered by the node daemon, for the compiled hook client (``gpuperf-hook``).

The client runs as the job's user in each task and sends what the task sees (its environment, its CPU
count, the NCCL libraries in its directories) over the user socket; the daemon finishes the job's plan
for that task (``envtask.task_output``: the same decision the Python TaskProlog makes) and returns the
lines to print and the records for the client to write as the user. The daemon reads the job's plan
only through ``safeio`` and only when the caller owns it (or is an admin), never lists a directory the
task named, and writes nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

from gpuperf.env.ncclver import Listing
from gpuperf.files import jobstate, jsonlite, safeio
from gpuperf.hookbase import hookconf, jobctx
from gpuperf.hookbase.hook import TASKS_DIR
from gpuperf.prolog import envtask


def run(cfg: Any, job: Mapping[str, Any], uid: int | None, admin: bool, now: float | None = None) -> dict[str, Any]:
    """The reply's members for one task: ``out`` (what the TaskProlog prints) and the records to write."""
    now = time.time() if now is None else now
    t0 = time.perf_counter()
    env = job["env"]
    why = hookconf.config_mismatch(cfg, job["config"], env, os.environ)
    if why:
        return {"done": False, "why": why}
    ctx = jobctx.from_env("taskprolog", env)
    cache = None
    if ctx.job_id is not None and not envtask.off_reason(ctx, cfg):
        ignored = safeio.Ignored()
        # the job's user owns its plan: another user's request reads nothing (uid=None: root, admins)
        cache = safeio.read_json(envtask.cache_path(cfg, ctx.job_id), uid=None if admin else uid, ignored=ignored)
        if cache is None and ignored.reasons:
            return {"done": False, "why": f"the job's plan was not read: {'; '.join(ignored.reasons)[:200]}"}
    nccl = job.get("nccl") or {}
    out = envtask.task_output(ctx, cfg, env, cache, job.get("cpus"), Listing(nccl.get("dirs", {}), nccl.get("wheels", [])))
    reply: dict[str, Any] = {"done": True, "out": out.text}
    if out.step_path and out.step_record is not None and not os.path.exists(out.step_path):
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
