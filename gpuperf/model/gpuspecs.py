"""Peak throughput and memory bandwidth of GPU models, each with the document it comes from.

Figures are the vendor's *dense* numbers: NVIDIA datasheets print tensor throughput "with
sparsity" (2:4 structured sparsity doubles it), so the dense figure is half the printed one.
They bound what a job could have achieved; the report labels everything derived from them as
an estimate.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GpuSpec:
    """Peak figures of one GPU model (dense, no sparsity)."""

    model: str
    tensor_bf16_tflops: float      # dense BF16/FP16 tensor-core peak
    fp32_tflops: float             # non-tensor FP32 (CUDA cores)
    fp64_tflops: float             # non-tensor FP64
    mem_bw_gbps: float             # HBM/GDDR bandwidth, GB/s (10^9 bytes/s)
    nvlink_gbps: float | None      # total NVLink bandwidth per GPU, both directions, GB/s; None: no NVLink
    fp8: bool                      # has FP8 tensor cores (Hopper, Ada, Blackwell)
    source: str
    # The SM clock (MHz) at which the datasheet's tensor and FP figures hold: peak = SMs x FLOP per
    # clock per SM x this clock. A job's estimate scales the peak by the clock it actually ran at
    # (a power-capped bf16 GEMM on an H100 runs at ~1400 MHz, an FP32 one at 1980). None: unknown.
    tensor_mhz: float | None = None
    fp_mhz: float | None = None
    # Peaks of the other tensor kinds and the half-precision CUDA cores (dense; None: the model has no
    # such unit or the datasheet gives no figure): INT8 tensor TOPS, FP64 tensor TFLOP/s, FP16 non-tensor.
    tensor_int8_tops: float | None = None
    tensor_fp64_tflops: float | None = None
    fp16_tflops: float | None = None
    # The host link the datasheet names: PCIe generation and lanes (None: not PCIe, e.g. GH200's C2C)
    pcie_gen: int | None = None
    pcie_lanes: int | None = None
    # INT32 lanes x clock: 64 INT32 units per SM on Hopper and Ampere (16 per SM partition, the H100 and A100
    # whitepapers), one operation each per clock, at the FP clock; TOPS
    int32_tops: float | None = None

    @property
    def tf32_tflops(self) -> float:
        """Dense TF32 tensor peak: half the bf16 rate on every generation with TF32 (A100 on)."""
        return self.tensor_bf16_tflops / 2.0

    @property
    def fp8_tflops(self) -> float | None:
        """Dense FP8 tensor peak: twice the bf16 rate where the model has FP8 tensor cores."""
        return 2.0 * self.tensor_bf16_tflops if self.fp8 else None

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return asdict(self)


_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), sparse figures halved"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), sparse figures halved"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), dense figures"
_B200_DS = "NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx), per GPU, sparse figures halved"
_L40S_DS = "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s), sparse figures halved"
_L4_DS = "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4), sparse figures halved"
_V100_DS = "NVIDIA V100 datasheet (nvidia.com/en-us/data-center/v100)"
_A10_DS = "NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu), sparse figures halved"

# A100: INT8 tensor 624 TOPS, FP64 tensor 19.5, FP16 non-tensor 78 (whitepaper table 1); PCIe gen4 x16;
# INT32 108 SMs x 64 x 1410 MHz = 9.7 TOPS
_A100_MORE = (624.0, 19.5, 78.0, 4, 16, 9.7)

# Matched in order against the NVML device name (lowercase whole words): specific before generic.
_TABLE: tuple[tuple[tuple[str, ...], GpuSpec], ...] = (
    # H100/H200 SXM: 132 SMs x 4096 dense bf16 FLOP/clk x 1830 MHz = 989.4 TFLOP/s; FP32 132 x 256 x
    # 1980 MHz = 66.9 (NVIDIA H100 whitepaper, "NVIDIA H100 Tensor Core GPU Architecture", table 3).
    # The ground-truth recordings confirm the per-clock rates (benchmarks/results/diag_estimates.md).
    # INT8 tensor 1979 TOPS, FP64 tensor 67, FP16 non-tensor 133.8 (the same table); PCIe gen5 x16;
    # INT32 132 x 64 x 1980 MHz = 16.7 TOPS (NVL: 1776 MHz, 15.0; PCIe: 114 SMs at 1755, 12.8).
    (("h200 nvl",), GpuSpec("H200 NVL", 835.5, 60.0, 30.0, 4800.0, 900.0, True, _H200_DS, 1545.0, 1776.0, 1671.0, 60.0, 120.0, 5, 16, 15.0)),
    (("h200",), GpuSpec("H200 SXM", 989.5, 67.0, 34.0, 4800.0, 900.0, True, _H200_DS, 1830.0, 1980.0, 1979.0, 67.0, 133.8, 5, 16, 16.7)),
    (("gh200",), GpuSpec("GH200", 989.5, 67.0, 34.0, 4000.0, 900.0, True, "NVIDIA GH200 datasheet, sparse figures halved",
                         1830.0, 1980.0, 1979.0, 67.0, 133.8, None, None, 16.7)),
    # H100 NVL: 132 SMs, 835.5 / (132 x 4096) = 1545 MHz; PCIe: 114 SMs, 756.5 / (114 x 4096) = 1620 MHz
    (("h100 nvl",), GpuSpec("H100 NVL", 835.5, 60.0, 30.0, 3900.0, 600.0, True, _H100_DS, 1545.0, 1776.0, 1671.0, 60.0, 120.0, 5, 16, 15.0)),
    (("h100 pcie",), GpuSpec("H100 PCIe", 756.5, 51.0, 26.0, 2000.0, 600.0, True, _H100_DS, 1620.0, 1755.0, 1513.0, 51.0, 102.4, 5, 16, 12.8)),
    (("h100",), GpuSpec("H100 SXM", 989.5, 67.0, 34.0, 3350.0, 900.0, True, _H100_DS, 1830.0, 1980.0, 1979.0, 67.0, 133.8, 5, 16, 16.7)),
    (("b200",), GpuSpec("B200", 2250.0, 75.0, 37.0, 8000.0, 1800.0, True, _B200_DS, None, None, 4500.0, 37.0, None, 5, 16)),
    # A100: 108 SMs x 2048 dense bf16 FLOP/clk x 1410 MHz = 311.9 TFLOP/s, FP32 108 x 128 x 1410 = 19.5
    # (NVIDIA A100 whitepaper, "NVIDIA A100 Tensor Core GPU Architecture", table 1)
    (("a100-sxm4-80gb", "a100 80gb sxm", "a100-sxm-80gb"), GpuSpec("A100 SXM 80GB", 312.0, 19.5, 9.7, 2039.0, 600.0, False, _A100_DS, 1410.0, 1410.0, *_A100_MORE)),
    (("a100-sxm4-40gb", "a100-sxm"), GpuSpec("A100 SXM 40GB", 312.0, 19.5, 9.7, 1555.0, 600.0, False, _A100_DS, 1410.0, 1410.0, *_A100_MORE)),
    (("a100 80gb pcie", "a100-pcie-80gb"), GpuSpec("A100 PCIe 80GB", 312.0, 19.5, 9.7, 1935.0, 600.0, False, _A100_DS, 1410.0, 1410.0, *_A100_MORE)),
    (("a100",), GpuSpec("A100 PCIe 40GB", 312.0, 19.5, 9.7, 1555.0, 600.0, False, _A100_DS, 1410.0, 1410.0, *_A100_MORE)),
    # L40S: 142 SMs at 2520 MHz boost: FP32 142 x 256 x 2520 = 91.6 TFLOP/s (NVIDIA Ada GPU architecture
    # whitepaper, appendix A); the tensor figure holds at the same clock
    (("l40s",), GpuSpec("L40S", 362.0, 91.6, 1.4, 864.0, None, True, _L40S_DS, 2520.0, 2520.0, 733.0, None, None, 4, 16)),
    (("l4",), GpuSpec("L4", 121.0, 30.3, 0.5, 300.0, None, True, _L4_DS, None, None, 242.5, None, None, 4, 16)),
    (("a10",), GpuSpec("A10", 125.0, 31.2, 1.0, 600.0, None, False, _A10_DS, None, None, 250.0, None, None, 4, 16)),
    (("v100",), GpuSpec("V100 SXM2", 125.0, 15.7, 7.8, 900.0, 300.0, False, _V100_DS, None, None, None, None, 31.4, 3, 16)),
)


def lookup(name: str | None) -> GpuSpec | None:
    """The spec of the GPU model NVML calls ``name``; None when the model is not in the table."""
    if not name:
        return None
    low = name.lower()
    for keys, spec in _TABLE:
        # whole words only: "l4" must not match "l40s", "h200" must not match "gh200"
        if any(re.search(rf"(?<![a-z0-9]){re.escape(k)}(?![a-z0-9])", low) for k in keys):
            return spec
    return None


# PCIe payload rate per lane and direction, GB/s, after line coding (gen1-2 8b/10b, gen3-5 128b/130b,
# gen6 FLIT): 2.5/5/8/16/32/64 GT/s. TLP headers cost a further 10-20%: pinned host-to-device copies
# on an H100 (gen5 x16, 63 GB/s here) reach 45 GB/s (FACTS.md).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_gbps(gen: int | None, lanes: int | None) -> float | None:
    """One direction's raw payload rate of a PCIe link, GB/s (None when generation or width is unknown)."""
    if not gen or not lanes or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * lanes


def known_models() -> list[str]:
    """Every model in the table (for the report's 'unknown GPU' note)."""
    return [spec.model for _, spec in _TABLE]
