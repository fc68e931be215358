"""The diagnosis on recordings of workloads that measured their own rate (header "achieved"): the class,
the findings, the phases, and the estimate against the achieved TFLOP/s or GB/s within the stated error
(gpuperf.diagnosis.roofline.ERROR_PCT; the table is benchmarks/results/diag_estimates.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuperf.model import admincomment
from gpuperf import diagnosis
from gpuperf.diagnosis import roofline
from gpuperf.report import fromrecording

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "recordings"
ERR = roofline.ERROR_PCT / 100.0


def job(name: str, gpus: int | None = 1, window: tuple[float, float] | None = None):
    path = RECORDINGS / name
    if not path.exists():
        pytest.skip(f"{name} not recorded (tests/data/recordings/README.md)")
    s, series = fromrecording.window_job(str(path), gpus=gpus, window=window)
    return s, diagnosis.diagnose(s, series=series), fromrecording.achieved(str(path))


@pytest.mark.parametrize("name", ["gemm_bf16-h100-80gb-hbm3.jsonl.gz", "gemm_bf16_2k-h200.jsonl.gz",
                                  "train_step-h100-80gb-hbm3.jsonl.gz", "train_step-h200.jsonl.gz",
                                  "gemm_fp32-h100-80gb-hbm3.jsonl.gz", "gemm_fp32-h200.jsonl.gz"])
def test_math_estimate_is_within_the_stated_error_of_what_the_workload_achieved(name):
    s, d, ach = job(name)
    assert d.cls == "compute_bound", d.evidence
    assert d.roofline["tflops"] == pytest.approx(ach["tflops"], rel=ERR)
    assert s["estimates"]["tflops_est_per_gpu"] == pytest.approx(ach["tflops"], rel=ERR)


def test_large_bf16_gemm_is_near_the_roof_and_the_advice_is_precision_or_algorithm():
    _, d, _ = job("gemm_bf16-h100-80gb-hbm3.jsonl.gz")
    assert d.roofline["compute_roof_pct"] >= 85 and not d.findings
    assert not any("far from" in r for r in d.recommendations)
    # the datatype of tensor work is not in evidence: FP8 is a note on what a bf16 job could gain, and the
    # recommendation names the measurement that tells (an FP8 job must not be told to use FP8)
    assert any("FP8" in n for n in d.notes) and not any("FP8" in r for r in d.recommendations)
    assert any("Nsight Systems" in r for r in d.recommendations)


def test_training_step_is_far_from_the_roof_and_the_advice_says_what_raises_it():
    for name in ("train_step-h100-80gb-hbm3.jsonl.gz", "train_step-h200.jsonl.gz"):
        _, d, _ = job(name)
        assert 15 <= d.roofline["compute_roof_pct"] <= 40
        assert d.recommendations[0].startswith("far from the math roof")
        # no framework read from the recording: neutral words; the same job with PyTorch in evidence gets its own
        assert not any("torch" in r for r in d.recommendations)
        s, _, _ = job(name)
        torch = diagnosis.diagnose(dict(s, frameworks=["torch"]), series=None)
        assert any("torch.compile" in r for r in torch.recommendations)
        assert not any("good:" in r or "FP8" in r for r in d.recommendations)


def test_fp32_gemm_without_tf32_is_told_it_leaves_the_tensor_cores_unused():
    for name in ("gemm_fp32-h100-80gb-hbm3.jsonl.gz", "gemm_fp32-h200.jsonl.gz"):
        _, d, ach = job(name)
        assert [f["kind"] for f in d.findings] == ["tensor_cores_unused"]
        assert "TF32" in d.recommendations[0] and not any("FP8" in r for r in d.recommendations)
        # the estimate is no longer below what the GEMM itself achieved by more than the error
        assert d.roofline["fp32_tflops"] >= ach["tflops"] * (1 - ERR)


def test_fp8_gemm_lies_between_the_tensor_estimate_and_twice_it():
    _, d, ach = job("gemm_fp8-h100-80gb-hbm3.jsonl.gz")
    assert d.cls == "compute_bound" and d.roofline["compute_roof_pct"] >= 85
    assert d.roofline["tensor_tflops"] * (1 - ERR) <= ach["tflops"] <= 2 * d.roofline["tensor_tflops"] * (1 + ERR)


def test_reduction_is_memory_bound_at_the_bandwidth_roof():
    s, d, ach = job("reduce_sum-h100-80gb-hbm3.jsonl.gz")
    assert d.cls == "memory_bound" and d.roofline["dram_roof_pct"] >= 85
    assert d.roofline["dram_gbps"] == pytest.approx(ach["gbps"], rel=ERR)
    assert any("fewer bytes" in r for r in d.recommendations)


def test_one_busy_gpu_of_two_leads_with_the_unused_gpu_and_its_waste_in_sacct():
    s, d, ach = job("one_busy-h200.jsonl.gz", gpus=None)
    assert d.cls == "unused_gpus" and d.busy_class == "compute_bound"
    assert d.unused["gpus"] == ["rec:1"] and d.unused["count"] == 1 and d.unused["of"] == 2
    idle_gpu = next(g for g in s["gpus"] if g["gpu"] == 1)
    assert d.unused["wasted_gpu_hours"] == pytest.approx(idle_gpu["seconds"] / 3600, rel=0.01)
    assert "--gres" in d.recommendations[0] and not any("DataLoader" in r for r in d.recommendations)
    # the working GPU's estimate is its own, not diluted by the idle one
    assert d.roofline["tflops"] == pytest.approx(ach["tflops"], rel=ERR)
    head = admincomment.decode_headline(admincomment.encode(s))
    assert head["class"] == "unused_gpus" and head["unused"] == "1/2" and head["busy"] == "compute_bound"
    assert float(head["wasted"].removesuffix("gpuh")) == pytest.approx(d.unused["wasted_gpu_hours"], abs=0.001)


def test_all_reduce_over_sockets_is_communication_through_host_memory():
    s, d, ach = job("allreduce_sockets-h200.jsonl.gz", gpus=None)
    assert d.cls == "communication_bound" and d.unused is None
    assert any("host memory" in e and "sockets" in e for e in d.evidence)
    assert any("NET/Socket" in r for r in d.recommendations)
    # PCIe carries the all-reduce: per GPU per direction within 30% of the bus bandwidth it measured
    assert s["job"]["pcie_bps"] / 2 / 1e9 == pytest.approx(ach["busbw_gbps"], rel=0.3)


def test_input_bound_then_compute_is_two_phases_with_their_shares():
    path = RECORDINGS / "phases-h100-80gb-hbm3.jsonl.gz"
    s, d, ach = job(path.name)
    # the loader's first batch (0.4-1.2 s, before any GPU step) is the job's start-up: 2 s at 1/120 of it a point
    assert [p["class"] for p in d.phases] == ["startup", "input_bound", "compute_bound"]
    switch = ach["t_switch"] - ach["t_start"]
    before = d.phases[0]["share_pct"] + d.phases[1]["share_pct"]
    assert before == pytest.approx(100 * switch / (ach["t_end"] - ach["t_start"]), abs=5)
    assert d.phases[0]["share_pct"] <= 10
    assert sum(p["share_pct"] for p in d.phases) == pytest.approx(100, abs=0.5)
    # the compute phase alone: its estimate against the rate the workload measured there
    _, dc, _ = job(path.name, window=(ach["t_switch"], ach["t_end"]))
    assert dc.cls == "compute_bound" and dc.roofline["tflops"] == pytest.approx(ach["tflops"], rel=ERR)


def test_steady_workloads_have_no_phases():
    for name in ("gemm_bf16-h100-80gb-hbm3.jsonl.gz", "reduce_sum-h100-80gb-hbm3.jsonl.gz"):
        assert job(name)[1].phases == []


def test_the_finalize_series_gives_the_node_summary_its_phases():
    # what the daemon's finalize reply carries (coarse, rounded) reaches the summary through the context
    from gpuperf.diagnosis import jobsummary as summary
    from gpuperf.diagnosis import phases

    path = RECORDINGS / "phases-h100-80gb-hbm3.jsonl.gz"
    aggs, series = fromrecording.replay_job(str(path), job_id=7, node="rec", with_series=True)
    plain = summary.node_summary(aggs, {"job_id": 7, "node": "rec"})["diagnosis"]
    with_series = summary.node_summary(aggs, {"job_id": 7, "node": "rec", "series": phases.compact(series)})["diagnosis"]
    assert plain["phases"] == []
    assert [p["class"] for p in with_series["phases"]][-1] == "compute_bound"
    assert "input_bound" in [p["class"] for p in with_series["phases"]]


def test_reports_show_the_phases_the_unused_gpus_and_the_confidence():
    from gpuperf.report import html, terminal

    s, d, _ = job("phases-h100-80gb-hbm3.jsonl.gz")
    s = dict(s, diagnosis=d.to_dict())
    assert "id='phases'" in html.render(s) and "input-bound, 45% of the GPU-hours" in html.render(s)
    assert "phase" in terminal.render(s, width=160, color=False)
    s2, d2, _ = job("one_busy-h200.jsonl.gz", gpus=None)
    out = terminal.render(dict(s2, diagnosis=d2.to_dict()), width=160, color=False)
    assert "UNUSED-GPUS" in out and "working GPUs: compute-bound" in out and "GPU-hours wasted" in out


def test_phases_of_the_socket_all_reduce_name_it_as_the_job_does():
    # the series carry PCIe and NVLink rates, so a stretch of collectives through host memory is
    # communication-bound there too, not launch-bound
    _, d, _ = job("allreduce_sockets-h200.jsonl.gz", gpus=None)
    from gpuperf.diagnosis import jobsummary as summary
    from gpuperf.diagnosis import phases

    aggs, series = fromrecording.replay_job(str(RECORDINGS / "allreduce_sockets-h200.jsonl.gz"), with_series=True)
    full = summary.node_summary(aggs, {"job_id": 7, "node": "rec", "series": phases.compact(series)})["diagnosis"]
    assert full["class"] == "communication_bound"
    # the recorder's last 3 s after the all-reduce are the job's idle tail (10% at 1/120 of the job a point)
    assert [p["class"] for p in full["phases"]][-2:] == ["communication_bound", "idle_tail"]
