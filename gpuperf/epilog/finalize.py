"""Epilog step: finalise the job with the node daemon, which then writes its aggregates and node
summary and sends it to the controller on its own (``deliver``): the job's COMPLETING waits for the
finalisation only, never for the controller, and a summary the controller could not take waits in the
daemon's outbox and is sent again. A daemon of an older gpuperf (no ``queued`` in its reply) returns the
aggregates, and this step delivers them itself as before.

When the daemon does not answer within ``daemon.request_timeout_s`` the epilog ends anyway (the job
ends normally) and a marker in ``<state_dir>/pending/`` lets the daemon finalise the job when it comes
back (aggregates flagged partial), then deliver it the same way. A job without a GPU on this node is
skipped, as the prolog skipped registering it (``report.cpu_jobs`` opts in).
"""

from __future__ import annotations

import time

from gpuperf.files import jobstate
from gpuperf.daemon import client

TYPE_CHECKING = False
if TYPE_CHECKING:   # the common case (a daemon that delivers) imports neither typing nor logging nor json
    from typing import Any


def context_of(ctx: Any, cfg: Any) -> dict[str, Any]:
    """What the node summary needs besides the aggregates."""
    return {"job_id": ctx.job_id, "user": ctx.user, "uid": ctx.uid, "node": ctx.node,
            "exit_code": ctx.exit_code, "job_dir": jobstate.job_path(cfg.general.run_dir, ctx.job_id)}


def job_series(cfg: Any, job_id: int) -> dict | None:
    """The job's bounded per-GPU series from the daemon's store (gpuperf.series.v1), None when none."""
    points = cfg.controller.series_points
    if points <= 0:
        return None
    from gpuperf.files import log
    from gpuperf.model import series as series_mod

    try:
        got = client.request(cfg, "series", {"job_id": job_id, "max_points": points}).get("series")
    except Exception as e:  # noqa: BLE001 - no series makes the report chartless on the controller, nothing worse
        log.get("epilog").info("job %s: no series for the controller: %s", job_id, e)
        return None
    return series_mod.compact(got or {}, points)


def step(ctx: Any, cfg: Any, state: Any) -> None:
    """Finalise and deliver; never fails the job."""
    def call(job: dict[str, Any]) -> dict[str, Any]:
        if state.daemon_down:  # the compiled client found no daemon a moment ago: leave the marker now
            raise client.DaemonUnavailable(state.daemon_down)
        return client.call(cfg, "finalize", job)

    finalize_with(ctx, cfg, state, call, time.time())


def finalize_with(ctx: Any, cfg: Any, state: Any, call: Any, end: float) -> None:
    """The step with ``call(job) -> reply`` asking the daemon to finalise (raises ``client.DaemonUnavailable``):
    over a socket from the epilog's process, or directly when the daemon runs the epilog itself."""
    if ctx.job_id is None:
        return
    if not ctx.gpus and not cfg.report.cpu_jobs:
        # the prolog registered nothing (gpuperf.prolog.register.wanted): no summary, no AdminComment
        state.data["finalize"] = {"ok": True, "skipped": "no GPU on this node"}
        return
    job = {"job_id": ctx.job_id, "end": end, "exit_code": ctx.exit_code}
    context = context_of(ctx, cfg)
    try:
        reply = call({**job, "deliver": True})
    except client.DaemonUnavailable as e:
        from gpuperf.files import log
        from gpuperf.daemon import deliver

        marker = deliver.write_pending(cfg.general.state_dir, "finalize", job, context)
        state.data["finalize"] = {"ok": False, "error": str(e), "pending": str(marker)}
        log.get("epilog").warning("job %s: daemon unavailable (%s); finalisation left in %s", ctx.job_id, e, marker)
        return
    if reply.get("ok") and reply.get("queued"):
        state.data["finalize"] = {"ok": True, "queued": True, "outbox": reply.get("outbox")}
        return
    from gpuperf.files import log
    from gpuperf.daemon import deliver

    if not reply.get("ok") or not isinstance(reply.get("aggregates"), dict):
        state.data["finalize"] = {"ok": False, "error": reply.get("error")}
        log.get("epilog").warning("job %s: daemon could not finalise: %s", ctx.job_id, reply.get("error"))
        return
    if isinstance(reply.get("series"), dict):
        context["series"] = reply["series"]        # coarse series: the diagnosis's phases
    context["controller_series"] = job_series(cfg, ctx.job_id)  # gpuperf.series.v1, for the controller
    done = deliver.deliver(cfg, reply["aggregates"], context)
    state.data["finalize"] = {"ok": True, **done}
