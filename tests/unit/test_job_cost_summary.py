"""benchmarks/gpu_job_cost.py's figures from paired on/off rounds (issues 27 and 29), on synthetic pairs: the
ratio intervals of a GEMM job's TFLOP/s and of an all-reduce job's bus bandwidth, and the hooks' added time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_job_cost as gjc  # noqa: E402


def _pair(on: float, off: float, metric: str, wall=(20.0, 20.0), hooks_on=None, hooks_off=None) -> dict:
    return {"on": {metric: on, "wall_s": wall[0], "hooks_ms": hooks_on or {"prolog": 120.0, "taskprolog": 30.0,
                                                                            "epilog": 80.0, "epilog-slurmctld": 15.0}},
            "off": {metric: off, "wall_s": wall[1], "hooks_ms": hooks_off or {"prolog": 5.0, "taskprolog": 4.0,
                                                                              "epilog": 5.0}}}


def test_allreduce_pairs_give_the_bus_bandwidth_ratio_interval():
    rows = [_pair(300.0, 300.0, "busbw_gbps"), _pair(303.0, 300.0, "busbw_gbps"), _pair(297.0, 300.0, "busbw_gbps"),
            _pair(300.0, 303.0, "busbw_gbps", wall=(21.0, 20.0))]
    f = gjc.summarise(rows, "busbw_gbps")
    r = f["busbw_gbps_ratio_on_off"]
    assert r["n"] == 4 and r["lo"] < 1.0 < r["hi"] and r["mean"] == pytest.approx(0.99752, abs=1e-4)
    assert f["wall_ratio_on_off"]["mean"] == pytest.approx(1.0125)
    assert f["added_start_ms"]["mean"] == pytest.approx(141.0) and f["added_end_ms"]["mean"] == pytest.approx(75.0)
    assert f["epilog_slurmctld_on_ms"]["mean"] == pytest.approx(15.0)
    assert "tflops_ratio_on_off" not in f and f["pairs_used"] == 4


def test_a_pair_whose_job_measured_nothing_is_left_out_and_counted():
    rows = [_pair(600.0, 610.0, "tflops"), _pair(None, 610.0, "tflops"), _pair(605.0, 600.0, "tflops")]
    f = gjc.summarise(rows, "tflops")
    assert f["pairs_used"] == 2 and f["pairs_failed"] == 1 and f["tflops_ratio_on_off"]["n"] == 2
    assert gjc.summarise([_pair(None, None, "tflops")], "tflops") == {"pairs_used": 0, "pairs_failed": 1}


def test_a_consistent_loss_is_an_interval_below_one():
    rows = [_pair(290.0 + i, 300.0 + i, "busbw_gbps") for i in range(6)]
    r = gjc.summarise(rows, "busbw_gbps")["busbw_gbps_ratio_on_off"]
    assert r["hi"] < 1.0


def test_each_job_kind_names_its_workload_gpus_and_figure():
    for kind, (script, sargs, tasks, metric) in gjc.JOBS.items():
        assert (REPO / "benchmarks" / "workloads" / script).exists(), script
        text = (REPO / "benchmarks" / "workloads" / script).read_text() + \
            (REPO / "benchmarks" / "workloads" / "_comm.py").read_text() + (REPO / "benchmarks" / "workloads" / "_gemm.py").read_text()
        assert metric in text
    assert "--gres=gpu:2" in gjc.JOBS["allreduce"][1] and gjc.JOBS["allreduce"][2] == 2
