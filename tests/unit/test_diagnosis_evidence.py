"""No bottleneck class without its evidence: summaries with measured fields removed (as samplers
without GPM/DCGM, daemons that were down, GPUs the sampler missed leave them) never get a class
whose evidence is gone; nothing sampled is ``no_data``; utilization alone is said to be low confidence."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf.model import admincomment
from gpuperf.diagnosis import jobsummary as summary
from gpuperf import diagnosis
from report_fixtures import aggregates, context

# what each class rests on, written here independently of the rules: every group needs one measured key
_ACTIVITY = ("util_gpu_pct", "sm_active_pct", "idle_pct")
_PIPES = ("tensor_active_pct", "fp16_active_pct", "fp32_active_pct", "fp64_active_pct")
NEEDS = {
    "idle": (_ACTIVITY,), "input_bound": (("util_gpu_pct", "sm_active_pct"),),
    "launch_bound": (("util_gpu_pct",), ("sm_active_pct",)), "memory_bound": (("dram_active_pct",),),
    "underfilled": (("util_gpu_pct",), ("sm_active_pct",)), "transfer_bound": (("pcie_bps", "nvlink_bps"),),
    "latency_bound": (("sm_active_pct",), _PIPES, ("dram_active_pct",)),
    "compute_bound": (_PIPES,), "communication_bound": (("nvlink_bps", "pcie_bps", "net_bps"),),
    "throttled": (("throttle_s",),), "busy_unprofiled": (_ACTIVITY,), "unused_gpus": (_ACTIVITY,),
    "no_data": (), "startup": (_ACTIVITY,),
}
REMOVABLE = ("util_gpu_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct",
             "fp16_active_pct", "fp32_active_pct", "fp64_active_pct", "idle_pct", "idle_s", "nvlink_bps", "pcie_bps",
             "throttle_s", "sm_clock_mhz", "net_bps", "samples")

JOBS = {   # one of each shape the rules know, as the node daemon's aggregates
    "compute": dict(tensor_active_pct=90.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0),
    "memory": dict(tensor_active_pct=2.0, dram_active_pct=85.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0),
    "comm": dict(sm_active_pct=20.0, tensor_active_pct=0.0, nvlink_tx_bps=150e9, nvlink_rx_bps=150e9),
    "launch": dict(sm_active_pct=10.0, tensor_active_pct=1.0, dram_active_pct=4.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0),
    "input": dict(util_gpu_pct=35.0, sm_active_pct=30.0, tensor_active_pct=20.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0),
    "idle": dict(util_gpu_pct=0.5, sm_active_pct=0.2, tensor_active_pct=0.0, dram_active_pct=0.0),
}


def _summary(kind: str, throttled: bool, one_unused: bool) -> dict:
    a = aggregates(ngpus=2, **JOBS[kind])
    if throttled:
        for g in a["gpus"].values():
            g["throttle_s"]["hw_thermal"] = 0.5 * g["seconds"]
    if one_unused:
        g = a["gpus"]["1"]
        for k in ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct"):
            g["metrics"][k] = {"mean": 0.0, "min": 0.0, "max": 0.0, "p50": 0.0, "p95": 0.0}
        g["idle_s"] = g["seconds"]
    return summary.node_summary(a, context(env=None, affinity=None))


def _strip(s: dict, keys: set[str]) -> dict:
    """The summary a sampler that measured none of ``keys`` would have given (job, GPUs and hosts)."""
    s = copy.deepcopy(s)
    for part in [s["job"], *s["gpus"], *s["hosts"].values()]:
        for k in keys:
            part.pop(k, None)
    return s


def _measured(s: dict, key: str) -> bool:
    parts = [s["job"], *s["gpus"]] + list(s["hosts"].values())
    return any(p.get(key) not in (None, {}, []) for p in parts)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(JOBS)), throttled=st.booleans(), one_unused=st.booleans(),
       removed=st.sets(st.sampled_from(REMOVABLE)))
def test_no_class_without_the_evidence_it_names(kind, throttled, one_unused, removed):
    s = _strip(_summary(kind, throttled, one_unused), removed)
    d = diagnosis.diagnose(s)
    assert d.cls in diagnosis.CLASSES
    for group in NEEDS[d.cls]:
        assert any(_measured(s, k) for k in group), f"{d.cls} without any of {group} (removed {sorted(removed)})"
    if d.busy_class:
        for group in NEEDS[d.busy_class]:
            assert any(_measured(s, k) for k in group), f"busy {d.busy_class} without any of {group}"
    if not any(_measured(s, k) for k in _ACTIVITY):
        assert d.cls == "no_data" and d.confidence == "none"
    if d.cls != "no_data" and not _measured(s, "sm_active_pct"):
        # utilization alone says whether kernels ran, not what bounds them; the report says so
        assert d.confidence == "low" and any("utilization only" in n for n in d.notes)
    assert 1 <= len(d.recommendations) <= 3 and d.evidence


def test_a_job_whose_gpus_gave_no_samples_is_no_data_not_compute_bound():
    # the daemon was down for the whole job: GPUs known, nothing measured (the first case)
    a = aggregates(ngpus=2)
    for g in a["gpus"].values():
        g.update(samples=0, metrics={}, idle_s=None, throttle_s={}, energy_j=None)
    s = summary.node_summary(a, context())
    d = s["diagnosis"]
    assert d["class"] == "no_data" and d["confidence"] == "none"
    assert any("daemon" in r for r in d["recommendations"])
    assert not any("bottleneck" in r or "roof" in r for r in d["recommendations"])
    head = admincomment.decode_headline(admincomment.encode(s))
    assert head["class"] == "no_data" and head["conf"] == "none"
    empty = summary.node_summary({"job_id": 9, "node": "n1", "gpus": {}, "host": {}}, context())
    assert empty["diagnosis"]["class"] == "no_data"


def test_busy_gpus_with_utilization_only_get_no_bottleneck_class():
    a = aggregates(ngpus=1, util_gpu_pct=98.0)
    for k in ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct", "fp16_active_pct",
              "fp32_active_pct", "fp64_active_pct"):
        del a["gpus"]["0"]["metrics"][k]
    d = summary.node_summary(a, context())["diagnosis"]
    assert d["class"] == "busy_unprofiled" and d["confidence"] == "low"
    assert any("GPM" in r or "DCGM" in r for r in d["recommendations"])


def test_busy_sms_with_low_occupancy_and_quiet_pipes_are_underfilled():
    s = summary.node_summary(aggregates(ngpus=1, util_gpu_pct=100.0, sm_active_pct=80.0, sm_occupancy_pct=8.0,
                                        tensor_active_pct=5.0, fp32_active_pct=10.0, dram_active_pct=20.0,
                                        nvlink_tx_bps=0.0, nvlink_rx_bps=0.0), context())
    d = s["diagnosis"]
    assert [f["kind"] for f in d["findings"]] == ["sms_underfilled"]
    assert "larger" in d["recommendations"][0]
    # the same occupancy with full tensor pipes is a large GEMM's normal, not a finding
    gemm = summary.node_summary(aggregates(ngpus=1, sm_active_pct=95.0, sm_occupancy_pct=13.0, tensor_active_pct=92.0,
                                           nvlink_tx_bps=0.0, nvlink_rx_bps=0.0), context())
    assert gemm["diagnosis"]["findings"] == []


def test_report_power_line_labels_sum_and_peak_and_rates_never_read_n_a_per_s():
    from gpuperf.report import terminal

    a = aggregates(ngpus=2, power_w=300.0)
    for g in a["gpus"].values():
        g.pop("pcie_tx_bytes"), g.pop("pcie_rx_bytes")
        g["metrics"].pop("pcie_tx_bps"), g["metrics"].pop("pcie_rx_bps")
    out = terminal.render(summary.node_summary(a, context()), width=200, color=False)
    assert "n/a/s" not in out
    line = next(x for x in out.splitlines() if x.lstrip().startswith("Power "))
    assert "per GPU" in line and "over 2 GPUs" in line and "peak" in line and "one GPU" in line


def test_one_way_pcie_copies_are_not_collectives_through_host_memory():
    def diag(tx: float, rx: float) -> str:
        return summary.node_summary(aggregates(ngpus=2, util_gpu_pct=70.0, sm_active_pct=3.0, tensor_active_pct=0.0,
                                               dram_active_pct=2.0, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0,
                                               pcie_tx_bps=tx, pcie_rx_bps=rx), context())["diagnosis"]["class"]

    assert diag(5e9, 4.5e9) == "communication_bound"       # both ways: an all-reduce over sockets
    assert diag(0.1e9, 6e9) != "communication_bound"       # host-to-device only: copies feeding the GPU
