"""The job summary ``gpuperf.summary.v1``: what a job did with its GPUs, built from the daemon's aggregates.

``node_part(aggregates, context)`` turns one node's ``JobAggregates.to_dict()`` into a summary's figures;
``join(node_summaries, expected_nodes)`` joins the nodes of a multi-node job into one. Both are pure
apart from reading the env/affinity records the prolog and the tasks left in the job's directory
(``env.report``, ``affinity.report``); the job-wide totals are ``model.totals``'. The ``estimates``
and the ``diagnosis`` are the diagnosis' (``gpuperf.diagnosis.jobsummary``: ``node_summary`` and
``merge`` give the whole summary).

Shape (all numbers rounded; ``None`` where the sampler could not measure, never 0)::

    {"schema": "gpuperf.summary.v1", "job_id", "user", "uid", "nodes": [..], "start", "end", "wall_s",
     "gpus": [{"node", "gpu", "name", "samples", "seconds", "sm_active_pct", "sm_occupancy_pct",
               "tensor_active_pct", "dram_active_pct", "fp16_active_pct", "fp32_active_pct",
               "fp64_active_pct", "int_active_pct", "tensor_hmma_pct", "tensor_imma_pct", "tensor_dfma_pct",
               "tensor_dmma_pct", "util_gpu_pct", "util_minus_sm_pct", "mem_peak_mib", "mem_total_mib",
               "mem_peak_pct", "power_mean_w", "power_max_w", "power_limit_w", "energy_j", "energy_kwh",
               "energy_source", "nvlink_tx_bytes", "nvlink_rx_bytes", "nvlink_bps", "pcie_tx_bytes",
               "pcie_rx_bytes", "pcie_bps", "throttle_s": {reason: s}, "idle_s", "idle_pct", "temp_max_c",
               "sm_clock_mhz", "profiled_s"?, "profilers"?, "profiled_spans"?}],
     "job": {the same quantities over all GPUs, "gpu_count", "gpu_hours", "wasted_gpu_hours",
             "sm_active_spread_pct", "util_spread_pct"},
     "hosts": {node: {"cpu_efficiency_pct", "cpu_time_s", "cpu_source", "cpus_allocated", "rss_peak_mib", "iowait_pct"}},
     "env": {node: {...}}, "affinity": {node: {...}},
     "estimates": {"label", "model", "source", "peak_tensor_tflops", "tensor_tflops_est", "tflops_est_per_gpu", ...},
     "quality": {"samples", "gaps", "gap_s", "partial", "reasons": [..], "nodes_expected", "nodes_missing"},
     "diagnosis": {"class", "confidence", "imbalanced", "evidence": [..], "recommendations": [..], "findings": [..],
                   "roofline": {..}, "unused": {..}|None, "busy_class", "phases": [..]}}

A GPU on which the job's own process ran under a profiler carries ``profiled_s`` (seconds), ``profilers``
({tool: seconds}) and ``profiled_spans`` ([[t0, t1]]): its activity figures (``model/profiled.py``) are
means over the rest of its time, ``None`` when there was none; ``idle_pct`` and the link rates too.

A node summary carries also ``fleet``: per GPU its uuid and figures under load (``gpuperf/model/load.py``),
which the controller folds into the fleet fingerprints; the merged job summary leaves it out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuperf.files import jobstate, safeio
from gpuperf.model.load import node_figures
from gpuperf.model.totals import J_PER_KWH, job_totals, rounded as _r

SCHEMA = "gpuperf.summary.v1"

# GpuSample fields averaged into the summary: summary key -> metric name in the aggregates
_MEANS: dict[str, str] = {
    "sm_active_pct": "sm_active_pct",
    "sm_occupancy_pct": "sm_occupancy_pct",
    "tensor_active_pct": "tensor_active_pct",
    "dram_active_pct": "dram_active_pct",
    "fp16_active_pct": "fp16_active_pct",
    "fp32_active_pct": "fp32_active_pct",
    "fp64_active_pct": "fp64_active_pct",
    "int_active_pct": "int_active_pct",
    "tensor_hmma_pct": "tensor_hmma_pct",
    "tensor_imma_pct": "tensor_imma_pct",
    "tensor_dfma_pct": "tensor_dfma_pct",
    "tensor_dmma_pct": "tensor_dmma_pct",
    "util_gpu_pct": "util_gpu_pct",
    "power_mean_w": "power_w",
    "sm_clock_mhz": "sm_clock_mhz",
}
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _stat(metrics: dict, name: str, which: str) -> float | None:
    m = metrics.get(name)
    return _num(m.get(which)) if isinstance(m, dict) else None


def _gpu_summary(node: str, index: str, g: dict) -> dict[str, Any]:
    """One GPU's summary from its aggregates entry."""
    metrics = g.get("metrics") or {}
    seconds = _num(g.get("seconds")) or 0.0
    profiled = min(seconds, max(0.0, _num(g.get("profiled_s")) or 0.0))
    measured = seconds - profiled          # the time the activity figures (and idle, links) were read
    out: dict[str, Any] = {"node": node, "gpu": int(index), "name": g.get("name"),
                           "samples": int(g.get("samples") or 0), "seconds": _r(seconds)}
    for key, metric in _MEANS.items():
        out[key] = _r(_stat(metrics, metric, "mean"))
    util, sm = out["util_gpu_pct"], out["sm_active_pct"]
    # "100% utilization" only means a kernel was running; SM active says how much of the GPU it used
    out["util_minus_sm_pct"] = _r(util - sm) if util is not None and sm is not None else None
    mem_total = _num(g.get("mem_total_mib")) or _stat(metrics, "mem_total_mib", "max")
    mem_peak = _stat(metrics, "mem_used_mib", "max")
    out["mem_peak_mib"] = _r(mem_peak, 0)
    out["mem_total_mib"] = _r(mem_total, 0)
    out["mem_peak_pct"] = _r(100.0 * mem_peak / mem_total) if mem_peak is not None and mem_total else None
    out["power_max_w"] = _r(_stat(metrics, "power_w", "max"))
    out["power_limit_w"] = _r(_num(g.get("power_limit_w")) or _stat(metrics, "power_limit_w", "max"))
    energy = _num(g.get("energy_j"))
    out["energy_j"] = _r(energy, 0)
    out["energy_kwh"] = _r(energy / J_PER_KWH, 4) if energy is not None else None
    out["energy_source"] = g.get("energy_source")
    for link in ("nvlink", "pcie"):
        total = 0.0
        known = False
        for d in ("tx", "rx"):
            b = _num(g.get(f"{link}_{d}_bytes"))
            if b is None:
                # older aggregates: bytes from the mean rate over the job
                rate = _stat(metrics, f"{link}_{d}_bps", "mean")
                b = rate * seconds if rate is not None else None
            out[f"{link}_{d}_bytes"] = _r(b, 0)
            if b is not None:
                total += b
                known = True
        out[f"{link}_bps"] = _r(total / measured, 0) if known and measured > 0 else None
    thr = g.get("throttle_s") or {}
    out["throttle_s"] = {k: _r(_num(v) or 0.0) for k, v in thr.items() if _num(v)}
    idle = _num(g.get("idle_s"))
    out["idle_s"] = _r(idle)
    out["idle_pct"] = _r(100.0 * idle / measured) if idle is not None and measured > 0 else None
    out["temp_max_c"] = _r(_stat(metrics, "temp_c", "max"), 0)
    if g.get("shared"):
        out["shared_s"] = _r(_num(g.get("shared_s")))
    if profiled > 0:
        # the job's process ran under a profiler: its activity figures then were the profiler's, kept out
        out["profiled_s"] = _r(profiled)
        out["profilers"] = {str(k): _r(_num(v)) for k, v in (g.get("profilers") or {}).items() if _num(v)}
        spans = [sp for sp in (g.get("profiled_spans") or [])[:16] if isinstance(sp, (list, tuple)) and len(sp) == 2]
        out["profiled_spans"] = [[_r(_num(a), 2), _r(_num(b), 2)] for a, b in spans
                                 if _num(a) is not None and _num(b) is not None]
    foreign = g.get("foreign_processes") or []
    if foreign:
        # processes of other jobs (or of none) on an allocated GPU: the figures above include their work
        out["foreign_processes"] = len(foreign)
    if g.get("xid_count"):
        # NVML XID events while the job ran on this GPU (the daemon's event poll)
        out["xids"] = {"count": int(g["xid_count"]), "codes": sorted({int(x["xid"]) for x in g.get("xids") or []})}
    return out


def host_summary(host: dict | None) -> dict[str, Any]:
    """Host-side figures: CPU efficiency = CPU time / (allocated CPUs × wall time)."""
    host = host or {}
    cpu_s, ncpu, wall = _num(host.get("cpu_time_s")), _num(host.get("cpus_allocated")), _num(host.get("wall_s"))
    eff = 100.0 * cpu_s / (ncpu * wall) if cpu_s is not None and ncpu and wall else None
    out = {"cpu_efficiency_pct": _r(eff), "cpu_time_s": _r(cpu_s), "cpu_source": host.get("cpu_source"),
           "cpus_allocated": None if ncpu is None else int(ncpu),
           "wall_s": _r(wall), "rss_peak_mib": _r(_num(host.get("rss_peak_mib")), 0),
           "iowait_pct": _r(_num(host.get("iowait_pct")))}
    net = host.get("net_bytes") or {}
    if net and wall:
        # node NIC counters over the job (the whole node's traffic, not only this job's)
        out["net_bps"] = {nic: _r(((_num(v.get("rx_bytes")) or 0.0) + (_num(v.get("tx_bytes")) or 0.0)) / wall, 0)
                          for nic, v in sorted(net.items()) if isinstance(v, dict)}
    return out


def _quality(aggs: dict, gpus: list[dict]) -> dict[str, Any]:
    gaps = aggs.get("gaps") or []
    gap_s = sum(max(0.0, float(b) - float(a)) for a, b in gaps if _num(a) is not None and _num(b) is not None)
    reasons = list(aggs.get("partial_reasons") or [])
    partial = bool(aggs.get("partial"))
    if partial and not reasons:
        reasons.append("daemon marked the aggregates partial")
    if not gpus:
        partial = True
        reasons.append("no GPU samples")
    return {"samples": sum(g["samples"] for g in gpus), "gaps": len(gaps), "gap_s": _r(gap_s),
            "partial": partial, "reasons": reasons}


def env_view(raw: Any) -> dict | None:
    """The injected environment as the summary keeps it: {"vars": {name: {"value", "reason"}}, "disabled"?}."""
    if not isinstance(raw, dict):
        return None
    if not isinstance(raw.get("vars"), list):
        return raw                      # not the env engineer's plan format: kept as it is
    out: dict[str, Any] = {"vars": {v["name"]: {"value": v.get("value"), "reason": v.get("reason")}
                                    for v in raw["vars"] if isinstance(v, dict) and "name" in v}}
    if raw.get("disabled"):
        out["disabled"] = raw["disabled"]
    return out


def read_job_files(job_dir: str | Path | None, ignored: safeio.Ignored | None = None,
                   node_cpus: list[int] | None = None) -> tuple[dict | None, dict | None]:
    """The env and affinity the prolog/TaskProlog recorded in the job's state dir (None when absent).

    The job's user writes part of that dir: what its readers refused is added to ``ignored``; the CPUs
    its tasks say they ran on are cut to the job's and the node's (``node_cpus``, where known)."""
    if not job_dir:
        return None, None
    d = Path(job_dir)
    ignored = ignored if ignored is not None else safeio.Ignored()
    try:
        # the env part's own reader: per-task values (OMP_NUM_THREADS...) as the tasks exported them
        from gpuperf.env.report import report as env_report

        env = env_view(env_report(d, ignored))
    except Exception:  # noqa: BLE001 - a missing or failing reader must not cost the summary
        env = env_view(safeio.read_json(d / "env.json", ignored=ignored))
    try:
        # the affinity part's own reader: what the tasks applied, else the prolog's plan
        from gpuperf.affinity.report import report as affinity_report

        affinity = affinity_report(d, ignored, node_cpus)
    except Exception:  # noqa: BLE001 - a missing or failing reader must not cost the summary
        affinity = jobstate.read_json(d / "affinity.json")  # not user-writable: root's file in root's dir
    return env, affinity


def node_part(aggregates: dict, context: dict) -> dict:
    """One node's summary from its aggregates, but for its ``estimates`` (None) and ``diagnosis``.

    context: job_id, user, uid, node, job_dir (env/affinity files), env, affinity, gpu_names
    ({"0": "NVIDIA H100 80GB HBM3"}) for GPUs the aggregates do not name, gpu_links ({"0": {"gen": 5,
    "width": 16}}: each GPU's PCIe link from the node's topology), gpudirect_rdma and gpudirect_storage
    (whether the node's GPUDirect RDMA module, nvidia_peermem, and GPUDirect Storage's, nvidia_fs, are loaded),
    cpus_online (the node's online CPU ids: what a task's affinity record may name, with the job's allocation).
    """
    node = str(context.get("node") or aggregates.get("node") or "")
    gpus = [_gpu_summary(node, i, g) for i, g in sorted((aggregates.get("gpus") or {}).items(), key=lambda kv: int(kv[0]))]
    names = context.get("gpu_names") or {}
    links = context.get("gpu_links") if isinstance(context.get("gpu_links"), dict) else {}
    for g in gpus:
        # the GPU's PCIe link as the node's topology read it (the diagnosis's transfer rule needs its rate)
        link = links.get(str(g["gpu"])) if isinstance(links.get(str(g["gpu"])), dict) else {}
        if _num(link.get("gen")) and _num(link.get("width")):
            g["pcie_gen"], g["pcie_width"] = int(link["gen"]), int(link["width"])
        # the model from the node's topology where the sampler did not name it
        if not g["name"] and names.get(str(g["gpu"])):
            g["name"] = names[str(g["gpu"])]
    ignored = safeio.Ignored()
    cpus = context.get("cpus_online")
    env, affinity = read_job_files(context.get("job_dir"), ignored,
                                   [c for c in cpus if isinstance(c, int)] if isinstance(cpus, list) and cpus else None)
    env = context.get("env", env)
    affinity = context.get("affinity", affinity)
    # a running job has no end yet: its summary runs to the last sample
    start = _num(aggregates.get("start"))
    end = _num(aggregates.get("end")) or _num(aggregates.get("last_sample_t"))
    s: dict[str, Any] = {
        "schema": SCHEMA,
        "job_id": context.get("job_id", aggregates.get("job_id")),
        "user": context.get("user"),
        "uid": context.get("uid"),
        "nodes": [node],
        "start": start, "end": end,
        "wall_s": _r(end - start) if start is not None and end is not None else None,
        "gpus": gpus,
        "job": job_totals(gpus),
        "hosts": {node: dict(host_summary(aggregates.get("host")),
                             **{k: context[k] for k in ("gpudirect_rdma", "gpudirect_storage")
                                if isinstance(context.get(k), bool)})},
        "env": {node: env} if env is not None else {},
        "affinity": {node: affinity} if affinity is not None else {},
        "estimates": None,
        "quality": _quality(aggregates, gpus),
    }
    s["fleet"] = node_figures(aggregates, names, context.get("probe"))
    if ignored.reasons:
        # what the job's user left in its files was refused: the summary lacks it, and says so
        s["quality"]["ignored"] = ignored.shown()
        s["quality"]["partial"] = True
        s["quality"]["reasons"].append(f"{len(ignored.reasons) + ignored.more} job record(s) refused")
    s["quality"]["nodes_expected"] = [node]
    s["quality"]["nodes_missing"] = []
    return s


def _node_notes(parts: list[dict]) -> tuple[list[str], list[str]]:
    """The nodes' own partial-data reasons and refused records, each prefixed with its node (a job's wording)."""
    reasons: list[str] = []
    ignored: list[str] = []
    for s in parts:
        node, q = ",".join(s.get("nodes", [])), s.get("quality") or {}
        if q.get("partial"):
            reasons += [f"{node}: {r}" for r in q.get("reasons", [])]
        ignored += [f"{node}: {r}" for r in q.get("ignored") or []]
    return reasons, ignored[:safeio.SHOWN * 2]


def _single(part: dict, expected: list[str]) -> dict:
    """The job summary of a job whose one node reported: that node's, already diagnosed (with its series)."""
    out = {k: v for k, v in part.items() if k != "fleet"}
    q = dict(part.get("quality") or {})
    q["reasons"], ignored = _node_notes([part])
    if ignored:
        q["ignored"] = ignored
    else:
        q.pop("ignored", None)
    q["partial"] = bool(q["reasons"])
    q["nodes_expected"], q["nodes_missing"] = expected, []
    out["quality"] = q
    return out


def join(node_summaries: list[dict], expected_nodes: list[str]) -> dict:
    """One summary for a multi-node job, but for its ``estimates`` (None) and ``diagnosis``; nodes that did
    not report make it partial and are named.

    A job of one node that reported keeps that node's whole summary, diagnosis included (made on the
    node with its time series, so with phases): nothing to join, and the controller does not diagnose
    twice. ``diagnosis.jobsummary.merge`` tells the two apart by that ``diagnosis``."""
    parts = [s for s in node_summaries if isinstance(s, dict) and s.get("schema") == SCHEMA]
    nodes = sorted({n for s in parts for n in s.get("nodes", [])})
    expected = list(expected_nodes) or nodes
    missing = [n for n in expected if n not in nodes]
    if len(parts) == 1 and not missing and isinstance(parts[0].get("diagnosis"), dict) and parts[0].get("gpus"):
        return _single(parts[0], expected)
    gpus = sorted((g for s in parts for g in s.get("gpus", [])), key=lambda g: (str(g.get("node")), g.get("gpu", 0)))
    starts = [s["start"] for s in parts if s.get("start") is not None]
    ends = [s["end"] for s in parts if s.get("end") is not None]
    first = parts[0] if parts else {}
    reasons, ignored = _node_notes(parts)
    if missing:
        reasons.append(f"no summary from {', '.join(missing)}")
    start, end = (min(starts) if starts else None), (max(ends) if ends else None)
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "job_id": first.get("job_id"), "user": first.get("user"), "uid": first.get("uid"),
        "nodes": nodes, "start": start, "end": end,
        "wall_s": _r(end - start) if start is not None and end is not None else None,
        "gpus": gpus, "job": job_totals(gpus),
        "hosts": {k: v for s in parts for k, v in (s.get("hosts") or {}).items()},
        "env": {k: v for s in parts for k, v in (s.get("env") or {}).items()},
        "affinity": {k: v for s in parts for k, v in (s.get("affinity") or {}).items()},
        "estimates": None,
        "quality": {"samples": sum((s.get("quality") or {}).get("samples", 0) for s in parts),
                    "gaps": sum((s.get("quality") or {}).get("gaps", 0) for s in parts),
                    "gap_s": _r(sum((s.get("quality") or {}).get("gap_s", 0.0) for s in parts)),
                    "partial": bool(missing or reasons or not parts), "reasons": reasons or ([] if parts else ["no node summaries"]),
                    "nodes_expected": expected, "nodes_missing": missing},
    }
    if ignored:
        out["quality"]["ignored"] = ignored
    return out
