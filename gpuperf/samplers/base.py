"""The sampler contract: every backend (nvml, dcgm, replay) yields the same typed samples.

Units are in the field names. A quantity a backend cannot measure is ``None``, never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol


@dataclass
class GpuSample:
    """One GPU at one instant (rates are means over the interval since the previous sample)."""

    gpu: int                                  # NVML index
    t: float                                  # unix time of the sample, seconds
    # NVML basics
    util_gpu_pct: float | None = None         # nvmlDeviceGetUtilizationRates().gpu ("kernel running")
    util_mem_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None       # nvmlClocksEventReasons bitmask
    energy_j: float | None = None             # cumulative counter, only when read (costly: ~4 ms)
    # GPM (Hopper+) or DCGM profiling, percent of the interval
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None    # any tensor pipe
    dram_active_pct: float | None = None
    fp64_active_pct: float | None = None      # non-tensor pipes (FMA units): FP64, FP32, FP16, integer
    fp32_active_pct: float | None = None
    fp16_active_pct: float | None = None
    int_active_pct: float | None = None
    # tensor activity by kind: which peak a tensor-active share belongs to (a float64 GEMM's tensor
    # work is DMMA at ~1/15 of the bf16 rate; FACTS.md "NVML GPM on Hopper")
    tensor_hmma_pct: float | None = None      # FP16/BF16/TF32/FP8 matrix ops (HMMA)
    tensor_imma_pct: float | None = None      # integer (INT8) matrix ops
    tensor_dfma_pct: float | None = None      # FP64 tensor ops as GPM/DCGM name them "DFMA"
    tensor_dmma_pct: float | None = None      # FP64 matrix ops (DMMA; GPM only)
    # rates over the interval, bytes per second
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    nvlink_tx_bps: float | None = None
    nvlink_rx_bps: float | None = None
    # processes on the GPU: [{"pid": int, "mem_mib": float}]
    processes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; None fields are dropped to keep recordings small."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != []}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GpuSample":
        """Inverse of to_dict; unknown keys (from newer recordings) are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


METRIC_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(GpuSample) if f.name not in ("gpu", "t", "processes", "throttle_reasons", "energy_j")
)


class Sampler(Protocol):
    """A sampler backend: ``sample()`` returns one GpuSample per GPU, each call one sweep."""

    name: str

    def gpu_count(self) -> int: ...

    def sample(self) -> list[GpuSample]: ...

    def read_energy(self) -> dict[int, float | None]:
        """Cumulative energy per GPU in joules (costly: call at job start/end and rarely)."""
        ...

    def close(self) -> None: ...


class SamplerUnavailable(Exception):
    """The backend cannot run here (no NVML, no DCGM hostengine, bad replay file)."""
