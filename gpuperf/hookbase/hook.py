"""What every Slurm hook does around its own steps: config, logging, job context, and never failing.

A hook is a list of named steps, each ``step(ctx, cfg, state) -> None``. Steps live in the
modules of the features they belong to and are named by import path, so the hook imports
only what runs. A step that raises is logged and recorded; the next step still runs and
the hook still exits 0 (gpuperf's own failure never fails a job), unless a step *decides*
the job must not run (``HookVerdict``), as the prolog does on a failing health check.

Light to import, since the TaskProlog runs it in every task: the config comes from ``hookconf``'s
cache, and logging is set up only when something is logged or a step's module loaded logging.
"""

from __future__ import annotations

import os
import sys
import time

from gpuperf.hookbase import hookconf, jobctx, watchdog
from gpuperf.files import jobstate
from gpuperf.hookbase.guard import main_guard  # noqa: F401 - the hooks' entry points import it from here

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from gpuperf.files import config as config_mod


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
    __import__(mod)  # importlib itself costs a hook ~1 ms
    return getattr(sys.modules[mod], fn)


class HookLog:
    """The hook's logger (``log.setup``), set up on first use: the common case logs nothing, and
    logging costs a fresh process a third of its start. ``run_steps`` sets it up before a step whose
    module loaded logging, so a step's own loggers write where they always did."""

    def __init__(self, name: str, cfg: config_mod.Config) -> None:
        self._name, self._cfg, self._logger = name, cfg, None

    def get(self) -> Any:
        """The configured logger (set up now if it was not)."""
        if self._logger is None:
            from gpuperf.files import log

            g = self._cfg.general
            self._logger = log.setup(self._name, g.log_file, g.log_level, stderr=True)
        return self._logger

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.get(), attr)


def run_hook(name: str, steps: list[tuple[str, str]], env: dict[str, str] | None = None, record: bool = True,
             state: HookState | None = None) -> int:
    """Run a hook's steps; returns the process exit code (0 unless a step gave a verdict)."""
    cfg = hookconf.load_or_defaults()
    watchdog.arm(name, watchdog.bound_of(cfg, name), cfg.general.log_file)  # whatever the job did, bounded
    try:
        return _run_hook(name, steps, cfg, env, record, state)
    finally:
        watchdog.disarm()


def _run_hook(name: str, steps: list[tuple[str, str]], cfg: config_mod.Config, env: dict[str, str] | None,
              record: bool, state: HookState | None) -> int:
    logger = HookLog(name, cfg)
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
            step = _resolve(spec)
            if isinstance(logger, HookLog) and "logging" in sys.modules:
                logger.get()
            step(ctx, cfg, state)
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
    jdir = jobstate.job_path(cfg.general.run_dir, ctx.job_id)
    path = os.path.join(jdir, f"{ctx.hook}{suffix}.json")
    record = {"context": ctx.to_dict(), "steps": state.steps, "data": _jsonable(state.data),
              "config": cfg.source, "started": state.started, **_cost(state.started)}
    try:
        try:
            jobstate.write_json(path, record)
        except PermissionError:
            # a TaskProlog of a non-root job cannot write the root-owned job dir: its own dir
            path = os.path.join(jdir, TASKS_DIR, os.path.basename(path))
            jobstate.write_json(path, record, mode=0o600)
        if ctx.hook == "prolog":
            _make_tasks_dir(jdir, ctx.uid)
    except OSError as e:
        logger.warning("job %s: cannot record hook state in %s: %s", ctx.job_id, path, e.strerror)


def _cost(started: float) -> dict[str, Any]:
    """Seconds since the hook's state began, and the peak RSS of the process that ran its steps (the
    hook's own, or the daemon's on the prolog's fast path); the abuse tests quote both."""
    import resource  # a builtin extension: no import cost to speak of

    return {"elapsed_s": round(time.time() - started, 3), "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


TASKS_DIR = "tasks"


def _make_tasks_dir(jdir: str, uid: int | None) -> None:
    """A directory the job's user owns, where its TaskProlog records what it did."""
    tasks = os.path.join(jdir, TASKS_DIR)
    try:
        os.mkdir(tasks, 0o700)
    except FileExistsError:
        if not os.path.isdir(tasks):
            raise
    if uid is not None and os.geteuid() == 0:
        os.chown(tasks, uid, -1)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        out[k] = v.to_dict() if hasattr(v, "to_dict") else v
    return out
