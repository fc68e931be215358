"""The primary class from a job's Signals: ordered rules, each needing the evidence it names.

A rule fires only on figures that were measured: with utilization alone no bottleneck class is given
(``busy_unprofiled``), and with nothing sampled the class is ``no_data``.
"""

from __future__ import annotations

from gpuperf.diagnosis.signals import Signals, pct


def classify(s: Signals, th: dict[str, float]) -> tuple[str, list[str]]:
    """(class, evidence) for one set of job-wide figures."""
    # 0. nothing sampled: no figure to judge by, and saying anything else would invent it
    if not s.has_activity:
        return "no_data", [f"no GPU activity was sampled ({s.gpu_count} GPU(s), {s.samples} samples): the node "
                           "daemon was down or did not cover these GPUs"]
    busy = s.util if s.util is not None else s.sm
    # 1. idle first: nothing else means anything when no kernel runs
    idle_ev = [f"GPU utilization {pct(s.util)}, SM active {pct(s.sm)}, no kernel {pct(s.idle_share)} of the time"]
    # NVML utilization samples a fraction of each second and misses short kernels that SM activity
    # (which integrates) sees: no-kernel time counts as idle only when SM activity agrees
    if (s.idle_share is not None and s.idle_share >= th["idle_share_pct"]
            and (s.sm is None or s.sm < th["idle_util_pct"])):
        return "idle", idle_ev
    if busy is None:
        # only the no-kernel share is known, and it is below the idle bar: kernels ran, nothing says how
        return "busy_unprofiled", [f"kernels ran in {pct(100.0 - s.idle_share)} of the samples; utilization "
                                   "and SM activity were not measured"] if s.idle_share is not None else idle_ev
    if busy < th["idle_util_pct"] and (s.sm is None or s.sm < th["idle_util_pct"]):
        # Little kernel time, but kernels keep arriving (most samples saw one): the GPU is waiting on
        # whatever feeds it, unless the host is known to be doing nothing either.
        host_idle = (s.cpu_eff is not None and s.cpu_eff < th["input_host_cpu_pct"]
                     and (s.iowait is None or s.iowait < th["input_host_cpu_pct"]))
        if s.idle_share is not None and not host_idle:
            return "input_bound", [f"kernels ran in {pct(100.0 - s.idle_share)} of the samples but kept the GPU busy "
                                   f"only {pct(busy)} of the time (SM active {pct(s.sm)}): the GPU waits between them",
                                   *host_evidence(s)]
        return "idle", idle_ev
    # 2. throttling distorts every other figure (clocks drop), so it is named before the workload's shape
    if s.hw_throttle_share >= th["throttle_share_pct"]:
        return "throttled", [f"hardware/thermal throttling {pct(s.hw_throttle_share)} of the GPU time"]
    # 3. peer copies: NVLink busy with the SMs idle is the copy engines' work (cudaMemcpyPeer); NCCL's
    # collectives move their bytes with kernels (the 4x H200 all-reduce recording: SM active 12.6%)
    if (s.nvlink_gbps is not None and s.nvlink_gbps >= th["comm_nvlink_gbps"] and s.sm is not None
            and s.sm < th["idle_util_pct"] and (s.pipes or 0.0) < th["compute_pipe_pct"]):
        return "transfer_bound", [f"NVLink {s.nvlink_gbps:.1f} GB/s per GPU while SMs were active {pct(s.sm)}: peer "
                                  "copies on the copy engines (collectives would run kernels on the SMs)"]
    # 3b. communication: collective kernels spin on few SMs, which would otherwise read as launch-bound
    comm = _communication(s, th)
    if comm:
        return "communication_bound", comm
    # 3c. host<->device copies: the copy engine keeps NVML's utilization up (FACTS.md) while the SMs idle
    xfer = _transfer(s, th)
    if xfer:
        return "transfer_bound", xfer
    spu = s.sm_per_util
    # 4. the GPU waits for its host: kernels run a small share of the time, but fill the GPU when they do
    if busy < th["input_util_pct"] and (spu is None or spu >= th["launch_sm_per_util"]):
        return "input_bound", [f"GPU utilization {pct(s.util)}: kernels ran {pct(s.util)} of the time, "
                               f"SM active {pct(s.sm)}", *host_evidence(s)]
    # 5. compute vs memory: whichever of the math pipes and the DRAM is further past its threshold
    comp = (s.pipes or 0.0) / th["compute_pipe_pct"] if th["compute_pipe_pct"] else 0.0
    mem = (s.dram or 0.0) / th["memory_dram_pct"] if th["memory_dram_pct"] else 0.0
    if max(comp, mem) >= 1.0:
        if mem > comp:
            scattered = _scattered(s, th)
            if scattered:
                return "latency_bound", scattered
            ev = [f"DRAM active {pct(s.dram)}, tensor active {pct(s.tensor)}"]
            if (s.dram or 0.0) < th["roof_near_pct"]:
                # DRAM activity counts the sectors moved, useful or not
                ev.append("DRAM below its roof: streaming that does not saturate it, or scattered accesses (gathers, "
                          "sorts, uncoalesced loads) whose wasted sectors keep it busy; GPM cannot tell them apart, "
                          "Nsight Compute's memory workload analysis (sectors per request) can")
            return "memory_bound", ev
        return "compute_bound", [f"tensor active {pct(s.tensor)}, FP pipes {pct(s.fp_max)}, DRAM active {pct(s.dram)}"]
    # 5b. the integer pipe computes every load's and store's address, so streaming kernels keep it busy in
    # proportion to their traffic: it bounds the kernels only near its roof (hashing, integer math)
    if s.int_pipe is not None and s.int_pipe >= th["roof_near_pct"]:
        return "compute_bound", [f"integer pipe {pct(s.int_pipe)} busy, near its roof (tensor {pct(s.tensor)}, FP pipes "
                                 f"{pct(s.fp_max)}, DRAM {pct(s.dram)}): integer math bounds the kernels"]
    # 6. kernels fill few SMs: launch gaps between small kernels, or grids too small for the GPU
    if spu is not None and spu < th["launch_sm_per_util"]:
        fill = f"GPU utilization {pct(s.util)} but SM active {pct(s.sm)} ({spu:.2f} of the GPU filled while a kernel runs)"
        if s.util is not None and s.util >= th["launch_gap_util_pct"]:
            return "underfilled", [f"{fill}: a kernel ran nearly all the time, so launch gaps cost at most "
                                  f"{pct(100.0 - s.util)} of it; the kernels have too few blocks to fill the SMs"]
        return "launch_bound", [f"{fill}: small kernels with gaps between them (launch overhead), or kernels whose "
                                "grids fill few SMs; the figures cannot tell how much is which: an Nsight Systems "
                                "trace (nsys profile) shows kernel durations and the gaps"]
    # 7. SMs busy, no resource past its bar alone. Math pipes and DRAM together account for the busy
    # time (each as a share of its bar, summed past 1): a mix of kernels. Tensor work at half its bar or
    # more names it compute-bound (a training step: tensor 26%, DRAM 45%); CUDA-core FP work under its bar
    # beside DRAM traffic is the per-element math of streaming kernels (softmax, normalisation), so
    # memory-bound. Short of 1, the warps wait on something that is neither math nor bandwidth.
    if s.sm is not None and s.pipes is not None and s.dram is not None:
        mix = f"SM active {pct(s.sm)}, tensor {pct(s.tensor)}, FP pipes {pct(s.fp_max)}, DRAM {pct(s.dram)}"
        if comp + mem >= 1.0:
            if (s.tensor or 0.0) >= 0.5 * th["compute_pipe_pct"]:
                return "compute_bound", [f"{mix}: a mix of tensor-core and memory-bound kernels, the tensor pipes at "
                                         f"{(s.tensor or 0.0) / th['compute_pipe_pct']:.1f} of their bar"]
            return "memory_bound", [f"{mix}: streaming kernels with some math per element, DRAM at {mem:.1f} of "
                                    "its bar and no tensor work"]
        return "latency_bound", [f"{mix}, integer pipe {pct(s.int_pipe)}: SMs busy while no math pipe works and DRAM "
                                 "moves little: the warps wait on memory latency, scattered or uncoalesced accesses, "
                                 "atomics or synchronisation; which of these needs Nsight Compute's warp-stall reasons"]
    return "busy_unprofiled", [f"GPU utilization {pct(s.util)}, SM active {pct(s.sm)}: kernels ran, but "
                               f"tensor/FP pipe and DRAM activity were not measured (tensor {pct(s.tensor)}, "
                               f"DRAM {pct(s.dram)})"]


def _scattered(s: Signals, th: dict[str, float]) -> list[str]:
    """Evidence that DRAM past its bar is held by where the loads go, not by the bandwidth (empty when not): SMs
    busy, every math pipe measured and quiet (tensor, FP and integer), and DRAM under the ceiling of scattered
    sector accesses (``stream_dram_pct``, thresholds.SOURCES): a kernel that moves memory past it streams, so is
    memory-bound (a fused optimiser step, a multi-tensor apply, attention decode). Without the integer pipe
    (DCGM) nothing is said."""
    if s.sm is None or s.sm < 50.0 or s.dram is None:
        return []
    # the ceiling holds while kernels run: DRAM activity over the time the SMs were busy (a decode loop whose host
    # leaves the GPU idle 40% of the time streams at 59% of the whole time, 98% of its kernels' time)
    busy_dram = min(100.0, 100.0 * s.dram / s.sm)
    if busy_dram >= th["stream_dram_pct"]:
        return []
    if s.pipes is None or s.int_pipe is None or max(s.pipes, s.int_pipe) >= th["quiet_pipe_pct"]:
        return []
    return [f"DRAM active {pct(s.dram)} with SM active {pct(s.sm)} ({pct(busy_dram)} while the SMs were busy) and no "
            f"math pipe at work (tensor {pct(s.tensor)}, FP pipes {pct(s.fp_max)}, integer {pct(s.int_pipe)}): under the "
            f"{th['stream_dram_pct']:.0f}% that "
            "scattered accesses reach at most (random gathers move whole sectors for single elements and are held by "
            "the DRAM's row activations) and coalesced streams pass, so these warps wait on where their loads go "
            "(gathers, random lookups, uncoalesced or dependent loads) or hold too few bytes in flight to cover the "
            "latency; Nsight Compute's sectors per request (memory workload analysis) tells which"]


def _transfer(s: Signals, th: dict[str, float]) -> list[str]:
    """Evidence that host<->device copies bound the job (empty when they do not): no math pipe or DRAM past
    its bar, and either the PCIe link near its rate on average with the SMs less busy than the link, or
    (pageable copies: the host stages each chunk between DMA bursts) SMs idle while NVML's utilization
    (the copy engine's busy time, FACTS.md) is explained by the link running near its rate while busy."""
    link = s.link_pct
    if link is None or (s.pipes or 0.0) >= th["compute_pipe_pct"] or (s.dram or 0.0) >= th["memory_dram_pct"]:
        return []
    steady = link >= th["transfer_link_pct"] and (s.sm is None or s.sm < link)
    while_busy = 100.0 * link / s.util if s.util and s.util >= 2 * th["idle_util_pct"] else None
    staged = (while_busy is not None and while_busy >= th["transfer_link_pct"] and s.sm is not None
              and s.sm < 2 * th["idle_util_pct"])
    if not (steady or staged):
        return []
    way = "both ways" if (s.pcie_balance or 0.0) >= 0.5 else "mostly one way"
    ev = [f"PCIe {s.pcie_dir_gbps:.1f} GB/s per GPU in the busier direction ({way}), {link:.0f}% of the "
          f"{s.pcie_link_gbps:.0f} GB/s link ({s.pcie_link_from}), while SMs were active {pct(s.sm)}: the GPU "
          f"waits on host<->device copies (NVML's utilization {pct(s.util)} counts the copy engine as busy)"]
    if not steady and while_busy is not None:
        ev.append(f"{while_busy:.0f}% of the link while the copy engine ran: copies staged through the host "
                  "between bursts (pageable memory), not kernels, fill the utilization")
    return ev


def _communication(s: Signals, th: dict[str, float]) -> list[str]:
    """Evidence that the GPUs mostly move data between themselves (empty when they do not)."""
    pipes = s.pipes or 0.0
    comm_nv = s.nvlink_gbps is not None and s.nvlink_gbps >= th["comm_nvlink_gbps"]
    comm_net = s.nodes > 1 and s.pcie_gbps is not None and s.pcie_gbps >= th["comm_pcie_gbps"]
    comm_tcp = s.nccl_on_tcp and (s.eth_gbps or 0.0) >= th["comm_eth_gbps"]
    comm_net = comm_net or comm_tcp
    # one node, several GPUs: kernels that hold the GPU but barely use SMs, PCIe busy both ways (a
    # collective sends what it receives; an input pipeline's copies go one way), NVLink idle
    comm_host = (s.gpu_count >= 2 and s.pcie_gbps is not None and s.pcie_gbps >= th["comm_host_pcie_gbps"]
                 and (s.pcie_balance is None or s.pcie_balance >= 0.5)
                 and (s.nvlink_gbps is None or s.nvlink_gbps < 1.0) and s.sm is not None
                 and s.sm < 2 * th["idle_util_pct"] and s.util is not None and s.util >= 2 * th["idle_util_pct"])
    if not (comm_nv or comm_net or comm_host) or pipes >= th["compute_pipe_pct"]:
        return []
    if not (comm_nv or comm_host) and s.dram is not None and s.dram >= th["memory_dram_pct"]:
        return []
    ev = [f"NVLink {s.nvlink_gbps:.1f} GB/s per GPU" if s.nvlink_gbps is not None else "NVLink n/a",
          f"tensor active {pct(s.tensor)}, SM active {pct(s.sm)}"]
    if comm_net and s.pcie_gbps is not None:
        ev.append(f"PCIe (network) {s.pcie_gbps:.1f} GB/s per GPU across {s.nodes} nodes")
    if comm_tcp:
        ev.append(f"Ethernet {s.eth_gbps:.1f} GB/s per node while RDMA ports carry {s.rdma_gbps:.2f} GB/s: "
                  "NCCL on TCP sockets")
    if comm_host and not comm_nv:
        ev.append(f"PCIe {s.pcie_gbps:.1f} GB/s per GPU with NVLink idle and SMs {pct(s.sm)} busy under "
                  f"{pct(s.util)} utilization: collectives through host memory (NCCL sockets, or P2P/SHM disabled)")
    return ev


def host_evidence(s: Signals) -> list[str]:
    """The host's CPU efficiency and I/O wait as evidence (or that they are absent)."""
    ev = []
    if s.cpu_eff is not None:
        ev.append(f"host CPU efficiency {pct(s.cpu_eff)}")
    if s.iowait is not None:
        ev.append(f"I/O wait {pct(s.iowait)}")
    if not ev:
        ev.append("host CPU and I/O figures absent")
    return ev
