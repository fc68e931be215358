"""The job-wide figures the diagnosis rules read, from a summary (None: not measured, never 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.diagnosis import frameworks

_HW_THROTTLE = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
# RDMA devices (IB, RoCE, EFA, Omni-Path) by their kernel names; everything else but lo is Ethernet
_RDMA_PREFIXES = ("mlx", "bnxt_re", "irdma", "efa", "hfi", "qedr", "erdma", "ionic")


def num(x: Any) -> float | None:
    """A number, or None for anything else (bools, strings, missing)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def pct(x: float | None) -> str:
    """'42%' or 'n/a'."""
    return "n/a" if x is None else f"{x:.0f}%"


@dataclass
class Signals:
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
    gpu_count: int = 0
    samples: int = 0
    occupancy: float | None = None
    fp32: float | None = None
    fp64: float | None = None
    pcie_balance: float | None = None   # min(tx, rx) / max(tx, rx): ~1 for collectives, ~0 for one-way copies
    pcie_link_gbps: float | None = None  # one direction's raw rate of the GPUs' host link (PCIe gen x lanes)
    pcie_link_from: str = ""            # where that rate comes from ("gen5 x16, the node's" / "the model's")
    int_pipe: float | None = None       # integer pipe activity (index arithmetic, hashing, sort keys)
    hmma: float | None = None           # tensor activity by kind (None: the GPU/driver gives none)
    imma: float | None = None
    dmma: float | None = None
    fp16: float | None = None
    gdr: bool | None = None             # GPUDirect RDMA loaded on every node (None: not known)
    gds: bool | None = None             # GPUDirect Storage (nvidia_fs) loaded on every node (None: not known)
    frameworks: tuple[str, ...] | None = None  # what the job's CUDA processes mapped (None: not read): frameworks.py

    @property
    def pcie_dir_gbps(self) -> float | None:
        """The busier direction's PCIe rate per GPU, GB/s (tx+rx split by their balance)."""
        if self.pcie_gbps is None:
            return None
        return self.pcie_gbps / (1.0 + (self.pcie_balance or 0.0))

    @property
    def link_pct(self) -> float | None:
        """The busier PCIe direction as a share of the link's raw rate, percent (None: rate or link unknown)."""
        d = self.pcie_dir_gbps
        if d is None or not self.pcie_link_gbps:
            return None
        return 100.0 * d / self.pcie_link_gbps

    @property
    def by_kind(self) -> bool:
        """Tensor activity by kind was measured."""
        return any(x is not None for x in (self.hmma, self.imma, self.dmma))

    @property
    def nccl_on_tcp(self) -> bool:
        """Multi-node, Ethernet busy, RDMA ports (almost) idle."""
        return (self.nodes > 1 and self.eth_gbps is not None and self.rdma_gbps is not None
                and self.rdma_gbps < 0.1 * self.eth_gbps)

    @property
    def sm_per_util(self) -> float | None:
        """How much of the GPU a kernel fills while one runs."""
        if self.sm is None or not self.util:
            return None
        return self.sm / self.util

    @property
    def pipes(self) -> float | None:
        """The busiest math pipe (tensor or FP), None when no pipe was measured."""
        vals = [x for x in (self.tensor, self.fp_max) if x is not None]
        return max(vals) if vals else None

    @property
    def has_activity(self) -> bool:
        """Whether anything says how busy the GPUs were (utilization, SM activity or no-kernel time)."""
        return self.samples > 0 and any(x is not None for x in (self.util, self.sm, self.idle_share))

    @property
    def profiled(self) -> bool:
        """SM activity and at least one of the math pipes or DRAM were measured (GPM or DCGM)."""
        return self.sm is not None and (self.pipes is not None or self.dram is not None)


def signals(summary: dict, series: dict | None = None) -> Signals:
    """The Signals of a summary; utilization from the series where the summary lacks it."""
    job = summary.get("job") or {}
    gpus = [g for g in summary.get("gpus") or [] if isinstance(g, dict)]
    gpu_s = sum(num(g.get("seconds")) or 0.0 for g in gpus)
    thr = job.get("throttle_s") or {}
    hw = sum(num(thr.get(k)) or 0.0 for k in _HW_THROTTLE)
    cap = num(thr.get("sw_power_cap")) or 0.0
    fps = [num(job.get(k)) for k in ("fp16_active_pct", "fp32_active_pct", "fp64_active_pct")]
    fps = [x for x in fps if x is not None]
    hosts = [h for h in (summary.get("hosts") or {}).values() if isinstance(h, dict)]
    effs = [num(h.get("cpu_efficiency_pct")) for h in hosts if num(h.get("cpu_efficiency_pct")) is not None]
    iow = [num(h.get("iowait_pct")) for h in hosts if num(h.get("iowait_pct")) is not None]
    util = num(job.get("util_gpu_pct"))
    if util is None and series:
        util = series_mean(series, "util_gpu_pct")
    nv, pc = num(job.get("nvlink_bps")), num(job.get("pcie_bps"))
    rdma, eth = net_split(hosts)
    samples = sum(int(num(g.get("samples")) or 0) for g in gpus)
    if samples == 0 and gpus and any(num(g.get("seconds")) for g in gpus):
        samples = len(gpus)           # older summaries without per-GPU sample counts
    return Signals(
        util=util, sm=num(job.get("sm_active_pct")), tensor=num(job.get("tensor_active_pct")),
        fp_max=max(fps) if fps else None, dram=num(job.get("dram_active_pct")),
        idle_share=num(job.get("idle_pct")),
        hw_throttle_share=100.0 * min(1.0, hw / gpu_s) if gpu_s > 0 else 0.0,
        power_cap_share=100.0 * min(1.0, cap / gpu_s) if gpu_s > 0 else 0.0,
        nvlink_gbps=nv / 1e9 if nv is not None else None, pcie_gbps=pc / 1e9 if pc is not None else None,
        nodes=len(summary.get("nodes") or []) or 1,
        cpu_eff=max(effs) if effs else None, iowait=max(iow) if iow else None, rdma_gbps=rdma, eth_gbps=eth,
        gpu_count=len(gpus), samples=samples, occupancy=num(job.get("sm_occupancy_pct")),
        fp32=num(job.get("fp32_active_pct")), fp64=num(job.get("fp64_active_pct")),
        pcie_balance=balance(num(job.get("pcie_tx_bytes")), num(job.get("pcie_rx_bytes"))),
        int_pipe=num(job.get("int_active_pct")), hmma=num(job.get("tensor_hmma_pct")),
        imma=num(job.get("tensor_imma_pct")), fp16=num(job.get("fp16_active_pct")),
        dmma=_max(num(job.get("tensor_dmma_pct")), num(job.get("tensor_dfma_pct"))),
        **dict(zip(("pcie_link_gbps", "pcie_link_from"), pcie_link(gpus))),
        gdr=_all_known([h.get("gpudirect_rdma") for h in hosts]),
        gds=_all_known([h.get("gpudirect_storage") for h in hosts]),
        frameworks=None if frameworks.of(summary) is None else tuple(frameworks.of(summary)),
    )


def _all_known(flags: list[Any]) -> bool | None:
    """True or False when every host said (all True: True), None when any did not."""
    if not flags or any(not isinstance(f, bool) for f in flags):
        return None
    return all(flags)


def _max(*xs: float | None) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def pcie_link(gpus: list[dict]) -> tuple[float | None, str]:
    """(one direction's raw rate of the slowest GPU host link, GB/s; what it rests on): the node's link
    generation and width where the summary carries them (``pcie_gen``, ``pcie_width``), else the model's."""
    rates = []
    for g in gpus:
        gen, width = num(g.get("pcie_gen")), num(g.get("pcie_width"))
        if gen and width:
            rates.append((gpuspecs.pcie_gbps(int(gen), int(width)), f"PCIe gen{int(gen)} x{int(width)}, as linked"))
            continue
        spec = gpuspecs.lookup(g.get("name"))
        if spec is not None and spec.pcie_gen:
            rates.append((gpuspecs.pcie_gbps(spec.pcie_gen, spec.pcie_lanes),
                          f"PCIe gen{spec.pcie_gen} x{spec.pcie_lanes}, the {spec.model}'s (the node's link not recorded)"))
    rates = [r for r in rates if r[0]]
    if not rates:
        return None, ""
    return min(rates, key=lambda r: r[0])


def balance(tx: float | None, rx: float | None) -> float | None:
    """min/max of the two directions (None when either is unknown or both are zero)."""
    if tx is None or rx is None or max(tx, rx) <= 0:
        return None
    return min(tx, rx) / max(tx, rx)


def net_split(hosts: list[dict]) -> tuple[float | None, float | None]:
    """Mean per node of RDMA and Ethernet traffic, GB/s (None when no node reported NIC counters)."""
    rdma = eth = 0.0
    n = 0
    for h in hosts:
        net = h.get("net_bps") or {}
        if not isinstance(net, dict) or not net:
            continue
        n += 1
        for nic, bps in net.items():
            if nic == "lo" or num(bps) is None:
                continue
            if nic.startswith(_RDMA_PREFIXES):
                rdma += bps
            else:
                eth += bps
    return (rdma / n / 1e9, eth / n / 1e9) if n else (None, None)


def series_mean(series: dict, key: str) -> float | None:
    """Mean of one field over every GPU's series."""
    vals = [v for s in series.values() for v in (s.get(key) or []) if num(v) is not None]
    return sum(vals) / len(vals) if vals else None
