"""Build the node topology (``gpuperf.topology.v1``, docs/CONTRACTS.md) from a sysfs root and an NVML snapshot.

GPU facts come from the snapshot; NUMA, CPUs, NICs, PCIe paths and ACS from sysfs. Whatever cannot be
read is ``None`` and, where it matters, explained in ``notes``.
"""

from __future__ import annotations

import re
from typing import Any

from gpuperf.topology import netaddr, nics, pcie
from gpuperf.topology.sysfs import Root, is_bdf, parse_cpulist

SCHEMA = "gpuperf.topology.v1"
_NODE_DIR = re.compile(r"^node(\d+)$")
_CPU_DIR = re.compile(r"^cpu(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def numa_nodes(root: Root) -> list[dict[str, Any]]:
    """NUMA nodes with their CPUs and memory."""
    out = []
    base = "sys/devices/system/node"
    for name in root.listdir(base):
        m = _NODE_DIR.match(name)
        if not m:
            continue
        mem = _MEMTOTAL.search(root.read(base, name, "meminfo") or "")
        out.append({"id": int(m.group(1)), "cpus": parse_cpulist(root.read(base, name, "cpulist")),
                    "mem_total_mib": int(mem.group(1)) // 1024 if mem else None})
    return sorted(out, key=lambda n: n["id"])


def cpus(root: Root) -> dict[str, Any]:
    """Online CPUs and each one's SMT siblings."""
    base = "sys/devices/system/cpu"
    online = parse_cpulist(root.read(base, "online"))
    siblings: dict[str, list[int] | None] = {}
    for cpu in online or []:
        siblings[str(cpu)] = parse_cpulist(root.read(base, f"cpu{cpu}", "topology", "thread_siblings_list"))
    return {"online": online, "siblings": siblings}


def nvlink_view(snap_gpus: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per GPU index: ``links`` (active), ``via_switch`` and ``peers`` from the snapshot's per-link records.

    A link to a GPU names its peer by bus id; a link to an NVSwitch reaches every GPU that also has an
    active switch link. When an active link's remote type is unknown, NVML's NVLink P2P status
    (``nvlink_p2p``) decides, else peers are unknown.
    """
    by_bus = {g.get("bus_id"): g["index"] for g in snap_gpus if g.get("bus_id")}
    info: dict[int, dict[str, Any]] = {}
    for g in snap_gpus:
        nv = g.get("nvlink") if "error" not in g else None
        if not isinstance(nv, dict) or not isinstance(nv.get("links"), list):
            info[g["index"]] = {"links": None, "via_switch": None, "peers": None, "_types": None, "_gpu_peers": set()}
            continue
        active = [lk for lk in nv["links"] if isinstance(lk, dict) and lk.get("active")]
        types = {lk.get("remote_type") for lk in active}
        gpu_peers = {by_bus.get(lk.get("remote_bus_id")) for lk in active if lk.get("remote_type") == "gpu"}
        info[g["index"]] = {"links": len(active), "_types": types, "_gpu_peers": gpu_peers,
                            "_p2p": g.get("nvlink_p2p")}
    switched = {i for i, v in info.items() if v["_types"] and "switch" in v["_types"]}
    for i, v in info.items():
        types = v.pop("_types")
        gpu_peers = v.pop("_gpu_peers")
        p2p = v.pop("_p2p", None)
        if types is None:
            continue
        if not types:
            v.update(via_switch=False, peers=[])
            continue
        v["via_switch"] = True if "switch" in types else (None if None in types else False)
        if None in types or None in gpu_peers:
            v["peers"] = sorted(p2p) if isinstance(p2p, list) else None
            continue
        reach = set(gpu_peers) | (switched if "switch" in types else set())
        v["peers"] = sorted(reach - {i})
    return info


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _gpu_entry(g: dict[str, Any], dev: pcie.PciDevice | None, nvl: dict[str, Any]) -> dict[str, Any]:
    """One GPU: NVML facts, sysfs filling what NVML does not know (NUMA, local CPUs, PCIe link).

    Values of the wrong type in a (hand-edited, corrupt) gpus.json count as unknown.
    """
    snap_pcie = g.get("pcie") if isinstance(g.get("pcie"), dict) else {}
    link = {k: _int(snap_pcie.get(k)) for k in ("gen", "width", "max_gen", "max_width")}
    if dev is not None:
        for k in link:
            if link[k] is None:
                link[k] = getattr(dev, k)
    numa = _int(g.get("numa_node"))
    if numa is None and dev is not None:
        numa = dev.numa_node
    return {
        "index": g["index"], "minor": _int(g.get("minor")), "uuid": _str(g.get("uuid")), "name": _str(g.get("name")),
        "bus_id": g["bus_id"] if isinstance(g.get("bus_id"), str) and is_bdf(g["bus_id"]) else None, "arch": _str(g.get("arch")), "numa_node": numa,
        "cpus": dev.cpus if dev is not None else None,
        "memory_total_mib": _int(g.get("memory_total_mib")),
        "pcie": link,
        "nvlink": {"links": nvl.get("links"), "via_switch": nvl.get("via_switch"), "peers": nvl.get("peers")},
    }


def _snapshot_gpus(snap: dict[str, Any] | None, root: Root, notes: list[str]) -> list[dict[str, Any]]:
    """Valid per-GPU snapshot records; GPUs found only in sysfs when the snapshot has none."""
    if snap is not None and snap.get("error"):
        notes.append(f"NVML: {snap['error']}")
    raw = snap.get("gpus") if isinstance(snap, dict) else None
    good = []
    for i, g in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(g, dict) or not isinstance(g.get("index"), int):
            notes.append(f"gpus.json: GPU record {i} has no integer index; skipped")
            continue
        if g.get("error"):
            notes.append(f"GPU {g['index']}: NVML error: {g['error']}")
        good.append(g)
    if not good and not (isinstance(raw, list) and raw):
        found = pcie.find_nvidia_gpus(root)
        if found:
            notes.append(f"{len(found)} NVIDIA GPU(s) found in sysfs only: index is PCI order, NVML facts unknown")
        good = [{"index": i, "bus_id": b, "_sysfs_only": True} for i, b in enumerate(found)]
    return sorted(good, key=lambda g: g["index"])


def _path(root: Root, bridges: list[str] | None, acs_cache: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    if bridges is None:
        return None
    out = []
    for b in bridges:
        if b not in acs_cache:
            acs_cache[b] = pcie.bridge_acs(root, b).to_dict()
        out.append({"bus_id": b, **acs_cache[b]})
    return out


def _gdr(root: Root) -> dict[str, Any]:
    if not root.exists("sys/module"):
        return {"module": None, "loaded": None}
    for mod in ("nvidia_peermem", "nv_peer_mem"):
        if root.exists("sys/module", mod):
            root.read("sys/module", mod, "initstate")  # recorded so the fixture keeps the directory
            return {"module": mod, "loaded": True}
    return {"module": "nvidia_peermem", "loaded": False}


_NVFS_VERSION = re.compile(r"NVFS Driver\(version:\s*([0-9][0-9:.]*)\)")


def _gds(root: Root) -> dict[str, Any]:
    """GPUDirect Storage: NVIDIA's nvidia-fs kernel module (``/sys/module/nvidia_fs``), with its version from
    ``/proc/driver/nvidia-fs/stats`` ("NVFS Driver(version: 2:7:47)", NVIDIA's GDS troubleshooting guide)."""
    if not root.exists("sys/module"):
        return {"module": None, "loaded": None}
    if not root.exists("sys/module", "nvidia_fs"):
        return {"module": "nvidia_fs", "loaded": False}
    root.read("sys/module", "nvidia_fs", "initstate")  # recorded so the fixture keeps the directory
    out: dict[str, Any] = {"module": "nvidia_fs", "loaded": True}
    m = _NVFS_VERSION.search(root.read("proc/driver/nvidia-fs/stats") or "")
    if m:
        out["version"] = m.group(1).replace(":", ".")
    return out


def discover(root: Root, snap: dict[str, Any] | None, source: str = "live") -> dict[str, Any]:
    """The whole topology dict of the node behind ``root`` and ``snap`` (the gpus.json dict, or None)."""
    notes: list[str] = []
    if not root.live and not root.exists("sys"):
        notes.append(f"{root.base} has no sys/ directory: not a recorded node")
    snap_gpus = _snapshot_gpus(snap, root, notes)
    nvl = nvlink_view([g for g in snap_gpus if not g.get("_sysfs_only")])
    acs_cache: dict[str, dict[str, Any]] = {}
    gpus, paths = [], {}
    for g in snap_gpus:
        bus = g.get("bus_id")
        dev = pcie.read_device(root, bus) if isinstance(bus, str) and is_bdf(bus) else None
        if dev is not None and dev.bridges is None:
            notes.append(f"GPU {g['index']}: bus id {bus} not found in sysfs")
        gpus.append(_gpu_entry(g, dev, nvl.get(g["index"], {})))
        if dev is not None:
            paths[f"gpu:{g['index']}"] = _path(root, dev.bridges, acs_cache)
    found_nics = nics.nics(root, netaddr.ipv4(root))
    for n in found_nics:
        if n["bus_id"] and f"nic:{n['name']}" not in paths:
            paths[f"nic:{n['name']}"] = _path(root, pcie.bridges_of(root, n["bus_id"]), acs_cache)
    driver = (snap or {}).get("driver_version") if isinstance(snap, dict) else None
    # always read: keeps sys/module non-empty in recordings (git drops empty directories) and is the fallback
    driver_sysfs = root.read("sys/module/nvidia/version")
    return {
        "schema": SCHEMA,
        "hostname": root.read("proc/sys/kernel/hostname"),
        "source": source,
        "driver_version": driver or driver_sysfs,
        "gpus": gpus,
        "numa_nodes": numa_nodes(root),
        "cpus": cpus(root),
        "nics": found_nics,
        "pcie_paths": paths,
        "gdr": _gdr(root),
        "gds": _gds(root),
        "notes": notes,
    }
