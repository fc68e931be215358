"""The classes a diagnosis can give and the thresholds its rules use, each default with its reason."""

from __future__ import annotations

# no_data: nothing was sampled; busy_unprofiled: kernels ran, but without SM/pipe/DRAM activity what
# bounds them is unknown; unused_gpus: some allocated GPUs did nothing while others worked;
# transfer_bound: host<->device copies on the PCIe link, SMs idle; latency_bound: SMs busy with no math
# pipe and little DRAM bandwidth (access pattern, atomics, dependent loads); underfilled: a kernel runs
# nearly all the time but fills few SMs (too few blocks: launch overhead is not the loss).
# startup: a job that never reached its GPU work (the whole job was start-up: __init__._never_worked).
CLASSES = ("no_data", "idle", "unused_gpus", "input_bound", "launch_bound", "underfilled", "transfer_bound",
           "memory_bound", "latency_bound", "compute_bound", "communication_bound", "throttled", "busy_unprofiled",
           "startup")
# Phases only: GPU work not yet begun (imports, CUDA context, JIT compilation, data loading before the
# first step, and the ramp into it: phases.RAMP_POINTS) and nothing left to do after the last; they never
# decide a job's class when it then worked, and its estimates are over the working phases alone.
PHASE_ONLY = ("startup", "idle_tail")

DEFAULTS: dict[str, float] = {
    # NVML utilization is "a kernel ran during the sample period"; below 5% on average the GPU was
    # allocated but essentially unused (a context, a monitoring probe, a stray warm-up).
    "idle_util_pct": 5.0,
    # ... or when 90% of the GPU-seconds had no kernel at all (a job that used the GPU for one minute of an hour).
    "idle_share_pct": 90.0,
    # One allocated GPU without a kernel for 90% of the job while another works is a GPU the job did
    # not need: the same bar as a whole job called idle.
    "unused_share_pct": 90.0,
    # A host whose allocated CPUs are below 5% busy and which waits on I/O less than 5% of the time is
    # doing nothing either: a GPU with rare kernels on such a host is idle, not waiting for input
    # (one busy loader thread of 16 allocated CPUs already shows as 6%).
    "input_host_cpu_pct": 5.0,
    # Hardware slowdown, thermal or power-brake throttling for a fifth of the GPU time costs clock speed
    # on a scale a user notices. The software power cap is excluded: a compute-bound job at its power
    # limit sits there by design (FACTS.md: bf16 matmul at 698 of 700 W with reason 0x4).
    "throttle_share_pct": 20.0,
    # Mean NVLink traffic per GPU (tx+rx). 25 GB/s is about 3% of an H100's 900 GB/s, but a data-parallel
    # job's gradient all-reduce averages a few GB/s; this much traffic with idle tensor pipes means
    # the GPUs mostly move data between themselves.
    "comm_nvlink_gbps": 25.0,
    # For multi-node jobs, PCIe carries the network traffic (GPUDirect RDMA); 10 GB/s is most of a
    # 100-200 Gb/s NIC, so the job spends its time on the network.
    "comm_pcie_gbps": 10.0,
    # GPUs of one node busy with kernels that use almost no SMs while PCIe moves this much and NVLink
    # is idle: collectives through host memory. The 2x H200 all-reduce forced onto NCCL's socket
    # transport moved 9.4 GB/s per GPU (tests/data/recordings/allreduce_sockets-h200); input pipelines
    # that move GB/s keep the SMs busy as well.
    "comm_host_pcie_gbps": 2.0,
    # Ethernet traffic per node while RDMA ports stay quiet: 1 GB/s (8 Gb/s) is more than control
    # traffic and checkpoints average, and is what NCCL falling back to TCP sockets looks like.
    "comm_eth_gbps": 1.0,
    # The GPU waits for its host when kernels run less than 60% of the time: at that point at least
    # 40% of the allocation is lost to the input pipeline, more than any kernel tuning could win back.
    "input_util_pct": 60.0,
    # SM active divided by utilization: how much of the GPU a kernel fills while one runs. Below 0.5,
    # kernels are too small to occupy half the SMs (launch overhead, tiny grids); real training kernels
    # fill all SMs (FACTS.md: bf16 matmul SM 96% at utilization 100%).
    "launch_sm_per_util": 0.5,
    # A kernel ran in 70% of the samples while it filled few SMs: the gaps between kernels are at most
    # 30% of the time, so removing launch overhead (CUDA graphs) wins back at most 1.4x; the SMs left
    # empty while a kernel runs are the larger loss (too few blocks). A launch-bound stream of tiny
    # kernels from Python keeps a kernel on the GPU a third of the time (tiny_kernels recording: 33%):
    # per launch, the host's overhead exceeds the kernel.
    "launch_gap_util_pct": 70.0,
    # Host<->device copies: the busier PCIe direction at a quarter of the link's raw rate (gen x lanes).
    # Pinned copies reach about 70% of it (45 of 63 GB/s on gen5 x16, FACTS.md) and pageable ones less
    # (the host copies into a staging buffer first), so a quarter on average means the link carried copies
    # a third of the time or more; with the SMs busy less than the link, the copies bound the job.
    "transfer_link_pct": 25.0,
    # Tensor (or FP) pipes active 30% of the time: well-tuned LLM training runs at 35-50% model FLOPs
    # utilization, so 30% means the math units are the main consumer of the GPU's time.
    "compute_pipe_pct": 30.0,
    # DRAM interface active half of the time: the memory system is the main consumer (a dense bf16
    # matmul keeps it at about 24%, FACTS.md; streaming kernels at 80-90%).
    "memory_dram_pct": 50.0,
    # A kernel that only moves memory (no math pipe, integer included, above quiet_pipe_pct) with the SMs busy:
    # DRAM activity counts the 32-byte sectors moved. Scattered accesses (one element per sector, rows opened
    # for single sectors) are held by the DRAM's row activations, not its bus: random 4-byte gathers at 91%
    # occupancy reach 59-61% on both H100 and H200 (zoo_gather_random_fp32), the ceiling of that access pattern.
    # At 65% or more the bytes must stream (coalesced loads: triad/axpy 80-92%, a fused Adam step ~69%, decode
    # attention 92%): memory-bound. Under it the warps wait on where their loads go, or hold too few bytes in
    # flight to cover the latency (Little's law): latency-bound either way. Judged over the time the SMs were busy
    # (DRAM / SM activity): the ceiling is the kernels', and a host that idles the GPU dilutes the whole-time mean.
    # Not used to set it and holding: zoo_app_cupy_pointer_chase 64% (latency), zoo_app_adam_fused_fp32 94% and
    # zoo_app_llama_decode_bf16's decode 98% (memory).
    "stream_dram_pct": 65.0,
    # A math pipe under 10% is not at work: streaming kernels' own address arithmetic keeps the integer pipe at
    # 3-6% (triad, gathers) and elementwise kernels with math per element are at 17-30% (gelu, layernorm).
    "quiet_pipe_pct": 10.0,
    # Near the roof: the busiest pipe (or DRAM) above 60% of its peak. Large GEMMs reach 88-92% tensor
    # activity and a streaming reduction 87% DRAM activity (the ground-truth recordings); a bf16
    # training step of a small transformer sits at 25-29%, where kernel-level work still pays.
    "roof_near_pct": 60.0,
    # Tensor cores unused: under 5% tensor activity while the FP32 pipe is at least 20% busy — FP32
    # math on CUDA cores (an FP32 GEMM without TF32 showed tensor 0%, FP32 pipe 75%).
    "tensor_unused_pct": 5.0,
    "fp32_busy_pct": 20.0,
    # ... and matrix math in evidence: tiled matrix kernels hold large register tiles and run few warps per
    # SM (the ground-truth FP32 and bf16 GEMMs: 12-14% occupancy), elementwise and reduction kernels fill
    # the SMs (66-95%): FP32 math at under 30% occupancy is matrix-like; above it, TF32 advice has no evidence.
    "matrix_occupancy_pct": 30.0,
    # SMs underfilled: SMs busy half the time with under 20% of their warp slots occupied and no pipe
    # or DRAM near its threshold. Large GEMMs run at 12-14% occupancy with full tensor pipes, so the
    # pipes must be quiet for low occupancy to be the finding.
    "underfilled_occupancy_pct": 20.0,
    # Phases: a phase of 5% of the job is to be found (issue 35); with SERIES_POINTS = 120 points per GPU it holds
    # at least 5 whole points (4.2%) wherever its edges fall, the points its edges share being either side's.
    "phase_min_share_pct": 4.0,
    # GPUs of one job whose SM activity (or utilization) differ by 30 points are doing unequal work:
    # stragglers, an unbalanced pipeline stage, or GPUs left unused.
    "imbalance_spread_pct": 30.0,
    # A job with no GPU work, its host busy and GPU memory held, is in start-up for all of it only if it is short: the
    # start-ups recorded run tens of seconds (imports, model build, torch.compile, data loading; the zoo's
    # startup_gemm and compile_mlp), a large model's load minutes; a quarter of an hour without GPU work is idle or
    # starved, whatever its host does.
    "startup_max_s": 900.0,
    # Most of the GPU time under a profiler (Nsight Compute, Nsight Systems, a CUPTI tool): no class. What is
    # left is mostly the start and end around the profiled program (ncu runs the whole program under it),
    # and classing a job from a minority of its time would pass that minority off as the job.
    "profiler_share_pct": 50.0,
}


# Where each default comes from: "datasheet" (the GPU's published figures), "measured" (a kernel class recorded on
# a named GPU, with the recording), or "policy" (a bar of what is worth telling a user, not a property of the
# hardware: an admin may move it in the config). tests/unit/test_diagnosis_thresholds.py checks every default has
# one and that every recording it names exists.
_Z = "tests/data/recordings/zoo/"
_R = "tests/data/recordings/"
SOURCES: dict[str, str] = {
    "idle_util_pct": "policy: under 5% kernel time the allocation is unused (jobstats flags under 15%); measured: a held "
                     f"context reads SM max 1.9%, median 0 (H100, {_R}idle-h100-80gb-hbm3.jsonl.gz)",
    "idle_share_pct": "policy: 90% of the GPU-seconds without a kernel",
    "unused_share_pct": "policy: the idle_share_pct bar, per GPU; measured: the untouched GPU of "
                        f"{_R}one_busy-h200.jsonl.gz (H200)",
    "input_host_cpu_pct": "measured: one busy loader thread of 16 allocated CPUs reads 6% (H100 VM, "
                          f"{_R}input_bound-h100-80gb-hbm3.jsonl.gz)",
    "throttle_share_pct": "policy: a fifth of the GPU time at reduced clocks; measured: the SW power cap is normal at "
                          f"load (bf16 matmul at 698 of 700 W, H100, {_R}matmul_bf16-h100-80gb-hbm3.jsonl.gz)",
    "comm_nvlink_gbps": "datasheet: 3% of an H100's 900 GB/s NVLink; measured: NCCL all-reduce on 4x H200 "
                        f"({_R}allreduce-h200.jsonl.gz)",
    "comm_pcie_gbps": "datasheet: most of a 100-200 Gb/s NIC",
    "comm_host_pcie_gbps": f"measured: all-reduce on NCCL's socket transport, 9.4 GB/s per GPU (2x H200, "
                           f"{_R}allreduce_sockets-h200.jsonl.gz)",
    "comm_eth_gbps": "policy: 8 Gb/s of Ethernet is more than control traffic and checkpoints average",
    "input_util_pct": f"policy: 40% of the allocation lost to the host; measured: {_R}input_bound-h100-80gb-hbm3.jsonl.gz "
                      "(H100, SM active 14%)",
    "launch_sm_per_util": f"measured: large kernels fill the GPU (bf16 matmul SM 96% at util 100%, H100, "
                          f"{_R}matmul_bf16-h100-80gb-hbm3.jsonl.gz); tiny kernels 0.03% at 35% "
                          f"({_R}tiny_kernels-h100-80gb-hbm3.jsonl.gz)",
    "launch_gap_util_pct": f"measured: a launch-bound stream of tiny kernels keeps a kernel on the GPU 33% of the time "
                           f"(H100, {_R}tiny_kernels-h100-80gb-hbm3.jsonl.gz); underfilled grids 100% "
                           f"({_Z}zoo_cupy_tiny_grid-h100-80gb-hbm3.jsonl.gz)",
    "transfer_link_pct": "datasheet: PCIe gen x lanes (63 GB/s one way for gen5 x16); measured: pinned copies 54.5 GB/s, "
                         f"pageable 14 GB/s (H100, {_Z}zoo_h2d_pinned-h100-80gb-hbm3.jsonl.gz, zoo_d2h_pageable)",
    "compute_pipe_pct": "policy: 30% pipe activity, under the 35-50% model FLOPs utilization of well-tuned LLM training; "
                        f"measured: a bf16 training step reads tensor 26% (H100, {_R}train_step-h100-80gb-hbm3.jsonl.gz)",
    "memory_dram_pct": f"measured: a dense bf16 matmul keeps DRAM at 24-26% ({_R}matmul_bf16-h100-80gb-hbm3.jsonl.gz), "
                       f"streaming kernels at 80-92% ({_R}membound-h100-80gb-hbm3.jsonl.gz, H100)",
    "stream_dram_pct": f"measured: random 4-byte gathers, the ceiling of scattered sector accesses, 59-61% on H100 and "
                       f"H200 ({_Z}zoo_gather_random_fp32-h100-80gb-hbm3.jsonl.gz, -h200); coalesced streams 80-92% "
                       f"({_Z}zoo_triad_fp32-h100-80gb-hbm3.jsonl.gz)",
    "quiet_pipe_pct": f"measured: streaming kernels' address arithmetic 3-6% integer pipe "
                      f"(H100 and H200, {_Z}zoo_triad_fp32-h100-80gb-hbm3.jsonl.gz); per-element math 17-30% "
                      f"({_Z}zoo_gelu_bf16-h100-80gb-hbm3.jsonl.gz)",
    "roof_near_pct": f"measured: large GEMMs 88-92% tensor activity ({_Z}zoo_gemm_fp16-h100-80gb-hbm3.jsonl.gz), a "
                     f"streaming reduction 87% DRAM ({_R}reduce_sum-h100-80gb-hbm3.jsonl.gz), H100",
    "tensor_unused_pct": f"measured: an FP32 GEMM without TF32 reads tensor 0%, FP32 pipe 75% (H100, "
                         f"{_R}gemm_fp32-h100-80gb-hbm3.jsonl.gz)",
    "fp32_busy_pct": f"measured: as tensor_unused_pct (H100, {_R}gemm_fp32-h100-80gb-hbm3.jsonl.gz); elementwise FP32 "
                     f"kernels 15-30% beside DRAM ({_Z}zoo_gelu_bf16-h100-80gb-hbm3.jsonl.gz)",
    "matrix_occupancy_pct": f"measured: tiled GEMMs run at 12-14% occupancy ({_Z}zoo_gemm_fp32-h100-80gb-hbm3.jsonl.gz), "
                            f"elementwise kernels at 82-96% ({_Z}zoo_cupy_poly_fp32-h100-80gb-hbm3.jsonl.gz), H100",
    "underfilled_occupancy_pct": f"measured: large GEMMs at 12-14% occupancy with full tensor pipes "
                                 f"({_Z}zoo_gemm_fp16-h100-80gb-hbm3.jsonl.gz, H100)",
    "phase_min_share_pct": "policy: a phase of 5% of a job is found (issue 35), at the series' resolution "
                           "(phases.SERIES_POINTS points per GPU, phases.MIN_POINTS at least)",
    "imbalance_spread_pct": f"policy: 30 points of SM activity between GPUs; measured: {_R}one_busy-h200.jsonl.gz (H200)",
    "startup_max_s": "policy: start-ups run tens of seconds (H100 and H200, "
                     f"{_Z}zoo_startup_gemm_bf16-h100-80gb-hbm3.jsonl.gz, zoo_compile_mlp_bf16), a large model's load minutes",
    "profiler_share_pct": "policy: a class from a minority of the job's time would pass that minority off as the job",
}


def resolve_thresholds(overrides: dict | None = None) -> dict[str, float]:
    """The defaults with the config's overrides; an unknown key or a non-number raises ValueError naming it."""
    out = dict(DEFAULTS)
    for k, v in (overrides or {}).items():
        if k not in DEFAULTS:
            raise ValueError(f"unknown diagnosis threshold {k!r} (known: {', '.join(DEFAULTS)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"diagnosis threshold {k!r} must be a number >= 0, got {v!r}")
        out[k] = float(v)
    return out
