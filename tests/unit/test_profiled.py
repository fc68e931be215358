"""A job that runs a profiler on its GPU (issue 27): the daemon tells from the process's environment
(``daemon.attribution.parse_environ_profiler``), folds those samples' activity figures as missing
(``model.profiled``), and the diagnosis and the reports say so instead of classing the profiler's replays.

Fixtures from the real run on an H100 (``benchmarks/results/gpu/cost_h100_python_hooks.json``, key ``ncu``: the run before the daemon marked profiled samples): the
profiled process's environment names, and the daemon's readings of the GPU during the ncu job (its
aggregates), which the report called ``input_bound`` with DataLoader advice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuperf.daemon.attribution import Attributor, PROFILERS, parse_environ_job, parse_environ_profiler
from gpuperf.diagnosis import diagnose, jobsummary
from gpuperf.model import profiled
from gpuperf.model.aggregates import JobAggregates
from gpuperf.report import html, mailtext, terminal
from gpuperf.samplers.base import GpuSample

REPO = Path(__file__).resolve().parents[2]
NCU = json.loads((REPO / "benchmarks" / "results" / "gpu" / "cost_h100_python_hooks.json").read_text())["ncu"]
PROC = NCU["gpu_processes"][0]
# what Nsight Compute added to the profiled process (the rest is the image's, Slurm's and gpuperf's)
NCU_ADDED = ("NV_NSIGHT_INJECTION_", "NV_TPS_", "NV_COMPUTE_PROFILER_", "NVIDIA_PROCESS_INJECTION_",
             "NVIDIA-PROCESS-TRACKING-", "NV_CUDA_START_SUSPENDED")
ACTIVITY = ("sm_active_pct", "tensor_active_pct", "dram_active_pct", "util_gpu_pct", "sm_occupancy_pct",
            "int_active_pct", "tensor_hmma_pct")


def _environ(names: list[str]) -> bytes:
    """A NUL-separated environ of the recorded names: the recorded value where the json kept it, else a
    plausible one."""
    plausible = {"SLURM_JOB_ID": str(NCU["job"]), "SLURM_JOBID": str(NCU["job"]), "PATH": "/usr/local/bin:/usr/bin:/bin",
                 "HOME": "/home/gpuperf-user", "CUDA_VISIBLE_DEVICES": "0", "USER": "gpuperf-user"}
    vals = {**{n: "1" for n in names}, **plausible, **PROC["env"]}
    return b"".join(f"{n}={vals[n]}".encode() + b"\0" for n in names)


RECORDED_ENV = _environ(PROC["env_names"])
PLAIN_ENV = _environ([n for n in PROC["env_names"] if not n.startswith(NCU_ADDED)])


# the parser ------------------------------------------------------------------------------------------

def test_the_recorded_ncu_process_environment_names_nsight_compute():
    assert parse_environ_profiler(RECORDED_ENV) == "Nsight Compute"
    assert parse_environ_job(RECORDED_ENV) == NCU["job"]


def test_the_same_job_without_the_profiler_names_none():
    # the CUDA image's variables stay (NV_CUDA_NSIGHT_COMPUTE_VERSION, NV_LIBCUBLAS_*): they are no marker
    assert b"NV_CUDA_NSIGHT_COMPUTE_VERSION=13.0.2-1\0" in PLAIN_ENV and b"NV_LIBCUBLAS_VERSION=" in PLAIN_ENV
    assert parse_environ_profiler(PLAIN_ENV) is None
    assert parse_environ_job(PLAIN_ENV) == NCU["job"]


@pytest.mark.parametrize("entries, tool", [
    ([b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds"], "Nsight Compute"),
    ([b"NV_COMPUTE_PROFILER_PERFWORKS_DIR=/opt/nvidia/nsight-compute/2025.3.1/target/linux-desktop-glibc_2_11_3-x64/."],
     "Nsight Compute"),
    ([b"NV_TPS_LAUNCH_TOKEN=Interactive Profile"], "Nsight Compute"),
    ([b"NV_TPS_LAUNCH_TOKEN=Frame Debugger"], None),          # Nsight Graphics' value: not a compute profiler
    ([b"NSYS_PROFILING_SESSION_ID=7", b"CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/lib/libToolsInjection64.so"],
     "Nsight Systems"),
    ([b"CUDA_INJECTION64_PATH=/home/u/libinjection.so"], "CUPTI injection"),
    ([b"CUDA_INJECTION64_PATH="], None),                       # set empty: nothing injected
    ([b"CUDA_INJECTION64_PATH=/x.so", b"NV_TPS_LAUNCH_TOKEN=Interactive Profile"], "Nsight Compute"),
    ([b"NV_COMPUTE_PROFILER_PERFWORKS_DIR", b"XNV_TPS_LAUNCH_TOKEN=Interactive Profile", b"NSYS_PROFILING_SESSION_IDX=1"], None),
    ([b"NV_CUDA_NSIGHT_COMPUTE_VERSION=13.0.2-1", b"NV_CUDA_NSIGHT_COMPUTE_DEV_PACKAGE=cuda-nsight-compute-13-0"], None),
])
def test_each_marker_names_its_tool(entries, tool):
    assert parse_environ_profiler(b"PATH=/bin\0" + b"\0".join(entries) + b"\0") == tool


def _fake_proc(root: Path, pid: int, environ: bytes, start: int = 5000, cgroup: str = "/a") -> Path:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(f"{pid} (python3) S 1 1 1 0 -1 0 " + " ".join(["0"] * 8) + f" 20 0 1 0 {start} "
                            + " ".join(["0"] * 30))
    (d / "environ").write_bytes(environ)
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    return d


def test_the_attributor_reads_a_processes_profiler_once_and_only_for_a_job(tmp_path):
    d = _fake_proc(tmp_path, 500, RECORDED_ENV)
    _fake_proc(tmp_path, 501, b"NV_TPS_LAUNCH_TOKEN=Interactive Profile\0", cgroup="/b")   # no job
    _fake_proc(tmp_path, 502, PLAIN_ENV)
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.job_and_profiler(500) == (NCU["job"], "Nsight Compute")
    assert attr.job_and_profiler(501) == (None, None)
    assert attr.job_and_profiler(502) == (NCU["job"], None)
    assert attr.job_and_profiler(999) == (None, None)                                # gone
    (d / "environ").write_bytes(PLAIN_ENV)
    assert attr.job_and_profiler(500) == (NCU["job"], "Nsight Compute")             # same process: cached
    (d / "stat").write_text((d / "stat").read_text().replace(" 5000 ", " 9000 "))   # pid reused
    assert attr.job_and_profiler(500) == (NCU["job"], None)


def test_a_marker_behind_a_huge_environment_is_found_within_the_bound_only(tmp_path):
    big = b"".join(b"X%d=" % i + b"y" * 100_000 + b"\0" for i in range(60))        # ~6 MiB
    _fake_proc(tmp_path, 600, b"SLURM_JOB_ID=5\0" + big + b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds\0")
    _fake_proc(tmp_path, 601, b"SLURM_JOB_ID=5\0" + big * 2 + b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds\0")
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.job_and_profiler(600) == (5, "Nsight Compute")
    assert attr.job_and_profiler(601) == (5, None)
    assert parse_environ_profiler(big * 2 + b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=uds\0") is None
    assert PROFILERS[0] == "Nsight Compute"


# the fold ------------------------------------------------------------------------------------------

def test_samples_under_a_profiler_fold_as_missing_and_count_their_seconds():
    a = JobAggregates.new(1, "n1", [0], start=1000.0, interval_s=1.0)
    full = dict(util_gpu_pct=5.0, sm_active_pct=4.0, tensor_active_pct=3.0, dram_active_pct=1.0, pcie_tx_bps=2e7,
                power_w=150.0, mem_used_mib=2000.0, sm_clock_mhz=1980.0)
    for i in range(1, 7):
        t = 1000.0 + i
        a.add_sweep(t, [GpuSample(gpu=0, t=t, **full)], profiled={0: "Nsight Compute"} if 2 <= i <= 4 else None)
    g = a.gpus[0]
    assert g.samples == 6 and g.seconds == 6.0 and g.profiled_s == 3.0 and g.profilers == {"Nsight Compute": 3.0}
    assert g.profiled_spans == [[1001.0, 1004.0]]                     # contiguous sweeps: one span
    for f in ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct", "pcie_tx_bps"):
        assert g.metrics[f].n == 3 and g.metrics[f].weight_s == 3.0, f          # only the unprofiled samples
    for f in ("power_w", "mem_used_mib", "sm_clock_mhz"):
        assert g.metrics[f].n == 6, f                                           # the GPU's, whatever ran
    d = a.to_dict()["gpus"]["0"]
    assert d["profiled_s"] == 3.0 and d["profilers"] == {"Nsight Compute": 3.0} and d["profiled_spans"] == [[1001.0, 1004.0]]
    back = JobAggregates.from_state(json.loads(json.dumps(a.to_state())))
    assert back.gpus[0].profiled_s == 3.0 and back.gpus[0].profiled_spans == [[1001.0, 1004.0]]
    old = a.to_state()
    for k in ("profiled_s", "profilers", "profiled_spans"):
        del old["gpus"][0][k]                       # a checkpoint from before: loads, nothing profiled
    assert JobAggregates.from_state(old).gpus[0].profiled_s == 0.0


def test_spans_stay_bounded():
    spans: list[list[float]] = []
    for i in range(40):
        profiled.add_span(spans, 10.0 * i, 10.0 * i + 1)
    assert len(spans) == profiled.MAX_SPANS and spans[-1][1] == 391.0 and spans[0] == [0.0, 1.0]


# the recorded ncu job, through the fold, the summary, the diagnosis and the reports ------------------

def _ncu_job(profile: range | None) -> dict:
    """Aggregates of the ncu job folded from samples shaped on the daemon's recorded readings: its idle
    samples first (no kernel: the program starting), then its busy ones at the recorded means scaled to
    them; ``profile``: the indices of the samples taken while the profiled process ran on the GPU."""
    rec = NCU["aggregates"]
    g = rec["gpus"]["0"]
    step = rec["interval_s"]
    n, n_idle = g["samples"], round(g["idle_s"] / step)
    m = {k: v["mean"] for k, v in g["metrics"].items()}
    a = JobAggregates.new(NCU["job"], "gpun1", [0], start=rec["start"], interval_s=step, cpus=4,
                          names={0: g["name"]})
    for i in range(n):
        t = rec["start"] + step * (i + 1)
        busy = {k: m[k] * n / (n - n_idle) for k in m if k.endswith("_pct") or k.endswith("_bps")}
        vals = busy if i >= n_idle else {k: 0.0 for k in busy}
        s = GpuSample(gpu=0, t=t, power_w=m["power_w"], mem_used_mib=m["mem_used_mib"], mem_total_mib=81559.0,
                      sm_clock_mhz=m["sm_clock_mhz"], power_limit_w=700.0, **vals)
        a.add_sweep(t, [s], profiled={0: "Nsight Compute"} if profile is not None and i in profile else None)
    a.end = rec["end"]
    d = a.to_dict()
    d["host"] = rec["host"]
    return d


def _summary(aggs: dict) -> dict:
    return jobsummary.node_summary(aggs, {"job_id": NCU["job"], "node": "gpun1", "user": "gpuperf-user", "uid": 1001})


def test_the_recorded_readings_alone_read_input_bound_as_the_report_did():
    # the daemon's aggregates of the real ncu job, without the profiler known: the misleading class
    s = _summary(NCU["aggregates"])
    assert s["diagnosis"]["class"] == NCU["summary"]["diagnosis"]["class"] == "input_bound"
    assert not any("profiler" in n for n in s["diagnosis"]["notes"]) and "profiled_s" not in s["job"]


def test_an_unprofiled_job_with_the_same_low_figures_keeps_its_class_without_the_note():
    s = _summary(_ncu_job(None))
    job, rec = s["job"], NCU["summary"]["job"]
    for k in ("tensor_active_pct", "sm_active_pct", "util_gpu_pct", "idle_pct"):
        assert job[k] == pytest.approx(rec[k], abs=0.6), k                  # the fixture is the recorded job
    d = s["diagnosis"]
    # no framework in evidence (the fixture read no maps): the loader advice in neutral words (issue 35)
    assert d["class"] == "input_bound" and any("loader" in r for r in d["recommendations"])
    assert not any("profiler" in n for n in d["notes"] + d["evidence"]) and "profiled_s" not in job
    assert "Profiler" not in terminal.render(s, width=120) and "id='profiler'" not in html.render(s, None)


def test_a_job_profiled_for_most_of_its_samples_gets_no_class_and_says_why():
    s = _summary(_ncu_job(range(12, 29)))               # the process on the GPU: every busy sample
    g, job, d = s["gpus"][0], s["job"], s["diagnosis"]
    assert g["profiled_s"] == job["profiled_s"] == 8.5 and job["profilers"] == {"Nsight Compute": 8.5}
    # the means are over the 12 samples before the process came (no kernel), not the profiler's readings
    assert all(g[k] == 0.0 for k in ACTIVITY) and g["idle_pct"] == 100.0
    assert g["power_mean_w"] is not None and g["energy_j"] is not None and g["mem_peak_mib"] is not None
    assert d["class"] == "no_data" and d["confidence"] == "none"
    assert d["evidence"] == ["59% of the job's GPU time ran under a profiler (Nsight Compute): its figures are the "
                             "profiler's, so no class is given from them"]
    note = d["notes"][0]
    assert note.startswith("a profiler (Nsight Compute) ran on GPU 0 for 8 s of its 14 s: its counters counted the "
                           "profiler's kernel replays") and "missing, not zero" in note
    assert not any("DataLoader" in r or "daemon" in r for r in d["recommendations"])
    assert d["recommendations"] and "without the profiler" in d["recommendations"][0]
    out = terminal.render(s, width=140)
    assert "NO-DATA" in out and "Profiler" in out and "Nsight Compute 8 GPU-s under a profiler" in out
    assert "ran on GPU 0" in out.replace("\n", " ")
    page = html.render(s, None)
    assert "id='profiler'" in page and "missing, not zero" in page
    assert "figures missing under a profiler" in mailtext.headline("1987031", s)


def test_a_job_profiled_throughout_has_no_activity_figure_at_all():
    s = _summary(_ncu_job(range(0, 29)))
    g = s["gpus"][0]
    assert all(g[k] is None for k in ACTIVITY) and g["idle_pct"] is None and g["pcie_bps"] is None
    assert s["diagnosis"]["class"] == "no_data" and s["diagnosis"]["evidence"][0].startswith("100% of the job's")
    assert s["job"]["wasted_gpu_hours"] == 0.0 and s["job"]["power_mean_w"] is not None


def test_a_job_profiled_for_a_small_part_is_classed_from_the_rest_with_the_note():
    s = _summary(_ncu_job(range(25, 29)))               # 2 s of 14.5 under the profiler
    d = s["diagnosis"]
    assert s["job"]["profiled_s"] == 2.0
    assert d["class"] == "input_bound"                  # what the rest of the (unprofiled) time says
    assert d["notes"][0].startswith("a profiler (Nsight Compute) ran on GPU 0 for 2 s of its 14 s")


def test_the_phases_leave_the_profiled_points_out():
    # a job busy (compute-bound) for 60 s, then 40 s under Nsight Compute reading what ncu's replays leave:
    # without the mask the low points would be a phase of their own; with it, one working phase
    gpus = [{"node": "n1", "gpu": 0, "name": "NVIDIA H100 80GB HBM3", "samples": 100, "seconds": 100.0,
             "profiled_s": 40.0, "profilers": {"Nsight Compute": 40.0}, "profiled_spans": [[1060.0, 1100.0]]}]
    ts = [1000.0 + i for i in range(1, 101)]
    low = [t > 1060.0 for t in ts]
    series = {"0": {"t": ts, "util_gpu_pct": [5.0 if lo else 100.0 for lo in low],
                    "sm_active_pct": [4.0 if lo else 95.0 for lo in low],
                    "tensor_active_pct": [3.0 if lo else 80.0 for lo in low],
                    "dram_active_pct": [1.0 if lo else 30.0 for lo in low]}}
    masked = profiled.mask_series(series, gpus)["0"]
    assert masked["util_gpu_pct"][:59] == [100.0] * 59 and set(masked["util_gpu_pct"][60:]) == {None}
    assert masked["t"] == ts
    assert profiled.mask_series({"n1:0": series["0"]}, gpus)["n1:0"]["sm_active_pct"][70] is None
    assert profiled.mask_series(series, [dict(gpus[0], profiled_spans=[])]) == series
    dropped = profiled.mask_series(series, gpus, drop=True)["0"]
    assert dropped["t"] == ts[:59] and dropped["util_gpu_pct"] == [100.0] * 59
    summary = {"gpus": [dict(gpus[0], util_gpu_pct=100.0, sm_active_pct=95.0, tensor_active_pct=80.0,
                             dram_active_pct=30.0, idle_pct=0.0, idle_s=0.0)], "nodes": ["n1"]}
    from gpuperf.model.totals import job_totals
    summary["job"] = job_totals(summary["gpus"])
    d = diagnose(summary, series)
    assert d.cls == "compute_bound" and not d.phases and d.notes[0].startswith("a profiler (Nsight Compute)")


def test_the_daemon_on_a_real_h100_folded_the_ncu_job_as_profiled_and_it_reads_no_data():
    """The run after the fix (benchmarks/results/gpu/cost_h100.json, key ``ncu``): the daemon's own aggregates
    of the job that ran Nsight Compute on its GPU; its summary from them is no_data with the note."""
    real = json.loads((REPO / "benchmarks" / "results" / "gpu" / "cost_h100.json").read_text())["ncu"]
    g = real["aggregates"]["gpus"]["0"]
    assert g["profilers"] and g["profiled_s"] > g["seconds"] / 2
    s = jobsummary.node_summary(real["aggregates"], {"job_id": real["job"], "node": "gpun1", "user": "u", "uid": 1001})
    assert s["diagnosis"]["class"] == "no_data"
    assert any("Nsight Compute" in n and "missing, not zero" in n for n in s["diagnosis"]["notes"])
    assert "DataLoader" not in json.dumps(s["diagnosis"])
