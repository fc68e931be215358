"""The epilog's step run inside the node daemon, for the compiled hook client (``gpuperf-hook``).

The client forwards the epilog's environment over the hook socket and exits with the daemon's answer,
so a job's end waits for one round trip instead of a Python start. The step is the epilog's own
(``finalize.finalize_with``) with the daemon's finalisation called directly; the daemon declines
(the client then runs the Python epilog) when its config is not the file the client read.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

from gpuperf.files import log
from gpuperf.hookbase import hookconf, jobctx
from gpuperf.hookbase.hook import HookState, record_state, run_steps
from gpuperf.epilog import finalize


def run(cfg: Any, job: Mapping[str, Any], finalise: Callable[[dict[str, Any]], dict[str, Any]],
        now: float | None = None) -> dict[str, Any]:
    """Run the epilog for the forwarded ``job`` ({env, config}); the reply's members (``done`` False: declined)."""
    now = time.time() if now is None else now
    why = hookconf.config_mismatch(cfg, job["config"], job["env"], os.environ)
    if why:
        return {"done": False, "why": why}
    ctx = jobctx.from_env("epilog", job["env"])
    state = HookState(job["env"])
    state.data["via"] = "daemon"

    def step(c: Any, _cfg: Any, st: HookState) -> None:
        finalize.finalize_with(c, cfg, st, finalise, now)

    logger = log.get("epilog")
    run_steps(ctx, cfg, [("finalize", step)], state, logger)
    if ctx.job_id is not None:
        record_state(ctx, cfg, state, logger)
    # an epilog never fails the job (a non-zero Epilog drains the node): the step's outcome is recorded
    return {"done": True, "exit_code": 0, "job_id": ctx.job_id,
            "steps": {k: {"ok": v.get("ok"), "ms": v.get("ms")} for k, v in state.steps.items()}}
