"""The multi-GPU acceptance checks (tests/gpu/multicheck.py, issue 29) on plans gpuperf writes for recorded
nodes and on rank lines as the communication workloads print them: each check finds what it must."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))

import multicheck as mc  # noqa: E402

from gpuperf.affinity import plan as aff  # noqa: E402
from gpuperf.topology import load_node  # noqa: E402

# 2 sockets, GPUs 0-1 on NUMA 0 and 2-3 on NUMA 1 (tests/data/nodes/pcie-l40s-2s)
TWO_SOCKET = REPO / "tests" / "data" / "nodes" / "pcie-l40s-2s"
EXPORTED = [("NCCL_NVLS_ENABLE", "0"), ("NCCL_IB_DISABLE", "1"), ("OMP_NUM_THREADS", "16")]


def _plan(gpus: tuple[int, ...], cpus: tuple[int, ...], root: Path = TWO_SOCKET) -> aff.ParsedPlan:
    topo = load_node(str(root), health=False).topology
    alloc = aff.Allocation(gpus=gpus, cpus=cpus, cpus_source="cgroup")
    plans = [aff.plan(topo, alloc, t) for t in aff.plan_counts(alloc)]
    return aff.parse_plan_text(aff.plan_text(7, alloc, plans))


def _line(rank: int, cpus: str, cvd: str = "0,1", device: str | None = None, nccl: str = "NCCL_IB_DISABLE=1,NCCL_NVLS_ENABLE=0") -> str:
    return f"rank{rank}: pid={100 + rank} cpus={cpus} cvd={cvd} device={device or f'cuda:{rank}'} omp=8 nccl={nccl}"


def _ranks_as_planned(plan: aff.ParsedPlan, cvd: str = "0,1") -> dict[int, dict[str, str]]:
    text = "noise\n" + "\n".join(_line(r, aff.format_cpu_list(plan.ranks[(2, r)].cpus), cvd) for r in (0, 1))
    return mc.parse_ranks(text + "\nzoo_comm_allreduce_nvlink_bf16: busbw_gbps=300\n")


def test_ranks_as_the_plan_says_pass():
    topo = load_node(str(TWO_SOCKET), health=False).topology
    cpus = tuple(sorted(c for n in topo["numa_nodes"] for c in n["cpus"]))
    plan = _plan((0, 1), cpus)
    assert not plan.noop and plan.ranks[(2, 0)].cpus and plan.ranks[(2, 0)].cpus != plan.ranks[(2, 1)].cpus
    ranks = _ranks_as_planned(plan)
    assert mc.rank_problems(ranks, 2, [0, 1], plan, EXPORTED) == []
    assert mc.planned_masks_disjoint(plan, 2) == []


def test_a_rank_on_the_wrong_cpus_gpu_or_without_an_injected_variable_is_named():
    topo = load_node(str(TWO_SOCKET), health=False).topology
    cpus = tuple(sorted(c for n in topo["numa_nodes"] for c in n["cpus"]))
    plan = _plan((0, 1), cpus)
    r0 = aff.format_cpu_list(plan.ranks[(2, 0)].cpus)
    r1 = aff.format_cpu_list(plan.ranks[(2, 1)].cpus)
    # rank 1 left on rank 0's CPUs (the SPANK plugin did not pin it)
    got = mc.rank_problems(mc.parse_ranks(_line(0, r0) + "\n" + _line(1, r0)), 2, [0, 1], plan, EXPORTED)
    assert any(p.startswith("rank 1: CPU mask") for p in got), got
    # both ranks on cuda:0: they share a GPU and rank 1 is not on its planned one
    got = mc.rank_problems(mc.parse_ranks(_line(0, r0) + "\n" + _line(1, r1, device="cuda:0")), 2, [0, 1], plan, EXPORTED)
    assert "rank 1: computed on GPU 0, the plan gives it GPU 1" in got and any("share a GPU" in p for p in got)
    # the TaskProlog's NCCL variable missing in a rank
    got = mc.rank_problems(mc.parse_ranks(_line(0, r0) + "\n" + _line(1, r1, nccl="NCCL_NVLS_ENABLE=0")), 2, [0, 1], plan, EXPORTED)
    assert got == ["rank 1: NCCL_IB_DISABLE=None, the TaskProlog exported 1"]
    # a rank that never reported
    assert mc.rank_problems(mc.parse_ranks(_line(0, r0)), 2, [0, 1], plan, EXPORTED) == ["ranks [0] reported, want 0..1"]
    # CUDA_VISIBLE_DEVICES naming a GPU the job does not hold
    got = mc.rank_problems(_ranks_as_planned(plan, cvd="2,3"), 2, [0, 1], plan, EXPORTED)
    assert any("CUDA_VISIBLE_DEVICES=2,3" in p for p in got)


def test_one_numa_node_plan_is_a_noop_and_slurms_mask_stands():
    plan = _plan((0, 1), (0, 1, 2, 3), REPO / "tests" / "data" / "nodes" / "h100-vm")
    assert plan.noop and not plan.ranks
    ranks = mc.parse_ranks(_line(0, "0-3") + "\n" + _line(1, "0-3"))
    assert mc.rank_problems(ranks, 2, [0, 1], plan, EXPORTED) == []
    assert mc.rank_problems(mc.parse_ranks(_line(0, "0-3") + "\n" + _line(1, "none")), 2, [0, 1], plan, EXPORTED) \
        == ["rank 1: no CPU mask read (none)"]


@pytest.mark.parametrize("cvd,device,job,want", [("0,1", "cuda:1", [0, 1], 1), ("0", "cuda:0", [1], 1),
                                                   ("1", "cuda:0", [1], 1), ("2,3", "cuda:1", [2, 3], 3),
                                                   ("0,1", "cuda:1", [2, 3], 3), ("none", "cuda:0", [0], None),
                                                   ("0", "cpu", [0], None)])
def test_physical_gpu_whether_slurm_renumbers_or_not(cvd, device, job, want):
    assert mc.physical_gpu({"cvd": cvd, "device": device}, job) == want


def test_attribution_each_process_to_the_job_holding_its_gpu():
    gpu_job = {0: 11, 1: 12}
    live = [{"pid": 1, "gpu": 0, "job": 11}, {"pid": 2, "gpu": 1, "job": 12}]
    assert mc.attribution_problems(live, gpu_job) == []
    assert mc.attribution_problems(live + [{"pid": 3, "gpu": 1, "job": 11}], gpu_job) == \
        ["pid 3 on GPU 1: attributed to job 11, the GPU is job 12's"]
    assert mc.attribution_problems(live[:1], gpu_job) == ["no process of job 12 seen on its GPU 1"]
    assert mc.attribution_problems([{"pid": 4, "gpu": 0, "job": None}] + live, gpu_job)[0].startswith("pid 4")


def test_own_gpus_only_in_the_aggregates():
    agg = {"gpus": {"1": {"samples": 20, "foreign_processes": []}}}
    assert mc.own_gpus_problems(agg, [1]) == []
    assert mc.own_gpus_problems(agg, [0]) == ["aggregates on GPUs [1], the job holds [0]"]
    agg2 = {"gpus": {"0": {"samples": 0}, "1": {"samples": 5, "foreign_processes": [{"pid": 9, "job": 3}]}}}
    assert mc.own_gpus_problems(agg2, [0, 1]) == ["GPU 0: no samples", "GPU 1: foreign processes [{'pid': 9, 'job': 3}]"]


def test_overlap_and_unused_gpu_flag():
    assert mc.overlap_s((0, 10), (5, 20)) == 5 and mc.overlap_s((0, 1), (2, 3)) == 0
    assert mc.unused_gpu_flagged({"diagnosis": {"class": "unused_gpus"}})
    assert mc.unused_gpu_flagged({"diagnosis": {"class": "compute_bound", "findings": [{"id": "unused_gpus"}]}})
    assert not mc.unused_gpu_flagged({"diagnosis": {"class": "compute_bound", "findings": [{"id": "tf32"}]}})
    assert not mc.unused_gpu_flagged({})


def test_ranks_on_the_cpu_skip_the_gpu_check_only():
    topo = load_node(str(TWO_SOCKET), health=False).topology
    cpus = tuple(sorted(c for n in topo["numa_nodes"] for c in n["cpus"]))
    plan = _plan((0, 1), cpus)
    r0, r1 = (aff.format_cpu_list(plan.ranks[(2, r)].cpus) for r in (0, 1))
    ranks = mc.parse_ranks(_line(0, r0, device="cpu") + "\n" + _line(1, r1, device="cpu"))
    assert mc.rank_problems(ranks, 2, [0, 1], plan, EXPORTED, on_gpu=False) == []
    assert any("computed on GPU None" in p for p in mc.rank_problems(ranks, 2, [0, 1], plan, EXPORTED))
    ranks[1]["cpus"] = r0
    assert mc.rank_problems(ranks, 2, [0, 1], plan, EXPORTED, on_gpu=False)[0].startswith("rank 1: CPU mask")


def test_the_allocator_setting_the_taskprolog_exported_is_checked_where_the_rank_says_it():
    plan = _plan((0, 1), (0, 1, 2, 3), REPO / "tests" / "data" / "nodes" / "h100-vm")
    exported = [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]
    ranks = mc.parse_ranks(_line(0, "0-3") + " alloc=expandable_segments:True\n" + _line(1, "0-3") + " alloc=none")
    assert mc.rank_problems(ranks, 2, [0, 1], plan, exported) == \
        ["rank 1: PYTORCH_CUDA_ALLOC_CONF=none, the TaskProlog exported expandable_segments:True"]
