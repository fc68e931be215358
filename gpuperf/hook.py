"""What every Slurm hook does around its own steps: config, logging, job context, and never failing.

A hook is a list of named steps, each ``step(ctx, cfg, state) -> None``. Steps live in the
modules of the features they belong to and are named by import path, so the hook imports
only what runs. A step that raises is logged and recorded; the next step still runs and
the hook still exits 0 (gpuperf's own failure never fails a job), unless a step *decides*
the job must not run (``HookVerdict``), as the prolog does on a failing health check.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

from gpuperf import config as config_mod
from gpuperf import jobctx, jobstate, log
from gpuperf.guard import main_guard  # noqa: F401 - the hooks' entry points import it from here


class HookVerdict(Exception):
    """Raised by a step that decided the hook must exit non-zero (for example: node unhealthy)."""

    def __init__(self, exit_code: int, reason: str):
        super().__init__(reason)
        self.exit_code, self.reason = exit_code, reason


class HookState:
    """What the steps of one hook run share and what is recorded for the job.

    ``env`` is the hook's environment (the process's own, or the one a prolog sent the daemon);
    ``daemon_down`` tells later steps not to wait for a daemon that already did not answer.
    """

    __slots__ = ("started", "steps", "data", "env", "daemon_down")

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.started: float = time.time()
        self.steps: dict[str, dict[str, Any]] = {}
        self.data: dict[str, Any] = {}
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.daemon_down: str | None = None


Step = "Callable[[jobctx.JobContext, config_mod.Config, HookState], None]"


def _resolve(spec: str | Step) -> Step:
    if callable(spec):
        return spec
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def run_hook(name: str, steps: list[tuple[str, str]], env: dict[str, str] | None = None, record: bool = True,
             state: HookState | None = None) -> int:
    """Run a hook's steps; returns the process exit code (0 unless a step gave a verdict)."""
    cfg = config_mod.load_or_defaults()
    logger = log.setup(name, cfg.general.log_file, cfg.general.log_level, stderr=True)
    ctx = jobctx.from_env(name, env)
    state = state or HookState(env)
    if cfg.degraded:
        # one clear line naming the key; defaults are used and nothing destructive happens
        logger.error("%s; running with defaults, node drain disabled", cfg.error)
        state.data["config_error"] = cfg.error
    exit_code = run_steps(ctx, cfg, steps, state, logger)
    if record and ctx.job_id is not None:
        record_state(ctx, cfg, state, logger)
    return exit_code


def run_steps(ctx: jobctx.JobContext, cfg: config_mod.Config, steps: list[tuple[str, str | Step]],
              state: HookState, logger: Any) -> int:
    """Run steps in order (a raising step is recorded, the next still runs); the exit code a verdict set, else 0."""
    exit_code = 0
    for step_name, spec in steps:
        t0 = time.perf_counter()
        try:
            _resolve(spec)(ctx, cfg, state)
            state.steps[step_name] = {"ok": True}
        except HookVerdict as v:
            state.steps[step_name] = {"ok": True, "verdict": v.reason, "exit_code": v.exit_code}
            exit_code = v.exit_code
            logger.warning("job %s: %s", ctx.job_id, v.reason)
            break
        except Exception as e:  # noqa: BLE001 - a hook must survive any step's failure
            state.steps[step_name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            logger.error("job %s: step %s failed: %s: %s", ctx.job_id, step_name, type(e).__name__, e)
        state.steps[step_name]["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return exit_code


def record_state(ctx: jobctx.JobContext, cfg: config_mod.Config, state: HookState, logger: Any) -> None:
    """Leave what this hook saw in the job's state dir (tests and the report read it)."""
    suffix = f".{os.getpid()}" if ctx.hook == "taskprolog" else ""
    jdir = jobstate.job_dir(cfg.general.run_dir, ctx.job_id)
    path = jdir / f"{ctx.hook}{suffix}.json"
    record = {"context": ctx.to_dict(), "steps": state.steps, "data": _jsonable(state.data),
              "config": cfg.source, "started": state.started}
    try:
        try:
            jobstate.write_json(path, record)
        except PermissionError:
            # a TaskProlog of a non-root job cannot write the root-owned job dir: its own dir
            path = jdir / TASKS_DIR / path.name
            jobstate.write_json(path, record, mode=0o600)
        if ctx.hook == "prolog":
            _make_tasks_dir(jdir, ctx.uid)
    except OSError as e:
        logger.warning("job %s: cannot record hook state in %s: %s", ctx.job_id, path, e.strerror)


TASKS_DIR = "tasks"


def _make_tasks_dir(jdir, uid: int | None) -> None:
    """A directory the job's user owns, where its TaskProlog records what it did."""
    tasks = jdir / TASKS_DIR
    tasks.mkdir(mode=0o700, exist_ok=True)
    if uid is not None and os.geteuid() == 0:
        os.chown(tasks, uid, -1)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        out[k] = v.to_dict() if hasattr(v, "to_dict") else v
    return out
