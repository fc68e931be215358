"""The job summary (gpuperf.summary.v1) from aggregates, and the merge of node summaries."""

from __future__ import annotations

import json

import pytest

from gpuperf.files import jobstate
from gpuperf.diagnosis import jobsummary as summary
from report_fixtures import aggregates, context


def test_per_gpu_figures_follow_the_aggregates():
    a = aggregates(ngpus=2, seconds=1000.0, util_gpu_pct=100.0, sm_active_pct=30.0, mem_used_mib=40779.5)
    s = summary.node_summary(a, context())
    g0 = s["gpus"][0]
    raw = a["gpus"]["0"]
    assert g0["sm_active_pct"] == round(raw["metrics"]["sm_active_pct"]["mean"], 1)
    assert g0["util_minus_sm_pct"] == pytest.approx(g0["util_gpu_pct"] - g0["sm_active_pct"], abs=0.11)
    assert g0["mem_peak_mib"] == round(raw["metrics"]["mem_used_mib"]["max"])
    assert g0["mem_peak_pct"] == pytest.approx(100 * raw["metrics"]["mem_used_mib"]["max"] / 81559, abs=0.06)
    assert g0["energy_kwh"] == pytest.approx(raw["energy_j"] / 3.6e6, abs=1e-4)
    assert g0["nvlink_bps"] == pytest.approx((raw["nvlink_tx_bytes"] + raw["nvlink_rx_bytes"]) / 1000.0, rel=1e-6)
    assert g0["power_limit_w"] == 700.0
    # zero throttle reasons are left out, the power cap is kept
    assert set(g0["throttle_s"]) == {"sw_power_cap"}


def test_job_totals_sum_energy_and_weight_means_by_time():
    a = aggregates(ngpus=2, seconds=100.0)
    a["gpus"]["1"]["seconds"] = 300.0
    a["gpus"]["0"]["metrics"]["sm_active_pct"]["mean"] = 10.0
    a["gpus"]["1"]["metrics"]["sm_active_pct"]["mean"] = 50.0
    s = summary.node_summary(a, context())
    job = s["job"]
    assert job["sm_active_pct"] == pytest.approx((10 * 100 + 50 * 300) / 400, abs=0.05)
    assert job["energy_j"] == pytest.approx(sum(g["energy_j"] for g in s["gpus"]), abs=1)
    assert job["gpu_hours"] == pytest.approx(400 / 3600, abs=1e-3)
    # wasted = GPU time without SM work: 100 s × 0.9 + 300 s × 0.5
    assert job["wasted_gpu_hours"] == pytest.approx((90 + 150) / 3600, abs=1e-3)
    assert job["sm_active_spread_pct"] == pytest.approx(40.0, abs=0.1)


def test_unmeasured_metrics_stay_unknown_not_zero():
    a = aggregates(ngpus=1)
    for k in ("sm_active_pct", "tensor_active_pct", "dram_active_pct"):
        del a["gpus"]["0"]["metrics"][k]
    a["gpus"]["0"]["energy_j"] = None
    s = summary.node_summary(a, context())
    g = s["gpus"][0]
    assert g["sm_active_pct"] is None and g["tensor_active_pct"] is None and g["util_minus_sm_pct"] is None
    assert g["energy_j"] is None and s["job"]["energy_j"] is None
    # waste falls back to utilization when SM activity is unknown
    assert s["job"]["wasted_gpu_hours"] == pytest.approx(
        g["seconds"] * (1 - g["util_gpu_pct"] / 100) / 3600 if g["util_gpu_pct"] < 100 else 0, abs=1e-3)


def test_host_cpu_efficiency_is_cpu_time_over_allocated_cpu_time():
    a = aggregates(seconds=1000.0)
    a["host"] = {"cpu_time_s": 4000.0, "cpus_allocated": 8, "wall_s": 1000.0, "rss_peak_mib": 1234.4, "iowait_pct": 12.25}
    h = summary.node_summary(a, context())["hosts"]["n1"]
    assert h["cpu_efficiency_pct"] == 50.0
    assert h["iowait_pct"] == pytest.approx(12.2, abs=0.06) and h["rss_peak_mib"] == 1234


def test_env_and_affinity_are_read_from_the_job_dir_and_absence_is_fine(tmp_path):
    d = tmp_path / "jobs" / "42"
    # as the env prolog step writes it (EnvPlan.to_dict() plus its own fields)
    jobstate.write_json(d / "env.json", {"schema": "gpuperf.envplan.v1", "job_id": 42, "disabled": None,
                                         "vars": [{"name": "NCCL_IB_HCA", "value": "mlx5_0", "reason": "active port",
                                                   "rule": "ib", "nccl_below": None, "per_task": None}],
                                         "skipped": [{"name": "NCCL_ALGO", "reason": "never forced", "rule": "x"}]})
    planned = {"0": {"gpu": "0", "numa": "0", "cpus": [0, 1], "status": "planned"}, "cpus_source": "cgroup"}
    jobstate.write_json(d / "affinity.json", planned)
    s = summary.node_summary(aggregates(ngpus=2), {"job_id": 42, "node": "n1", "job_dir": str(d)})
    assert s["env"]["n1"] == {"vars": {"NCCL_IB_HCA": {"value": "mlx5_0", "reason": "active port"}}}
    assert s["affinity"]["n1"]["0"]["cpus"] == [0, 1]
    empty = summary.node_summary(aggregates(ngpus=2), {"job_id": 42, "node": "n1", "job_dir": str(tmp_path / "none")})
    assert empty["env"] == {} and empty["affinity"] == {}


def test_per_task_env_values_come_from_what_the_tasks_exported(tmp_path):
    d = tmp_path / "jobs" / "43"
    jobstate.write_json(d / "env.json", {"schema": "gpuperf.envplan.v1", "job_id": 43, "disabled": None, "skipped": [],
                                         "vars": [{"name": "OMP_NUM_THREADS", "value": "", "reason": "CPUs per GPU",
                                                   "rule": "omp", "nccl_below": None, "per_task": "omp_threads"}]})
    s = summary.node_summary(aggregates(ngpus=1), {"job_id": 43, "node": "n1", "job_dir": str(d)})
    assert s["env"]["n1"]["vars"]["OMP_NUM_THREADS"]["value"] == "(per task)"   # no task ran
    jobstate.write_json(d / "env" / "step-0.json", {"step": "0", "exported": [["OMP_NUM_THREADS", "6"]],
                                                     "user_kept": [], "user_forced": {}})
    s = summary.node_summary(aggregates(ngpus=1), {"job_id": 43, "node": "n1", "job_dir": str(d)})
    assert s["env"]["n1"]["vars"]["OMP_NUM_THREADS"] == {"value": "6", "reason": "CPUs per GPU"}


def test_estimates_use_the_model_peak_and_say_they_are_estimates():
    s = summary.node_summary(aggregates(ngpus=1, tensor_active_pct=50.0, fp32_active_pct=0.0, dram_active_pct=10.0),
                             context())
    e = s["estimates"]
    assert e["model"] == "H100 SXM" and "estimate" in e["label"] and "datasheet" in e["source"]
    tensor = s["gpus"][0]["tensor_active_pct"]
    # clock-scaled: the fixture runs at 1755 MHz, the datasheet figure holds at 1830
    assert e["tensor_tflops_est"] == pytest.approx(tensor / 100 * 989.5 * 1755 / 1830, rel=0.03)
    assert e["roofline_side"] == ("compute" if e["intensity_flop_per_byte"] >= e["ridge_flop_per_byte"] else "memory")
    unknown = summary.node_summary(aggregates(ngpus=1, name="Mystery GPU 9000"), context())["estimates"]
    assert unknown["model"] is None and "not in gpuperf's table" in unknown["note"]


def test_gaps_and_partial_aggregates_are_reported():
    a = aggregates()
    a["gaps"] = [[0.0, 10.0], [20.0, 25.5]]
    a["partial"] = True
    q = summary.node_summary(a, context())["quality"]
    assert q["gaps"] == 2 and q["gap_s"] == 15.5 and q["partial"] and q["reasons"]
    assert q["samples"] == sum(g["samples"] for g in a["gpus"].values())


def test_running_job_summary_ends_at_the_last_sample():
    a = aggregates(seconds=100.0)
    a["end"], a["last_sample_t"] = None, a["start"] + 42.0
    assert summary.node_summary(a, context())["wall_s"] == 42.0


def test_merge_joins_nodes_and_recomputes_the_job():
    n1 = summary.node_summary(aggregates(node="n1", ngpus=8, seed=1), context(node="n1"))
    n2 = summary.node_summary(aggregates(node="n2", ngpus=8, seed=2), context(node="n2"))
    m = summary.merge([n2, n1], ["n1", "n2"])
    assert m["nodes"] == ["n1", "n2"] and m["job"]["gpu_count"] == 16
    assert [g["node"] for g in m["gpus"]] == ["n1"] * 8 + ["n2"] * 8
    assert m["job"]["energy_j"] == pytest.approx(n1["job"]["energy_j"] + n2["job"]["energy_j"], abs=2)
    assert set(m["hosts"]) == {"n1", "n2"} and set(m["env"]) == {"n1", "n2"}
    assert not m["quality"]["partial"] and m["quality"]["nodes_missing"] == []
    assert m["diagnosis"]["class"] == n1["diagnosis"]["class"]
    json.dumps(m)  # plain data all the way down


def test_merge_with_a_missing_node_is_partial_and_names_it():
    n1 = summary.node_summary(aggregates(node="n1"), context(node="n1"))
    m = summary.merge([n1], ["n1", "n2"])
    assert m["quality"]["partial"] and m["quality"]["nodes_missing"] == ["n2"]
    assert any("n2" in r for r in m["quality"]["reasons"])
    nothing = summary.merge([], ["n1"])
    assert nothing["quality"]["partial"] and nothing["job"]["gpu_count"] == 0


def test_a_one_node_job_keeps_its_nodes_summary_and_diagnosis_as_a_full_merge_would_word_it():
    a = aggregates(node="n1", ngpus=8, seed=3)
    a["partial"], a["partial_reasons"] = True, ["daemon restarted: 12 s gap"]
    n1 = summary.node_summary(a, context(node="n1"))
    n1["quality"]["ignored"] = ["record ignored: env.json: symlink"]
    n1["diagnosis"]["phases"] = [{"class": "idle", "share_pct": 10.0}]  # as the node's series gave it
    fast = summary.merge([n1], ["n1"])
    # the full join (node diagnosis left out, so the controller diagnoses again) words the same summary
    full = summary.merge([dict(n1, diagnosis=None)], ["n1"])
    assert "fleet" in n1 and "fleet" not in fast
    assert {k: v for k, v in fast.items() if k != "diagnosis"} == {k: v for k, v in full.items() if k != "diagnosis"}
    assert fast["quality"]["reasons"] == ["n1: daemon restarted: 12 s gap"] and fast["quality"]["partial"]
    assert fast["quality"]["ignored"] == ["n1: record ignored: env.json: symlink"]
    # the node's diagnosis (made with its series) is kept, not made again without it
    assert fast["diagnosis"] is n1["diagnosis"] and fast["diagnosis"]["phases"]
    assert full["diagnosis"]["class"] == fast["diagnosis"]["class"]
    assert summary.merge([n1], ["n1", "n2"])["quality"]["nodes_missing"] == ["n2"]  # a missing node: full merge


def test_gpu_names_from_the_context_fill_what_the_sampler_left_out():
    a = aggregates(ngpus=2)
    a["gpus"]["0"]["name"] = None
    a["gpus"]["1"]["name"] = None
    s = summary.node_summary(a, context(gpu_names={"0": "NVIDIA H200", "1": "NVIDIA H200"}))
    assert [g["name"] for g in s["gpus"]] == ["NVIDIA H200"] * 2 and s["estimates"]["model"] == "H200 SXM"
    bare = summary.node_summary(a, context())
    assert bare["estimates"]["model"] is None and "not reported" in bare["estimates"]["note"]
