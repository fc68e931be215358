"""Prolog step: register the job with the node daemon (id, uid, user, GPUs, CPUs, start).

A job that holds no GPU on this node is not registered (nothing to measure: no summary, no
AdminComment follow) unless ``report.cpu_jobs``.

When the daemon does not answer within ``daemon.request_timeout_s`` the job starts anyway and a
marker in ``<state_dir>/pending/`` lets the daemon register it when it comes back (partial).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from gpuperf.files import log
from gpuperf.daemon import client, deliver


def cpus_on_node(env: Mapping[str, str]) -> int | None:
    """CPUs of the job on this node from SLURM_JOB_CPUS_PER_NODE ('8', '8(x2)', '8(x2),4'): the first count."""
    v = env.get("SLURM_JOB_CPUS_PER_NODE") or env.get("SLURM_CPUS_ON_NODE")
    if not v:
        return None
    head = v.split(",")[0].split("(")[0].strip()
    return int(head) if head.isdigit() else None


def registration(ctx: Any, env: Mapping[str, str], now: float | None = None) -> dict[str, Any]:
    """The register request's ``job`` member from the hook's context."""
    return {"job_id": ctx.job_id, "uid": ctx.uid if ctx.uid is not None else 0, "user": ctx.user,
            "gpus": list(ctx.gpus), "cpus": cpus_on_node(env), "node": ctx.node,
            "start": time.time() if now is None else now}


def wanted(ctx: Any, cfg: Any) -> bool:
    """Whether gpuperf follows this job on this node: it holds a GPU here, or ``report.cpu_jobs``."""
    return ctx.job_id is not None and (bool(ctx.gpus) or bool(cfg.report.cpu_jobs))


def step(ctx: Any, cfg: Any, state: Any) -> None:
    """Register the job; never fails the job."""
    if not wanted(ctx, cfg):
        if ctx.job_id is not None:
            state.data["register"] = {"ok": True, "skipped": "no GPU on this node"}
        return
    job = registration(ctx, state.env)
    try:
        if state.daemon_down:
            raise client.DaemonUnavailable(state.daemon_down)  # asked once this run already: do not wait twice
        reply = client.call(cfg, "register", job)
    except client.DaemonUnavailable as e:
        marker = deliver.write_pending(cfg.general.state_dir, "register", job, ctx.to_dict())
        state.data["register"] = {"ok": False, "error": str(e), "pending": str(marker)}
        log.get("prolog").warning("job %s: daemon unavailable (%s); registration left in %s", ctx.job_id, e, marker)
        return
    state.data["register"] = {"ok": bool(reply.get("ok")), "error": reply.get("error"), "already": reply.get("already", False)}
    if not reply.get("ok"):
        log.get("prolog").warning("job %s: daemon refused registration: %s", ctx.job_id, reply.get("error"))
