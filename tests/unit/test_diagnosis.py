"""The diagnosis: every labelled real recording gets its class; rules and thresholds on synthetic jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf import diagnosis
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import fromrecording
from report_fixtures import aggregates, context

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "recordings"
# workload label in the recording's header -> the class the diagnosis must give
EXPECTED = {"matmul_bf16": "compute_bound", "membound": "memory_bound", "idle": "idle",
            "tiny_kernels": "launch_bound", "input_bound": "input_bound", "allreduce": "communication_bound"}


def _labelled() -> list[Path]:
    return sorted(p for p in RECORDINGS.glob("*.jsonl*") if fromrecording.workload(str(p)) in EXPECTED)


@pytest.mark.parametrize("path", _labelled() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no labelled recordings in tests/data/recordings yet"))], ids=lambda p: p.name if p else "none")
def test_every_labelled_recording_gets_its_class(path):
    aggs, series = fromrecording.replay_job(str(path), job_id=7, node="rec", with_series=True)
    s = summary.node_summary(aggs, {"job_id": 7, "node": "rec"})
    want = EXPECTED[fromrecording.workload(str(path))]
    got = s["diagnosis"]
    assert got["class"] == want, f"{path.name}: {got['class']} (evidence: {got['evidence']}; job: {s['job']})"
    assert 1 <= len(got["recommendations"]) <= 3 and got["evidence"]
    # the series only add evidence, never change the class
    assert diagnosis.diagnose(s, series=series).cls == want


def test_all_six_workloads_are_recorded():
    labels = {fromrecording.workload(str(p)) for p in _labelled()}
    missing = set(EXPECTED) - labels
    if missing:
        pytest.skip(f"not recorded yet: {', '.join(sorted(missing))}")
    assert labels == set(EXPECTED)


def _diag(thresholds=None, **means):
    s = summary.node_summary(aggregates(ngpus=4, **means), context())
    return diagnosis.diagnose(s, thresholds=thresholds), s


def _rare_kernels(idle_share: float, cpu_time_s: float) -> dict:
    a = aggregates(ngpus=2, util_gpu_pct=0.5, sm_active_pct=0.2, tensor_active_pct=0.0, dram_active_pct=0.0,
                   nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    for g in a["gpus"].values():
        g["idle_s"] = idle_share * g["seconds"]
    a["host"].update(cpu_time_s=cpu_time_s, iowait_pct=0.0)
    return summary.node_summary(a, context())["diagnosis"]


def test_idle_when_no_kernel_runs():
    d = _rare_kernels(idle_share=0.97, cpu_time_s=3600.0 * 8)
    assert d["class"] == "idle" and any("--gres" in r for r in d["recommendations"])


def test_rare_kernels_are_input_bound_unless_the_host_is_idle_too():
    # kernels in half the samples, the GPU busy 0.5% of the time, the host working: waiting for input
    busy_host = _rare_kernels(idle_share=0.5, cpu_time_s=3600.0 * 4)
    assert busy_host["class"] == "input_bound" and any("waits" in e for e in busy_host["evidence"])
    # the same GPU figures on a host doing nothing: idle
    assert _rare_kernels(idle_share=0.5, cpu_time_s=3600.0 * 0.1)["class"] == "idle"


def test_the_100_percent_utilization_trap_is_a_underfilled_not_launch_gaps_and_noted():
    # a kernel runs all the time but fills 12% of the SMs: too few blocks; CUDA graphs cannot help
    d, _ = _diag(util_gpu_pct=100.0, sm_active_pct=12.0, tensor_active_pct=1.0, dram_active_pct=5.0,
                 nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    assert d.cls == "underfilled"
    assert any("utilization" in n and "SM active" in n for n in d.notes)
    assert not any("CUDA graphs" in r and "capture" in r for r in d.recommendations)
    assert any("more blocks" in r for r in d.recommendations)


def test_small_kernels_with_gaps_are_launch_bound_and_say_what_would_tell_the_causes_apart():
    d, _ = _diag(util_gpu_pct=40.0, sm_active_pct=1.0, tensor_active_pct=0.0, dram_active_pct=0.5,
                 nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    assert d.cls == "launch_bound"
    assert any("Nsight Systems" in e for e in d.evidence)
    graphs = next(r for r in d.recommendations if "CUDA graphs" in r)
    assert graphs.startswith("if the trace shows gaps") and "at most the 60%" in graphs


def test_memory_bound_when_dram_dominates_and_compute_when_tensor_does():
    mem, _ = _diag(util_gpu_pct=100.0, sm_active_pct=90.0, tensor_active_pct=5.0, dram_active_pct=85.0,
                   nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    comp, _ = _diag(util_gpu_pct=100.0, sm_active_pct=95.0, tensor_active_pct=90.0, dram_active_pct=25.0,
                    nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    assert mem.cls == "memory_bound" and comp.cls == "compute_bound"
    # FP8 only where the GPU model has FP8, and as a note (the tensor datatype is not in evidence)
    assert any("FP8" in n for n in comp.notes) and not any("FP8" in r for r in comp.recommendations)
    s = summary.node_summary(aggregates(ngpus=1, name="NVIDIA A100-SXM4-80GB", tensor_active_pct=90.0,
                                        nvlink_tx_bps=0.0, nvlink_rx_bps=0.0), context())
    assert s["diagnosis"]["class"] == "compute_bound" and not any("FP8" in r for r in s["diagnosis"]["recommendations"])
    assert not any("FP8" in n for n in s["diagnosis"]["notes"])


def test_communication_bound_on_busy_nvlink_with_idle_tensor_pipes():
    d, _ = _diag(util_gpu_pct=100.0, sm_active_pct=25.0, tensor_active_pct=0.0, dram_active_pct=35.0,
                 nvlink_tx_bps=150e9, nvlink_rx_bps=150e9)
    assert d.cls == "communication_bound" and any("NVLink" in e for e in d.evidence)


def test_multi_node_nccl_on_tcp_is_named():
    parts = []
    for node in ("n1", "n2"):
        a = aggregates(node=node, ngpus=4, util_gpu_pct=100.0, sm_active_pct=15.0, tensor_active_pct=2.0,
                       dram_active_pct=5.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, pcie_tx_bps=1e9, pcie_rx_bps=1e9)
        a["host"]["net_bytes"] = {"eth0": {"rx_bytes": 3e9 * 3600, "tx_bytes": 3e9 * 3600},
                                  "mlx5_0": {"rx_bytes": 1e6, "tx_bytes": 1e6}}
        a["host"]["wall_s"] = 3600.0
        parts.append(summary.node_summary(a, context(node=node)))
    m = summary.merge(parts, ["n1", "n2"])
    assert m["diagnosis"]["class"] == "communication_bound"
    assert any("TCP" in e for e in m["diagnosis"]["evidence"])
    assert any("InfiniBand" in r for r in m["diagnosis"]["recommendations"])


def test_input_bound_when_the_gpu_waits_and_host_figures_are_evidence():
    a = aggregates(ngpus=2, util_gpu_pct=35.0, sm_active_pct=30.0, tensor_active_pct=20.0, dram_active_pct=10.0,
                   nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    a["host"]["iowait_pct"] = 40.0
    s = summary.node_summary(a, context())
    d = s["diagnosis"]
    assert d["class"] == "input_bound"
    assert any("I/O wait 40%" in e for e in d["evidence"]) and any("NVMe" in r for r in d["recommendations"])


def test_hardware_throttling_wins_but_the_power_cap_alone_does_not():
    a = aggregates(ngpus=2, tensor_active_pct=90.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    for g in a["gpus"].values():
        g["throttle_s"]["sw_power_cap"] = 0.9 * g["seconds"]
    capped = summary.node_summary(a, context())["diagnosis"]
    assert capped["class"] == "compute_bound" and any("power cap" in n for n in capped["notes"])
    for g in a["gpus"].values():
        g["throttle_s"]["hw_thermal"] = 0.3 * g["seconds"]
    assert summary.node_summary(a, context())["diagnosis"]["class"] == "throttled"


def test_imbalanced_flag_names_the_gpus():
    a = aggregates(ngpus=4, tensor_active_pct=90.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    a["gpus"]["3"]["metrics"]["sm_active_pct"]["mean"] = 20.0
    d = summary.node_summary(a, context())["diagnosis"]
    assert d["imbalanced"] and any("n1:3" in e for e in d["evidence"])
    assert 1 <= len(d["recommendations"]) <= 3 and any("balance" in r for r in d["recommendations"])


def test_thresholds_from_config_change_the_class():
    means = dict(util_gpu_pct=100.0, sm_active_pct=80.0, tensor_active_pct=35.0, dram_active_pct=20.0,
                 nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    assert _diag(**means)[0].cls == "compute_bound"
    cfg = config.parse("[report]\nthresholds = {compute_pipe_pct = 60, memory_dram_pct = 15}\n")
    assert _diag(thresholds=cfg.report.thresholds, **means)[0].cls == "memory_bound"


def test_unknown_or_bad_thresholds_are_config_errors_naming_the_key():
    with pytest.raises(config.ConfigError, match="idle_pct"):
        config.parse("[report]\nthresholds = {idle_pct = 3}\n")
    with pytest.raises(config.ConfigError, match="compute_pipe_pct"):
        config.parse("[report]\nthresholds = {compute_pipe_pct = 'high'}\n")


def test_without_profiling_metrics_the_class_comes_from_utilization_and_says_so():
    a = aggregates(ngpus=1, util_gpu_pct=2.0)
    a["gpus"]["0"]["idle_s"] = 0.95 * a["gpus"]["0"]["seconds"]
    for k in ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "fp16_active_pct", "fp32_active_pct",
              "fp64_active_pct"):
        del a["gpus"]["0"]["metrics"][k]
    d = summary.node_summary(a, context())["diagnosis"]
    assert d["class"] == "idle" and any("utilization only" in n for n in d["notes"])


def test_series_show_a_bursty_gpu_as_evidence():
    s = summary.node_summary(aggregates(ngpus=1, util_gpu_pct=45.0, sm_active_pct=40.0, tensor_active_pct=30.0,
                                        nvlink_tx_bps=0.0, nvlink_rx_bps=0.0), context())
    bursty = {"0": {"t": list(range(40)), "util_gpu_pct": [0.0, 0.0, 99.0, 95.0] * 10}}
    steady = {"0": {"t": list(range(40)), "util_gpu_pct": [45.0] * 40}}
    ev = diagnosis.diagnose(s, series=bursty).evidence
    assert any("bursts" in e and "50%" in e for e in ev)
    assert not any("bursts" in e for e in diagnosis.diagnose(s, series=steady).evidence)
