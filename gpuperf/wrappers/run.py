"""gpuperf-run CMD...: pin this task next to its GPU(s), set gpuperf's environment, then exec CMD.

For sites that load neither the SPANK plugin nor the TaskProlog: the same plan the plugin
applies (the prolog's ``affinity.plan``, or one computed here when there is none), applied with
``os.sched_setaffinity`` and ``set_mempolicy`` (ctypes), and the environment of
``gpuperf.prolog.envtask.exports_for``. Any failure of gpuperf's own is one line on stderr and
the command still runs, unchanged.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import time
from pathlib import Path
from typing import Mapping

from gpuperf.affinity import plan as affinity
from gpuperf.files import config, jobstate
from gpuperf.hookbase import jobctx
from gpuperf.affinity.plan import RankPlan

USAGE = "usage: gpuperf-run CMD [ARGS...]   (pins the task next to its GPU, sets gpuperf's environment, execs CMD)"
# set_mempolicy(2) is not in libc: the syscall number per architecture
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "ppc64": 261}
MPOL = {"prefer": 1, "bind": 2}
MAX_NODES = 1024


def local_tasks(env: Mapping[str, str]) -> int | None:
    """Tasks of this step on this node: SLURM_STEP_TASKS_PER_NODE ('2(x3),1') at SLURM_NODEID."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not spec:
        return None
    counts: list[int] = []
    try:
        for part in spec.split(","):
            n, _, rep = part.partition("(x")
            counts.extend([int(n)] * (int(rep.rstrip(")")) if rep else 1))
        return counts[int(env.get("SLURM_NODEID", "0"))]
    except (ValueError, IndexError):
        return None


def own_cpuset(proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> list[int] | None:
    """The CPUs of this process's cpuset cgroup (v1 or v2), None when it cannot be read."""
    try:
        lines = Path(proc_root, "self", "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuset" in controllers.split(","):
            files = [Path(cgroup_root, "cpuset", path.lstrip("/"), "cpuset.effective_cpus")]
        elif controllers == "":
            files = [Path(cgroup_root, path.lstrip("/"), "cpuset.cpus.effective")]
        else:
            continue
        for f in files:
            try:
                return affinity.parse_cpu_list(f.read_text())
            except (OSError, ValueError):
                continue
    return None


def rank_plan(ctx: jobctx.JobContext, cfg: config.Config, env: Mapping[str, str]) -> tuple[RankPlan | None, str]:
    """This task's plan and a status word (the same words the plugin records)."""
    tasks = local_tasks(env) or ctx.ntasks_local or 1
    rank = ctx.local_rank or 0
    path = jobstate.job_dir(cfg.general.run_dir, ctx.job_id) / "affinity.plan" if ctx.job_id is not None else None
    if path is not None and path.exists():
        parsed = affinity.parse_plan_text(path.read_text())
        if parsed.noop:
            return None, "noop"
        r = parsed.ranks.get((tasks, rank))
        return r, "ok" if r else "noshape"
    # no prolog ran for this job: plan here from the node and what this step may use
    from gpuperf.prolog.affinityplan import load_topology

    topology = load_topology(cfg)
    cpus = own_cpuset() or sorted(os.sched_getaffinity(0))
    alloc = affinity.Allocation(gpus=tuple(ctx.gpus), cpus=tuple(cpus), cpus_source="self")
    p = affinity.plan(topology, alloc, tasks, cfg.affinity.mem_policy, cfg.affinity.hyperthreads)
    if p.noop:
        return None, "noop"
    return (p.ranks[rank], "ok") if rank < len(p.ranks) else (None, "noshape")


def set_mempolicy(policy: str, nodes: tuple[int, ...]) -> None:
    """set_mempolicy(2) for this process; raises OSError with the kernel's errno."""
    nr = SYS_SET_MEMPOLICY.get(platform.machine())
    if nr is None:
        raise OSError(0, f"set_mempolicy: unknown syscall number on {platform.machine()}")
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * (MAX_NODES // bits))()
    for n in nodes:
        mask[n // bits] |= 1 << (n % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    # maxnode counts one past the last bit the kernel reads
    if libc.syscall(ctypes.c_long(nr), ctypes.c_int(MPOL[policy]), mask, ctypes.c_ulong(MAX_NODES + 1)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def apply(r: RankPlan) -> tuple[str, str]:
    """Pin this process as ``r`` says; returns (status, mem) as the applied record spells them."""
    if not r.cpus:
        return "unpinned", "none"
    os.sched_setaffinity(0, r.cpus)
    mem = "none"
    if r.mem_policy in MPOL and r.mems:
        try:
            set_mempolicy(r.mem_policy, r.mems)
            mem = "ok"
        except OSError as e:
            mem = f"failed:{errno.errorcode.get(e.errno, '?')}"
            print(f"gpuperf-run: set_mempolicy({r.mem_policy}, {affinity.format_cpu_list(r.mems)}): "
                  f"{e.strerror}: CPUs pinned, memory not", file=sys.stderr)
    return "ok", mem


def omp_exports(r: RankPlan | None, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """OMP_NUM_THREADS/OMP_PLACES for the rank unless the user set them (the plugin's rule, same markers)."""
    if r is None or not r.cpus or not r.omp_num_threads or not r.omp_places:
        return []
    aff_t, _, aff_p = env.get("GPUPERF_AFFINITY_OMP", "").partition(" ")
    env_t = env.get("GPUPERF_OMP", "").partition(" ")[0]
    cur_t, cur_p = env.get("OMP_NUM_THREADS"), env.get("OMP_PLACES")
    ours_t = cur_t is None or cur_t in {x for x in (aff_t, env_t) if x}
    ours_p = cur_p is None or (bool(aff_t) and cur_p == aff_p)
    if not (ours_t and ours_p):
        return []
    mark = f"{r.omp_num_threads} {r.omp_places}"
    return [("OMP_NUM_THREADS", str(r.omp_num_threads)), ("OMP_PLACES", r.omp_places),
            ("GPUPERF_AFFINITY_OMP", mark), ("GPUPERF_OMP", mark)]


def env_exports(ctx: jobctx.JobContext, cfg: config.Config, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """gpuperf's environment for the job (the env part), [] when that part is not installed."""
    try:
        from gpuperf.prolog.envtask import exports_for
    except ImportError:
        return []
    try:
        return list(exports_for(ctx, cfg, dict(env)))
    except Exception as e:  # noqa: BLE001 - the env part failing must not cost the pinning
        print(f"gpuperf-run: environment not set: {type(e).__name__}: {e}", file=sys.stderr)
        return []


def _record(cfg: config.Config, ctx: jobctx.JobContext, env: Mapping[str, str], r: RankPlan | None,
            status: str, mem: str, t0: float) -> None:
    if ctx.job_id is None:
        return
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "run"
    path = jobstate.job_dir(cfg.general.run_dir, ctx.job_id) / "applied" / f"{step}.{ctx.local_rank or 0}.run"
    cpus = affinity.format_cpu_list(os.sched_getaffinity(0))
    line = affinity.applied_line({
        "job": ctx.job_id, "step": step, "rank": ctx.local_rank or 0, "tasks": local_tasks(env) or 1,
        "pid": os.getpid(), "status": status, "gpus": affinity.format_cpu_list(r.gpus) if r else "none",
        "numa": affinity.format_cpu_list(r.numa_nodes) if r else "none", "cpus": cpus or "none",
        "policy": r.mem_policy if r else "none", "mem": mem, "us": round((time.perf_counter() - t0) * 1e6, 1)})
    try:
        path.write_text(line)
    except OSError:
        pass  # no applied/ dir: no prolog ran for this job, nobody collects the record


def prepare(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Pin this process and return the variables to export before exec."""
    t0 = time.perf_counter()
    cfg = config.load_or_defaults()
    ctx = jobctx.from_env("run", env)
    if (ctx.env_gpuperf or "").lower() == "off":
        return []
    exports = env_exports(ctx, cfg, env)
    r, status, mem = None, "noop", "none"
    if cfg.affinity.enabled:
        try:
            r, status = rank_plan(ctx, cfg, env)
            if r is not None:
                status, mem = apply(r)
        except (OSError, ValueError) as e:
            r, status = None, "failed"
            print(f"gpuperf-run: affinity not applied: {e}", file=sys.stderr)
        _record(cfg, ctx, env, r, status, mem, t0)
    # the rank's threading beats the env part's generic default; a user's own value beats both
    omp = dict(omp_exports(r if status == "ok" else None, env))
    return [(k, v) for k, v in exports if k not in omp] + list(omp.items())


def main(argv: list[str] | None = None) -> int:
    """Entry point of gpuperf-run: never returns on success (exec)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    try:
        for k, v in prepare(os.environ):
            os.environ[k] = v
    except Exception as e:  # noqa: BLE001 - gpuperf's failure must not stop the user's command
        print(f"gpuperf-run: internal error, running the command unchanged: {type(e).__name__}: {e}", file=sys.stderr)
    try:
        os.execvp(args[0], args)
    except OSError as e:
        print(f"gpuperf-run: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
