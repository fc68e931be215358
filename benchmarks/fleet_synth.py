"""A synthetic fleet built from the real GPU recordings (tests/data/recordings), for the fleet proofs.

Each synthetic job on a GPU is a random window of a real recording of that GPU's model, folded by the
real aggregates (``JobAggregates``) into the node summary's ``fleet`` figures (``gpuperf/model/load.py``).
H100 nodes run the H100 recordings (matmul, membound, input-bound, tiny kernels, idle); H200 nodes run
the 4x H200 all-reduce recording (NVLink). Boards differ a little, as real ones do: each GPU gets a fixed
SM clock factor (sd 0.4%), temperature offset (sd 1 degC) and NVLink factor (sd 0.5%).

Planted GPUs are made slow *in the samples* before folding:
  slow_clock  SM clock x0.78 and hw_slowdown asserted in a third of its samples (a stuck slowdown)
  low_clock   SM clock x0.88, no throttle reason (a sticky clock limit NVML does not explain)
  hot         +15 degC and sw_thermal asserted in a fifth of its samples
  slow_link   NVLink rates x0.6 (a degraded link)
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from gpuperf.model.aggregates import THROTTLE_BITS, JobAggregates
from gpuperf.model.load import node_figures
from gpuperf.samplers.base import GpuSample
from gpuperf.samplers.replay import load_recording

REC = Path(__file__).resolve().parents[1] / "tests" / "data" / "recordings"
H100 = ["matmul_bf16", "membound", "input_bound", "tiny_kernels", "idle"]
H100_WEIGHTS = [4, 3, 2, 1, 1]
H200 = ["allreduce"]
# (node index, GPU index) -> variant; nodes 0..49 are H200, the rest H100
PLANTED: dict[tuple[int, int], str] = {(60, 3): "slow_clock", (211, 0): "slow_clock", (333, 5): "low_clock",
                                       (402, 7): "hot", (7, 2): "slow_link", (31, 6): "slow_link"}
H200_NODES = 50


def _plant(s: GpuSample, variant: str, k: int) -> GpuSample:
    if variant == "slow_clock":
        return replace(s, sm_clock_mhz=s.sm_clock_mhz * 0.78 if s.sm_clock_mhz else s.sm_clock_mhz,
                       throttle_reasons=(s.throttle_reasons or 0) | (THROTTLE_BITS["hw_slowdown"] if k % 3 == 0 else 0))
    if variant == "low_clock":
        return replace(s, sm_clock_mhz=s.sm_clock_mhz * 0.88 if s.sm_clock_mhz else s.sm_clock_mhz)
    if variant == "hot":
        return replace(s, temp_c=(s.temp_c or 0) + 15.0,
                       throttle_reasons=(s.throttle_reasons or 0) | (THROTTLE_BITS["sw_thermal"] if k % 5 == 0 else 0))
    if variant == "slow_link":
        return replace(s, nvlink_tx_bps=s.nvlink_tx_bps * 0.6 if s.nvlink_tx_bps else s.nvlink_tx_bps,
                       nvlink_rx_bps=s.nvlink_rx_bps * 0.6 if s.nvlink_rx_bps else s.nvlink_rx_bps)
    return s


def _fold(samples: list[GpuSample], name: str) -> dict[str, Any]:
    agg = JobAggregates.new(1, "x", [0], samples[0].t - 1.0, 1.0, names={0: name})
    for s in samples:
        agg.add_sweep(s.t, [replace(s, gpu=0)])
    return node_figures(agg.to_dict())[0]


def build_pools(rng: random.Random, per_workload: int = 24) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(model, variant) -> fleet entries of recording windows (real folds; variants planted in samples)."""
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for model, workloads, weights in (("NVIDIA H100 80GB HBM3", H100, H100_WEIGHTS), ("NVIDIA H200", H200, [1])):
        variants = ["normal"] + sorted({v for v in PLANTED.values()})
        for wl, weight in zip(workloads, weights):
            path = next(REC.glob(f"{wl}-*.jsonl.gz"))
            rec = load_recording(str(path))
            n_rec = len(rec.gpu_indices)
            for _ in range(per_workload * weight):
                g = rng.randrange(n_rec)
                length = rng.randint(max(10, len(rec.sweeps) // 2), len(rec.sweeps))
                start = rng.randint(0, len(rec.sweeps) - length)
                samples = []
                for k in range(start, start + length):
                    for d in rec.sweeps[k]:
                        if int(d["gpu"]) == rec.gpu_indices[g]:
                            samples.append(GpuSample.from_dict({**d, "t": 1000.0 + k * rec.interval_s}))
                for v in variants:
                    pools.setdefault((model, v), []).append(_fold([_plant(s, v, i) for i, s in enumerate(samples)], model))
    return pools


def _board(rng: random.Random) -> tuple[float, float, float]:
    return rng.gauss(1.0, 0.004), rng.gauss(0.0, 1.0), rng.gauss(1.0, 0.005)


def _vary(entry: dict[str, Any], board: tuple[float, float, float]) -> dict[str, Any]:
    clock_f, temp_d, link_f = board
    ld = dict(entry["load"])
    for k in ("sm_clock_mhz", "sm_clock_free_mhz"):
        if ld.get(k) is not None:
            ld[k] *= clock_f
    if ld.get("temp_c") is not None:
        ld["temp_c"] += temp_d
    if ld.get("nvlink_comm_bps") is not None:
        ld["nvlink_comm_bps"] *= link_f
    return {**entry, "load": ld}


def fleet(nodes: int = 500, gpus: int = 8, jobs: int = 100, planted: dict[tuple[int, int], str] | None = None,
          seed: int = 1, pools: dict | None = None, h200_nodes: int = H200_NODES) -> Iterator[dict[str, Any]]:
    """Node summaries (``nodes``, ``job_id``, ``end``, ``fleet``), job round by job round."""
    planted = PLANTED if planted is None else planted
    rng = random.Random(seed)
    pools = pools or build_pools(random.Random(seed + 1))
    boards = {(n, g): _board(rng) for n in range(nodes) for g in range(gpus)}
    job_id = 0
    for j in range(jobs):
        for n in range(nodes):
            model = "NVIDIA H200" if n < h200_nodes else "NVIDIA H100 80GB HBM3"
            entries = []
            for g in range(gpus):
                e = rng.choice(pools[(model, planted.get((n, g), "normal"))])
                entries.append({**_vary(e, boards[(n, g)]), "gpu": g, "uuid": uuid(n, g)})
            job_id += 1
            yield {"job_id": job_id, "nodes": [node_name(n)], "end": 1.8e9 + j * 3600.0 + n, "fleet": entries}


def node_name(n: int) -> str:
    """Synthetic node name."""
    return f"n{n:03d}"


def uuid(n: int, g: int) -> str:
    """Synthetic board UUID."""
    return f"GPU-synth-{n:03d}-{g}"
