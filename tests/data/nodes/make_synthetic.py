#!/usr/bin/env python3
"""Build the synthetic recorded nodes ``hgx-h100-2s`` and ``pcie-l40s-2s`` (sysfs subset + gpus.json + net.json).

Reproducible: same output every run. Usage: ``python3 tests/data/nodes/make_synthetic.py [OUTDIR]``
(default: the directory of this script). The trees have the layout ``gpuperf topology --record`` writes,
built from public facts about these servers (see README.md beside this file).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from typing import Callable

DRIVER = "580.159.04"
NVML = "13.580.159.04"
ZERO_ERRORS = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


class Tree:
    """Writes files and relative symlinks under one recorded-node directory."""

    def __init__(self, dest: str):
        self.dest = dest

    def file(self, rel: str, content: str | bytes) -> None:
        p = os.path.join(self.dest, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = content if isinstance(content, bytes) else (content + "\n").encode()
        with open(p, "wb") as f:
            f.write(data)

    def files(self, rel: str, values: dict[str, str | bytes]) -> None:
        for name, value in values.items():
            self.file(os.path.join(rel, name), value)

    def link(self, rel: str, target_rel: str) -> None:
        """Symlink at ``rel`` pointing (relatively, like sysfs) to ``target_rel``; both relative to the tree."""
        p = os.path.join(self.dest, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(self.dest, target_rel), os.path.dirname(p)), p)

    def json(self, rel: str, obj: object) -> None:
        self.file(rel, json.dumps(obj, indent=1))


def config_space(vendor: int, device: int, cls: int, acs_ctrl: int | None) -> bytes:
    """4 KiB PCI config space: header ids and class, AER at 0x100, then ACS (when given) at 0x148."""
    c = bytearray(4096)
    c[0:2], c[2:4] = vendor.to_bytes(2, "little"), device.to_bytes(2, "little")
    c[9:12] = cls.to_bytes(3, "little")
    c[0x0E] = 0x01 if cls >> 8 == 0x0604 else 0x00  # header type 1 for bridges
    nxt = 0x148 if acs_ctrl is not None else 0
    c[0x100:0x104] = (0x0001 | (2 << 16) | (nxt << 20)).to_bytes(4, "little")  # AER, version 2
    if acs_ctrl is not None:
        c[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, version 1, last
        c[0x14C:0x14E] = (0x005F).to_bytes(2, "little")  # capability: SV TB RR CR UF DT
        c[0x14E:0x150] = acs_ctrl.to_bytes(2, "little")
    return bytes(c)


def cpulist(cpus: list[int]) -> str:
    out, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [-2]:
        if c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(out)


def cpus_and_numa(t: Tree, cores_per_socket: int, sockets: int, mem_kib_per_node: int) -> dict[int, list[int]]:
    """Intel numbering: physical cores first, then their hyperthreads; one NUMA node per socket."""
    cores = cores_per_socket * sockets
    total = cores * 2
    node_cpus: dict[int, list[int]] = {}
    for s in range(sockets):
        first = list(range(s * cores_per_socket, (s + 1) * cores_per_socket))
        node_cpus[s] = first + [c + cores for c in first]
        base = f"sys/devices/system/node/node{s}"
        t.file(f"{base}/cpulist", cpulist(node_cpus[s]))
        t.file(f"{base}/meminfo", f"Node {s} MemTotal:       {mem_kib_per_node} kB\nNode {s} MemFree:        {mem_kib_per_node - 9_000_000} kB")
    t.file("sys/devices/system/node/online", f"0-{sockets - 1}")
    t.file("sys/devices/system/cpu/online", f"0-{total - 1}")
    for c in range(total):
        core = c % cores
        t.file(f"sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list", f"{core},{core + cores}")
    return node_cpus


def pci(t: Tree, chain: list[str], attrs: dict[str, str | bytes], driver: str | None = None) -> str:
    """A PCI function at the end of ``chain`` (host bridge dir, then bus ids); its sysfs dir."""
    rel = "sys/devices/" + "/".join(chain)
    t.files(rel, attrs)
    t.link(f"sys/bus/pci/devices/{chain[-1]}", rel)
    if driver:
        os.makedirs(os.path.join(t.dest, f"sys/bus/pci/drivers/{driver}"), exist_ok=True)
        t.file(f"sys/bus/pci/drivers/{driver}/uevent", f"DRIVER={driver}")
        t.link(f"{rel}/driver", f"sys/bus/pci/drivers/{driver}")
    return rel


def bridge(t: Tree, chain: list[str], numa: int, cpus: list[int], gen: int = 5, acs_ctrl: int = 0x0000) -> None:
    """A PCIe root port or switch port with ACS in its config space."""
    speed = {4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}[gen]
    pci(t, chain, {"vendor": "0x1000", "device": "0xc030", "class": "0x060400", "numa_node": str(numa),
                   "local_cpulist": cpulist(cpus), "current_link_speed": speed, "current_link_width": "16",
                   "max_link_speed": speed, "max_link_width": "16",
                   "config": config_space(0x1000, 0xC030, 0x060400, acs_ctrl)}, driver="pcieport")


def endpoint(t: Tree, chain: list[str], vendor: int, device: int, cls: int, numa: int, cpus: list[int],
             gen: int, driver: str) -> str:
    speed = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}[gen]
    return pci(t, chain, {"vendor": f"0x{vendor:04x}", "device": f"0x{device:04x}", "class": f"0x{cls:06x}",
                          "numa_node": str(numa), "local_cpulist": cpulist(cpus), "current_link_speed": speed,
                          "current_link_width": "16", "max_link_speed": speed, "max_link_width": "16"}, driver=driver)


def gid_v4(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def rdma(t: Tree, devrel: str, name: str, netdev: str, link_layer: str, rate: str, gids: list[tuple[str, str]],
         net_type: int, speed_mbps: int | None) -> None:
    """An mlx5 RDMA device with port 1 and its netdev, linked from class/infiniband and class/net."""
    ib = f"{devrel}/infiniband/{name}"
    t.link(f"sys/class/infiniband/{name}", ib)
    t.link(f"{ib}/device", devrel)
    port = f"{ib}/ports/1"
    t.files(port, {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": rate, "link_layer": link_layer})
    for i, (gid, gtype) in enumerate(gids):
        t.file(f"{port}/gids/{i}", gid)
        if gtype:
            t.file(f"{port}/gid_attrs/types/{i}", gtype)
            t.file(f"{port}/gid_attrs/ndevs/{i}", netdev)
    nd = f"{devrel}/net/{netdev}"
    t.link(f"sys/class/net/{netdev}", nd)
    t.link(f"{nd}/device", devrel)
    attrs = {"type": str(net_type), "operstate": "up"}
    if speed_mbps:
        attrs["speed"] = str(speed_mbps)
    t.files(nd, attrs)


def plain_nic(t: Tree, devrel: str, netdev: str, speed_mbps: int) -> None:
    nd = f"{devrel}/net/{netdev}"
    t.link(f"sys/class/net/{netdev}", nd)
    t.link(f"{nd}/device", devrel)
    t.files(nd, {"type": "1", "operstate": "up", "speed": str(speed_mbps)})
    t.link("sys/class/net/lo", "sys/devices/virtual/net/lo")
    t.files("sys/devices/virtual/net/lo", {"type": "772", "operstate": "unknown"})


def uuid(name: str, i: int) -> str:
    h = hashlib.sha256(f"{name}/{i}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_record(node: str, i: int, bus: str, name: str, arch: str, cc: list[int], mem_mib: int, numa: int | None,
               gen: int, power_w: float, nvlink: dict, peers: list[int]) -> dict:
    return {
        "index": i, "minor": i, "uuid": uuid(node, i), "name": name, "serial": f"16523{i:08d}", "bus_id": bus,
        "arch": arch, "cuda_cc": cc, "memory_total_mib": mem_mib, "numa_node": numa,
        "pcie": {"gen": gen, "width": 16, "max_gen": gen, "max_width": 16},
        "nvlink": nvlink, "nvlink_p2p": peers,
        "persistence_mode": True,
        "ecc": {"enabled": True, "volatile_uncorrected": 0, "volatile_corrected": 0, "aggregate_uncorrected": 0},
        "row_remap": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": None,  # NotSupported on Hopper and Ada (row remapping replaced it)
        "throttle_reasons": 1, "util_gpu_pct": 0, "power_limit_w": power_w, "temp_c": 31 + i,
    }


def snapshot(node: str, gpus: list[dict]) -> dict:
    return {"schema": "gpuperf.gpus.v1", "recorded": "2026-11-21T12:00:00Z",
            "how": f"synthetic: tests/data/nodes/make_synthetic.py ({node})",
            "driver_version": DRIVER, "nvml_version": NVML, "cuda_driver_version": 13000, "gpus": gpus}


def common(t: Tree, hostname: str, peermem: bool) -> None:
    t.file("proc/sys/kernel/hostname", hostname)
    t.file("sys/module/nvidia/version", DRIVER)
    if peermem:
        t.file("sys/module/nvidia_peermem/initstate", "live")


def hgx_h100(dest: str) -> None:
    """HGX H100 8-GPU: 2 sockets, 4 PCIe switches each with 2 GPUs + 2 CX-7 NDR NICs, 4 NVSwitches."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=56, sockets=2, mem_kib_per_node=1_056_462_232)
    common(t, "hgx-h100-01", peermem=True)
    nvswitch_bus = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    switch_of_link = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5
    gpus, ipv4 = [], {}
    gpu_index = 0
    for sw, b in enumerate([0x15, 0x37, 0x97, 0xB7]):
        numa = 0 if sw < 2 else 1
        cpus = node_cpus[numa]
        host, rp, usp = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        bridge(t, [host, rp], numa, cpus)
        bridge(t, [host, rp, usp], numa, cpus)
        for j in range(4):
            dsp, ep = f"0000:{b + 2:02x}:{j:02x}.0", f"0000:{b + 3 + j:02x}:00.0"
            bridge(t, [host, rp, usp, dsp], numa, cpus)
            chain = [host, rp, usp, dsp, ep]
            if j % 2 == 0:
                endpoint(t, chain, 0x10DE, 0x2330, 0x030200, numa, cpus, 5, "nvidia")
                links = [{"link": k, "active": True, "remote_bus_id": nvswitch_bus[switch_of_link[k]],
                          "remote_type": "switch", "errors": dict(ZERO_ERRORS)} for k in range(18)]
                gpus.append(gpu_record("hgx-h100-2s", gpu_index, ep, "NVIDIA H100 80GB HBM3", "hopper", [9, 0],
                                       81559, numa, 5, 700.0,
                                       {"links_total": 18, "links_active": 18, "links": links},
                                       [k for k in range(8) if k != gpu_index]))
                gpu_index += 1
            else:
                n = len(ipv4)
                rel = endpoint(t, chain, 0x15B3, 0x1021, 0x020700, numa, cpus, 5, "mlx5_core")
                netdev = f"ibp{b + 3 + j}s0"
                rdma(t, rel, f"mlx5_{n}", netdev, "InfiniBand", "400 Gb/sec (4X NDR)",
                     [(f"fe80:0000:0000:0000:a088:c203:00{n:02x}:{0x3e00 + n:04x}", "")], 32, None)
                ipv4[netdev] = [f"10.20.{n}.11"]
    # onboard 10GbE management port behind a root port of socket 0
    bridge(t, ["pci0000:00", "0000:00:1c.0"], 0, node_cpus[0], gen=4)
    rel = endpoint(t, ["pci0000:00", "0000:00:1c.0", "0000:04:00.0"], 0x14E4, 0x16D8, 0x020000, 0, node_cpus[0], 3, "bnxt_en")
    plain_nic(t, rel, "eno1np0", 10000)
    ipv4["eno1np0"] = ["10.0.0.11"]
    t.json("gpus.json", snapshot("hgx-h100-2s", gpus))
    t.json("net.json", {"ipv4": ipv4})


def pcie_l40s(dest: str) -> None:
    """4 PCIe L40S on their own root ports (2 per socket), one ConnectX-6 Dx 100GbE RoCE NIC, no NVLink."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=32, sockets=2, mem_kib_per_node=263_841_236)
    common(t, "l40s-01", peermem=False)
    gpus = []
    for i, b in enumerate([0x16, 0x38, 0x98, 0xB8]):
        numa = 0 if i < 2 else 1
        host, rp, ep = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        bridge(t, [host, rp], numa, node_cpus[numa], gen=4)
        endpoint(t, [host, rp, ep], 0x10DE, 0x26B9, 0x030200, numa, node_cpus[numa], 4, "nvidia")
        # numa_node null: this driver's NVML reports NotSupported, so sysfs supplies it
        gpus.append(gpu_record("pcie-l40s-2s", i, ep, "NVIDIA L40S", "ada", [8, 9], 46068, None, 4, 350.0,
                               {"links_total": 0, "links_active": 0, "links": []}, []))
    host, rp, ep = "pci0000:4a", "0000:4a:01.0", "0000:4b:00.0"
    bridge(t, [host, rp], 0, node_cpus[0], gen=4)
    rel = endpoint(t, [host, rp, ep], 0x15B3, 0x101D, 0x020000, 0, node_cpus[0], 4, "mlx5_core")
    ip = "10.10.0.21"
    ll = "fe80:0000:0000:0000:0a5c:d8ff:fe4e:9a10"
    rdma(t, rel, "mlx5_0", "ens1f0np0", "Ethernet", "100 Gb/sec (4X EDR)",
         [(ll, "IB/RoCE v1"), (ll, "RoCE v2"), (gid_v4(ip), "IB/RoCE v1"), (gid_v4(ip), "RoCE v2")], 1, 100000)
    bridge(t, ["pci0000:00", "0000:00:1c.0"], 0, node_cpus[0], gen=4)
    rel = endpoint(t, ["pci0000:00", "0000:00:1c.0", "0000:04:00.0"], 0x8086, 0x1533, 0x020000, 0, node_cpus[0], 3, "igb")
    plain_nic(t, rel, "eno1", 1000)
    t.json("gpus.json", snapshot("pcie-l40s-2s", gpus))
    t.json("net.json", {"ipv4": {"ens1f0np0": [ip], "eno1": ["10.0.0.21"]}})


def mixed_a100_h100(dest: str) -> None:
    """A workstation-class node with two GPU generations: an A100 PCIe on the lower bus, an H100 PCIe above it."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=32, sockets=1, mem_kib_per_node=527_682_472)
    common(t, "mixed-01", peermem=False)
    models = [("NVIDIA A100 80GB PCIe", "ampere", [8, 0], 0x20B5, 81920, 300.0, 4),
              ("NVIDIA H100 PCIe", "hopper", [9, 0], 0x2331, 81559, 350.0, 5)]
    gpus = []
    for i, (b, (name, arch, cc, dev, mem, power, gen)) in enumerate(zip([0x17, 0x65], models)):
        host, rp, ep = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        bridge(t, [host, rp], 0, node_cpus[0], gen=gen)
        endpoint(t, [host, rp, ep], 0x10DE, dev, 0x030200, 0, node_cpus[0], gen, "nvidia")
        gpus.append(gpu_record("mixed-a100-h100", i, ep, name, arch, cc, mem, 0, gen, power,
                               {"links_total": 0, "links_active": 0, "links": []}, []))
    bridge(t, ["pci0000:00", "0000:00:1c.0"], 0, node_cpus[0], gen=4)
    rel = endpoint(t, ["pci0000:00", "0000:00:1c.0", "0000:04:00.0"], 0x8086, 0x1533, 0x020000, 0, node_cpus[0], 3, "igb")
    plain_nic(t, rel, "eno1", 1000)
    t.json("gpus.json", snapshot("mixed-a100-h100", gpus))
    t.json("net.json", {"ipv4": {"eno1": ["10.0.0.31"]}})


def efa_dev(t: Tree, devrel: str, name: str, rate: str) -> None:
    """An EFA RDMA device (driver efa, no netdev, link layer Unspecified) with port 1 ACTIVE."""
    ib = f"{devrel}/infiniband/{name}"
    t.link(f"sys/class/infiniband/{name}", ib)
    t.link(f"{ib}/device", devrel)
    t.files(f"{ib}/ports/1", {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": rate,
                              "link_layer": "Unspecified"})


def nic_dev(t: Tree, devrel: str, netdev: str, speed_mbps: int) -> None:
    """A plain Ethernet netdev below a PCI function (no loopback entry: plain_nic adds that once)."""
    nd = f"{devrel}/net/{netdev}"
    t.link(f"sys/class/net/{netdev}", nd)
    t.link(f"{nd}/device", devrel)
    t.files(nd, {"type": "1", "operstate": "up", "speed": str(speed_mbps)})


def h100_gpu(t: Tree, node: str, i: int, chain: list[str], numa: int, cpus: list[int], nvlink: bool = True) -> dict:
    """An H100 SXM endpoint and its NVML record (18 NVLinks to 4 NVSwitches, or none when hidden in a VM)."""
    endpoint(t, chain, 0x10DE, 0x2330, 0x030200, numa, cpus, 5, "nvidia")
    sw_bus = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    sw_of = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5
    links = [{"link": k, "active": True, "remote_bus_id": sw_bus[sw_of[k]], "remote_type": "switch",
              "errors": dict(ZERO_ERRORS)} for k in range(18)] if nvlink else []
    return gpu_record(node, i, chain[-1], "NVIDIA H100 80GB HBM3", "hopper", [9, 0], 81559, numa, 5, 700.0,
                      {"links_total": 18, "links_active": 18, "links": links}, [k for k in range(8) if k != i])


def switched_node(t: Tree, node: str, node_cpus: dict[int, list[int]], per_switch: int,
                  nic_pci: tuple[int, int, int, str], nic: Callable[[int, int, str, int, list[int]], None]) -> list[dict]:
    """8 GPUs, each on its own PCIe switch with ``per_switch`` NIC functions (vendor, device, class, driver);
    ``nic(gpu, k, devrel, numa, cpus)`` adds what hangs below each."""
    gpus = []
    for i in range(8):
        b = 0x10 + 0x20 * i
        numa = 0 if i < 4 else 1
        cpus = node_cpus[numa]
        host, rp, usp = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        bridge(t, [host, rp], numa, cpus)
        bridge(t, [host, rp, usp], numa, cpus)
        for j in range(per_switch + 1):
            dsp, ep = f"0000:{b + 2:02x}:{j:02x}.0", f"0000:{b + 3 + j:02x}:00.0"
            bridge(t, [host, rp, usp, dsp], numa, cpus)
            chain = [host, rp, usp, dsp, ep]
            if j == 0:
                gpus.append(h100_gpu(t, node, i, chain, numa, cpus))
            else:
                vendor, device, cls, driver = nic_pci
                nic(i, j - 1, endpoint(t, chain, vendor, device, cls, numa, cpus, 5, driver), numa, cpus)
    return gpus


def host_nic(t: Tree, node_cpus: dict[int, list[int]], netdev: str, vendor: int, device: int, driver: str,
             speed_mbps: int) -> None:
    """The host's own Ethernet port behind a root port of socket 0."""
    bridge(t, ["pci0000:00", "0000:00:1c.0"], 0, node_cpus[0], gen=4)
    rel = endpoint(t, ["pci0000:00", "0000:00:1c.0", "0000:04:00.0"], vendor, device, 0x020000, 0, node_cpus[0], 4,
                   driver)
    plain_nic(t, rel, netdev, speed_mbps)


def finish(t: Tree, node: str, gpus: list[dict], ipv4: dict[str, list[str]]) -> None:
    """The NVML snapshot and the addresses, the two files beside the sysfs tree."""
    t.json("gpus.json", snapshot(node, gpus))
    t.json("net.json", {"ipv4": ipv4})


def dgx_h100_ndr(dest: str) -> None:
    """DGX H100-like: 8 GPUs each with a ConnectX-7 NDR compute HCA on its switch, plus 2 storage HCAs on root ports."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=56, sockets=2, mem_kib_per_node=1_056_462_232)
    common(t, "dgx-01", peermem=True)
    ipv4: dict[str, list[str]] = {}

    def hca(i: int, k: int, devrel: str, numa: int, cpus: list[int]) -> None:
        rdma(t, devrel, f"mlx5_{i}", f"ibp{0x13 + 0x20 * i}s0", "InfiniBand", "400 Gb/sec (4X NDR)",
             [(f"fe80:0000:0000:0000:a088:c203:00{i:02x}:3e00", "")], 32, None)
    gpus = switched_node(t, "dgx-h100-ndr", node_cpus, 1, (0x15B3, 0x1021, 0x020700, "mlx5_core"), hca)
    for k, (b, numa) in enumerate([(0x0C, 0), (0x8C, 1)]):
        host, rp, ep = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        bridge(t, [host, rp], numa, node_cpus[numa])
        rel = endpoint(t, [host, rp, ep], 0x15B3, 0x1021, 0x020700, numa, node_cpus[numa], 5, "mlx5_core")
        rdma(t, rel, f"mlx5_{8 + k}", f"ibp{b + 1}s0", "InfiniBand", "400 Gb/sec (4X NDR)",
             [(f"fe80:0000:0000:0000:a088:c203:00{8 + k:02x}:3e00", "")], 32, None)
        ipv4[f"ibp{b + 1}s0"] = [f"10.30.{k}.11"]
    host_nic(t, node_cpus, "eno1np0", 0x14E4, 0x16D8, "bnxt_en", 10000)
    finish(t, "dgx-h100-ndr", gpus, {**ipv4, "eno1np0": ["10.0.1.11"]})


def roce_h100(dest: str) -> None:
    """8 H100 + 8 ConnectX-7 400GbE RoCE v2 ports, one per GPU switch (mlx5 GID table: v2 at index 3)."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=48, sockets=2, mem_kib_per_node=1_056_462_232)
    common(t, "roce-01", peermem=True)
    ipv4: dict[str, list[str]] = {}

    def port(i: int, k: int, devrel: str, numa: int, cpus: list[int]) -> None:
        ip, netdev = f"10.40.{i}.21", f"ens{i + 1}f0np0"
        ll = f"fe80:0000:0000:0000:0a5c:d8ff:fe4e:{0x9a10 + i:04x}"
        rdma(t, devrel, f"mlx5_{i}", netdev, "Ethernet", "400 Gb/sec (4X NDR)",
             [(ll, "IB/RoCE v1"), (ll, "RoCE v2"), (gid_v4(ip), "IB/RoCE v1"), (gid_v4(ip), "RoCE v2")], 1, 400000)
        ipv4[netdev] = [ip]
    gpus = switched_node(t, "roce-h100-400g", node_cpus, 1, (0x15B3, 0x1021, 0x020000, "mlx5_core"), port)
    host_nic(t, node_cpus, "eno1", 0x8086, 0x1533, "igb", 1000)
    finish(t, "roce-h100-400g", gpus, {**ipv4, "eno1": ["10.0.2.21"]})


def aws_p5(dest: str) -> None:
    """p5.48xlarge-like: 8 H100, 32 EFA devices (4 per GPU switch, 100 Gb/s each), one ENA port for IP."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=48, sockets=2, mem_kib_per_node=1_056_462_232)
    common(t, "ip-10-1-0-5", peermem=True)

    def efa(i: int, k: int, devrel: str, numa: int, cpus: list[int]) -> None:
        efa_dev(t, devrel, f"rdmap{0x13 + 0x20 * i + k}s0", "100 Gb/sec (4X EDR)")
    gpus = switched_node(t, "aws-p5-efa", node_cpus, 4, (0x1D0F, 0xEFA1, 0x020000, "efa"), efa)
    host_nic(t, node_cpus, "ens32", 0x1D0F, 0xEC20, "ena", 100000)
    finish(t, "aws-p5-efa", gpus, {"ens32": ["10.1.0.5"]})


def azure_ndv5(dest: str) -> None:
    """ND H100 v5-like VM: GPUs and HCAs on the root bus (the host's switches hidden), HCAs named mlx5_ib0-7,
    the accelerated-networking VF mlx5_an0 (RDMA-capable Ethernet) carrying eth0."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=48, sockets=2, mem_kib_per_node=990_000_000)
    common(t, "ndv5-01", peermem=True)
    gpus = []
    for i in range(8):
        numa = 0 if i < 4 else 1
        host = f"pci{0x0001 + i:04x}:00"
        gpus.append(h100_gpu(t, "azure-ndv5", i, [host, f"{0x0001 + i:04x}:00:00.0"], numa, node_cpus[numa]))
        rel = endpoint(t, [f"pci{0x0101 + i:04x}:00", f"{0x0101 + i:04x}:00:00.0"], 0x15B3, 0x101E, 0x020700, numa,
                       node_cpus[numa], 5, "mlx5_core")
        rdma(t, rel, f"mlx5_ib{i}", f"ib{i}", "InfiniBand", "400 Gb/sec (4X NDR)",
             [(f"fe80:0000:0000:0000:0015:5dff:fd33:{0xff00 + i:04x}", "")], 32, None)
    rel = endpoint(t, ["pci0200:00", "0200:00:02.0"], 0x15B3, 0x101A, 0x020000, 0, node_cpus[0], 4, "mlx5_core")
    ll = "fe80:0000:0000:0000:020d:3aff:fe6e:1a2b"
    rdma(t, rel, "mlx5_an0", "eth0", "Ethernet", "80 Gb/sec (2X HDR)", [(ll, "IB/RoCE v1"), (ll, "RoCE v2")], 1, 80000)
    t.link("sys/class/net/lo", "sys/devices/virtual/net/lo")
    t.files("sys/devices/virtual/net/lo", {"type": "772", "operstate": "unknown"})
    finish(t, "azure-ndv5", gpus, {"eth0": ["10.2.0.4"]})


def gcp_a3(dest: str) -> None:
    """a3-highgpu-8g-like: 8 H100, 4 gVNIC GPU NICs (eth1-eth4, 200 Gb/s) on the GPU switches, host NIC eth0."""
    t = Tree(dest)
    node_cpus = cpus_and_numa(t, cores_per_socket=52, sockets=2, mem_kib_per_node=990_000_000)
    common(t, "a3-01", peermem=False)
    ipv4 = {"eth0": ["10.128.0.5"]}

    def gvnic(i: int, k: int, devrel: str, numa: int, cpus: list[int]) -> None:
        if i % 2 == 0:  # one NIC per pair of GPUs: the other switches' NIC slots hold a function with no netdev
            netdev = f"eth{i // 2 + 1}"
            nic_dev(t, devrel, netdev, 200000)
            ipv4[netdev] = [f"192.168.{i // 2 + 1}.5"]
    gpus = switched_node(t, "gcp-a3-tcpx", node_cpus, 1, (0x1AE0, 0x0042, 0x020000, "gve"), gvnic)
    host_nic(t, node_cpus, "eth0", 0x1AE0, 0x0042, "gve", 100000 // 2)
    finish(t, "gcp-a3-tcpx", gpus, ipv4)


BUILDERS = {"hgx-h100-2s": hgx_h100, "pcie-l40s-2s": pcie_l40s, "mixed-a100-h100": mixed_a100_h100,
            "dgx-h100-ndr": dgx_h100_ndr, "roce-h100-400g": roce_h100, "aws-p5-efa": aws_p5,
            "azure-ndv5": azure_ndv5, "gcp-a3-tcpx": gcp_a3}


def main(out: str) -> None:
    for name, build in BUILDERS.items():
        dest = os.path.join(out, name)
        shutil.rmtree(dest, ignore_errors=True)
        build(dest)
        print(f"wrote {dest}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
