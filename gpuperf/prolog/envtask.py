"""TaskProlog step ``env``: print the job's cached environment as ``export NAME=value`` lines.

Runs as the job user in every task, on the job's environment. Reads only the prolog's cache
(``env.json``); never discovers topology (too slow for a task's start). Variables the user set
win; ``GPUPERF=off`` or a disabled/broken config exports nothing. ``exports_for`` gives the same
list to ``gpuperf-run``, computing the plan from the topology when no cache exists.
"""

from __future__ import annotations

import os
import sys

from gpuperf.files import jobstate, safeio

# the plan as data and the per-task decisions, not the node's policy (``env.policy``): this runs in
# every task, and ``tests/unit/test_hook_imports.py`` keeps its imports light
from gpuperf.env import plan as env_plan
from gpuperf.env.plan import CACHE, TASK_DIR, EnvPlan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any


def cpus_of_task(environ: Mapping[str, str], allowed: int | None = None) -> int | None:
    """The task's CPUs: what it asked for (SLURM_CPUS_PER_TASK), else the CPUs it may run on (``allowed``:
    as the task counted them; None: this process's)."""
    v = environ.get("SLURM_CPUS_PER_TASK", "")
    if v.isdigit() and int(v) > 0:
        return int(v)
    if allowed is not None:
        return allowed or None
    try:
        return len(os.sched_getaffinity(0)) or None
    except OSError:
        return None


def gpus_of_task(environ: Mapping[str, str], fallback: int = 1) -> int:
    """How many GPUs the task sees (CUDA_VISIBLE_DEVICES), else ``fallback``."""
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    if cvd and cvd.strip() not in ("", "NoDevFiles"):
        return len([x for x in cvd.split(",") if x.strip()])
    return max(1, fallback)


def version_for_task(cfg: Any, cache: dict[str, Any] | None, environ: Mapping[str, str], listing: Any = None):
    """The NCCL the task will most likely load: its environment's, the config's, else the node's."""
    from gpuperf.env.ncclver import nccl_from_env  # light: directory listings, no glob or re

    v, src = nccl_from_env(environ, listing)
    if v:
        return v, src
    v = env_plan.parse_version(getattr(cfg.env, "nccl_version", "") or None)
    if v:
        return v, "config [env] nccl_version"
    if cache:
        v = env_plan.parse_version(cache.get("nccl_system"))
        if v:
            return v, cache.get("nccl_system_source") or "system"
    return None, None


def task_plan(cache: dict[str, Any], cfg: Any, environ: Mapping[str, str], job_gpus: int = 1,
              allowed_cpus: int | None = None, listing: Any = None) -> EnvPlan:
    """The cached plan finished for one task (per-task values, NCCL version, the user's variables win).

    ``allowed_cpus`` and ``listing``: what the task saw itself (its CPU count, its NCCL directories), when
    the daemon finishes the plan for it; None: this process is the task."""
    plan = EnvPlan.from_dict(cache)
    if plan.disabled:
        return plan
    v, src = version_for_task(cfg, cache, environ, listing)
    plan = env_plan.finalize_task(plan, env_plan.user_set(environ), cpus_of_task(environ, allowed_cpus),
                                   gpus_of_task(environ, job_gpus), v, src)
    return _keep_affinity_omp(plan, environ)


def _keep_affinity_omp(plan: EnvPlan, environ: Mapping[str, str]) -> EnvPlan:
    """Leave OMP_NUM_THREADS to the affinity plugin when it already set it for this rank.

    In Slurm 22.05 the SPANK plugin's task_init runs before the TaskProlog (seen in the test
    cluster's records), and it knows the rank's exact CPU set; our value is only an estimate.
    """
    threads = (environ.get("GPUPERF_AFFINITY_OMP") or "").split(" ", 1)[0]
    if threads and environ.get("OMP_NUM_THREADS") == threads:
        plan.vars = [v for v in plan.vars if v.name != "OMP_NUM_THREADS"]
    return plan


def exports(plan: EnvPlan) -> list[tuple[str, str]]:
    """The (name, value) pairs to export, the marker last; [] when disabled or empty."""
    pairs = [(v.name, v.value) for v in plan.vars] if not plan.disabled else []
    if not pairs:
        return []
    omp = plan.get("OMP_NUM_THREADS")
    if omp is not None and omp.rule == "default:omp_threads":
        # marked this way, a later affinity step (gpuperf-run, or the plugin in a newer Slurm that
        # runs it after the TaskProlog) replaces our per-task estimate instead of keeping it as the user's
        pairs.append((env_plan.AFFINITY_OMP_MARKER, env_plan.affinity_omp_marker(omp.value)))
    return pairs + [(env_plan.MARKER, env_plan.marker(pairs))]


def off_reason(ctx: Any, cfg: Any) -> str | None:
    """Why nothing is injected for this job (``env_plan.off_reason`` on the hook's config and context)."""
    return env_plan.off_reason(cfg.error if cfg.degraded else None, cfg.env.enabled, ctx.env_gpuperf)


def cache_path(cfg: Any, job_id: int) -> Path:
    """Where the prolog leaves the job's plan."""
    from pathlib import Path

    return Path(_cache_file(cfg, job_id))


def _cache_file(cfg: Any, job_id: int) -> str:
    return os.path.join(jobstate.job_path(cfg.general.run_dir, job_id), CACHE)


def read_cache(cfg: Any, job_id: int) -> dict[str, Any] | None:
    """The prolog's plan for this job, or None."""
    # the job's user owns env.json (its own TaskProlog reads it, and so may gpuperf-run): safeio
    return safeio.read_json(_cache_file(cfg, job_id))


class TaskOutput:
    """What the TaskProlog prints for one task, what it did (the hook's record), and the step's record
    (None when the step has one already or nothing was planned)."""

    __slots__ = ("text", "data", "step_path", "step_record")

    def __init__(self, text: str, data: dict[str, Any], step_path: str | None = None,
                 step_record: dict[str, Any] | None = None):
        self.text, self.data, self.step_path, self.step_record = text, data, step_path, step_record


def task_output(ctx: Any, cfg: Any, environ: Mapping[str, str], cache: dict[str, Any] | None,
                allowed_cpus: int | None = None, listing: Any = None) -> TaskOutput:
    """The TaskProlog's decision for one task with this environment and the job's cached plan (no I/O but
    the NCCL directory listing when ``listing`` is None); the daemon answers a TaskProlog with it too."""
    why = off_reason(ctx, cfg)
    if why or cache is None:
        # off for this step (srun --gpuperf=off, GPUPERF=off exported later): take back what an
        # earlier step injected and this one inherited; the user's own values are not ours to touch
        undo = env_plan.injected(environ) if why else []
        text = "".join(f"unset {n}\n" for n in undo + [env_plan.MARKER]) if undo else ""
        return TaskOutput(text, {"exported": [], "unset": undo, "disabled": why or "no cached plan for this job"})
    plan = task_plan(cache, cfg, environ, len(ctx.gpus) or 1, allowed_cpus, listing)
    pairs = exports(plan)
    out = [f"export {n}={v}" for n, v in pairs]
    if pairs and cfg.env.notice:
        names = ", ".join(n for n, _ in pairs[:-1])
        out.append(f"print gpuperf: set {names} for this node (GPUPERF=off to opt out; `gpuperf env --explain` says why)")
    record = {"exported": pairs[:-1], "disabled": plan.disabled,
              "user_kept": sorted(s.name for s in plan.skipped if s.reason == env_plan.USER_WINS)}
    step_id = ctx.step_id or "unknown"
    path = os.path.join(jobstate.job_path(cfg.general.run_dir, ctx.job_id), TASK_DIR, f"step-{step_id}.json")
    # forced variables the user set (NCCL_ALGO=Tree, ...) are what a report most needs to mention
    forced = {n: environ[n] for n in env_plan.user_set(environ)
              if n in env_plan.FORCE_REQUIRED and n != "CUDA_VISIBLE_DEVICES"}  # Slurm sets that one
    return TaskOutput("\n".join(out) + "\n" if out else "", record, path,
                      dict(record, step=step_id, user_forced=forced))


def step(ctx: Any, cfg: Any, state: Any) -> None:
    """TaskProlog step: print ``export`` lines for the cached plan (nothing when off or absent)."""
    cache = None if off_reason(ctx, cfg) or ctx.job_id is None else read_cache(cfg, ctx.job_id)
    out = task_output(ctx, cfg, os.environ, cache)
    if out.text:
        sys.stdout.write(out.text)
        sys.stdout.flush()
    state.data["env"] = out.data
    if out.step_path and out.step_record is not None and not os.path.exists(out.step_path):
        # once per step and node: what was exported, into the job's user-owned env/ dir, for the report
        try:
            jobstate.write_json(out.step_path, out.step_record, mode=0o600)
        except OSError:
            pass  # the report says "not recorded"; the task must not fail over it


def exports_for(ctx: Any, cfg: Any, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """What to export for one task (gpuperf-run): the cached plan, or one computed from the topology."""
    if off_reason(ctx, cfg):
        return []
    cache = read_cache(cfg, ctx.job_id) if ctx.job_id is not None else None
    if cache is None:
        from gpuperf.prolog import envplan

        gpus = list(ctx.gpus) if ctx.gpus else None
        topo = envplan.load_topology(cfg)
        if gpus is None:
            gpus = [g.get("index") for g in topo.get("gpus") or []]
        plan, _ = envplan.compute(ctx, cfg, topo, environ=environ, gpus=gpus)
        cache = plan.to_dict()
        sys_v, sys_src = envplan.nccl_system()
        cache.update(nccl_system=".".join(map(str, sys_v)) if sys_v else None, nccl_system_source=sys_src)
    return exports(task_plan(cache, cfg, environ, len(ctx.gpus) or 1))
