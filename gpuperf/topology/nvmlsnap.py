"""The live NVML snapshot (``gpuperf.gpus.v1``, docs/CONTRACTS.md): static GPU facts plus health state.

Every NVML call goes through ``gpuperf.access.nvmlq``; NotSupported becomes ``None``. A GPU whose handle
cannot be had is kept as ``{"index": i, "error": "..."}`` so one broken GPU costs only itself.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from gpuperf.access import nvmlq

SCHEMA = "gpuperf.gpus.v1"

_ARCH = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada",
         9: "hopper", 10: "blackwell"}
_REMOTE = {0: "gpu", 1: "ibmnpu", 2: "switch"}
_LINK_ERRORS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))


def norm_bus_id(bus_id: Any) -> str | None:
    """NVML's ``00000000:18:00.0`` (bytes or str) -> sysfs form ``0000:18:00.0``; None when malformed."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    if not isinstance(bus_id, str) or bus_id.count(":") != 2:
        return None
    dom, bus, devfn = bus_id.strip().lower().split(":")
    try:
        return f"{int(dom, 16) & 0xFFFF:04x}:{int(bus, 16):02x}:{devfn}"
    except ValueError:
        return None


def _s(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def empty(error: str | None = None, how: str = "") -> dict[str, Any]:
    """A snapshot with no GPUs; ``error`` says why NVML gave none."""
    snap: dict[str, Any] = {"schema": SCHEMA, "recorded": _now(), "how": how, "driver_version": None,
                            "nvml_version": None, "cuda_driver_version": None, "gpus": []}
    if error:
        snap["error"] = error
    return snap


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def snapshot(health: bool = True, how: str = "") -> dict[str, Any]:
    """Query live NVML; on a machine without NVML a snapshot with ``error`` and no GPUs (never raises)."""
    try:
        m = nvmlq.nvml()
    except nvmlq.NvmlUnavailable as e:
        return empty(f"NVML unavailable: {e}", how)
    q = nvmlq.query
    snap = empty(None, how or f"gpuperf NVML snapshot on {socket.gethostname()}")
    snap["driver_version"] = _s(q("nvmlSystemGetDriverVersion"))
    snap["nvml_version"] = _s(q("nvmlSystemGetNVMLVersion"))
    snap["cuda_driver_version"] = q("nvmlSystemGetCudaDriverVersion")
    count = q("nvmlDeviceGetCount")
    if count is None:
        snap["error"] = "nvmlDeviceGetCount failed"
        return snap
    handles: dict[int, Any] = {}
    for i in range(count):
        try:
            handles[i] = m.nvmlDeviceGetHandleByIndex(i)
        except m.NVMLError as e:
            snap["gpus"].append({"index": i, "error": f"nvmlDeviceGetHandleByIndex: {e}"})
            continue
        try:
            snap["gpus"].append(_gpu(m, i, handles[i], health))
        except Exception as e:  # noqa: BLE001 - one broken GPU must not cost the others
            snap["gpus"].append({"index": i, "error": f"{type(e).__name__}: {e}"})
    _add_p2p(m, snap, handles)
    snap["gpus"].sort(key=lambda g: g["index"])
    return snap


def _gpu(m: Any, i: int, h: Any, health: bool) -> dict[str, Any]:
    q = nvmlq.query
    pci = q("nvmlDeviceGetPciInfo", h)
    cc = q("nvmlDeviceGetCudaComputeCapability", h)
    mem = q("nvmlDeviceGetMemoryInfo", h)
    arch = q("nvmlDeviceGetArchitecture", h)
    numa = q("nvmlDeviceGetNumaNodeId", h)
    g: dict[str, Any] = {
        "index": i,
        "minor": q("nvmlDeviceGetMinorNumber", h),
        "uuid": _s(q("nvmlDeviceGetUUID", h)),
        "name": _s(q("nvmlDeviceGetName", h)),
        "serial": _s(q("nvmlDeviceGetSerial", h)),
        "bus_id": norm_bus_id(getattr(pci, "busId", None)) if pci is not None else None,
        "arch": _ARCH.get(arch) if arch is not None else None,
        "cuda_cc": list(cc) if cc is not None else None,
        "memory_total_mib": mem.total // (1 << 20) if mem is not None else None,
        "numa_node": numa if isinstance(numa, int) and 0 <= numa < 0xFFFF else None,
        "pcie": {"gen": q("nvmlDeviceGetCurrPcieLinkGeneration", h),
                 "width": q("nvmlDeviceGetCurrPcieLinkWidth", h),
                 "max_gen": q("nvmlDeviceGetMaxPcieLinkGeneration", h),
                 "max_width": q("nvmlDeviceGetMaxPcieLinkWidth", h)},
        "nvlink": _nvlink(m, h, health),
    }
    if health:
        g.update(_health(m, h))
    return g


def _nvlink(m: Any, h: Any, health: bool) -> dict[str, Any]:
    q = nvmlq.query
    links = []
    for link in range(getattr(m, "NVML_NVLINK_MAX_LINKS", 18)):
        state = q("nvmlDeviceGetNvLinkState", h, link)
        if state is None:  # NotSupported (no NVLink) or InvalidArgument (past the last link)
            if link >= 18:
                break
            continue
        entry: dict[str, Any] = {"link": link, "active": bool(state), "remote_bus_id": None, "remote_type": None}
        if state:
            rtype = q("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            entry["remote_type"] = _REMOTE.get(rtype) if rtype is not None else None
            rpci = q("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            entry["remote_bus_id"] = norm_bus_id(getattr(rpci, "busId", None)) if rpci is not None else None
        if health:
            entry["errors"] = {name: q("nvmlDeviceGetNvLinkErrorCounter", h, link, c) for name, c in _LINK_ERRORS}
        links.append(entry)
    return {"links_total": len(links), "links_active": sum(1 for e in links if e["active"]), "links": links}


def _health(m: Any, h: Any) -> dict[str, Any]:
    q = nvmlq.query
    ecc_mode = q("nvmlDeviceGetEccMode", h)
    ecc = None
    if ecc_mode is not None:
        unc, cor = getattr(m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), getattr(m, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        vol, agg = getattr(m, "NVML_VOLATILE_ECC", 0), getattr(m, "NVML_AGGREGATE_ECC", 1)
        ecc = {"enabled": bool(ecc_mode[0]),
               "volatile_uncorrected": q("nvmlDeviceGetTotalEccErrors", h, unc, vol),
               "volatile_corrected": q("nvmlDeviceGetTotalEccErrors", h, cor, vol),
               "aggregate_uncorrected": q("nvmlDeviceGetTotalEccErrors", h, unc, agg)}
    rr = q("nvmlDeviceGetRemappedRows", h)
    row_remap = None
    if rr is not None:
        row_remap = {"correctable": rr[0], "uncorrectable": rr[1], "pending": bool(rr[2]), "failure": bool(rr[3])}
    retired = None
    pending = q("nvmlDeviceGetRetiredPagesPendingStatus", h)
    if pending is not None:
        sbe = q("nvmlDeviceGetRetiredPages", h, getattr(m, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
        dbe = q("nvmlDeviceGetRetiredPages", h, getattr(m, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
        retired = {"pending": bool(pending), "sbe": len(sbe) if sbe is not None else None,
                   "dbe": len(dbe) if dbe is not None else None}
    persistence = q("nvmlDeviceGetPersistenceMode", h)
    throttle = q("nvmlDeviceGetCurrentClocksEventReasons", h)
    if throttle is None:
        throttle = q("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    util = q("nvmlDeviceGetUtilizationRates", h)
    limit_mw = q("nvmlDeviceGetEnforcedPowerLimit", h)
    return {
        "persistence_mode": bool(persistence) if persistence is not None else None,
        "ecc": ecc, "row_remap": row_remap, "retired_pages": retired,
        "throttle_reasons": throttle,
        "util_gpu_pct": util.gpu if util is not None else None,
        "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
        "temp_c": q("nvmlDeviceGetTemperature", h, getattr(m, "NVML_TEMPERATURE_GPU", 0)),
    }


def _add_p2p(m: Any, snap: dict[str, Any], handles: dict[int, Any]) -> None:
    """``nvlink_p2p``: GPUs NVML reports NVLink P2P OK with (a cross-check when remote link types are unknown)."""
    nvl = getattr(m, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    ok = getattr(m, "NVML_P2P_STATUS_OK", 0)
    by_index = {g["index"]: g for g in snap["gpus"] if "error" not in g}
    for i, g in by_index.items():
        if not g["nvlink"]["links_active"]:
            g["nvlink_p2p"] = []
            continue
        peers: list[int] | None = []
        for j in sorted(by_index):
            if j == i:
                continue
            status = nvmlq.query("nvmlDeviceGetP2PStatus", handles[i], handles[j], nvl)
            if status is None:
                peers = None
                break
            if status == ok:
                peers.append(j)
        g["nvlink_p2p"] = peers
