"""Prolog step ``health``: fast checks for the job's GPUs; on a failure drain the node and requeue the job.

Order matters (measured on Slurm 22.05, see the checks' report): gpuperf drains the node with its
own reason *first*; Slurm then keeps that reason when the Prolog fails (it writes "Prolog error"
only on a node not yet drained). ``scontrol requeue`` before exiting non-zero puts the job back in
the queue without the hold Slurm adds on its own (and ``StartTime=now`` drops the 120 s begin time
Slurm gives a requeued job); the non-zero exit guarantees it never starts here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from gpuperf.files import log
from gpuperf.hookbase import watchdog
from gpuperf.checks import base, policy
from gpuperf.hookbase.hook import HookVerdict

EXIT_UNHEALTHY = 1


def _from_daemon(cfg: Any, gpus: list[int]) -> list[base.CheckResult] | None:
    """The daemon's fresh cached results, or None (no daemon, stale, malformed: check locally)."""
    from gpuperf.daemon.protocol import control_endpoint

    # no socket, no daemon: do not pay for importing zmq (recorded nodes, benchmarks, first boot)
    if not os.path.exists(control_endpoint(cfg)[len("ipc://"):]):
        return None
    from gpuperf.daemon import client

    try:
        raw = client.health(cfg, gpus, max_age_s=float(cfg.checks.daemon_max_age_s))
        results = [base.CheckResult.from_dict(d) for d in raw]
    except (client.DaemonUnavailable, client.DaemonRefused, ValueError) as e:
        log.get("checks").info("daemon health not used: %s", e)
        return None
    return results or None


def _local(cfg: Any, gpus: list[int]) -> list[base.CheckResult]:
    """Run the fast checks here; a node that cannot be read makes every check ``error`` (never a drain)."""
    from gpuperf import checks

    try:
        node = checks.read_node(cfg, once=True)
    except Exception as e:  # noqa: BLE001 - unreadable node: could not check, not unhealthy
        why = f"cannot read the node: {type(e).__name__}: {e}"
        return [base.CheckResult(s.code, "error", why) for s in
                checks.runner.enabled(checks.registry(), cfg, "fast")]
    return checks.run_fast(node, cfg, gpus)


def act_on_failure(node: str | None, job_id: int | None, failing: list[base.CheckResult], cfg: Any,
                   rec: dict[str, Any]) -> None:
    """Drain (within the safety bound) and requeue; raises HookVerdict when the job must not run here."""
    from gpuperf.access.slurm import Slurm, SlurmError

    logger = log.get("checks")
    reason = policy.drain_reason(failing)
    rec["reason"] = reason
    if cfg.degraded or not cfg.checks.drain or not node:
        why = ("config is broken: no drain" if cfg.degraded else "checks.drain is off" if not cfg.checks.drain
               else "no SLURMD_NODENAME: no drain")
        rec["action"] = f"none ({why})"
        logger.warning("job %s: unhealthy node, %s: %s", job_id, why, reason)
        return
    slurm = Slurm(cfg.general.slurm_bin_dir)
    try:
        nodes = slurm.node_reasons()
    except SlurmError as e:
        rec["action"] = f"none (cannot read node states for the safety bound: {e})"
        logger.error("job %s: unhealthy node not drained, %s: %s", job_id, rec["action"], reason)
        return
    bound = policy.drain_bound(nodes, float(cfg.checks.max_drained_share))
    rec["bound"] = bound.describe()
    if not bound.allows:
        rec["action"] = f"none (safety bound: {bound.describe()})"
        logger.error("job %s: NOT draining %s although unhealthy: %s; %s", job_id, node, reason, bound.describe())
        return
    watchdog.decided(EXIT_UNHEALTHY)  # should the bound pass while draining, the exit stays non-zero
    rec["drain"] = _drain(slurm, node, nodes.get(node, ("", "")), reason)
    if job_id is not None:
        rec["requeue"] = _requeue(slurm, job_id)
        if rec["requeue"] == "requeued":
            rec["eligible_now"] = _spawn_eligible_now(job_id)
    rec["action"] = f"{rec['drain']}, job {rec.get('requeue', 'not requeued (no job id)')}"
    raise HookVerdict(EXIT_UNHEALTHY, reason)


def _drain(slurm: Any, node: str, current: tuple[str, str], reason: str) -> str:
    """Drain with gpuperf's reason, unless someone else drained the node first (their reason stays)."""
    from gpuperf.access.slurm import SlurmError

    state, other = current
    if policy.is_drained(state) and other and not other.startswith(policy.PREFIX):
        return f"already drained, reason kept ({other})"
    try:
        slurm.drain(node, reason)
    except SlurmError as e:
        # the non-zero exit still makes Slurm drain it, with its own reason "Prolog error"
        log.get("checks").error("cannot drain %s: %s", node, e)
        return f"drain failed ({e})"
    return "drained"


def _requeue(slurm: Any, job_id: int) -> str:
    """Requeue without a hold; when Slurm refuses (--no-requeue), the non-zero exit lets Slurm cancel or hold it."""
    from gpuperf.access.slurm import SlurmError

    try:
        slurm.requeue(job_id)
    except SlurmError as e:
        return f"not requeued, Slurm decides ({e})"
    return "requeued"


def _spawn_eligible_now(job_id: int) -> str:
    """Start a detached helper that clears the requeued job's begin time once Slurm has set it."""
    try:
        subprocess.Popen([sys.executable, "-m", "gpuperf.prolog.health", "eligible-now", str(int(job_id))],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)  # slurmd must not wait on its pipes
    except OSError as e:
        return f"not started (the job waits Slurm's requeue delay): {e.strerror}"
    return "deferred"


def wait_and_make_eligible(slurm: Any, job_id: int, timeout_s: float = 150.0, poll_s: float = 0.5) -> str:
    """Slurm sets a requeued job's begin time (now + 120 s) only when the job has finished completing;
    wait for that, then set ``StartTime=now`` so a healthy node can take the job at once."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        # squeue's two fields, not scontrol's line: the user's comment could fake "JobState=" there
        state, reason = slurm.job_state(job_id) or ("gone", "")
        if state not in ("PENDING", "COMPLETING"):
            return f"job is {state}: nothing to do"
        if state == "PENDING" and reason == "BeginTime":
            slurm.eligible_now(job_id)
            return "eligible now"
        time.sleep(poll_s)
    return "Slurm set no begin time in time: left as is"


def record_results(ctx: Any, state: Any, results: list[base.CheckResult], source: str,
                   age_s: float | None = None) -> dict[str, Any]:
    """Record the results in ``state.data['health']`` (and log checks that could not run); the record."""
    rec: dict[str, Any] = {"source": source, "gpus": ctx.gpus, "status": base.worst(results),
                           "results": [r.to_dict() for r in results]}
    if age_s is not None:
        rec["age_s"] = round(age_s, 3)
    state.data["health"] = rec
    warnings = [f"{r.code}: {r.detail}" for r in results if r.status == "warn"]
    if warnings:
        rec["warnings"] = warnings
    errors = [r for r in results if r.status == "error"]
    if errors:
        log.get("checks").warning("job %s: %d checks could not run: %s", ctx.job_id, len(errors),
                                  "; ".join(f"{r.code}: {r.detail}" for r in errors))
    return rec


def step(ctx: Any, cfg: Any, state: Any) -> None:
    """Prolog step: record every result in ``state.data['health']``; drain and requeue on a failure."""
    t0 = time.perf_counter()
    results = None if state.daemon_down else _from_daemon(cfg, ctx.gpus)
    source = "daemon"
    if results is None:
        results, source = _local(cfg, ctx.gpus), "local"
    rec = record_results(ctx, state, results, source)
    failing = [r for r in results if r.status == "fail"]
    try:
        if failing:
            act_on_failure(ctx.node, ctx.job_id, failing, cfg, rec)
    finally:
        rec["ms"] = round((time.perf_counter() - t0) * 1000, 3)


def _main(argv: list[str]) -> int:
    """``python -m gpuperf.prolog.health eligible-now JOBID``: the detached helper of a requeue."""
    from gpuperf.files import config
    from gpuperf.access.slurm import Slurm, SlurmError

    if len(argv) != 2 or argv[0] != "eligible-now" or not argv[1].isdigit():
        print("usage: python -m gpuperf.prolog.health eligible-now JOBID", file=sys.stderr)
        return 2
    cfg = config.load_or_defaults()
    logger = log.setup("prolog", cfg.general.log_file, cfg.general.log_level, stderr=False)
    try:
        logger.info("job %s: requeued: %s", argv[1], wait_and_make_eligible(Slurm(cfg.general.slurm_bin_dir), int(argv[1])))
    except SlurmError as e:
        logger.warning("job %s: requeued, begin time left to Slurm: %s", argv[1], e)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
