"""The prolog's steps run inside the node daemon, for the prolog's fast path (``gpuperf.prolog.fast``).

The daemon has the node's topology, the fresh health result and every module loaded, so the
prolog process only forwards its environment and waits for one reply. The steps are the prolog's
own (``envplan``, ``affinityplan``) on a context built from the forwarded environment; health and
registration use the daemon's state directly. The daemon declines (the prolog then runs every step
itself) whenever the fast path could decide differently from the full one: its config is not the
file the hook loaded, its health result is missing or stale, or a check fails (draining is the
prolog's business: it must requeue the job and exit non-zero).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from gpuperf.files import config, log
from gpuperf.hookbase import hookconf, jobctx
from gpuperf.checks import base
from gpuperf.hookbase.hook import HookState, record_state, run_steps
from gpuperf.prolog import health as health_step
from gpuperf.prolog import register as register_step

PLAN_STEPS = [("env", "gpuperf.prolog.envplan:step"), ("affinity", "gpuperf.prolog.affinityplan:step")]


def decline_reason(cfg: Any, sent: Mapping[str, Any], cached: dict[str, Any] | None, now: float,
                   hook_env: Mapping[str, str] | None = None, daemon_env: Mapping[str, str] | None = None) -> str | None:
    """Why the daemon must not run this prolog (the hook runs it itself); None when it may."""
    import os

    why = hookconf.config_mismatch(cfg, sent, hook_env or {}, os.environ if daemon_env is None else daemon_env)
    if why:
        return why
    if cached is None:
        return "no health result in the daemon yet"
    if "error" in cached:
        return f"the daemon's health checks could not run: {cached['error']}"
    age = now - float(cached["t"])
    if age > float(cfg.checks.daemon_max_age_s):
        return f"the daemon's health result is {age:.0f} s old (max {cfg.checks.daemon_max_age_s:.0f} s)"
    if any(r.get("status") == "fail" for r in cached["results"]):
        return "a health check fails: the prolog drains and requeues"
    return None


def run(cfg: Any, job: Mapping[str, Any], cached_health: dict[str, Any] | None,
        register: Callable[[dict[str, Any]], dict[str, Any]], now: float | None = None) -> dict[str, Any]:
    """Run the prolog for the forwarded ``job`` ({env, config}); the reply's members.

    ``{"done": False, "why": ...}`` when the daemon declines, else ``{"done": True, "exit_code": 0,
    "steps": {name: {ok, ms}}}`` after the job's files (env cache, affinity plan, record) are written.
    """
    now = time.time() if now is None else now
    why = decline_reason(cfg, job["config"], cached_health, now, job["env"])
    if why:
        return {"done": False, "why": why}
    env = job["env"]
    ctx = jobctx.from_env("prolog", env)
    state = HookState(env)
    state.data["via"] = "daemon"
    results = [base.CheckResult.from_dict(d) for d in cached_health["results"]]  # type: ignore[index]

    def health(c: Any, _cfg: Any, st: HookState) -> None:
        health_step.record_results(c, st, results, "daemon", now - float(cached_health["t"]))  # type: ignore[index]

    def registration(c: Any, _cfg: Any, st: HookState) -> None:
        if not register_step.wanted(c, cfg):
            if c.job_id is not None:
                st.data["register"] = {"ok": True, "skipped": "no GPU on this node"}
            return
        reply = register(register_step.registration(c, st.env, now))
        st.data["register"] = {"ok": bool(reply.get("ok")), "error": reply.get("error"),
                               "already": reply.get("already", False)}

    logger = log.get("prolog")
    code = run_steps(ctx, cfg, [("health", health), ("register", registration), *PLAN_STEPS], state, logger)
    if ctx.job_id is not None:
        record_state(ctx, cfg, state, logger)
    return {"done": True, "exit_code": code, "job_id": ctx.job_id,
            "steps": {k: {"ok": v.get("ok"), "ms": v.get("ms")} for k, v in state.steps.items()}}
