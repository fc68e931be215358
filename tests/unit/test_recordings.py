"""What each committed real-GPU recording shows (tests/data/recordings/README.md says how each was made).

Thresholds come from the recordings themselves (H100 80GB HBM3, nvml backend with GPM), with margin;
they check that the sampler captured the signature a report relies on, read through the replay loader.
The workload window is the sweeps with a compute process on the GPU.
"""

from __future__ import annotations

import glob
import os
import statistics

import pytest

from gpuperf.samplers.replay import ReplaySampler, load_recording

HERE = os.path.join(os.path.dirname(__file__), "..", "data", "recordings")


def recordings(workload: str) -> list[str]:
    return sorted(glob.glob(os.path.join(HERE, f"{workload}-*.jsonl*")))


def window(path: str, field: str) -> list[float]:
    """Values of one metric on every GPU, over the sweeps where a compute process is on that GPU."""
    rec = load_recording(path)
    return [s[field] for sw in rec.sweeps for s in sw if s.get("processes") and s.get(field) is not None]


def needs(workload: str) -> list[str]:
    files = recordings(workload)
    if not files:
        pytest.skip(f"no {workload} recording in tests/data/recordings yet (see its README)")
    return files


def share(vals: list[float], pred) -> float:
    return sum(1 for v in vals if pred(v)) / len(vals)


def test_every_workload_is_recorded():
    for w in ("matmul_bf16", "membound", "idle", "tiny_kernels", "input_bound", "allreduce"):
        assert recordings(w), f"missing recording for {w}"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "*.jsonl*"))))
def test_recording_is_complete_and_energy_counter_agrees_with_power(path):
    rec = load_recording(path)
    assert rec.header["backend"] == "nvml" and rec.header["how"] and rec.header["gpus"]
    # 20-40 s of workload (the ground-truth ones are 16-20 s, tests/data stays small), 1 s sweeps
    assert len(rec.sweeps) >= 20 and rec.interval_s == 1.0
    assert len(window(path, "power_w")) >= 15
    for g in rec.gpu_indices:
        e = rec.energy_j[g]
        integrated = sum(sw_power(rec, i, g) * (rec.offsets_s[i] - rec.offsets_s[i - 1]) for i in range(1, len(rec.sweeps)))
        assert e[-1] > e[0]
        assert (e[-1] - e[0]) == pytest.approx(integrated, rel=0.03)


def sw_power(rec, i: int, gpu: int) -> float:
    return next(s["power_w"] for s in rec.sweeps[i] if s["gpu"] == gpu)


def test_matmul_is_tensor_bound():
    for p in needs("matmul_bf16"):
        tensor = window(p, "tensor_active_pct")
        assert share(tensor, lambda v: v > 80) >= 0.85           # measured 38 of 40 (ramp up/down below)
        assert statistics.median(window(p, "sm_active_pct")) > 90
        assert statistics.median(window(p, "util_gpu_pct")) >= 99
        # at the 700 W cap: SW power cap (0x4) is the throttle reason most of the time
        assert share(window(p, "throttle_reasons"), lambda v: v & 0x4) >= 0.8


def test_membound_is_dram_bound_with_idle_tensor_cores():
    for p in needs("membound"):
        assert statistics.median(window(p, "dram_active_pct")) > 80
        assert max(window(p, "tensor_active_pct")) < 1
        assert statistics.median(window(p, "sm_occupancy_pct")) > 50   # streaming kernels fill the SMs


def test_idle_holds_memory_and_does_no_work():
    for p in needs("idle"):
        assert min(window(p, "mem_used_mib")) > 20 * 1024
        sm = window(p, "sm_active_pct")
        assert statistics.median(sm) < 0.5 and max(sm) < 5
        assert statistics.median(window(p, "util_gpu_pct")) == 0


def test_tiny_kernels_keep_util_up_while_sms_idle():
    for p in needs("tiny_kernels"):
        util, sm = window(p, "util_gpu_pct"), window(p, "sm_active_pct")
        assert statistics.median(util) > 20
        assert max(sm) < 1
        assert statistics.median(util) > 100 * statistics.median(sm)


def test_input_bound_has_low_mean_sm_with_gaps_and_bursts():
    for p in needs("input_bound"):
        sm = window(p, "sm_active_pct")
        assert 5 < statistics.mean(sm) < 30
        assert share(sm, lambda v: v < 1) >= 0.1                 # seconds the GPU waited on the loader
        assert max(sm) > 20                                      # and seconds it computed


def test_allreduce_moves_bytes_over_nvlink():
    for p in needs("allreduce"):
        rec = load_recording(p)
        assert len(rec.gpu_indices) >= 2
        for g in rec.gpu_indices:
            tx = [s["nvlink_tx_bps"] for sw in rec.sweeps for s in sw
                  if s["gpu"] == g and s.get("processes") and s.get("nvlink_tx_bps") is not None]
            # ring all-reduce: each GPU sends 2(n-1)/n of the data per op, exactly the bus bandwidth
            # factor, so its NVLink TX rate should be the bus bandwidth NCCL reported (335.7 GB/s
            # on 4x H200; measured median 335.5 GB/s per GPU). A reading of link 0 alone would be 1/18.
            assert tx and 250e9 < statistics.median(tx) < 420e9


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "*.jsonl*"))))
def test_recordings_replay_through_the_sampler(path):
    s = ReplaySampler(path, clock="virtual", start_t=0.0)
    n = 0
    while s.sample():
        n += 1
    assert n == len(load_recording(path).sweeps)
    assert all(v is not None and v > 0 for v in s.read_energy().values())
