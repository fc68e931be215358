"""What to change: recommendations per class that depend on the distance to the roofline, and the
findings that stand beside the class (tensor cores unused, SMs underfilled)."""

from __future__ import annotations

from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.diagnosis.signals import Signals, pct

_BALANCE = "balance the work across GPUs (some GPUs far less busy than others: stragglers, uneven stages)"
_FAR = ["raise the work per kernel: larger batch or micro-batch, longer sequences per step",
        "fuse kernels and cut launch gaps: torch.compile, CUDA graphs, fused optimizers",
        "use fused attention kernels (FlashAttention, scaled_dot_product_attention)"]


def findings(s: Signals, th: dict[str, float]) -> list[dict[str, str]]:
    """Findings that hold whatever the class: each {"kind", "text", "fix"}."""
    out = []
    busy = s.sm is not None and s.sm >= 50.0
    if (busy and s.tensor is not None and s.tensor < th["tensor_unused_pct"] and s.fp32 is not None
            and s.fp32 >= th["fp32_busy_pct"] and (s.fp64 is None or s.fp64 < th["tensor_unused_pct"])):
        out.append({"kind": "tensor_cores_unused",
                    "text": f"tensor cores unused: tensor active {pct(s.tensor)} while the FP32 pipe is "
                            f"{pct(s.fp32)} busy (FP32 math on CUDA cores)",
                    "fix": "enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True) or bf16 autocast: "
                           "tensor cores do this math several times faster"})
    quiet = ((s.pipes is not None and s.pipes < th["compute_pipe_pct"])
             and (s.dram is not None and s.dram < th["memory_dram_pct"]))
    if busy and quiet and s.occupancy is not None and s.occupancy < th["underfilled_occupancy_pct"]:
        out.append({"kind": "sms_underfilled",
                    "text": f"SMs underfilled: SM active {pct(s.sm)} but only {pct(s.occupancy)} of warp slots "
                            f"occupied, with math pipes at {pct(s.pipes)} and DRAM at {pct(s.dram)}",
                    "fix": "give each kernel more parallel work: larger batches, larger thread blocks/grids, "
                           "fewer registers or shared memory per block"})
    return out


def recommend(cls: str, s: Signals, spec: gpuspecs.GpuSpec | None, roof: dict[str, Any] | None,
              found: list[dict[str, str]], imbalanced: bool, th: dict[str, float]) -> list[str]:
    """One to three recommendations; findings' fixes come first, imbalance last."""
    r = [f["fix"] for f in found]
    r += _by_class(cls, s, spec, roof, th)
    if imbalanced and cls not in ("unused_gpus", "no_data"):
        r = r[:2] + [_BALANCE]
    out: list[str] = []
    for x in r:
        if x not in out:
            out.append(x)
    return out[:3]


def _by_class(cls: str, s: Signals, spec: gpuspecs.GpuSpec | None, roof: dict[str, Any] | None,
              th: dict[str, float]) -> list[str]:
    near = th["roof_near_pct"]
    if cls == "no_data":
        return ["check the gpuperf daemon ran on the job's nodes for the whole job (systemctl status gpuperfd, "
                "its log) and that its sampler covers the allocated GPUs"]
    if cls == "unused_gpus":
        return ["request only the GPUs the job uses (--gres=gpu:N), or make the program use all of them "
                "(torchrun --nproc-per-node, DistributedDataParallel)"]
    if cls == "idle":
        return ["request only the GPUs the job uses (--gres=gpu:N), or none for CPU-only work",
                "check the program sees and uses CUDA (torch.cuda.is_available(), device placement)",
                "end interactive sessions when done; use a shorter --time for them"]
    if cls == "busy_unprofiled":
        return ["enable profiling metrics (GPM on Hopper and later through the nvml backend, or DCGM) to tell "
                "compute-, memory- and launch-bound apart"]
    if cls == "input_bound":
        r = ["feed the GPU faster: more DataLoader workers (num_workers), pin_memory=True, prefetching"]
        r.append("stage the dataset on node-local NVMe or a faster filesystem (high I/O wait)"
                 if s.iowait is not None and s.iowait >= 10 else
                 "move decoding/augmentation to the GPU (NVIDIA DALI, torchvision v2 on CUDA)")
        r.append("overlap host work with GPU work (non_blocking copies, CUDA streams)")
        return r
    if cls == "launch_bound":
        return ["capture the step in CUDA graphs or use torch.compile(mode='reduce-overhead')",
                "use larger batches so each kernel fills the GPU",
                "fuse small operations (torch.compile, fused optimizers such as fused AdamW)"]
    if cls == "memory_bound":
        dram = (roof or {}).get("dram_roof_pct") if roof else s.dram
        if dram is not None and dram >= near:
            # at the bandwidth roof only less traffic helps
            return ["move fewer bytes: bf16/FP8 activations, quantised weights (FP8/INT8)",
                    "fuse elementwise operations so intermediates stay on chip (torch.compile)",
                    "an algorithm with more reuse per byte (tiling, FlashAttention)"]
        return ["fuse elementwise operations to cut DRAM round trips (torch.compile)",
                "use FlashAttention / fused attention kernels",
                "larger, contiguous accesses: bigger batches, channels-last or contiguous tensors"]
    if cls == "compute_bound":
        roof_pct = (roof or {}).get("compute_roof_pct")
        if roof_pct is None:
            roof_pct = s.pipes
        if roof_pct is not None and roof_pct >= near:
            if (s.tensor or 0.0) >= th["tensor_unused_pct"]:
                r = [f"near the math roof ({pct(roof_pct)} tensor/FP pipe activity): only less math per result helps"]
                r.append(f"this GPU ({spec.model}) has FP8 tensor cores: Transformer Engine FP8 can nearly double "
                         "throughput" if spec is not None and spec.fp8 else
                         "lower precision where accuracy allows (bf16/fp16 instead of TF32/FP32)")
                r.append("a cheaper algorithm (fewer FLOPs: sparsity, smaller models, distillation)")
                return r
            return []          # FP32 pipe near its roof with tensor cores idle: the finding says it
        return [f"far from the math roof ({pct(roof_pct)} tensor/FP pipe activity): " + _FAR[0], *_FAR[1:]]
    if cls == "communication_bound":
        r = ["overlap communication with compute (DDP bucket_cap_mb, FSDP forward/backward prefetch)"]
        if s.nccl_on_tcp:
            r.append("check NCCL uses InfiniBand, not TCP sockets (NCCL_DEBUG=INFO shows NET/IB vs NET/Socket)")
        elif s.gpu_count >= 2 and (s.nvlink_gbps is None or s.nvlink_gbps < 1.0) and s.nodes == 1:
            r.insert(0, "check NCCL_P2P_DISABLE, NCCL_SHM_DISABLE and NCCL_NET are unset: NCCL_DEBUG=INFO should show "
                        "P2P/NVLink between the GPUs of a node, not NET/Socket")
        else:
            r.append("keep tensor parallelism inside one NVLink domain, data parallelism across nodes")
        r.append("larger gradient buckets or gradient accumulation to communicate less often")
        return r
    return ["tell the cluster admins: GPUs throttled by hardware/thermal limits (cooling, power delivery)",
            "compare with a run on another node; the node may need service"]
