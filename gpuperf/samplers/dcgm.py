"""The ``dcgm`` backend: the same GpuSample from a DCGM hostengine's watched fields.

Uses the public DCGM Python bindings (``pydcgm``, ``dcgm_structs``, ``dcgm_fields``), which ship with the
DCGM package, not PyPI: they are imported from ``sys.path`` or from the package's install directories.
The hostengine does the reading; each sweep is one ``GetLatest`` of one field group. Profiling fields
(1001-1016) are watched in their own group, so a GPU or a hostengine without profiling (or paused for
Nsight) still gives the device fields. Processes come from NVML where it loads (DCGM has no public
per-process field); energy is the hostengine's latest total-energy reading (field 156).

Spec: ``dcgm`` (localhost:5555) or ``dcgm:HOST[:PORT]`` or ``dcgm:unix:/path/to/socket``.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

from gpuperf.files import log
from gpuperf.access import nvmlq
from gpuperf.samplers.base import GpuSample, SamplerUnavailable

# Where DCGM packages install their Python bindings (DCGM 4 Debian/RPM packages, then DCGM 3).
BINDINGS_DIRS = ("/usr/share/datacenter-gpu-manager-4/bindings/python3", "/usr/local/dcgm/bindings/python3",
                 "/usr/local/dcgm/bindings")

# DCGM field id -> (GpuSample field, factor to its unit)
DEVICE_FIELDS: dict[int, tuple[str, float]] = {
    203: ("util_gpu_pct", 1.0),        # DCGM_FI_DEV_GPU_UTIL, %
    204: ("util_mem_pct", 1.0),        # DCGM_FI_DEV_MEM_COPY_UTIL, %
    252: ("mem_used_mib", 1.0),        # DCGM_FI_DEV_FB_USED, MiB
    250: ("mem_total_mib", 1.0),       # DCGM_FI_DEV_FB_TOTAL, MiB
    155: ("power_w", 1.0),             # DCGM_FI_DEV_POWER_USAGE, W
    164: ("power_limit_w", 1.0),       # DCGM_FI_DEV_ENFORCED_POWER_LIMIT, W
    150: ("temp_c", 1.0),              # DCGM_FI_DEV_GPU_TEMP, C
    100: ("sm_clock_mhz", 1.0),        # DCGM_FI_DEV_SM_CLOCK, MHz
    101: ("mem_clock_mhz", 1.0),       # DCGM_FI_DEV_MEM_CLOCK, MHz
    112: ("throttle_reasons", 1.0),    # DCGM_FI_DEV_CLOCKS_EVENT_REASONS, bitmask (NVML's)
}
PROF_FIELDS: dict[int, tuple[str, float]] = {
    1002: ("sm_active_pct", 100.0),    # DCGM_FI_PROF_SM_ACTIVE, ratio 0-1
    1003: ("sm_occupancy_pct", 100.0),  # DCGM_FI_PROF_SM_OCCUPANCY
    1004: ("tensor_active_pct", 100.0),  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    1005: ("dram_active_pct", 100.0),  # DCGM_FI_PROF_DRAM_ACTIVE
    1006: ("fp64_active_pct", 100.0),  # DCGM_FI_PROF_PIPE_FP64_ACTIVE
    1007: ("fp32_active_pct", 100.0),  # DCGM_FI_PROF_PIPE_FP32_ACTIVE
    1008: ("fp16_active_pct", 100.0),  # DCGM_FI_PROF_PIPE_FP16_ACTIVE
    1009: ("pcie_tx_bps", 1.0),        # DCGM_FI_PROF_PCIE_TX_BYTES, bytes/s
    1010: ("pcie_rx_bps", 1.0),        # DCGM_FI_PROF_PCIE_RX_BYTES
    1011: ("nvlink_tx_bps", 1.0),      # DCGM_FI_PROF_NVLINK_TX_BYTES
    1012: ("nvlink_rx_bps", 1.0),      # DCGM_FI_PROF_NVLINK_RX_BYTES
}
# Tensor activity by kind and the integer pipe: watched in a group of their own, so a GPU or DCGM
# version that lacks one of them (DFMA is Hopper and later) loses these alone, not the fields above
KIND_FIELDS: dict[int, tuple[str, float]] = {
    1013: ("tensor_imma_pct", 100.0),  # DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE
    1014: ("tensor_hmma_pct", 100.0),  # DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE
    1015: ("tensor_dfma_pct", 100.0),  # DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE (Hopper and later)
    1016: ("int_active_pct", 100.0),   # DCGM_FI_PROF_PIPE_INT_ACTIVE
}
ENERGY_FIELD = 156      # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
NVML_INDEX_FIELD = 52   # DCGM_FI_DEV_NVML_INDEX: DCGM gpu ids need not equal NVML indices


def import_bindings() -> tuple[Any, Any]:
    """(pydcgm, dcgm_structs) from sys.path or the DCGM install dirs; ImportError says where it looked."""
    try:
        return importlib.import_module("pydcgm"), importlib.import_module("dcgm_structs")
    except ImportError:
        pass
    for d in BINDINGS_DIRS:
        if os.path.isfile(os.path.join(d, "pydcgm.py")):
            sys.path.append(d)  # the bindings import each other by top-level name
            return importlib.import_module("pydcgm"), importlib.import_module("dcgm_structs")
    raise ImportError(f"DCGM Python bindings (pydcgm) not importable and not in {', '.join(BINDINGS_DIRS)}")


def parse_address(arg: str) -> tuple[str, bool]:
    """Spec argument -> (address, is_unix_socket); empty is the local hostengine."""
    if arg.startswith("unix:"):
        return arg[len("unix:"):], True
    return arg or "localhost", False


def to_sample(gpu: int, t: float, values: dict[int, Any]) -> GpuSample:
    """Pure: one GPU's latest field values (DcgmFieldValue-like: .value, .isBlank) -> GpuSample."""
    s = GpuSample(gpu=gpu, t=t)
    for fields in (DEVICE_FIELDS, PROF_FIELDS, KIND_FIELDS):
        for fid, (name, scale) in fields.items():
            v = values.get(fid)
            if v is None or v.isBlank or v.value is None:
                continue
            setattr(s, name, int(v.value) if name == "throttle_reasons" else float(v.value) * scale)
    return s


class DcgmSampler:
    """Sampler protocol over a DCGM hostengine."""

    name = "dcgm"

    def __init__(self, address: str = "", interval_s: float = 1.0):
        try:
            self.pydcgm, self.structs = pydcgm, structs = import_bindings()
        except ImportError as e:
            raise SamplerUnavailable(f"dcgm: {e}") from None
        addr, unix = parse_address(address)
        self._groups: list[Any] = []
        try:
            kw = {"unixSocketPath": addr} if unix else {"ipAddress": addr}
            self.handle = pydcgm.DcgmHandle(opMode=structs.DCGM_OPERATION_MODE_AUTO, timeoutMs=2000, **kw)
            system = self.handle.GetSystem()
            gpu_ids = list(system.discovery.GetAllSupportedGpuIds())
            if not gpu_ids:
                self.close()
                raise SamplerUnavailable("dcgm: the hostengine sees no supported GPUs")
            name = f"gpuperf_{os.getpid()}"
            self.group = system.GetGroupWithGpuIds(name, gpu_ids)
            keep_s, freq_us = max(60.0, 10 * interval_s), int(interval_s * 1e6)
            self.dev_fg = pydcgm.DcgmFieldGroup(self.handle, name=name + "_dev",
                                                fieldIds=list(DEVICE_FIELDS) + [ENERGY_FIELD, NVML_INDEX_FIELD])
            self.group.samples.WatchFields(self.dev_fg, freq_us, keep_s, 0)
            # no profiling here (consumer GPU, paused for Nsight, another watcher): device fields only
            self.prof_fg = self._watch(name + "_prof", PROF_FIELDS, freq_us, keep_s, "profiling fields")
            self.kind_fg = self._watch(name + "_kind", KIND_FIELDS, freq_us, keep_s,
                                       "per-kind tensor and integer pipe fields") if self.prof_fg else None
            system.UpdateAllFields(True)
            self._index = self._nvml_indices(gpu_ids)
        except structs.DCGMError as e:
            self.close()
            raise SamplerUnavailable(f"dcgm: hostengine at {addr}: {e}") from None

    def _watch(self, name: str, fields: dict[int, tuple[str, float]], freq_us: int, keep_s: float,
               what: str) -> Any:
        """A watched field group, or None (logged) where the hostengine refuses it."""
        fg = None
        try:
            fg = self.pydcgm.DcgmFieldGroup(self.handle, name=name, fieldIds=list(fields))
            self.group.samples.WatchFields(fg, freq_us, keep_s, 0)
            return fg
        except self.structs.DCGMError as e:
            log.get("samplers.dcgm").warning("DCGM %s unavailable: %s", what, e)
            if fg is not None:
                try:
                    fg.Delete()
                except self.structs.DCGMError:
                    pass
            return None

    def _nvml_indices(self, gpu_ids: list[int]) -> dict[int, int]:
        latest = self.group.samples.GetLatest(self.dev_fg).values
        out = {}
        for g in gpu_ids:
            v = latest.get(g, {}).get(NVML_INDEX_FIELD)
            out[g] = int(v[-1].value) if v and not v[-1].isBlank else g
        return out

    def gpu_count(self) -> int:
        """GPUs in the watched group."""
        return len(self._index)

    def sample(self) -> list[GpuSample]:
        """One GetLatest per field group; GPUs in NVML index order."""
        t = time.time()
        per_gpu: dict[int, dict[int, Any]] = {g: {} for g in self._index}
        for fg in (self.dev_fg, self.prof_fg, self.kind_fg):
            if fg is None:
                continue
            try:
                latest = self.group.samples.GetLatest(fg).values
            except self.structs.DCGMError as e:
                log.get("samplers.dcgm").warning("DCGM GetLatest failed: %s", e)
                continue
            for g, fields in latest.items():
                if g in per_gpu:
                    per_gpu[g].update({fid: series[-1] for fid, series in fields.items() if len(series)})
        out = [to_sample(self._index[g], t, vals) for g, vals in per_gpu.items()]
        out.sort(key=lambda s: s.gpu)
        _add_processes(out)
        return out

    def read_energy(self) -> dict[int, float | None]:
        """Latest total-energy reading per GPU (hostengine's), joules."""
        out: dict[int, float | None] = {i: None for i in self._index.values()}
        try:
            latest = self.group.samples.GetLatest(self.dev_fg).values
        except self.structs.DCGMError:
            return out
        for g, fields in latest.items():
            v = fields.get(ENERGY_FIELD)
            if g in self._index and v and not v[-1].isBlank:
                out[self._index[g]] = float(v[-1].value) / 1000.0
        return out

    def close(self) -> None:
        """Delete our field groups and group, and disconnect."""
        for obj in (getattr(self, "kind_fg", None), getattr(self, "prof_fg", None), getattr(self, "dev_fg", None),
                    getattr(self, "group", None)):
            try:
                if obj is not None:
                    obj.Delete()
            except Exception:  # noqa: BLE001 - the hostengine may be gone; nothing to clean up then
                pass
        self.kind_fg = self.prof_fg = self.dev_fg = self.group = None
        h = getattr(self, "handle", None)
        if h is not None:
            try:
                h.Shutdown()
            except Exception:  # noqa: BLE001
                pass
            self.handle = None


def _add_processes(samples: list[GpuSample]) -> None:
    """Running compute processes from NVML (cheap: ~30 us per GPU); nothing when NVML is absent."""
    try:
        m = nvmlq.nvml()
    except nvmlq.NvmlUnavailable:
        return
    for s in samples:
        h = nvmlq.query(m.nvmlDeviceGetHandleByIndex, s.gpu)
        procs = nvmlq.query(m.nvmlDeviceGetComputeRunningProcesses, h) if h is not None else None
        if procs:
            s.processes = [{"pid": int(p.pid), "mem_mib": p.usedGpuMemory / 2**20 if p.usedGpuMemory is not None else None}
                           for p in procs]


def probe(cfg: Any = None, address: str = "") -> str | None:
    """None when the bindings import and a hostengine answers, else the reason."""
    try:
        pydcgm, structs = import_bindings()
    except ImportError as e:
        return str(e)
    addr, unix = parse_address(address)
    try:
        kw = {"unixSocketPath": addr} if unix else {"ipAddress": addr}
        h = pydcgm.DcgmHandle(opMode=structs.DCGM_OPERATION_MODE_AUTO, timeoutMs=1000, **kw)
    except structs.DCGMError as e:
        return f"no hostengine at {addr}: {e}"
    h.Shutdown()
    return None


def register_backend() -> None:
    """Register ``dcgm`` with the sampler registry (auto: preferred when available)."""
    from gpuperf.samplers import register

    def _interval(cfg: Any) -> float:
        return float(cfg.daemon.interval_s) if cfg is not None else 1.0

    register("dcgm", probe, lambda arg, cfg: DcgmSampler(arg, _interval(cfg)), auto_priority=10)
