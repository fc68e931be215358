"""Phases at the daemon's resolution for jobs of any length (issue 35): a 12-hour job with a 40-minute evaluation
every 2 hours, a 3-minute job with a 30 s start-up, a job that never reached its GPU work, and a bursty job that
is one phase, each through the series the daemon hands the diagnosis (phases.SERIES_POINTS points per GPU)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuperf import diagnosis
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.diagnosis import phases
from report_fixtures import aggregates, context

IDLE = dict(util_gpu_pct=0.0, sm_active_pct=0.0, tensor_active_pct=0.0, dram_active_pct=0.0, sm_clock_mhz=1980.0)
TRAIN = dict(util_gpu_pct=100.0, sm_active_pct=96.0, tensor_active_pct=88.0, tensor_hmma_pct=88.0,
             dram_active_pct=25.0, fp32_active_pct=3.0, int_active_pct=4.0, sm_clock_mhz=1755.0)
# an evaluation pass: forward only, streaming activations and a metric over them
EVAL = dict(util_gpu_pct=100.0, sm_active_pct=95.0, tensor_active_pct=8.0, tensor_hmma_pct=8.0,
            dram_active_pct=78.0, fp32_active_pct=12.0, int_active_pct=20.0, sm_clock_mhz=1755.0)
T0 = 1763700000.0
DATA = Path(__file__).resolve().parents[1] / "data" / "jobs"


def daemon_series(parts: list[tuple[float, dict]], step_s: float, gpus: int = 1) -> dict:
    """The series the daemon hands the diagnosis: samples every ``step_s`` (1 s, or the store's 1-minute means) of
    stretches (seconds, {field: value}), averaged into SERIES_POINTS equal-time buckets as the store's series() does."""
    rows, t = [], T0
    for secs, vals in parts:
        for _ in range(int(round(secs / step_s))):
            t += step_s
            rows.append((t, vals))
    t1, n = rows[-1][0], phases.SERIES_POINTS
    width = (t1 - T0) / n
    buckets: dict[int, list] = {}
    for t, vals in rows:
        buckets.setdefault(min(int((t - T0) / width), n - 1), []).append((t, vals))
    fields = sorted({k for _, v in parts for k in v})
    one = {"t": [], **{f: [] for f in fields}}
    for _, items in sorted(buckets.items()):
        one["t"].append(sum(t for t, _ in items) / len(items))
        for f in fields:
            one[f].append(sum(v.get(f, 0.0) for _, v in items) / len(items))
    return phases.compact({str(g): one for g in range(gpus)})


def _means(parts: list[tuple[float, dict]]) -> dict:
    total = sum(s for s, _ in parts)
    fields = {k for _, v in parts for k in v}
    return {f: sum(s * v.get(f, 0.0) for s, v in parts) / total for f in fields}


def job(parts: list[tuple[float, dict]], step_s: float, gpus: int = 1, **host):
    seconds = sum(s for s, _ in parts)
    a = aggregates(ngpus=gpus, seconds=seconds, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, **_means(parts))
    for g in a["gpus"].values():       # no kernel in the samples whose utilization read 0
        g["idle_s"] = seconds * sum(s for s, v in parts if not v.get("util_gpu_pct")) / seconds
    a["host"].update(host)
    ser = daemon_series(parts, step_s, gpus)
    return summary.node_summary(a, context(series=ser))["diagnosis"], ser


def twelve_hours() -> list[tuple[float, dict]]:
    # 5 minutes of start-up, then training with a 40-minute evaluation every 2 hours: 12 hours in all
    parts = [(300.0, IDLE), (75 * 60.0, TRAIN), (40 * 60.0, EVAL)]
    for _ in range(5):
        parts += [(80 * 60.0, TRAIN), (40 * 60.0, EVAL)]
    return parts


def test_a_12_hour_job_shows_each_40_minute_evaluation_every_2_hours():
    d, ser = job(twelve_hours(), step_s=60.0)        # the store's 1-minute means: full resolution aged out
    assert len(ser["0"]["t"]) == phases.SERIES_POINTS
    classes = [p["class"] for p in d["phases"]]
    assert classes == ["startup"] + ["compute_bound", "memory_bound"] * 6, classes
    evals = [p for p in d["phases"] if p["class"] == "memory_bound"]
    for p in evals:
        assert p["share_pct"] == pytest.approx(100 * 40 / 720, abs=1.0)     # 5.6% of the job each
        assert p["recurs"]["times"] == 6
        assert p["recurs"]["every_s"] == pytest.approx(7200, rel=0.05)
        assert p["recurs"]["each_s"] == pytest.approx(2400, rel=0.1)
    # the class is that of the most GPU-hours over the working phases, and the evaluations keep their own
    assert d["class"] == "compute_bound"
    assert sum(p["share_pct"] for p in d["phases"]) == pytest.approx(100, abs=0.5)


def test_a_3_minute_job_shows_its_30_s_startup():
    d, _ = job([(30.0, IDLE), (150.0, TRAIN)], step_s=1.0)
    assert [p["class"] for p in d["phases"]] == ["startup", "compute_bound"]
    assert d["phases"][0]["share_pct"] == pytest.approx(100 * 30 / 180, abs=2.0)
    assert d["phases"][0]["end"] - d["phases"][0]["start"] == pytest.approx(30, abs=3)
    assert d["class"] == "compute_bound" and not d["phases"][0]["work"]


@pytest.mark.parametrize("seconds, step", [(60.0, 1.0), (3600.0, 1.0), (3 * 86400.0, 60.0)])
def test_a_phase_of_5_percent_is_found_from_a_minute_to_days(seconds, step):
    parts = [(0.45 * seconds, TRAIN), (0.05 * seconds, EVAL), (0.5 * seconds, TRAIN)]
    d, _ = job(parts, step_s=step)
    assert [p["class"] for p in d["phases"]] == ["compute_bound", "memory_bound", "compute_bound"]
    assert d["phases"][1]["share_pct"] == pytest.approx(5.0, abs=1.5)


def test_a_pause_between_working_stretches_says_what_it_is_and_is_not_the_class():
    d, _ = job([(1800.0, TRAIN), (300.0, IDLE), (1800.0, TRAIN)], step_s=1.0)
    assert [p["class"] for p in d["phases"]] == ["compute_bound", "idle", "compute_bound"]
    assert "between working stretches" in d["phases"][1]["evidence"] and d["class"] == "compute_bound"


def test_a_bursty_job_is_one_phase_not_a_flicker_of_classes():
    # ABSENT: kernels in random seconds of a 10-minute input-bound job make no working phase of another class
    rng = random.Random(5)
    parts = [(1.0, TRAIN if rng.random() < 0.25 else IDLE) for _ in range(600)]
    d, _ = job(parts, step_s=1.0)
    assert {p["class"] for p in d["phases"] if p["work"]} <= {"input_bound"}, [p["class"] for p in d["phases"]]


def test_a_job_that_never_reached_its_gpu_work_is_in_startup_for_all_of_it():
    # a torch.compile'd step still compiling when its 30 s ended: CPUs busy, the model on the GPU, no kernel
    d, _ = job([(30.0, IDLE)], step_s=1.0, cpu_time_s=30.0 * 4, cpus_allocated=8)
    assert d["class"] == "startup" and d["evidence"][0] == "start-up for all 30 s"
    assert not any("--gres" in r or "request only" in r for r in d["recommendations"])
    # ABSENT: the same GPU with its host doing nothing is idle, and so is a job too long to be starting
    assert job([(30.0, IDLE)], step_s=1.0, cpu_time_s=0.1)[0]["class"] == "idle"
    assert job([(3600.0, IDLE)], step_s=1.0, cpu_time_s=3600.0 * 4, cpus_allocated=8)[0]["class"] != "startup"


def _recorded(name: str, **host) -> dict:
    """The diagnosis of a job recorded on real hardware, made again from its aggregates and phase series."""
    d = DATA / name
    aggs = json.loads((d / "aggregates.json").read_text())
    aggs["host"].update(host)
    node = json.loads((d / "node_summary.json").read_text())
    ctx = context(job_id=node["job_id"], node=node["nodes"][0], series=node[summary.PHASE_SERIES])
    return summary.node_summary(aggs, ctx)["diagnosis"]


def test_a_job_busy_only_for_its_imports_then_sleeping_with_its_memory_is_idle_not_startup():
    # 4x H100 GPU suite at 52a714e: idle.py (-c2) imported torch (4.0 CPU s), put 2 GiB on its GPU, filled it
    # and slept 10 s of its 14.7 s: 13.5% of its CPUs over the job (over the 5% bar), 0.27 CPU-seconds a second
    # (the never-worked rule classed it startup; its GPU sat idle)
    d = _recorded("h100x4_52a714e_idle")
    assert d["class"] in ("idle", "unused_gpus") and not d["evidence"][0].startswith("start-up"), d["evidence"]
    # the same job with its host kept busy through it (compiling to the end) was still starting
    d = _recorded("h100x4_52a714e_idle", cpu_time_s=14.7 * 1.2)
    assert d["class"] == "startup" and d["evidence"][0] == "start-up for all 15 s"


def test_the_phases_cost_is_bounded_by_the_points_not_the_job():
    # the daemon hands SERIES_POINTS points per GPU whatever the length: 8 GPUs of a 12-hour job, the phases found
    d, ser = job(twelve_hours(), step_s=60.0, gpus=8)
    assert all(len(s["t"]) == phases.SERIES_POINTS for s in ser.values())
    assert len(d["phases"]) == 13 and len(d["phases"]) <= phases.MAX_PHASES


def test_the_admincomment_headline_shows_the_phases_in_order_within_its_4_kib():
    from gpuperf.model import admincomment

    parts = twelve_hours()
    seconds = sum(s for s, _ in parts)
    a = aggregates(ngpus=8, seconds=seconds, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, **_means(parts))
    s = summary.node_summary(a, context(series=daemon_series(parts, 60.0, gpus=8)))
    text = admincomment.encode(s)
    assert len(text.encode()) <= admincomment.NODE_BUDGET_BYTES
    shown = admincomment.decode_headline(text.lower())["phases"].split(",")
    assert [x.split(":")[0] for x in shown] == ["startup"] + ["compute_bound", "memory_bound"] * 6
    assert all(int(x.split(":")[1]) in (5, 6) for x in shown[2::2])
    # the payload keeps every phase (the headline is its compact form)
    assert len(admincomment.decode(text)["diagnosis"]["phases"]) == 13
    # ABSENT for a job of one phase
    one = summary.node_summary(aggregates(ngpus=1), context())
    assert "phases" not in admincomment.decode_headline(admincomment.encode(one))


def test_rates_say_what_they_cover_each_working_phase_and_the_job_average():
    # a 3-minute job: 30 s of start-up, then bf16 GEMMs at 88% HMMA activity
    d, _ = job([(30.0, IDLE), (150.0, TRAIN)], step_s=1.0)
    roof = d["roofline"]
    assert roof["covers"].startswith("the working phases") and roof["job_average"]["covers"].startswith("the whole job")
    work = [p for p in d["phases"] if p["work"]]
    assert all(p["rate"]["covers"] == "this phase" and p["rate"]["unit"] == "TFLOP/s" for p in work)
    # the phase's rate is its own activity at its own clock; the average is diluted by the start-up's sixth
    from gpuperf.model import gpuspecs

    h100 = gpuspecs.lookup("NVIDIA H100 80GB HBM3")
    want = 0.88 * h100.tensor_bf16_tflops * 1755.0 / h100.tensor_mhz
    assert work[0]["rate"]["value"] == pytest.approx(want, rel=0.03)
    # (priced at the job's mean clock, the start-up's idle 1980 MHz included: the fixture's means carry +-2% noise)
    assert roof["job_average"]["rate"] == pytest.approx(want * 150 / 180, rel=0.1)
    assert roof["job_average"]["rate"] < 0.9 * work[0]["rate"]["value"]
    assert any("job average" in e and "over the working phases" in e for e in d["evidence"])
    assert not any(p.get("rate") for p in d["phases"] if not p["work"])
