"""Why a job was slow: one primary class from its summary, with the evidence and what to change.

Pure: ``diagnose(summary, series=None, thresholds=None) -> Diagnosis``. The rules read the job-wide
means the summary holds; their order matters and is explained where they are applied.
Thresholds come from ``[report] thresholds`` in the config; each default says why it is what it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuperf import gpuspecs

CLASSES = ("idle", "input_bound", "launch_bound", "memory_bound", "compute_bound", "communication_bound", "throttled")

DEFAULTS: dict[str, float] = {
    # NVML utilization is "a kernel ran during the sample period"; below 5% on average the GPU was
    # allocated but essentially unused (a context, a monitoring probe, a stray warm-up).
    "idle_util_pct": 5.0,
    # ... or when 90% of the GPU-seconds had no kernel at all (a job that used the GPU for one minute of an hour).
    "idle_share_pct": 90.0,
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
    # Tensor (or FP) pipes active 30% of the time: well-tuned LLM training runs at 35-50% model FLOPs
    # utilization, so 30% means the math units are the main consumer of the GPU's time.
    "compute_pipe_pct": 30.0,
    # DRAM interface active half of the time: the memory system is the main consumer (a dense bf16
    # matmul keeps it at about 24%, FACTS.md; streaming kernels at 80-90%).
    "memory_dram_pct": 50.0,
    # GPUs of one job whose SM activity (or utilization) differ by 30 points are doing unequal work:
    # stragglers, an unbalanced pipeline stage, or GPUs left unused.
    "imbalance_spread_pct": 30.0,
}

_HW_THROTTLE = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")


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


@dataclass
class Diagnosis:
    """One primary class, whether GPUs were imbalanced, the evidence, and 1-3 recommendations."""

    cls: str
    imbalanced: bool = False
    evidence: list[str] = field(default_factory=list)
    recommendations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; the class under the key ``class``."""
        d = asdict(self)
        d["class"] = d.pop("cls")
        return d


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


@dataclass
class _Signals:
    """The job-wide figures the rules read (None: not measured)."""

    util: float | None
    sm: float | None
    tensor: float | None
    fp_max: float | None
    dram: float | None
    idle_share: float | None
    hw_throttle_share: float
    power_cap_share: float
    nvlink_gbps: float | None
    pcie_gbps: float | None
    nodes: int
    cpu_eff: float | None
    iowait: float | None
    rdma_gbps: float | None = None
    eth_gbps: float | None = None

    @property
    def nccl_on_tcp(self) -> bool:
        """Multi-node, Ethernet busy, RDMA ports (almost) idle."""
        return (self.nodes > 1 and self.eth_gbps is not None and self.rdma_gbps is not None
                and self.rdma_gbps < 0.1 * self.eth_gbps)

    @property
    def sm_per_util(self) -> float | None:
        if self.sm is None or not self.util:
            return None
        return self.sm / self.util


def _signals(summary: dict, series: dict | None) -> _Signals:
    job = summary.get("job") or {}
    gpu_s = sum(_f(g.get("seconds")) or 0.0 for g in summary.get("gpus") or [])
    thr = job.get("throttle_s") or {}
    hw = sum(_f(thr.get(k)) or 0.0 for k in _HW_THROTTLE)
    cap = _f(thr.get("sw_power_cap")) or 0.0
    fps = [_f(job.get(k)) for k in ("fp16_active_pct", "fp32_active_pct", "fp64_active_pct")]
    fps = [x for x in fps if x is not None]
    hosts = list((summary.get("hosts") or {}).values())
    effs = [_f(h.get("cpu_efficiency_pct")) for h in hosts if _f(h.get("cpu_efficiency_pct")) is not None]
    iow = [_f(h.get("iowait_pct")) for h in hosts if _f(h.get("iowait_pct")) is not None]
    util = _f(job.get("util_gpu_pct"))
    if util is None and series:
        util = _series_mean(series, "util_gpu_pct")
    nv, pc = _f(job.get("nvlink_bps")), _f(job.get("pcie_bps"))
    rdma, eth = _net_split(hosts)
    return _Signals(
        util=util, sm=_f(job.get("sm_active_pct")), tensor=_f(job.get("tensor_active_pct")),
        fp_max=max(fps) if fps else None, dram=_f(job.get("dram_active_pct")),
        idle_share=_f(job.get("idle_pct")),
        hw_throttle_share=100.0 * min(1.0, hw / gpu_s) if gpu_s > 0 else 0.0,
        power_cap_share=100.0 * min(1.0, cap / gpu_s) if gpu_s > 0 else 0.0,
        nvlink_gbps=nv / 1e9 if nv is not None else None, pcie_gbps=pc / 1e9 if pc is not None else None,
        nodes=len(summary.get("nodes") or []) or 1,
        cpu_eff=max(effs) if effs else None, iowait=max(iow) if iow else None, rdma_gbps=rdma, eth_gbps=eth,
    )


# RDMA devices (IB, RoCE, EFA, Omni-Path) by their kernel names; everything else but lo is Ethernet
_RDMA_PREFIXES = ("mlx", "bnxt_re", "irdma", "efa", "hfi", "qedr", "erdma", "ionic")


def _net_split(hosts: list[dict]) -> tuple[float | None, float | None]:
    """Mean per node of RDMA and Ethernet traffic, GB/s (None when no node reported NIC counters)."""
    rdma = eth = 0.0
    n = 0
    for h in hosts:
        net = h.get("net_bps") or {}
        if not net:
            continue
        n += 1
        for nic, bps in net.items():
            if nic == "lo" or _f(bps) is None:
                continue
            if nic.startswith(_RDMA_PREFIXES):
                rdma += bps
            else:
                eth += bps
    return (rdma / n / 1e9, eth / n / 1e9) if n else (None, None)


def _series_mean(series: dict, key: str) -> float | None:
    vals = [v for s in series.values() for v in (s.get(key) or []) if v is not None]
    return sum(vals) / len(vals) if vals else None


def diagnose(summary: dict, series: dict | None = None, thresholds: dict | None = None) -> Diagnosis:
    """The primary class of a job from its summary (and optional per-GPU series), with evidence."""
    th = resolve_thresholds(thresholds)
    s = _signals(summary, series)
    spec = gpuspecs.lookup(((summary.get("gpus") or [{}])[0] or {}).get("name"))
    cls, evidence = _classify(s, th)
    d = Diagnosis(cls=cls, evidence=evidence)
    d.imbalanced, imb = _imbalance(summary, th)
    d.evidence += imb
    bursts = _bursts(series, th) if series else None
    if bursts:
        d.evidence.append(bursts)
    gap = (s.util - s.sm) if s.util is not None and s.sm is not None else None
    if gap is not None and s.util >= 90 and s.sm < 50:
        d.notes.append(f"NVML utilization {_pct(s.util)} but SM active {_pct(s.sm)}: 'utilization' only says a "
                       "kernel was running, not how much of the GPU it used")
    if s.sm is None:
        d.notes.append("no SM/tensor/DRAM activity (needs GPM on Hopper+ or DCGM): classified from utilization only")
    if s.power_cap_share >= th["throttle_share_pct"] and cls != "throttled":
        d.notes.append(f"at the software power cap {_pct(s.power_cap_share)} of the time (normal for busy GPUs)")
    if (summary.get("quality") or {}).get("partial"):
        d.notes.append("summary is partial: " + "; ".join((summary.get("quality") or {}).get("reasons") or []))
    d.recommendations = _recommend(cls, s, spec, d.imbalanced)[:3]
    return d


def _classify(s: _Signals, th: dict[str, float]) -> tuple[str, list[str]]:
    busy = s.util if s.util is not None else s.sm
    # 1. idle first: nothing else means anything when no kernel runs
    idle_ev = [f"GPU utilization {_pct(s.util)}, SM active {_pct(s.sm)}, no kernel {_pct(s.idle_share)} of the time"]
    if s.idle_share is not None and s.idle_share >= th["idle_share_pct"]:
        return "idle", idle_ev
    if busy is not None and busy < th["idle_util_pct"] and (s.sm is None or s.sm < th["idle_util_pct"]):
        # Little kernel time, but kernels keep arriving (most samples saw one): the GPU is waiting on
        # whatever feeds it, unless the host is known to be doing nothing either.
        host_idle = (s.cpu_eff is not None and s.cpu_eff < th["input_host_cpu_pct"]
                     and (s.iowait is None or s.iowait < th["input_host_cpu_pct"]))
        if s.idle_share is not None and not host_idle:
            return "input_bound", [f"kernels ran in {_pct(100.0 - s.idle_share)} of the samples but kept the GPU busy "
                                   f"only {_pct(busy)} of the time (SM active {_pct(s.sm)}): the GPU waits between them",
                                   *_host_evidence(s)]
        return "idle", idle_ev
    # 2. throttling distorts every other figure (clocks drop), so it is named before the workload's shape
    if s.hw_throttle_share >= th["throttle_share_pct"]:
        return "throttled", [f"hardware/thermal throttling {_pct(s.hw_throttle_share)} of the GPU time"]
    # 3. communication: collective kernels spin on few SMs, which would otherwise read as launch-bound
    pipes = max(x for x in (s.tensor, s.fp_max, 0.0) if x is not None)
    comm_nv = s.nvlink_gbps is not None and s.nvlink_gbps >= th["comm_nvlink_gbps"]
    comm_net = s.nodes > 1 and s.pcie_gbps is not None and s.pcie_gbps >= th["comm_pcie_gbps"]
    comm_tcp = s.nccl_on_tcp and (s.eth_gbps or 0.0) >= th["comm_eth_gbps"]
    comm_net = comm_net or comm_tcp
    if (comm_nv or comm_net) and pipes < th["compute_pipe_pct"] and (s.dram is None or s.dram < th["memory_dram_pct"]
                                                                      or comm_nv):
        ev = [f"NVLink {s.nvlink_gbps:.1f} GB/s per GPU" if s.nvlink_gbps is not None else "NVLink n/a",
              f"tensor active {_pct(s.tensor)}, SM active {_pct(s.sm)}"]
        if comm_net and s.pcie_gbps is not None:
            ev.append(f"PCIe (network) {s.pcie_gbps:.1f} GB/s per GPU across {s.nodes} nodes")
        if comm_tcp:
            ev.append(f"Ethernet {s.eth_gbps:.1f} GB/s per node while RDMA ports carry {s.rdma_gbps:.2f} GB/s: "
                      "NCCL on TCP sockets")
        return "communication_bound", ev
    spu = s.sm_per_util
    # 4. the GPU waits for its host: kernels run a small share of the time, but fill the GPU when they do
    if busy is not None and busy < th["input_util_pct"] and (spu is None or spu >= th["launch_sm_per_util"]):
        return "input_bound", [f"GPU utilization {_pct(s.util)}: kernels ran {_pct(s.util)} of the time, "
                               f"SM active {_pct(s.sm)}", *_host_evidence(s)]
    # 5. compute vs memory: whichever of the math pipes and the DRAM is further past its threshold
    comp = pipes / th["compute_pipe_pct"] if th["compute_pipe_pct"] else 0.0
    mem = (s.dram or 0.0) / th["memory_dram_pct"] if th["memory_dram_pct"] else 0.0
    if max(comp, mem) >= 1.0:
        if mem > comp:
            return "memory_bound", [f"DRAM active {_pct(s.dram)}, tensor active {_pct(s.tensor)}"]
        return "compute_bound", [f"tensor active {_pct(s.tensor)}, FP pipes {_pct(s.fp_max)}, DRAM active {_pct(s.dram)}"]
    # 6. kernels run most of the time but fill few SMs: launch overhead and tiny grids
    if spu is not None and spu < th["launch_sm_per_util"]:
        return "launch_bound", [f"GPU utilization {_pct(s.util)} but SM active {_pct(s.sm)} "
                                f"({spu:.2f} of the GPU filled while a kernel runs)"]
    # 7. nothing dominant: SMs busy without tensor or DRAM pressure, the math runs on CUDA cores
    return "compute_bound", [f"SM active {_pct(s.sm)}, tensor {_pct(s.tensor)}, DRAM {_pct(s.dram)}: no pipe dominant"]


def _bursts(series: dict, th: dict[str, float]) -> str | None:
    """'Works in bursts' evidence from the per-GPU series: samples with no kernel and samples nearly all busy."""
    utils = [v for ser in series.values() for v in (ser.get("util_gpu_pct") or []) if v is not None]
    if len(utils) < 10:
        return None
    idle = sum(1 for v in utils if v < th["idle_util_pct"]) / len(utils)
    busy = sum(1 for v in utils if v >= 80.0) / len(utils)
    # both states common: the GPU runs flat out, then waits (input pipeline, synchronisation, checkpoints)
    if idle >= 0.15 and busy >= 0.15:
        return (f"the GPU works in bursts: no kernel in {idle:.0%} of the samples, over 80% busy in {busy:.0%}")
    return None


def _host_evidence(s: _Signals) -> list[str]:
    ev = []
    if s.cpu_eff is not None:
        ev.append(f"host CPU efficiency {_pct(s.cpu_eff)}")
    if s.iowait is not None:
        ev.append(f"I/O wait {_pct(s.iowait)}")
    if not ev:
        ev.append("host CPU and I/O figures absent")
    return ev


def _imbalance(summary: dict, th: dict[str, float]) -> tuple[bool, list[str]]:
    gpus = summary.get("gpus") or []
    if len(gpus) < 2:
        return False, []
    for key, label in (("sm_active_pct", "SM active"), ("util_gpu_pct", "utilization")):
        vals = [(_f(g.get(key)), g) for g in gpus if _f(g.get(key)) is not None]
        if len(vals) < 2:
            continue
        lo, hi = min(vals, key=lambda x: x[0]), max(vals, key=lambda x: x[0])
        if hi[0] - lo[0] >= th["imbalance_spread_pct"]:
            return True, [f"{label} differs across GPUs: {_pct(lo[0])} on {lo[1].get('node')}:{lo[1].get('gpu')} "
                          f"vs {_pct(hi[0])} on {hi[1].get('node')}:{hi[1].get('gpu')}"]
        break  # SM activity, where known, is the better figure; utilization only when SM is absent
    return False, []


def _recommend(cls: str, s: _Signals, spec: gpuspecs.GpuSpec | None, imbalanced: bool) -> list[str]:
    r: list[str]
    if cls == "idle":
        r = ["request only the GPUs the job uses (--gres=gpu:N), or none for CPU-only work",
             "check the program sees and uses CUDA (torch.cuda.is_available(), device placement)",
             "end interactive sessions when done; use a shorter --time for them"]
    elif cls == "input_bound":
        r = ["feed the GPU faster: more DataLoader workers (num_workers), pin_memory=True, prefetching"]
        if s.iowait is not None and s.iowait >= 10:
            r.append("stage the dataset on node-local NVMe or a faster filesystem (high I/O wait)")
        else:
            r.append("move decoding/augmentation to the GPU (NVIDIA DALI, torchvision v2 on CUDA)")
        r.append("overlap host work with GPU work (non_blocking copies, CUDA streams)")
    elif cls == "launch_bound":
        r = ["capture the step in CUDA graphs or use torch.compile(mode='reduce-overhead')",
             "use larger batches so each kernel fills the GPU",
             "fuse small operations (torch.compile, fused optimizers such as fused AdamW)"]
    elif cls == "memory_bound":
        r = ["fuse elementwise operations to cut DRAM round trips (torch.compile)",
             "use FlashAttention / fused attention kernels"]
        r.append("quantise weights/activations (FP8 or INT8)" if spec is None or spec.fp8 else
                 "use bf16 instead of fp32 to halve memory traffic")
    elif cls == "compute_bound":
        r = ["good: the math units are the bottleneck"]
        if spec is not None and spec.fp8:
            r.append(f"this GPU ({spec.model}) has FP8 tensor cores: Transformer Engine FP8 can nearly double throughput")
        elif (s.tensor or 0.0) < 10:
            r.append("use tensor cores: bf16/fp16 autocast or TF32 (torch.backends.cuda.matmul.allow_tf32)")
    elif cls == "communication_bound":
        r = ["overlap communication with compute (DDP bucket_cap_mb, FSDP forward/backward prefetch)",
             "keep tensor parallelism inside one NVLink domain, data parallelism across nodes"]
        if s.nccl_on_tcp:
            r.append("check NCCL uses InfiniBand, not TCP sockets (NCCL_DEBUG=INFO shows NET/IB vs NET/Socket)")
        else:
            r.append("larger gradient buckets or gradient accumulation to communicate less often")
    else:  # throttled
        r = ["tell the cluster admins: GPUs throttled by hardware/thermal limits (cooling, power delivery)",
             "compare with a run on another node; the node may need service"]
    if imbalanced and len(r) >= 3:
        r[-1] = "balance the work across GPUs (some GPUs far less busy than others: stragglers, uneven stages)"
    elif imbalanced:
        r.append("balance the work across GPUs (some GPUs far less busy than others: stragglers, uneven stages)")
    return r
