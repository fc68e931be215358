"""The multi-GPU acceptance harness (tests/gpu/multicheck.py, issue 29) under real Slurm on the fake-GPU test
cluster: a ``--gres=gpu:2 -n2`` job whose ``srun`` starts the two ranks of the communication workload
(``zoo_comm_allreduce_nvlink_bf16.py``) on gloo, checked as tests/gpu/test_multi_gpu.py checks it on real
GPUs: both ranks met and reported, each rank's CPU mask the plan's, CUDA_VISIBLE_DEVICES the job's GPUs, the
NCCL variables the TaskProlog exported present in each rank. Needs a CPU PyTorch the job user can run
(``GPUPERF_TORCH_CPU_PYTHON``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf.affinity import plan as aff
from gpuperf.env.plan import TASK_DIR
from gpuperf.prolog import affinityplan

from test_affinity_slurm import spank_cluster  # noqa: F401 - the fixture: SPANK plugin, a 2-NUMA topology here

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import multicheck as mc  # noqa: E402

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def torch_cpu():
    py = os.environ.get("GPUPERF_TORCH_CPU_PYTHON", "")
    if not py or subprocess.run([py, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        pytest.skip("no CPU PyTorch for the job user (GPUPERF_TORCH_CPU_PYTHON=/path/to/python with torch)")
    return py


def test_two_rank_srun_job_checked_by_the_multi_gpu_harness(spank_cluster, torch_cpu):
    c = spank_cluster
    work = c.layout.out_dir / "workloads"
    shutil.copytree(REPO / "benchmarks" / "workloads", work, dirs_exist_ok=True)
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    script = f"srun -n2 {torch_cpu} {work}/zoo_comm_allreduce_nvlink_bf16.py --seconds 1 --device cpu --mib 1\n"
    job = c.sbatch(script, "-n2", "--gres=gpu:2", "--job-name=gp-ranks", user=c.user)
    assert c.wait(job, timeout=240) == "COMPLETED", c.job_output(job)
    out = c.job_output(job)
    ranks = mc.parse_ranks(out)
    gpus = list(c.job_record(job, "prolog")["context"]["gpus"])
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), job).read_text())
    steps = sorted((c.run_dir / "jobs" / str(job) / TASK_DIR).glob("step-*.json"))
    exported = [tuple(p) for p in json.loads(steps[0].read_text())["exported"]]
    # this node (PCIe, no NVLink) gets no NCCL variable; PyTorch's allocator setting stands for the injection
    assert len(gpus) == 2 and not plan.noop and "PYTORCH_CUDA_ALLOC_CONF" in dict(exported), (gpus, exported)
    assert "busbw_gbps=" in out
    assert mc.rank_problems(ranks, 2, gpus, plan, exported, on_gpu=False) == [], (out, plan)
    # both GPUs sit on NUMA 0, whose one CPU here the two ranks share (the plan shares cores when there are
    # fewer than ranks): planned_masks_disjoint holds on the GPU machines, not on this 2-CPU one
    assert mc.planned_masks_disjoint(plan, 2) == ["CPU 0 planned for ranks 0 and 1"]
    # the harness is not blind: rank 1 off its planned CPUs, or without an exported variable, is named
    wrong = {0: ranks[0], 1: dict(ranks[1], cpus="0-1", alloc="none")}  # left unpinned, the setting lost
    got = mc.rank_problems(wrong, 2, gpus, plan, exported, on_gpu=False)
    assert any(p.startswith("rank 1: CPU mask") for p in got) and any("the TaskProlog exported" in p for p in got)
