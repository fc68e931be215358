"""What the multi-GPU acceptance jobs must show (issue 29), as pure checks: each returns the problems found.

Inputs are what the test reads on the node: the ranks' own lines (``rankN: pid= cpus= cvd= device= nccl=``,
printed by ``benchmarks/workloads/_comm.py``), the job's affinity plan (``gpuperf.affinity.plan``), what the
TaskProlog exported (``run_dir/jobs/JOB/env/step-N.json``), the GPU processes seen while the jobs ran
(nvidia-smi's compute apps, each attributed by gpuperf's own ``Attributor``) and the daemon's aggregates.
Unit-tested on recorded and synthetic figures (``tests/unit/test_multicheck.py``), so the harness is proven
where no two GPUs are.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from gpuperf.affinity import plan as aff

_RANK = re.compile(r"^rank(\d+): ((?:\w+=\S+ ?)+)$")


def parse_ranks(output: str) -> dict[int, dict[str, str]]:
    """The ranks' own lines of a job's output, by rank."""
    out: dict[int, dict[str, str]] = {}
    for line in output.splitlines():
        m = _RANK.match(line.strip())
        if m:
            out[int(m.group(1))] = dict(kv.split("=", 1) for kv in m.group(2).split())
    return out


def physical_gpu(rank: Mapping[str, str], job_gpus: list[int]) -> int | None:
    """The node's GPU index a rank computed on: its ``cuda:i`` among the GPUs CUDA_VISIBLE_DEVICES shows it,
    which are the job's GPUs in order (Slurm numbers them 0..n-1 under ConstrainDevices, else by index)."""
    m = re.match(r"cuda:(\d+)$", rank.get("device", ""))
    cvd = [x for x in rank.get("cvd", "").split(",") if x.isdigit()]
    if not m or int(m.group(1)) >= len(cvd):
        return None
    shown = int(cvd[int(m.group(1))])
    renumbered = cvd == [str(i) for i in range(len(job_gpus))]
    return job_gpus[shown] if renumbered else shown


def rank_problems(ranks: Mapping[int, Mapping[str, str]], world: int, job_gpus: list[int], plan: aff.ParsedPlan,
                  exported: Iterable[tuple[str, str]], on_gpu: bool = True) -> list[str]:
    """Each rank: present, on its own GPU (the plan's, else the job's r-th), CUDA_VISIBLE_DEVICES the job's
    GPUs, its CPU mask the plan's (or Slurm's where the plan is a no-op), every NCCL variable the TaskProlog
    exported, and its PYTORCH_CUDA_ALLOC_CONF where the rank says it, present with its value. ``on_gpu=False``: ranks that ran on the CPU (gloo, the fake-GPU
    cluster), whose GPU is not checked."""
    bad: list[str] = []
    if sorted(ranks) != list(range(world)):
        return [f"ranks {sorted(ranks)} reported, want 0..{world - 1}"]
    allowed = {",".join(map(str, range(len(job_gpus)))), ",".join(map(str, job_gpus))}
    nccl_want = {n: v for n, v in exported if n.startswith("NCCL_")}
    used = []
    for r in range(world):
        kv = ranks[r]
        planned = plan.ranks.get((world, r))
        want_gpu = planned.gpus[0] if planned and planned.gpus else job_gpus[r % len(job_gpus)]
        got_gpu = physical_gpu(kv, job_gpus)
        used.append(got_gpu)
        if kv.get("cvd") not in allowed:
            bad.append(f"rank {r}: CUDA_VISIBLE_DEVICES={kv.get('cvd')}, want the job's GPUs ({' or '.join(sorted(allowed))})")
        if on_gpu and got_gpu != want_gpu:
            bad.append(f"rank {r}: computed on GPU {got_gpu}, the plan gives it GPU {want_gpu}")
        try:
            cpus = aff.parse_cpu_list(kv.get("cpus", ""))
        except ValueError:
            cpus = []
        if planned and planned.cpus:
            if cpus != list(planned.cpus):
                bad.append(f"rank {r}: CPU mask {kv.get('cpus')}, the plan says {aff.format_cpu_list(planned.cpus)}")
        elif not cpus:
            bad.append(f"rank {r}: no CPU mask read ({kv.get('cpus')})")
        have = dict(p.split("=", 1) for p in kv.get("nccl", "").split(",") if "=" in p)
        for n, v in nccl_want.items():
            if have.get(n) != v:
                bad.append(f"rank {r}: {n}={have.get(n)}, the TaskProlog exported {v}")
        alloc = dict(exported).get("PYTORCH_CUDA_ALLOC_CONF")
        if alloc is not None and "alloc" in kv and kv["alloc"] != alloc.replace(" ", ""):
            bad.append(f"rank {r}: PYTORCH_CUDA_ALLOC_CONF={kv['alloc']}, the TaskProlog exported {alloc}")
    if on_gpu and len(set(used)) != world:
        bad.append(f"ranks share a GPU: {used}")
    return bad


def planned_masks_disjoint(plan: aff.ParsedPlan, world: int) -> list[str]:
    """Where the plan pins ranks, no two ranks share a CPU (a rank per GPU, each with its own cores): holds
    where each GPU's NUMA node has at least as many of the job's cores as ranks (the plan shares them otherwise)."""
    seen: dict[int, int] = {}
    bad = []
    for r in range(world):
        p = plan.ranks.get((world, r))
        for c in (p.cpus if p else ()):
            if c in seen:
                bad.append(f"CPU {c} planned for ranks {seen[c]} and {r}")
            seen[c] = r
    return bad


def attribution_problems(live: Iterable[Mapping[str, Any]], gpu_job: Mapping[int, int]) -> list[str]:
    """Every GPU process seen (``{pid, gpu, job}``: job as gpuperf's Attributor names it) belongs to the job
    holding that GPU; each job holding a GPU was seen there."""
    bad, seen = [], set()
    for p in live:
        want = gpu_job.get(p["gpu"])
        if p.get("job") != want:
            bad.append(f"pid {p['pid']} on GPU {p['gpu']}: attributed to job {p.get('job')}, the GPU is job {want}'s")
        seen.add((p["gpu"], p.get("job")))
    for gpu, job in gpu_job.items():
        if (gpu, job) not in seen:
            bad.append(f"no process of job {job} seen on its GPU {gpu}")
    return bad


def own_gpus_problems(aggregates: Mapping[str, Any], job_gpus: list[int]) -> list[str]:
    """A job's aggregates hold its own GPUs only, each sampled, none with a foreign process."""
    got = sorted(int(g) for g in (aggregates.get("gpus") or {}))
    bad = [] if got == sorted(job_gpus) else [f"aggregates on GPUs {got}, the job holds {sorted(job_gpus)}"]
    for g, a in (aggregates.get("gpus") or {}).items():
        if not a.get("samples"):
            bad.append(f"GPU {g}: no samples")
        if a.get("foreign_processes"):
            bad.append(f"GPU {g}: foreign processes {a['foreign_processes']}")
    return bad


def overlap_s(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Seconds two (start, end) intervals share."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def unused_gpu_flagged(summary: Mapping[str, Any]) -> bool:
    """The job's report flags a GPU it held and did not use: class unused_gpus, or a finding naming it."""
    d = summary.get("diagnosis") or {}
    if d.get("class") == "unused_gpus":
        return True
    text = " ".join(str(f.get("id") or f.get("name") or f) if isinstance(f, dict) else str(f)
                    for f in (d.get("findings") or []) + (d.get("evidence") or []))
    return "unused" in text.lower()
