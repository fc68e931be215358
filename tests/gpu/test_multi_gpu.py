"""Multi-GPU acceptance on real GPUs under real Slurm (issue 29): jobs across two GPUs of one host.

- a 2-GPU job whose ``srun`` starts one task per GPU running an NCCL all-reduce: each rank's CPU mask, GPU,
  ``CUDA_VISIBLE_DEVICES`` and the NCCL variables the TaskProlog exported as the affinity plan says; both
  processes attributed to the job (gpuperf's Attributor on nvidia-smi's compute apps, the daemon's
  mismatch counter 0, no foreign process);
- two 1-GPU jobs side by side, each attributed and aggregated on its own GPU only;
- a job that holds two GPUs and computes on one: its report and AdminComment say ``unused_gpus``.

The checks are ``multicheck.py``'s (unit-tested in tests/unit/test_multicheck.py). Skipped with the reason on
a machine with fewer than 2 GPUs; needs the GPU suite's cluster (``conftest.gpu_cluster``).
``benchmarks/device/h200x2_issue29.sh`` runs it on a lent 2x H200.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

import multicheck as mc
from gpunode import real_gpu_files, wait_admincomment
from test_gpu_slurm import _metric, _metrics

pytestmark = pytest.mark.slurm
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
SECONDS = 10


@pytest.fixture(scope="module")
def cluster(request):
    """The GPU suite's cluster, on a machine with at least two GPUs."""
    n = len(real_gpu_files())
    if n < 2:
        pytest.skip(f"the multi-GPU jobs need 2 GPUs of one host; this machine has {n} "
                    "(benchmarks/device/h200x2_issue29.sh runs them on a 2x H200)")
    return request.getfixturevalue("gpu_cluster")


def _uuid_index() -> dict[str, int]:
    p = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                       text=True, timeout=60)
    return {u.strip(): int(i) for i, u in (l.split(",") for l in p.stdout.splitlines() if "," in l)}


def _probe(pid: int) -> bool:
    """gpuperf's own idle-time fleet probe (conftest turns it on), which ends when a job registers: no job's."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"probe_script" in f.read()
    except OSError:
        return False


def watch(c, jobs: list[int], timeout: float) -> list[dict]:
    """While any of ``jobs`` is active: each GPU process (nvidia-smi's compute apps) once per (pid, GPU), with
    the job gpuperf's Attributor (the daemon's code) gives it and the job its environment names."""
    from gpuperf.daemon.attribution import Attributor

    attr, uuids, seen = Attributor(), _uuid_index(), {}
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(c.job_state(j) in ACTIVE for j in jobs):
        p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
        for line in p.stdout.splitlines():
            pid, _, uuid = (x.strip() for x in line.partition(","))
            if pid.isdigit() and (int(pid), uuid) not in seen and uuid in uuids and not _probe(int(pid)):
                seen[(int(pid), uuid)] = {"pid": int(pid), "gpu": uuids[uuid], "job": attr.job_of(int(pid))}
        time.sleep(0.5)
    return list(seen.values())


def _gpus(c, job: int) -> list[int]:
    return list(c.job_record(job, "prolog")["context"]["gpus"])


def _py(c, script: str, args: str) -> str:
    return f"{c.torch_python} {c.workloads}/{script} {args}"


@pytest.fixture(scope="module")
def ddp(cluster, gpu_results):
    """The 2-GPU all-reduce job: srun -n2, one task per GPU; the GPU processes seen while it ran."""
    c = cluster
    script = f"srun -n2 {_py(c, 'zoo_comm_allreduce_nvlink_bf16.py', f'--seconds {SECONDS} --mib 256')}\n"
    job = c.sbatch(script, "--gres=gpu:2", "-n2", "-c4", "--job-name=gp-ddp", user=c.user)
    live = watch(c, [job], SECONDS + 240)
    state = c.wait(job, timeout=120)
    out = c.job_output(job)
    gpu_results["multi_ddp"] = {"job": job, "state": state, "live": live, "output": out[-3000:]}
    return job, state, out, live


def test_two_gpu_srun_job_ranks_pinned_and_given_the_environment_as_planned(cluster, ddp, gpu_results):
    from gpuperf.affinity import plan as aff
    from gpuperf.env.plan import TASK_DIR
    from gpuperf.prolog import affinityplan

    c = cluster
    job, state, out, _ = ddp
    assert state == "COMPLETED", out[-3000:]
    busbw = float(re.search(r"busbw_gbps=([\d.]+)", out).group(1))
    gpus = _gpus(c, job)
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), job).read_text())
    steps = sorted((c.run_dir / "jobs" / str(job) / TASK_DIR).glob("step-*.json"))
    exported = [tuple(p) for p in json.loads(steps[0].read_text())["exported"]] if steps else []
    ranks = mc.parse_ranks(out)
    gpu_results["multi_ranks"] = {"gpus": gpus, "ranks": ranks, "plan_noop": plan.noop, "busbw_gbps": busbw,
                                  "exported": exported, "planned": {r: aff.format_cpu_list(p.cpus)
                                                                    for (t, r), p in plan.ranks.items() if t == 2}}
    assert len(gpus) == 2 and busbw > 0
    assert steps, "the TaskProlog recorded no step"
    # exported as the job's plan says, no more and no less: on one node over NVLink the plan may well set
    # no NCCL variable at all (NCCL picks its transports itself); every NCCL one it sets is checked per rank
    cache = json.loads((c.run_dir / "jobs" / str(job) / "env.json").read_text())
    planned_names = {v["name"] for v in cache.get("vars", [])}
    gpu_results["multi_ranks"]["plan"] = {"vars": sorted(planned_names),
                                          "skipped": [(s["name"], s["reason"]) for s in cache.get("skipped", [])]}
    assert {n for n, _ in exported} - {"GPUPERF_OMP"} == planned_names, (exported, planned_names)
    assert mc.rank_problems(ranks, 2, gpus, plan, exported) == []
    assert mc.planned_masks_disjoint(plan, 2) == []


def test_both_ranks_attributed_to_the_two_gpu_job(cluster, ddp, gpu_results):
    c = cluster
    job, _, _, live = ddp
    gpus = _gpus(c, job)
    agg = json.loads((c.run_dir / "jobs" / str(job) / "aggregates.json").read_text())
    mism = _metric(_metrics(c), "gpuperf_daemon_attribution_mismatches_total") or \
        _metric(_metrics(c), "gpuperf_daemon_attribution_mismatches") or 0.0
    gpu_results["multi_attribution"] = {"live": live, "mismatches": mism}
    assert len({p["pid"] for p in live}) >= 2, live
    assert mc.attribution_problems(live, {g: job for g in gpus}) == []
    assert mc.own_gpus_problems(agg, gpus) == []
    assert mism == 0


@pytest.fixture(scope="module")
def side_by_side(cluster, ddp, gpu_results):
    """Two 1-GPU GEMM jobs submitted together (after the 2-GPU job: the node's GPUs are free)."""
    c = cluster
    jobs = [c.sbatch(_py(c, "gemm_bf16.py", f"--seconds {SECONDS}") + "\n", "--gres=gpu:1", "-c4",
                     f"--job-name=gp-side{i}", user=c.user) for i in (0, 1)]
    live = watch(c, jobs, SECONDS + 240)
    states = [c.wait(j, timeout=120) for j in jobs]
    gpu_results["multi_side_by_side"] = {"jobs": jobs, "states": states, "live": live}
    return jobs, states, live


def test_two_one_gpu_jobs_side_by_side_each_attributed_only_its_own_gpu(cluster, side_by_side, gpu_results):
    c = cluster
    jobs, states, live = side_by_side
    assert states == ["COMPLETED", "COMPLETED"], [c.job_output(j)[-1500:] for j in jobs]
    gpus = {j: _gpus(c, j) for j in jobs}
    assert all(len(g) == 1 for g in gpus.values()) and gpus[jobs[0]] != gpus[jobs[1]], gpus
    windows = []
    for j in jobs:
        out = c.job_output(j)
        windows.append((float(re.search(r"t_start=([\d.]+)", out).group(1)), float(re.search(r"t_end=([\d.]+)", out).group(1))))
    together = mc.overlap_s(*windows)
    gpu_results["multi_side_by_side"].update(gpus=gpus, overlap_s=together)
    assert together > SECONDS / 2, windows  # they ran at the same time, not one after the other
    assert mc.attribution_problems(live, {gpus[j][0]: j for j in jobs}) == []
    for j in jobs:
        agg = json.loads((c.run_dir / "jobs" / str(j) / "aggregates.json").read_text())
        assert mc.own_gpus_problems(agg, gpus[j]) == [], (j, agg.get("gpus", {}).keys())


def test_job_holding_two_gpus_and_using_one_is_flagged(cluster, side_by_side, gpu_results):
    c = cluster
    job = c.sbatch(_py(c, "one_busy.py", f"--seconds {SECONDS}") + "\n", "--gres=gpu:2", "-c4",
                   "--job-name=gp-onebusy", user=c.user)
    state = c.wait(job, timeout=SECONDS + 240)
    row = wait_admincomment(c, job, state)
    js = c.run("gpuperf", "report", job, "--json", user=c.user)
    summary = json.loads(js.stdout) if js.returncode == 0 else {}
    gpu_results["multi_one_busy"] = {"job": job, "state": state, "admincomment": row.get("AdminComment", "")[:400],
                                     "diagnosis": summary.get("diagnosis")}
    assert state == "COMPLETED", c.job_output(job)[-1500:]
    assert "class=unused_gpus" in row.get("AdminComment", ""), row
    assert mc.unused_gpu_flagged(summary), summary.get("diagnosis")
