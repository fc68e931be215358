"""Advice with its evidence, framework included (issue 35): the frameworks a job's CUDA processes mapped, read from
/proc/PID/maps by a pure, bounded parser; PyTorch's remedies only where PyTorch is in evidence, JAX's and CuPy's in
their own terms, neutral words where none is; TF32 only under the condition that tells matrix products from other
FP32 math; every recommendation names the evidence it rests on."""

from __future__ import annotations

import re
import time

import pytest

from gpuperf import diagnosis
from gpuperf.diagnosis import frameworks
from gpuperf.diagnosis import jobsummary as summary
from report_fixtures import aggregates, context


def maps(*paths: str) -> str:
    return "".join(f"7f{i:08x}000-7f{i:08x}fff r-xp 00000000 fd:01 {100 + i} {p}\n" for i, p in enumerate(paths)) + \
        "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]\n"


CUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"
TORCH = maps("/usr/bin/python3.12", CUDA, "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
             "/opt/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so")
JAX = maps("/usr/bin/python3.12", CUDA, "/opt/venv/lib/python3.12/site-packages/jaxlib/_jax.so",
           "/opt/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
CUPY = maps("/usr/bin/python3.12", CUDA, "/opt/venv/lib/python3.12/site-packages/cupy/_core/core.cpython-312-x86_64-linux-gnu.so",
            "/opt/venv/lib/python3.12/site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so")
PLAIN = maps("/home/alice/bin/nbody", "/usr/local/cuda/lib64/libcudart.so.13.0.48", CUDA)


@pytest.mark.parametrize("text, want", [(TORCH, ["torch"]), (JAX, ["jax"]), (CUPY, ["cupy"]), (PLAIN, ["cuda"]),
                                        (maps("/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/libc.so.6"), []),
                                        ("", []), ("garbage\n\n  \n", [])])
def test_the_maps_parser_names_the_framework_a_process_mapped(text, want):
    assert frameworks.from_maps(text) == want


def test_the_maps_parser_is_bounded_and_a_path_with_spaces_is_read_whole():
    # a process that mapped 100,000 regions: the parser reads MAX_LINES of them and MAX_BYTES, never more
    huge = maps(*(f"/tmp/lib{i}.so" for i in range(100000))) + maps(CUDA)
    t0 = time.process_time()
    assert frameworks.from_maps(huge) == []              # libcuda sits past the bound
    assert time.process_time() - t0 < 5.0
    assert frameworks.from_maps(maps("/home/a b/site-packages/torch/lib/libtorch_cuda.so")) == ["torch"]


def test_the_frameworks_of_a_jobs_processes_and_nodes_are_their_union_and_unknown_stays_unknown():
    assert frameworks.union([["torch"], ["cuda"]]) == ["torch"]          # a helper process beside the trainer
    assert frameworks.union([["jax"], ["torch"]]) == ["jax", "torch"]
    assert frameworks.union([None, None]) is None and frameworks.union([[], None]) == []


# the job shapes whose advice has a framework's words, each as the node daemon's aggregates
QUIET = dict(nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, pcie_tx_bps=1e8, pcie_rx_bps=1e8)
SHAPES = {
    "input": dict(util_gpu_pct=35.0, sm_active_pct=30.0, tensor_active_pct=20.0),
    "memory": dict(util_gpu_pct=100.0, sm_active_pct=97.0, tensor_active_pct=1.0, fp32_active_pct=10.0,
                   int_active_pct=20.0, dram_active_pct=60.0),
    "far_from_roof": dict(util_gpu_pct=98.0, sm_active_pct=85.0, tensor_active_pct=20.0, dram_active_pct=30.0),
    "launch": dict(util_gpu_pct=40.0, sm_active_pct=1.0, tensor_active_pct=0.0, dram_active_pct=0.5),
    "fp32_low_occupancy": dict(util_gpu_pct=100.0, sm_active_pct=97.0, sm_occupancy_pct=15.0, tensor_active_pct=0.0,
                               fp32_active_pct=70.0, fp64_active_pct=0.0, dram_active_pct=8.0),
}
PYTORCH_WORDS = re.compile(r"torch|PyTorch|DataLoader|num_workers|pin_memory|autocast|fused optimi[sz]er|"
                           r"DistributedDataParallel|channels_last", re.I)


def advice_of(shape: str, fw: list[str] | None) -> list[str]:
    a = aggregates(ngpus=1, **{**QUIET, **SHAPES[shape]})
    if fw is not None:
        a["frameworks"] = fw
    d = summary.node_summary(a, context())["diagnosis"]
    return d["recommendations"] + [f["fix"] for f in d["findings"]] + d["notes"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("fw", [None, [], ["cuda"], ["jax"], ["cupy"]])
def test_no_pytorch_advice_where_pytorch_is_not_in_evidence(shape, fw):
    bad = [t for t in advice_of(shape, fw) if PYTORCH_WORDS.search(t)]
    assert not bad, bad


@pytest.mark.parametrize("shape, word", [("input", "DataLoader"), ("memory", "torch.compile"),
                                         ("far_from_roof", "torch.compile"), ("launch", "torch.compile"),
                                         ("fp32_low_occupancy", "allow_tf32")])
def test_pytorch_advice_where_pytorch_is_in_evidence(shape, word):
    assert any(word in t for t in advice_of(shape, ["torch"])), advice_of(shape, ["torch"])


@pytest.mark.parametrize("fw, word", [(["jax"], "jax.jit"), (["cupy"], "cupy.fuse")])
def test_jax_and_cupy_get_advice_in_their_own_terms(fw, word):
    assert any(word in t for t in advice_of("memory", fw))


def test_tf32_advice_is_conditional_on_the_measurement_that_tells_matrix_products_from_other_fp32_math():
    # an n-body code (FP32 SIMT, no matrix product) and an FP32 GEMM read alike: FP32 busy at low occupancy
    fix = next(t for t in advice_of("fp32_low_occupancy", ["cupy"]) if "TF32" in t)
    assert "cannot be told" in fix and "Nsight Systems" in fix and "only if they are matrix products" in fix
    assert "CUPY_TF32=1" in fix and not PYTORCH_WORDS.search(fix)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_recommendation_names_the_evidence_it_rests_on(shape):
    a = aggregates(ngpus=1, **{**QUIET, **SHAPES[shape]})
    d = summary.node_summary(a, context())["diagnosis"]
    assert d["recommendations"] and all("[evidence: " in r for r in d["recommendations"]), d["recommendations"]


def test_the_summary_carries_the_frameworks_read_and_a_merge_their_union():
    a1, a2 = aggregates(node="n1", ngpus=1), aggregates(node="n2", ngpus=1)
    a1["frameworks"], a2["frameworks"] = ["torch"], ["cuda"]
    n1, n2 = (summary.node_summary(a, context(node=a["node"])) for a in (a1, a2))
    assert n1["frameworks"] == ["torch"] and n2["frameworks"] == ["cuda"]
    assert summary.merge([n1, n2], ["n1", "n2"])["frameworks"] == ["torch"]
    assert summary.node_summary(aggregates(ngpus=1), context())["frameworks"] is None
    assert diagnosis.diagnose(dict(n2, frameworks=None)).cls == n2["diagnosis"]["class"]


# the daemon's read: /proc/PID/maps of a job's CUDA process, beside its environment, through the same deadline

def _proc(root, pid: int, maps_text: str, env: bytes = b"SLURM_JOB_ID=7\0", cgroup: str = "/a"):
    from test_profiled import _fake_proc

    d = _fake_proc(root, pid, env, cgroup=cgroup)
    (d / "maps").write_text(maps_text)
    return d


def test_the_daemon_reads_a_jobs_process_maps_once_within_the_deadline_and_bounded(tmp_path):
    from gpuperf.daemon.attribution import Attributor, Mismatches
    from gpuperf.model.aggregates import JobAggregates
    from gpuperf.samplers.base import GpuSample

    d = _proc(tmp_path, 500, TORCH)
    _proc(tmp_path, 501, CUPY, env=b"PATH=/bin\0", cgroup="/b")         # a process of no job: not read
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.frameworks_of(500) == ["torch"] and attr.frameworks_of(999) is None     # gone: not read
    (d / "maps").write_text(PLAIN)
    assert attr.frameworks_of(500) == ["torch"]                                          # once per process

    class Run:
        agg = JobAggregates.new(7, "n1", [0], 0.0, 1.0)

    class Store:
        def add_event(self, *a):
            pass

    running = {7: Run()}
    m = Mismatches(attr, running, Store(), {"mismatches": 0})
    sample = GpuSample(gpu=0, t=1.0, processes=[{"pid": 500}, {"pid": 501}])
    m.check(1.0, [sample], {0: [7]})
    assert Run.agg.to_dict()["frameworks"] == ["torch"]
    state = JobAggregates.from_state(Run.agg.to_state())
    assert state.frameworks == ["torch"]
    assert JobAggregates.new(8, "n1", [0], 0.0, 1.0).to_dict()["frameworks"] is None     # nothing read: unknown


def test_a_maps_read_that_hangs_costs_its_deadline_once_and_leaves_the_framework_unknown(tmp_path):
    from gpuperf.daemon.attribution import Attributor
    from gpuperf.daemon.procread import Deadline
    import threading

    _proc(tmp_path, 600, TORCH)
    gate = threading.Event()
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"),
                      deadline=Deadline(deadline_s=0.2))
    attr._maps = lambda pid: gate.wait(30)             # a read blocked in the kernel (a FUSE fault)
    t0 = time.monotonic()
    assert attr.frameworks_of(600) is None and attr.frameworks_of(600) is None
    assert time.monotonic() - t0 < 2.0
    gate.set()
