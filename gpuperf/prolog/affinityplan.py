"""Prolog step: plan where each task of the job runs and leave the plan for the SPANK plugin.

Writes ``<run_dir>/jobs/<id>/affinity.plan`` (format: ``gpuperf.affinity``) and an
``applied/`` directory owned by the job user, where each task (plugin or ``gpuperf-run``)
records what it applied; ``gpuperf.affinity.report`` reads those back for the job's report.
"""

from __future__ import annotations

import glob
import json
import os
import time
from pathlib import Path
from typing import Any

from gpuperf.affinity import plan as affinity
from gpuperf.affinity.report import APPLIED_DIR, PLAN_FILE, REPORT_FILE
from gpuperf.files import acl, jobstate, log
from gpuperf.files.config import Config
from gpuperf.hookbase.hook import HookState
from gpuperf.hookbase.jobctx import JobContext
from gpuperf.access.slurm import Slurm, SlurmError



def plan_path(run_dir: str, job_id: int) -> Path:
    """Where the job's plan file lives."""
    return jobstate.job_dir(run_dir, job_id) / PLAN_FILE


def load_topology(cfg: Config) -> dict[str, Any]:
    """The node's topology: ``[affinity] topology_file`` when set, else discovered (node_root or live)."""
    path = cfg.affinity.topology_file
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    from gpuperf.topology import load_node_once, node_root

    return load_node_once(node_root(cfg), health=False).topology


def cgroup_patterns(cgroup_root: str, uid: int | None, job_id: int, sluid: str | None = None) -> list[str]:
    """Where Slurm puts the job's cpuset, per layout (pure): cgroup v1 ``cpuset/slurm[_<node>]/uid_<uid>/job_<id>``;
    v2 ``[unified/]system.slice/[<node>_]slurmstepd.scope/job_<id>`` to 25.11, and from 26.05
    ``.../slurmstepd.scope/<SLUID>`` (26.05.5's cgroup_v2.so names the job's directory by the SLUID alone
    when the job has one; SLURM_JOB_SLUID reaches the prolog). Names are made from the job's own ids,
    never read out of a path."""
    u = uid if uid is not None else "*"
    out = [f"{cgroup_root}/cpuset/slurm*/uid_{u}/job_{job_id}/cpuset.effective_cpus",
           f"{cgroup_root}/cpuset/slurm*/uid_{u}/job_{job_id}/cpuset.cpus"]
    names = [f"job_{job_id}"] + ([sluid] if sluid and sluid.isalnum() else [])
    for name in names:
        out += [f"{cgroup_root}/system.slice/*slurmstepd.scope/{name}/cpuset.cpus.effective",
                f"{cgroup_root}/*/system.slice/*slurmstepd.scope/{name}/cpuset.cpus.effective"]
    return out


def cgroup_cpus(cgroup_root: str, uid: int | None, job_id: int, sluid: str | None = None) -> str | None:
    """The job's cpuset (cpulist text) from Slurm's cgroup layout (v1, v2, 26.05's SLUID-named v2), None
    when not found. Only where the job's cgroup exists when the prolog runs: from 23.11 with
    ``PrologFlags=RunInJob`` (the prolog runs in the job's extern step); 22.05 makes it after the prolog
    (seen on the test cluster, v1, ``ConstrainCores=yes``), and the caller then asks scontrol."""
    for pat in cgroup_patterns(cgroup_root, uid, job_id, sluid):
        for path in sorted(glob.glob(pat)):
            try:
                text = Path(path).read_text().strip()
            except OSError:
                continue
            if text:
                return text
    return None


def job_cpus(ctx: JobContext, cfg: Config, topology: dict[str, Any]) -> tuple[list[int], str]:
    """The CPUs the job may use here and where that came from: cgroup, scontrol, else all CPUs."""
    online = sorted((topology.get("cpus") or {}).get("online") or
                    {c for n in topology.get("numa_nodes") or [] for c in n.get("cpus") or []})
    text = cgroup_cpus(cfg.affinity.cgroup_root, ctx.uid, ctx.job_id, ctx.sluid) if ctx.job_id is not None else None
    if text:
        try:
            # the job's own cpuset is the authority; the node's CPUs bound it (a list never names more)
            return _on_node(affinity.parse_cpu_list(text), online), "cgroup"
        except ValueError:
            pass
    slurm = Slurm(cfg.general.slurm_bin_dir)
    try:
        ids = slurm.job_cpu_ids(ctx.job_id, ctx.node) if ctx.job_id is not None else None
        # CPU_IDs are Slurm's abstract ids (socket, core, thread order), not the kernel's
        layout = _node_layout(slurm, cfg, ctx.node) if ids and ctx.node else None
        mapped = affinity.slurm_ids_to_os(affinity.parse_cpu_list(ids), topology, *layout) if layout else None
    except (SlurmError, ValueError):
        mapped = None
    mapped = _on_node(mapped or [], online)
    if mapped:
        return mapped, "scontrol"
    return online, "all"


def _on_node(cpus: list[int], online: list[int]) -> list[int]:
    """``cpus`` that the node has (all of them when the node's list is unknown)."""
    if not online:
        return cpus
    have = set(online)
    return [c for c in cpus if c in have]


LAYOUT_TTL_S = 300.0
_LAYOUTS: dict[tuple[str, str], tuple[float, Any]] = {}


def _node_layout(slurm: Slurm, cfg: Config, node: str) -> Any:
    """Slurm's CPU layout of the node, remembered a few minutes: it changes only with slurm.conf, and
    the daemon plans every job's affinity (one scontrol call less per job)."""
    key = (str(cfg.general.slurm_bin_dir), node)
    hit = _LAYOUTS.get(key)
    now = time.monotonic()
    if hit and now - hit[0] < LAYOUT_TTL_S:
        return hit[1]
    layout = slurm.node_cpu_layout(node)
    if layout:
        _LAYOUTS[key] = (now, layout)
    return layout


def early_noop(ctx: JobContext, cfg: Config) -> str | None:
    """Why there is nothing to plan, decided before reading the node (no NVML, no scontrol)."""
    if not cfg.affinity.enabled:
        return "affinity disabled ([affinity] enabled = false)"
    if (ctx.env_gpuperf or "").lower() == "off":
        return "gpuperf switched off for this job (--gpuperf=off)"
    if not ctx.gpus:
        return "no GPUs for the job on this node: Slurm's binding kept"
    return None


def build(ctx: JobContext, cfg: Config, topology: dict[str, Any], cpus: list[int], source: str
          ) -> tuple[affinity.Allocation, list[affinity.AffinityPlan]]:
    """The plans for every task count a step of this job may have on this node."""
    alloc = affinity.Allocation(gpus=tuple(ctx.gpus), cpus=tuple(cpus), cpus_source=source)
    known = [ctx.ntasks_local] if ctx.ntasks_local else []
    plans = [affinity.plan(topology, alloc, t, cfg.affinity.mem_policy, cfg.affinity.hyperthreads)
             for t in affinity.plan_counts(alloc, known)]
    return alloc, plans


def step(ctx: JobContext, cfg: Config, state: HookState) -> None:
    """Prolog step: compute and write the job's affinity plan; record it in ``state.data['affinity']``."""
    if ctx.job_id is None:
        return
    why = early_noop(ctx, cfg)
    if why:
        alloc = affinity.Allocation(gpus=tuple(ctx.gpus), cpus=(), cpus_source="none")
        plans = [affinity.AffinityPlan(tasks=1, noop=why)]
    else:
        topology = load_topology(cfg)
        node_why = affinity.node_noop(topology)
        if node_why:
            # nothing to pin on this node: the job's CPUs (a cgroup glob, else scontrol: ~10 ms) are not needed
            alloc = affinity.Allocation(gpus=tuple(ctx.gpus), cpus=(), cpus_source="not needed")
            plans = [affinity.AffinityPlan(tasks=1, noop=node_why)]
        else:
            alloc, plans = build(ctx, cfg, topology, *job_cpus(ctx, cfg, topology))
    jdir = jobstate.job_dir(cfg.general.run_dir, ctx.job_id)
    _write_atomic(jdir / PLAN_FILE, affinity.plan_text(ctx.job_id, alloc, plans), ctx.uid)
    _applied_dir(jdir / APPLIED_DIR, ctx.uid)
    jobstate.write_json(jdir / REPORT_FILE, _planned_view(plans, alloc))
    # the report shows the one-rank-per-GPU shape (the common one) and the job's own shape when known
    shown = {p.tasks: p for p in plans if p.tasks in (max(1, len(alloc.gpus)), ctx.ntasks_local or 0)}
    state.data["affinity"] = {
        "plan_file": str(jdir / PLAN_FILE), "cpus_source": alloc.cpus_source,
        "job_cpus": affinity.format_cpu_list(alloc.cpus), "gpus": list(alloc.gpus),
        "noop": next((p.noop for p in plans if p.noop), None),
        "warnings": sorted({w for p in plans for w in p.warnings}),
        "tasks_planned": [p.tasks for p in plans], "plans": {str(t): p.to_dict() for t, p in shown.items()},
    }


def _write_atomic(path: Path, text: str, uid: int | None) -> None:
    """The plan: root's, readable by the job's user (its tasks pin from it) and no other user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    how = acl.grant_read(tmp, uid)
    if how.startswith("none"):
        log.get("affinity").warning("%s: the job's user cannot read it (%s): its tasks stay unpinned", path, how[6:])
    os.replace(tmp, path)


def _applied_dir(path: Path, uid: int | None) -> None:
    """A directory the job's tasks (running as the job user) can write their records into; no other user
    reads it (root does, through safeio)."""
    path.mkdir(parents=True, exist_ok=True)
    if uid is not None and os.geteuid() == 0:
        os.chown(path, uid, -1)
    path.chmod(0o700)


def _planned_view(plans: list[affinity.AffinityPlan], alloc: affinity.Allocation) -> dict[str, Any]:
    """The report's view before any task ran: one rank per GPU as planned."""
    shape = next((p for p in plans if p.tasks == max(1, len(alloc.gpus))), None)
    view: dict[str, Any] = {"cpus_source": alloc.cpus_source}
    for r in (shape.ranks if shape else []):
        view[str(r.rank)] = {"gpu": affinity.format_cpu_list(r.gpus), "numa": affinity.format_cpu_list(r.numa_nodes),
                             "cpus": list(r.cpus), "status": "planned", "mem": r.mem_policy, "step": None}
    return view


def plan_warnings(run_dir: str, job_id: int) -> list[str]:
    """The plan's warnings (for a TaskProlog that prints them when ``[affinity] warn_in_job``)."""
    try:
        return affinity.parse_plan_text(plan_path(run_dir, job_id).read_text()).warnings
    except (OSError, ValueError):
        return []
