"""Per-job streaming aggregates: time weighting, percentiles, idle/throttle/bytes/energy, gaps, sharing,
and that the persisted state resumes exactly."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuperf.model.aggregates import GAP_FACTOR, THROTTLE_BITS, HostAggregate, JobAggregates
from gpuperf.samplers.base import GpuSample


def _job(gpus=(0,), interval=1.0, start=1000.0):
    return JobAggregates.new(7, "n1", gpus, start, interval, cpus=4)


def test_mean_is_time_weighted_and_min_max_exact():
    a = _job()
    # 10 W held for 1 s (first sample: one interval), then 30 W held for 3 s
    a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=10.0)])
    a.add_sweep(1004.0, [GpuSample(gpu=0, t=1004.0, power_w=30.0)])
    m = a.to_dict()["gpus"]["0"]["metrics"]["power_w"]
    assert m["mean"] == pytest.approx((10 * 1 + 30 * 3) / 4)
    assert (m["min"], m["max"]) == (10.0, 30.0)
    assert a.to_dict()["gpus"]["0"]["seconds"] == pytest.approx(4.0)


def test_percentiles_within_histogram_error():
    a = _job()
    rng = random.Random(3)
    values = [rng.uniform(1, 100) for _ in range(20000)]
    for i, v in enumerate(values):
        a.add_sweep(1001.0 + i, [GpuSample(gpu=0, t=1001.0 + i, sm_active_pct=v)])
    m = a.to_dict()["gpus"]["0"]["metrics"]["sm_active_pct"]
    s = sorted(values)
    assert m["p50"] == pytest.approx(s[len(s) // 2], rel=0.02)
    assert m["p95"] == pytest.approx(s[int(len(s) * 0.95)], rel=0.02)


def test_state_size_does_not_grow_with_job_length():
    a = _job()
    rng = random.Random(5)
    sizes = []
    for i in range(60000):
        a.add_sweep(1001.0 + i, [GpuSample(gpu=0, t=1001.0 + i, power_w=rng.uniform(50, 700),
                                           util_gpu_pct=rng.uniform(0, 100), nvlink_tx_bps=rng.uniform(0, 4e11))])
        if i in (20000, 59999):
            sizes.append(len(json.dumps(a.to_state())))
    assert sizes[1] < sizes[0] * 1.2


def test_idle_throttle_and_bytes():
    a = _job()
    reasons = THROTTLE_BITS["sw_power_cap"] | THROTTLE_BITS["hw_thermal"]
    a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, util_gpu_pct=0.0, nvlink_tx_bps=1e9, pcie_rx_bps=2e6)])
    a.add_sweep(1003.0, [GpuSample(gpu=0, t=1003.0, util_gpu_pct=50.0, throttle_reasons=reasons, nvlink_tx_bps=3e9)])
    a.add_sweep(1004.0, [GpuSample(gpu=0, t=1004.0, util_gpu_pct=None, sm_active_pct=0.2)])
    g = a.to_dict()["gpus"]["0"]
    assert g["idle_s"] == pytest.approx(1.0 + 1.0)           # util 0 for 1 s; no util and SM ~0 for 1 s
    assert g["throttle_s"]["sw_power_cap"] == pytest.approx(2.0)
    assert g["throttle_s"]["hw_thermal"] == pytest.approx(2.0)
    assert g["throttle_s"]["hw_slowdown"] == 0
    assert g["nvlink_tx_bytes"] == pytest.approx(1e9 * 1 + 3e9 * 2)
    assert g["pcie_rx_bytes"] == pytest.approx(2e6)


def test_nan_from_backend_is_not_folded():
    a = _job()
    a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=float("nan"), temp_c=40.0)])
    m = a.to_dict()["gpus"]["0"]["metrics"]
    assert "power_w" not in m and m["temp_c"]["mean"] == 40.0


def test_energy_counter_when_fresh_else_integrated():
    a = _job()
    a.energy_reading({0: 5000.0}, 1000.5)
    for i in range(1, 11):
        a.add_sweep(1000.0 + i, [GpuSample(gpu=0, t=1000.0 + i, power_w=100.0)])
    a.energy_reading({0: 6050.0}, 1010.0)
    g = a.to_dict()["gpus"]["0"]
    assert (g["energy_j"], g["energy_source"]) == (pytest.approx(1050.0), "counter")
    # the last reading is old (no end reading): integrated power instead
    for i in range(11, 30):
        a.add_sweep(1000.0 + i, [GpuSample(gpu=0, t=1000.0 + i, power_w=100.0)])
    g = a.to_dict()["gpus"]["0"]
    assert g["energy_source"] == "integrated" and g["energy_j"] == pytest.approx(100.0 * 29)


def test_energy_counter_reset_falls_back_to_integration():
    a = _job()
    a.energy_reading({0: 5000.0}, 1000.0)
    a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=200.0)])
    a.energy_reading({0: 10.0}, 1001.0)       # driver reload: counter restarted
    g = a.to_dict()["gpus"]["0"]
    assert g["energy_source"] == "integrated" and g["energy_j"] == pytest.approx(200.0)


def test_gap_recorded_and_not_weighted():
    a = _job()
    a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=100.0)])
    a.add_sweep(1002.0, [GpuSample(gpu=0, t=1002.0, power_w=100.0)])
    later = 1002.0 + GAP_FACTOR * 1.0 + 100
    a.add_sweep(later, [GpuSample(gpu=0, t=later, power_w=300.0)])
    d = a.to_dict()
    assert d["gaps"] == [[1002.0, later]]
    assert d["gpus"]["0"]["seconds"] == pytest.approx(3.0)
    assert d["gpus"]["0"]["metrics"]["power_w"]["mean"] == pytest.approx(500.0 / 3)


def test_repeated_timestamp_is_skipped():
    a = _job()
    assert a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=1.0)])
    assert not a.add_sweep(1001.0, [GpuSample(gpu=0, t=1001.0, power_w=1.0)])
    assert a.to_dict()["gpus"]["0"]["samples"] == 1


def test_shared_gpu_flags_and_splits_energy():
    a, b = _job(), _job()
    a.energy_reading({0: 0.0}, 1000.0)
    for i in range(1, 5):
        s = [GpuSample(gpu=0, t=1000.0 + i, power_w=300.0)]
        a.add_sweep(1000.0 + i, s, {0: 2})
        b.add_sweep(1000.0 + i, s, {0: 2})
    a.energy_reading({0: 1200.0}, 1004.0)
    ga, gb = a.to_dict()["gpus"]["0"], b.to_dict()["gpus"]["0"]
    assert ga["shared"] and ga["shared_s"] == pytest.approx(4.0)
    # the counter cannot be split: each job gets half of the integrated power
    assert ga["energy_source"] == "integrated"
    assert ga["energy_j"] + gb["energy_j"] == pytest.approx(300.0 * 4)
    assert ga["metrics"]["power_w"]["mean"] == 300.0      # GPU-level metrics are not split


def test_foreign_processes_kept_once_with_times():
    a = _job()
    a.gpus[0].note_foreign(11, None, 1001.0)
    a.gpus[0].note_foreign(11, None, 1005.0)
    a.gpus[0].note_foreign(12, 99, 1003.0)
    f = {p["pid"]: p for p in a.to_dict()["gpus"]["0"]["foreign_processes"]}
    assert f[11]["job_id"] is None and (f[11]["first_t"], f[11]["last_t"]) == (1001.0, 1005.0)
    assert f[12]["job_id"] == 99


def test_host_exited_processes_keep_their_cpu_time():
    h = HostAggregate(cpus_allocated=4)
    h.update_procs({"10:1": (5.0, 1.0, 1), "11:1": (2.0, 0.0, 1)}, 100.0)
    h.update_procs({"11:1": (4.0, 1.0, 1)}, 50.0)         # 10 exited (parent not in the job) with 5 s CPU
    d = h.to_dict(wall_s=10.0)
    assert d["cpu_time_s"] == pytest.approx(9.0)
    assert d["iowait_s"] == pytest.approx(2.0)
    assert d["iowait_pct"] == pytest.approx(100 * 2 / 11)
    assert d["rss_peak_mib"] == 100.0


def test_host_child_reaped_by_live_parent_is_not_counted_twice():
    h = HostAggregate()
    # parent 10 (own 1 s), child 11 of 10 (2 s)
    h.update_procs({"10:1": (1.0, 0.0, 1), "11:5": (2.0, 0.5, 10)}, 1.0)
    # the child exited and was reaped: its 2.5 s (2 seen + 0.5 after the scan) are in the parent's cutime
    h.update_procs({"10:1": (1.0 + 0.5 + 2.5, 0.0, 1)}, 1.0)
    assert h.cpu_time_s == pytest.approx(4.0)
    assert h.iowait_s == pytest.approx(0.5)
    # an orphan (its parent gone too) keeps what was last seen of it
    h.update_procs({"20:9": (3.0, 0.0, 77)}, 1.0)
    h.update_procs({}, 1.0)
    assert h.cpu_time_s == pytest.approx(4.0 + 3.0)


def test_host_net_deltas_and_reset():
    h = HostAggregate()
    h.update_net({"eth0": (100.0, 200.0), "mlx5_0:1": (1000.0, 1000.0)})
    h.update_net({"eth0": (150.0, 260.0), "mlx5_0:1": (10.0, 5000.0)})
    n = h.to_dict(1.0)["net_bytes"]
    assert n["eth0"] == {"rx_bytes": 50.0, "tx_bytes": 60.0}
    assert n["mlx5_0:1"] == {"rx_bytes": None, "tx_bytes": 4000.0}


def test_state_round_trip_resumes_exactly():
    rng = random.Random(11)

    def sweeps(n, t0):
        return [(t0 + i, [GpuSample(gpu=g, t=t0 + i, power_w=rng.uniform(100, 600), util_gpu_pct=rng.choice([0, 40, 99]),
                                    throttle_reasons=rng.choice([0, 4, 8]), nvlink_rx_bps=rng.uniform(0, 1e10))
                          for g in (0, 1)]) for i in range(n)]

    first, second = sweeps(300, 1001.0), sweeps(300, 1301.0)
    whole = _job((0, 1))
    split = _job((0, 1))
    for t, s in first:
        whole.add_sweep(t, s)
        split.add_sweep(t, s)
    whole.energy_reading({0: 1.0, 1: 2.0}, 1200.0)
    split.energy_reading({0: 1.0, 1: 2.0}, 1200.0)
    split.host.update_procs({"1:1": (3.0, 0.5, 1)}, 10.0)
    whole.host.update_procs({"1:1": (3.0, 0.5, 1)}, 10.0)
    restored = JobAggregates.from_dict(json.loads(json.dumps(split.to_state())))
    for t, s in second:
        whole.add_sweep(t, s)
        restored.add_sweep(t, s)
    assert restored.to_dict() == whole.to_dict()


def test_from_state_rejects_other_schema():
    with pytest.raises(ValueError):
        JobAggregates.from_state({"schema": "something.else"})


def test_iowait_unknown_without_delay_accounting():
    h = HostAggregate()
    h.update_procs({"1:1": (4.0, 0.0, 1)}, 1.0)
    h.iowait_known = False
    d = HostAggregate.from_state(h.to_state()).to_dict(1.0)
    assert d["iowait_s"] is None and d["iowait_pct"] is None and d["cpu_time_s"] == 4.0


RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "recordings"


def _replay_aggregates(workload: str) -> tuple[dict, float]:
    from gpuperf.samplers.replay import ReplaySampler

    path = next(RECORDINGS.glob(f"{workload}-*.jsonl*"), None)
    if path is None:
        pytest.skip(f"no {workload} recording in {RECORDINGS}")
    r = ReplaySampler(str(path), clock="virtual", start_t=1000.0)
    a = JobAggregates.new(1, "n1", [0], 1000.0, r.interval_s)
    while sweep := r.sample():
        if a.last_t is None:
            a.energy_reading(r.read_energy(), sweep[0].t)     # the job's start reading
        a.add_sweep(sweep[0].t, sweep)
    a.energy_reading(r.read_energy(), a.last_t)               # and its end reading
    return a.to_dict()["gpus"]["0"], a.gpus[0].power_energy_j


def test_real_matmul_recording_counter_matches_integrated_power():
    g, integrated_j = _replay_aggregates("matmul_bf16")
    assert g["energy_source"] == "counter"
    assert g["energy_j"] == pytest.approx(integrated_j, rel=0.03)
    assert g["metrics"]["tensor_active_pct"]["p50"] > 80
    assert g["idle_s"] < 0.3 * g["seconds"]


def test_real_idle_and_membound_recordings():
    idle, _ = _replay_aggregates("idle")
    assert idle["idle_s"] >= 0.9 * idle["seconds"]
    mem, _ = _replay_aggregates("membound")
    assert mem["metrics"]["dram_active_pct"]["p50"] > 80
    assert mem["metrics"]["tensor_active_pct"]["p95"] < 5


def test_replayed_gpus_are_named_from_the_recording_so_summaries_have_peaks():
    """The daemon names each job's GPUs from its sampler: the report's estimates need the model."""
    import glob
    import os

    from gpuperf.daemon.server import gpu_names
    from gpuperf.samplers.replay import ReplaySampler

    here = os.path.join(os.path.dirname(__file__), "..", "data", "recordings")
    path = sorted(glob.glob(os.path.join(here, "matmul_bf16-*.jsonl.gz")))[0]
    names = gpu_names(ReplaySampler(path, gpus=3, clock="virtual"))
    assert names == {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3", 2: "NVIDIA H100 80GB HBM3"}
    agg = JobAggregates.new(1, "n1", [2], 0.0, 1.0, names=names)
    assert agg.to_dict()["gpus"]["2"]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu_names(object()) == {}


def test_bytes_never_measured_are_none_not_zero():
    from gpuperf.samplers.base import GpuSample

    agg = JobAggregates.new(1, "n1", [0], 0.0, 1.0)
    for t in (1.0, 2.0, 3.0):
        agg.add_sweep(t, [GpuSample(gpu=0, t=t, util_gpu_pct=50.0, pcie_tx_bps=1e9, pcie_rx_bps=0.0)])
    g = agg.to_dict()["gpus"]["0"]
    assert g["nvlink_tx_bytes"] is None and g["nvlink_rx_bytes"] is None
    assert g["pcie_tx_bytes"] > 0 and g["pcie_rx_bytes"] == 0.0
