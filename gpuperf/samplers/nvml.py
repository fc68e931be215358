"""The ``nvml`` backend: NVML per GPU per sweep, plus GPM metrics on Hopper and later.

Every NVML call goes through ``gpuperf.access.nvmlq.query`` (NotSupported -> None). Costs (FACTS.md):
basic queries are 1-7 us each, one GPM sample 0.5-0.7 ms, the total-energy counter ~4 ms, so the
energy counter is read only in ``read_energy()``. ``nvmlDeviceGetPcieThroughput`` is never called:
it samples for 20 ms inside the call; PCIe rates come from GPM or from cumulative byte counters.
Rates are computed between consecutive sweeps; the first sweep has none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpuperf.files import log
from gpuperf.access import nvmlq
from gpuperf.samplers.base import GpuSample, SamplerUnavailable

MIB = 1024 * 1024

# GPM metric id (nvml.h NVML_GPM_METRIC_*) -> GpuSample field and factor to its unit
GPM_METRICS: dict[int, tuple[str, float]] = {
    2: ("sm_active_pct", 1.0),          # SM_UTIL
    3: ("sm_occupancy_pct", 1.0),       # SM_OCCUPANCY
    4: ("int_active_pct", 1.0),         # INTEGER_UTIL
    5: ("tensor_active_pct", 1.0),      # ANY_TENSOR_UTIL
    6: ("tensor_dfma_pct", 1.0),        # DFMA_TENSOR_UTIL
    7: ("tensor_hmma_pct", 1.0),        # HMMA_TENSOR_UTIL
    8: ("tensor_dmma_pct", 1.0),        # DMMA_TENSOR_UTIL
    9: ("tensor_imma_pct", 1.0),        # IMMA_TENSOR_UTIL
    10: ("dram_active_pct", 1.0),       # DRAM_BW_UTIL
    11: ("fp64_active_pct", 1.0),       # FP64_UTIL
    12: ("fp32_active_pct", 1.0),       # FP32_UTIL
    13: ("fp16_active_pct", 1.0),       # FP16_UTIL
    20: ("pcie_tx_bps", MIB),           # PCIE_TX_PER_SEC, MiB/s
    21: ("pcie_rx_bps", MIB),           # PCIE_RX_PER_SEC
    60: ("nvlink_rx_bps", MIB),         # NVLINK_TOTAL_RX_PER_SEC
    61: ("nvlink_tx_bps", MIB),         # NVLINK_TOTAL_TX_PER_SEC
}
GPM_NVLINK_FIELDS = ("nvlink_rx_bps", "nvlink_tx_bps")

# NVML field ids of cumulative counters -> (GpuSample rate field, bytes per counter unit)
COUNTER_FIELDS: dict[int, tuple[str, float]] = {
    138: ("nvlink_tx_bps", 1024.0),     # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB
    139: ("nvlink_rx_bps", 1024.0),     # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    197: ("pcie_tx_bps", 1.0),          # NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    198: ("pcie_rx_bps", 1.0),          # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
}


def counter_rate(prev: float | None, cur: float | None, dt_s: float, scale: float) -> float | None:
    """Rate of a cumulative counter between two readings; None when unknown or the counter went back."""
    if prev is None or cur is None or dt_s <= 0 or cur < prev:
        return None
    return (cur - prev) * scale / dt_s


ALL_LINKS = 0xFFFFFFFF  # scopeId: NVLink throughput fields are per link; UINT_MAX sums every link (nvml.h)


def counter_fields(has_nvlink: bool, has_gpm: bool) -> list[tuple[int, int]]:
    """(field id, scope id) worth reading: byte counters only where GPM cannot give the rates.

    Measured per GPU and call: nvmlDeviceGetFieldValues with the NVLink counters (all links) 1.33 ms
    on H200, with the PCIe counters 0.25-0.5 ms on H100, while a whole GPM sweep, whose metrics
    include NVLink and PCIe rates from the same hardware counters, costs 0.075 ms. NVLink fields
    need an explicit scope: a bare id means scope 0, link 0 alone.
    """
    if has_gpm:
        return []
    ids = [(138, ALL_LINKS), (139, ALL_LINKS)] if has_nvlink else []
    return ids + [(197, 0), (198, 0)]


def per_link(req: list[tuple[int, int]], links: list[int]) -> list[tuple[int, int]]:
    """Replace all-link NVLink requests by one per active link (drivers that reject UINT_MAX)."""
    out = []
    for fid, scope in req:
        out += [(fid, link) for link in links] if scope == ALL_LINKS else [(fid, scope)]
    return out


def sum_fields(req: list[tuple[int, int]], answers: list[tuple[int, float | None]]) -> dict[int, float]:
    """Pure: per field id, the sum over its scopes; a field with any unanswered scope is left out."""
    out: dict[int, float] = {}
    bad: set[int] = set()
    for (fid, _), (_, v) in zip(req, answers):
        if v is None:
            bad.add(fid)
        else:
            out[fid] = out.get(fid, 0.0) + v
    return {k: v for k, v in out.items() if k not in bad}


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str | None = None
    uuid: str | None = None
    counters: dict[int, float] = field(default_factory=dict)   # field id -> last value
    counter_req: list[tuple[int, int]] = field(default_factory=list)  # (field id, scope id) still asked
    links: list[int] = field(default_factory=list)              # active NVLink links
    counters_t: float | None = None                             # monotonic time of the counter values
    gpm: "_Gpm | None" = None
    has_nvlink: bool = False


class _Gpm:
    """Two GPM samples per GPU: metrics are computed between the previous sweep's sample and this one's."""

    def __init__(self, mod: Any, handle: Any, nvlink: bool):
        self.mod, self.handle = mod, handle
        self.prev = mod.nvmlGpmSampleAlloc()
        self.cur = mod.nvmlGpmSampleAlloc()
        self.have_prev = False
        # NVLink rates of a GPU without NVLink read 0, which would look like "measured, none moved"
        self.ids = [i for i in GPM_METRICS if nvlink or GPM_METRICS[i][0] not in GPM_NVLINK_FIELDS]
        self.req = mod.c_nvmlGpmMetricsGet_t()   # ~19 KB struct, reused every sweep
        self.checked = False

    def sweep(self) -> dict[str, float]:
        """Take a sample; metrics since the previous one (empty on the first call or on error)."""
        if nvmlq.query(self.mod.nvmlGpmSampleGet, self.handle, self.cur) is None:
            self.have_prev = False
            return {}
        out: dict[str, float] = {}
        if self.have_prev:
            req = self.req
            req.version = self.mod.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(self.ids)
            req.sample1, req.sample2 = self.prev, self.cur
            for i, mid in enumerate(self.ids):
                req.metrics[i].metricId = mid
            if nvmlq.query(self.mod.nvmlGpmMetricsGet, req) is not None:
                ok = []
                for i, mid in enumerate(self.ids):
                    m = req.metrics[i]
                    if m.nvmlReturn == 0:
                        name, scale = GPM_METRICS[mid]
                        out[name] = m.value * scale
                        ok.append(mid)
                if not self.checked:
                    # metrics this GPU does not offer answer with an error every time: stop asking
                    dropped = sorted(set(self.ids) - set(ok))
                    if dropped:
                        log.get("samplers.nvml").info("GPM metrics not offered: %s", dropped)
                    self.ids, self.checked = ok, True
        self.prev, self.cur = self.cur, self.prev
        self.have_prev = True
        return out

    def free(self) -> None:
        for s in (self.prev, self.cur):
            nvmlq.query(self.mod.nvmlGpmSampleFree, s)


class NvmlSampler:
    """Sampler protocol over NVML (+ GPM where the GPU supports it)."""

    name = "nvml"

    def __init__(self, gpus: list[int] | None = None, gpm: bool = True):
        try:
            self.m = m = nvmlq.nvml()
        except nvmlq.NvmlUnavailable as e:
            raise SamplerUnavailable(f"nvml: {e}") from None
        count = nvmlq.query(m.nvmlDeviceGetCount) or 0
        indices = list(range(count)) if gpus is None else list(gpus)
        self.gpus: list[_Gpu] = []
        for i in indices:
            h = nvmlq.query(m.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                log.get("samplers.nvml").warning("GPU %d: no NVML handle, not sampled", i)
                continue
            g = _Gpu(i, h, _text(nvmlq.query(m.nvmlDeviceGetName, h)), _text(nvmlq.query(m.nvmlDeviceGetUUID, h)))
            g.links = [link for link in range(getattr(m, "NVML_NVLINK_MAX_LINKS", 18))
                       if nvmlq.query(m.nvmlDeviceGetNvLinkState, h, link) == 1]
            g.has_nvlink = bool(g.links)
            if gpm and _gpm_supported(m, h):
                try:
                    g.gpm = _Gpm(m, h, g.has_nvlink)
                except m.NVMLError as e:
                    log.get("samplers.nvml").info("GPU %d: GPM unavailable: %s", i, e)
            g.counter_req = counter_fields(g.has_nvlink, g.gpm is not None)
            self.gpus.append(g)
        if not self.gpus:
            raise SamplerUnavailable("nvml: no GPUs")
        self._throttle_fn = getattr(m, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(m, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def gpu_count(self) -> int:
        """GPUs sampled."""
        return len(self.gpus)

    def describe(self) -> list[dict[str, Any]]:
        """Static facts of each GPU, as a recording header lists them."""
        out = []
        for g in self.gpus:
            mem = nvmlq.query(self.m.nvmlDeviceGetMemoryInfo, g.handle)
            lim = nvmlq.query(self.m.nvmlDeviceGetEnforcedPowerLimit, g.handle)
            out.append({"index": g.index, "name": g.name, "uuid": g.uuid,
                        "memory_total_mib": round(mem.total / MIB) if mem is not None else None,
                        "power_limit_w": lim / 1000.0 if lim is not None else None,
                        "gpm": g.gpm is not None, "nvlink": g.has_nvlink})
        return out

    def gpm_offered(self) -> dict[int, list[str] | None]:
        """Per GPU, the GpuSample fields GPM filled (known after two sweeps); None: no GPM."""
        return {g.index: ([GPM_METRICS[i][0] for i in g.gpm.ids] if g.gpm is not None else None) for g in self.gpus}

    def sample(self) -> list[GpuSample]:
        """One sweep over every GPU."""
        t = time.time()
        return [self._sample_one(g, t) for g in self.gpus]

    def _sample_one(self, g: _Gpu, t: float) -> GpuSample:
        m, q, h = self.m, nvmlq.query, g.handle
        s = GpuSample(gpu=g.index, t=t)
        util = q(m.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            s.util_gpu_pct, s.util_mem_pct = float(util.gpu), float(util.memory)
        mem = q(m.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            s.mem_used_mib, s.mem_total_mib = mem.used / MIB, mem.total / MIB
        s.power_w = _scaled(q(m.nvmlDeviceGetPowerUsage, h), 1e-3)
        s.power_limit_w = _scaled(q(m.nvmlDeviceGetEnforcedPowerLimit, h), 1e-3)
        s.temp_c = _scaled(q(m.nvmlDeviceGetTemperature, h, m.NVML_TEMPERATURE_GPU), 1.0)
        s.sm_clock_mhz = _scaled(q(m.nvmlDeviceGetClockInfo, h, m.NVML_CLOCK_SM), 1.0)
        s.mem_clock_mhz = _scaled(q(m.nvmlDeviceGetClockInfo, h, m.NVML_CLOCK_MEM), 1.0)
        s.throttle_reasons = q(self._throttle_fn, h)
        procs = q(m.nvmlDeviceGetComputeRunningProcesses, h)
        if procs:
            s.processes = [{"pid": int(p.pid),
                            "mem_mib": p.usedGpuMemory / MIB if p.usedGpuMemory is not None else None} for p in procs]
        self._counters(g, s)
        if g.gpm is not None:
            for name, v in g.gpm.sweep().items():
                if getattr(s, name) is not None:  # byte counters win where they answered
                    continue
                setattr(s, name, v)
        return s

    def _counters(self, g: _Gpu, s: GpuSample) -> None:
        """NVLink/PCIe cumulative byte counters -> rates since the previous sweep."""
        if not g.counter_req:
            return
        vals = nvmlq.query(self.m.nvmlDeviceGetFieldValues, g.handle, g.counter_req)
        now = time.monotonic()
        if vals is None:
            g.counter_req = []
            return
        answers = [(v.fieldId, float(v.value.ullVal) if v.nvmlReturn == 0 else None) for v in vals]
        totals = sum_fields(g.counter_req, answers)
        if g.counters_t is None:
            # first sweep: fields NotSupported are never asked again; a driver that rejects the
            # all-links scope is asked link by link
            failed = {fid for fid, _ in g.counter_req} - set(totals)
            retry = [r for r in g.counter_req if r[0] in failed and r[1] == ALL_LINKS]
            g.counter_req = [r for r in g.counter_req if r[0] not in failed] + per_link(retry, g.links)
        dt = now - g.counters_t if g.counters_t is not None else 0.0
        for fid, cur in totals.items():
            name, scale = COUNTER_FIELDS[fid]
            rate = counter_rate(g.counters.get(fid), cur, dt, scale)
            if rate is not None:
                setattr(s, name, rate)
            g.counters[fid] = cur
        g.counters_t = now

    def read_energy(self) -> dict[int, float | None]:
        """Cumulative energy per GPU in joules (~4 ms per GPU: job start/end only)."""
        return {g.index: _scaled(nvmlq.query(self.m.nvmlDeviceGetTotalEnergyConsumption, g.handle), 1e-3)
                for g in self.gpus}

    def close(self) -> None:
        """Free the GPM samples."""
        for g in self.gpus:
            if g.gpm is not None:
                g.gpm.free()
                g.gpm = None


def _gpm_supported(m: Any, h: Any) -> bool:
    if not hasattr(m, "nvmlGpmQueryDeviceSupport"):
        return False
    sup = nvmlq.query(m.nvmlGpmQueryDeviceSupport, h)
    return bool(sup is not None and sup.isSupportedDevice)


def _scaled(v: Any, k: float) -> float | None:
    return None if v is None else float(v) * k


def _text(v: Any) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


def probe(cfg: Any = None) -> str | None:
    """None when NVML loads and shows at least one GPU, else the reason."""
    try:
        m = nvmlq.nvml()
    except nvmlq.NvmlUnavailable as e:
        return str(e)
    return None if (nvmlq.query(m.nvmlDeviceGetCount) or 0) > 0 else "no GPUs"


def register_backend() -> None:
    """Register ``nvml`` with the sampler registry (auto: after dcgm)."""
    from gpuperf.samplers import register

    register("nvml", probe, lambda arg, cfg: NvmlSampler(), auto_priority=20)
