"""Synthetic aggregates (the daemon's ``JobAggregates.to_dict()`` shape) for the report's unit tests."""

from __future__ import annotations

import random

METRICS = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz",
           "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct", "fp16_active_pct",
           "fp32_active_pct", "fp64_active_pct", "pcie_tx_bps", "pcie_rx_bps", "nvlink_tx_bps", "nvlink_rx_bps")


def _stats(mean: float, rng: random.Random) -> dict:
    return {"mean": mean, "min": mean * 0.8, "max": mean * 1.1 + rng.random(), "p50": mean, "p95": mean * 1.05}


def aggregates(job_id: int = 42, node: str = "n1", ngpus: int = 8, seconds: float = 3600.0, seed: int = 0,
               name: str = "NVIDIA H100 80GB HBM3", **means: float) -> dict:
    """Aggregates of one node; ``means`` override per-metric means (e.g. tensor_active_pct=90)."""
    rng = random.Random(seed)
    base = {"util_gpu_pct": 100.0, "util_mem_pct": 30.0, "mem_used_mib": 40000.0, "power_w": 600.0, "temp_c": 60.0,
            "sm_clock_mhz": 1755.0, "mem_clock_mhz": 2619.0, "sm_active_pct": 90.0, "sm_occupancy_pct": 20.0,
            "tensor_active_pct": 85.0, "dram_active_pct": 25.0, "fp16_active_pct": 1.0, "fp32_active_pct": 3.0,
            "fp64_active_pct": 0.0, "pcie_tx_bps": 1e8, "pcie_rx_bps": 1e8, "nvlink_tx_bps": 2e9, "nvlink_rx_bps": 2e9}
    base.update(means)
    gpus = {}
    for i in range(ngpus):
        m = {k: _stats(v * (1 + rng.uniform(-0.02, 0.02)), rng) for k, v in base.items()}
        gpus[str(i)] = {"samples": int(seconds), "seconds": seconds, "metrics": m,
                        "idle_s": seconds * max(0.0, 1 - base["util_gpu_pct"] / 100) * 0.5,
                        "throttle_s": {"sw_power_cap": seconds * 0.1 + rng.random(), "hw_slowdown": 0.0,
                                       "hw_thermal": 0.0, "sw_thermal": 0.0, "hw_power_brake": 0.0},
                        "energy_j": base["power_w"] * seconds + rng.random() * 100, "energy_source": "counter",
                        "nvlink_tx_bytes": base["nvlink_tx_bps"] * seconds, "nvlink_rx_bytes": base["nvlink_rx_bps"] * seconds,
                        "pcie_tx_bytes": base["pcie_tx_bps"] * seconds, "pcie_rx_bytes": base["pcie_rx_bps"] * seconds,
                        "mem_total_mib": 81559, "power_limit_w": 700.0, "name": name, "foreign_processes": []}
    return {"job_id": job_id, "node": node, "gpus": gpus,
            "host": {"cpu_time_s": seconds * 6.5, "cpus_allocated": 16, "wall_s": seconds, "rss_peak_mib": 51234.0,
                     "iowait_pct": 0.4},
            "start": 1763700000.0, "end": 1763700000.0 + seconds, "gaps": [[1763700100.0, 1763700103.0]], "partial": False}


def context(job_id: int = 42, node: str = "n1", **kw) -> dict:
    """A node_summary context with a user and env/affinity as the prolog would leave them."""
    ctx = {"job_id": job_id, "node": node, "user": "alice", "uid": 1000,
           "env": {"vars": {"NCCL_SOCKET_IFNAME": {"value": "eth0", "reason": "the interface with the default route"},
                            "NCCL_IB_HCA": {"value": "mlx5_0,mlx5_1,mlx5_2,mlx5_3", "reason": "IB ports that are ACTIVE"},
                            "OMP_NUM_THREADS": {"value": "8", "reason": "cpus per task"}}},
           "affinity": {str(r): {"gpu": r, "cpus": list(range(r * 8, r * 8 + 8)), "mem_policy": "bind", "numa": r // 4}
                        for r in range(8)}}
    ctx.update(kw)
    return ctx


# the estimates' fixed texts: an AdminComment too long for its budget drops them first (admincomment._slim)
ESTIMATE_TEXTS = ("label", "source")


def story(s: dict) -> dict:
    """What every reader of a job must agree on (issue 35): the judgement (class, phases, evidence, advice) and
    the rates (the estimates, less their fixed texts)."""
    est = {k: v for k, v in (s.get("estimates") or {}).items() if k not in ESTIMATE_TEXTS}
    return {"diagnosis": s.get("diagnosis"), "estimates": est}
