"""Prolog step ``env``: compute the job's environment once per job and cache it for the TaskProlog.

The cache ``<run_dir>/jobs/<id>/env.json`` is owned by the job's user (mode 0600): the TaskProlog runs
as that user and only reads it. ``<run_dir>/jobs/<id>/env/`` (the user's, 0700) receives what each
step's TaskProlog exported, for the report. When injection is off for the job (config, a broken
config, ``--gpuperf=off``) the cache says why and holds no variables, so the TaskProlog exports nothing.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from gpuperf.files import jobstate, log
from gpuperf.env import policy as envpolicy
from gpuperf.env import plan as env_plan
from gpuperf.env.policy import EnvPlan, JobShape
from gpuperf.env.ncclver import nccl_system


def count_hosts(nodelist: str | None) -> int | None:
    """Number of hosts in a Slurm host list ('n[1-3,5],m1' -> 5); None when empty or unparsable."""
    if not nodelist:
        return None
    total = 0
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        ranges = re.findall(r"\[([^\]]*)\]", item)
        n = 1
        for r in ranges:
            width = 0
            for part in r.split(","):
                a, _, b = part.partition("-")
                if not a.isdigit() or (b and not b.isdigit()):
                    return None
                width += (int(b) - int(a) + 1) if b else 1
            n *= width
        total += n
    return total or None


ADDRS_TTL_S = 300.0
_ADDRS: dict[tuple[str, ...], tuple[float, tuple[str, ...]]] = {}


def resolve_addrs(names: list[str], timeout_s: float = 1.0) -> tuple[str, ...]:
    """Non-loopback IPv4 addresses the names resolve to; () when resolution fails or takes too long.

    A found answer is remembered a few minutes: the daemon plans every job, and a slow resolver must
    not cost each multi-node job's prolog up to ``timeout_s``."""
    key = tuple(names)
    hit = _ADDRS.get(key)
    if hit and time.monotonic() - hit[0] < ADDRS_TTL_S:
        return hit[1]
    addrs = _resolve(names, timeout_s)
    if addrs:
        _ADDRS[key] = (time.monotonic(), addrs)
    return addrs


def _resolve(names: list[str], timeout_s: float) -> tuple[str, ...]:
    found: list[str] = []

    def work() -> None:
        for name in names:
            try:
                for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM):
                    addr = str(info[4][0])
                    if not addr.startswith("127.") and addr not in found:
                        found.append(addr)
            except (OSError, UnicodeError):
                continue

    # a slow DNS must not hold the job's start: give up after timeout_s
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout_s)
    return tuple(found) if not t.is_alive() else ()


def load_topology(cfg: Any, root: str | None = None) -> dict[str, Any]:
    """The node's topology dict (recorded node when ``root`` or the config names one, else live)."""
    from gpuperf import topology

    return topology.load_node_once(root if root is not None else topology.node_root(cfg), health=False).topology


def shape_from(ctx: Any, topo: dict[str, Any], environ: Mapping[str, str] | None = None, *,
               gpus: list[int] | None = None, nodes: int | None = None, cpus_per_task: int | None = None,
               gpus_per_task: int | None = None, nccl: tuple[Any, Any] = (None, None)) -> JobShape:
    """The job shape from a hook's context (+ the job's environment when the caller sees it)."""
    env = environ or {}
    if gpus is None:
        gpus = list(ctx.gpus) if ctx.gpus else []
    if nodes is None:
        nodes = (_int(env.get("SLURM_JOB_NUM_NODES")) or _int(env.get("SLURM_NNODES"))
                 or count_hosts(ctx.nodelist) or 1)
    node = ctx.node or topo.get("hostname")
    names = [n for n in dict.fromkeys([node, topo.get("hostname")]) if n]
    user = envpolicy.user_set(env)
    return JobShape(gpus=tuple(gpus), nodes=nodes, cpus_per_task=cpus_per_task, gpus_per_task=gpus_per_task,
                    user_set=user, nccl_version=nccl[0], nccl_source=nccl[1], node_name=node,
                    node_addrs=resolve_addrs(names) if nodes > 1 else (), partition=ctx.partition)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v else None
    except ValueError:
        return None


def rules_of(cfg: Any) -> list[Any]:
    """The admin rules of a validated config (validated again: cheap, and a hand-built config may skip it)."""
    from gpuperf.env import rules as envrules

    return envrules.parse(cfg.env.rules or [])


def compute(ctx: Any, cfg: Any, topo: dict[str, Any] | None = None, **shape_kw: Any) -> tuple[EnvPlan, JobShape | None]:
    """The job's plan on this node; a disabled plan (no variables, a reason) when injection is off."""
    why = env_plan.off_reason(cfg.error if cfg.degraded else None, cfg.env.enabled, ctx.env_gpuperf)
    if why:
        return EnvPlan(disabled=why), None
    topo = topo if topo is not None else load_topology(cfg)
    shape = shape_from(ctx, topo, **shape_kw)
    return envpolicy.plan(topo, shape, rules_of(cfg)), shape


def step(ctx: Any, cfg: Any, state: Any) -> None:
    """Prolog step: plan the job's environment, cache it for the TaskProlog, record it for the report."""
    if ctx.job_id is None:
        return
    t0 = time.perf_counter()
    try:
        plan, _ = compute(ctx, cfg)
    except Exception as e:  # noqa: BLE001 - no plan is better than a failed job; say why in the cache
        plan = EnvPlan(disabled=f"gpuperf could not plan the environment: {type(e).__name__}: {e}")
        log.get("env").error("job %s: %s", ctx.job_id, plan.disabled)
    sys_v, sys_src = nccl_system()
    data = plan.to_dict()
    data.update(job_id=ctx.job_id, computed=time.time(),
                nccl_system=".".join(map(str, sys_v)) if sys_v else None, nccl_system_source=sys_src)
    path = jobstate.job_dir(cfg.general.run_dir, ctx.job_id) / env_plan.CACHE
    jobstate.write_json(path, data, mode=0o600)
    _give_to_user(path, ctx.uid, 0o600)
    task_dir = path.parent / env_plan.TASK_DIR
    task_dir.mkdir(mode=0o700, exist_ok=True)
    _give_to_user(task_dir, ctx.uid, 0o700)
    state.data["env"] = {"vars": data["vars"], "skipped": data["skipped"], "notes": data["notes"],
                         "disabled": plan.disabled, "ms": round((time.perf_counter() - t0) * 1000, 3)}


def _give_to_user(path: Path, uid: int | None, mode: int) -> None:
    """chown to the job's user so its TaskProlog (running as that user) can use it."""
    if uid is None or uid == os.geteuid():
        return
    try:
        os.chown(path, uid, -1)
        os.chmod(path, mode)
    except OSError as e:
        log.get("env").warning("cannot give %s to uid %s: %s", path, uid, e.strerror)
