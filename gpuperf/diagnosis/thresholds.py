"""The classes a diagnosis can give and the thresholds its rules use, each default with its reason."""

from __future__ import annotations

# no_data: nothing was sampled; busy_unprofiled: kernels ran, but without SM/pipe/DRAM activity what
# bounds them is unknown; unused_gpus: some allocated GPUs did nothing while others worked;
# transfer_bound: host<->device copies on the PCIe link, SMs idle; latency_bound: SMs busy with no math
# pipe and little DRAM bandwidth (access pattern, atomics, dependent loads); underfilled: a kernel runs
# nearly all the time but fills few SMs (too few blocks: launch overhead is not the loss).
CLASSES = ("no_data", "idle", "unused_gpus", "input_bound", "launch_bound", "underfilled", "transfer_bound",
           "memory_bound", "latency_bound", "compute_bound", "communication_bound", "throttled", "busy_unprofiled")
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
    # A kernel that only moves memory (no math pipe, integer included, above a third of the compute bar)
    # streams at 87% DRAM activity in the ground-truth recordings (the streaming reduction) when its
    # accesses are coalesced; with nothing else for its warps to do, DRAM busy at under 85% of that while
    # the SMs are busy is held by where its loads go (scattered accesses move whole sectors for single
    # elements, and GPM counts the wasted sectors as activity), not by the bandwidth.
    "stream_dram_pct": 75.0,
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
    # Phases: a stretch shorter than a tenth of the job is noise at the series' resolution.
    "phase_min_share_pct": 10.0,
    # GPUs of one job whose SM activity (or utilization) differ by 30 points are doing unequal work:
    # stragglers, an unbalanced pipeline stage, or GPUs left unused.
    "imbalance_spread_pct": 30.0,
    # Most of the GPU time under a profiler (Nsight Compute, Nsight Systems, a CUPTI tool): no class. What is
    # left is mostly the start and end around the profiled program (ncu runs the whole program under it),
    # and classing a job from a minority of its time would pass that minority off as the job.
    "profiler_share_pct": 50.0,
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
