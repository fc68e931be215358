"""Network adapters: RDMA devices (``class/infiniband``: IB, RoCE, EFA) and plain Ethernet (``class/net``)."""

from __future__ import annotations

import re
from typing import Any

from gpuperf.topology.sysfs import Root, is_bdf, numa_or_none

_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_ARPHRD_ETHER = 1


def parse_ib_rate(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0; None when missing or malformed."""
    m = _RATE.match(text or "")
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def parse_ib_state(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``; None when missing or malformed."""
    if not text or ":" not in text:
        return None
    state = text.split(":", 1)[1].strip()
    return state or None


def _nic_kind(link_layer: str | None, driver: str | None, name: str) -> str | None:
    if driver == "efa" or name.startswith("efa"):
        return "efa"
    if link_layer == "InfiniBand":
        return "ib"
    if link_layer == "Ethernet":
        return "roce"
    return None


def rocev2_gid_index(root: Root, dev: str, port: str) -> int | None:
    """The first populated RoCE v2 GID, preferring IPv4-mapped ones (what NCCL picks); None if none."""
    base = ("sys/class/infiniband", dev, "ports", port)
    v4: list[int] = []
    other: list[int] = []
    for name in root.listdir(*base, "gids"):
        if not name.isdigit():
            continue
        gid = root.read(*base, "gids", name)
        if not gid or gid == _ZERO_GID:
            continue
        if root.read(*base, "gid_attrs", "types", name) != "RoCE v2":
            continue
        (v4 if gid.startswith("0000:0000:0000:0000:0000:ffff:") else other).append(int(name))
    found = sorted(v4) or sorted(other)
    return found[0] if found else None


def _pci_of(root: Root, *link: str) -> str | None:
    real = root.realpath(*link)
    if real is None:
        return None
    # virtio NICs hang below their PCI function (.../0000:00:03.0/virtio0): the nearest PCI address
    bdfs = [part for part in real.split("/") if is_bdf(part)]
    return bdfs[-1] if bdfs else None


def rdma_nics(root: Root) -> list[dict[str, Any]]:
    """One entry per port of every RDMA device."""
    out = []
    for dev in root.listdir("sys/class/infiniband"):
        base = ("sys/class/infiniband", dev)
        bus_id = _pci_of(root, *base, "device")
        netdevs = root.listdir(*base, "device", "net")
        driver = root.link_name(*base, "device", "driver")
        numa = numa_or_none(root.read_int(*base, "device", "numa_node"))
        ports = [p for p in root.listdir(*base, "ports") if p.isdigit()] or [None]
        for port in ports:
            p = (*base, "ports", port) if port else None
            link_layer = root.read(*p, "link_layer") if p else None
            kind = _nic_kind(link_layer, driver, dev)
            out.append({
                "name": dev, "kind": kind,
                "netdev": netdevs[0] if netdevs else None,
                "state": parse_ib_state(root.read(*p, "state")) if p else None,
                "rate_gbps": parse_ib_rate(root.read(*p, "rate")) if p else None,
                "numa_node": numa, "bus_id": bus_id,
                "port": int(port) if port else None,
                "gid_index_rocev2": rocev2_gid_index(root, dev, port) if kind == "roce" and port else None,
            })
    return out


def ethernet_nics(root: Root, taken: set[str]) -> list[dict[str, Any]]:
    """Physical Ethernet interfaces (with a ``device``) not already listed as an RDMA device's netdev."""
    out = []
    for ifname in root.listdir("sys/class/net"):
        if ifname in taken:
            continue
        base = ("sys/class/net", ifname)
        if root.realpath(*base, "device") is None or root.read_int(*base, "type") != _ARPHRD_ETHER:
            continue
        bus_id = _pci_of(root, *base, "device")
        speed = root.read_int(*base, "speed")  # Mb/s; -1 or unreadable while the link is down
        oper = root.read(*base, "operstate")
        out.append({
            "name": ifname, "kind": "ethernet", "netdev": ifname,
            "state": oper.upper() if oper else None,
            "rate_gbps": speed / 1000.0 if speed is not None and speed > 0 else None,
            "numa_node": numa_or_none(root.read_int("sys/bus/pci/devices", bus_id, "numa_node")) if bus_id else None,
            "bus_id": bus_id,
            "port": None, "gid_index_rocev2": None,
        })
    return out


def nics(root: Root, ipv4: dict[str, list[str]] | None) -> list[dict[str, Any]]:
    """All NICs, RDMA first, each with its IPv4 addresses (None when addresses are unknown)."""
    rdma = rdma_nics(root)
    taken = {n["netdev"] for n in rdma if n["netdev"]}
    found = rdma + ethernet_nics(root, taken)
    for n in found:
        n["ipv4"] = None if ipv4 is None else (ipv4.get(n["netdev"], []) if n["netdev"] else [])
    return found
