"""PCI devices in sysfs: link speed/width, NUMA, local CPUs, the bridge path to the root port and ACS state."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from gpuperf.topology.sysfs import Root, is_bdf, numa_or_none, parse_cpulist

ACS_CAP_ID = 0x000D
# ACS Control register bits (PCIe base spec, ACS Extended Capability, offset 6)
ACS_BITS = (("SrcValid", 0x01), ("TransBlk", 0x02), ("ReqRedir", 0x04), ("CmpltRedir", 0x08),
            ("UpstreamFwd", 0x10), ("EgressCtrl", 0x20), ("DirectTrans", 0x40))
# the bits that send peer-to-peer traffic up to the root complex (what NCCL warns about)
ACS_P2P_MASK = 0x01 | 0x04 | 0x08 | 0x10
_EXT_CFG_SIZE = 4096
_GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
_SPEED = re.compile(r"^\s*([0-9.]+)\s*GT/s")


@dataclass(frozen=True)
class Acs:
    """ACS state of one bridge: ``ctrl`` the control register (None: unknown or no capability)."""

    ctrl: int | None
    enabled: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The ``pcie_paths`` entry fields."""
        flags = None if self.ctrl is None else [n for n, bit in ACS_BITS if self.ctrl & bit]
        return {"acs_enabled": self.enabled, "acs_ctrl": None if self.ctrl is None else f"0x{self.ctrl:04x}",
                "acs_flags": flags}


def parse_acs(config: bytes | None) -> Acs:
    """PCI config space bytes -> ACS state. Only the 256-byte header (non-root read, truncated file): unknown.

    A full extended space without an ACS capability means ACS cannot redirect: enabled False.
    """
    if config is None or len(config) < _EXT_CFG_SIZE:
        return Acs(None, None)
    off, seen = 0x100, set()
    while off and off not in seen and 0x100 <= off <= _EXT_CFG_SIZE - 8:
        seen.add(off)
        hdr = int.from_bytes(config[off:off + 4], "little")
        if hdr in (0, 0xFFFFFFFF):
            break
        if hdr & 0xFFFF == ACS_CAP_ID:
            ctrl = int.from_bytes(config[off + 6:off + 8], "little")
            return Acs(ctrl, bool(ctrl & ACS_P2P_MASK))
        off = (hdr >> 20) & 0xFFC
    return Acs(None, False)


def link_gen(speed: str | None) -> int | None:
    """sysfs ``current_link_speed`` (``32.0 GT/s PCIe``) -> PCIe generation; None if unknown."""
    m = _SPEED.match(speed or "")
    if not m:
        return None
    try:
        return _GT_TO_GEN.get(float(m.group(1)))
    except ValueError:
        return None


def link_width(text: str | None) -> int | None:
    """sysfs ``current_link_width`` -> lanes; None for missing, garbage or 0 (link down/unknown)."""
    try:
        w = int((text or "").strip())
    except ValueError:
        return None
    return w if 0 < w <= 32 else None


@dataclass
class PciDevice:
    """What sysfs says about one PCI function."""

    bus_id: str
    numa_node: int | None
    cpus: list[int] | None
    gen: int | None
    width: int | None
    max_gen: int | None
    max_width: int | None
    bridges: list[str] | None  # bus ids from the device's parent up to the root port; None: not in sysfs
    driver: str | None


def read_device(root: Root, bus_id: str) -> PciDevice:
    """Read a PCI function by bus id (``0000:18:00.0``); every field None when sysfs lacks it."""
    d = ("sys/bus/pci/devices", bus_id)
    bridges = bridges_of(root, bus_id)
    return PciDevice(
        bus_id=bus_id,
        numa_node=numa_or_none(root.read_int(*d, "numa_node")),
        cpus=parse_cpulist(root.read(*d, "local_cpulist")),
        gen=link_gen(root.read(*d, "current_link_speed")),
        width=link_width(root.read(*d, "current_link_width")),
        max_gen=link_gen(root.read(*d, "max_link_speed")),
        max_width=link_width(root.read(*d, "max_link_width")),
        bridges=bridges,
        driver=root.link_name(*d, "driver"),
    )


def bridges_of(root: Root, bus_id: str) -> list[str] | None:
    """Bridges from a PCI function up to its root port (nearest first); None when sysfs lacks the device."""
    real = root.realpath("sys/bus/pci/devices", bus_id)
    return None if real is None else bridge_chain(root.rel(real))


def bridge_chain(rel_devpath: str) -> list[str]:
    """``sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0`` -> parents nearest first, root port last."""
    parts = [p for p in rel_devpath.split(os.sep) if is_bdf(p)]
    return list(reversed(parts[:-1]))


def bridge_acs(root: Root, bus_id: str) -> Acs:
    """ACS state of a bridge from its config space."""
    return parse_acs(root.read_bytes("sys/bus/pci/devices", bus_id, "config"))


def find_nvidia_gpus(root: Root) -> list[str]:
    """Bus ids of NVIDIA display/3D controllers in sysfs (used only when NVML gives no GPUs)."""
    found = []
    for bdf in root.listdir("sys/bus/pci/devices"):
        if root.read("sys/bus/pci/devices", bdf, "vendor") != "0x10de":
            continue
        cls = root.read_int("sys/bus/pci/devices", bdf, "class", base=16)
        if cls is not None and cls >> 8 in (0x0300, 0x0302):
            found.append(bdf)
    return found
