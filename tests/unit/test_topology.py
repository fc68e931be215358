"""Node topology: recorded fixtures, bad input, the recorder's mirror, and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys

import pytest

from gpuperf.topology import load_node, load_snapshot, nvmlsnap, pcie, record, render
from gpuperf.topology.discover import discover, nvlink_view
from gpuperf.topology.netaddr import parse_ifconf
from gpuperf.topology.sysfs import Root, parse_cpulist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = os.path.join(REPO, "tests", "data", "nodes")
HGX = os.path.join(NODES, "hgx-h100-2s")
L40S = os.path.join(NODES, "pcie-l40s-2s")
H100_VM = os.path.join(NODES, "h100-vm")
H200X4_VM = os.path.join(NODES, "h200x4-vm")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "GPUPERF_SYSFS_ROOT"}
    e.update(PYTHONPATH=REPO, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpuperf", "topology", *args], capture_output=True, text=True,
                          env=e, timeout=60, cwd=REPO)


def copy_node(src: str, tmp_path) -> str:
    dst = str(tmp_path / os.path.basename(src))
    shutil.copytree(src, dst, symlinks=True)
    return dst


def write(path: str, data: str | bytes) -> None:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


# --- the "Done when", through the real command -------------------------------------------

def test_hgx_cli_json_eight_gpus_two_numa_nodes_nvswitch_all_to_all():
    r = cli("--json", "--root", HGX)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["schema"] == "gpuperf.topology.v1"
    assert [g["index"] for g in t["gpus"]] == list(range(8))
    assert [n["id"] for n in t["numa_nodes"]] == [0, 1]
    assert [g["numa_node"] for g in t["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    numa_cpus = {n["id"]: n["cpus"] for n in t["numa_nodes"]}
    assert len(numa_cpus[0]) + len(numa_cpus[1]) == 224 and not set(numa_cpus[0]) & set(numa_cpus[1])
    for g in t["gpus"]:
        assert g["cpus"] == numa_cpus[g["numa_node"]]
        assert g["nvlink"] == {"links": 18, "via_switch": True, "peers": [i for i in range(8) if i != g["index"]]}
        assert g["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    ib = [n for n in t["nics"] if n["kind"] == "ib"]
    assert [n["name"] for n in ib] == [f"mlx5_{i}" for i in range(8)]
    assert all(n["rate_gbps"] == 400.0 and n["state"] == "ACTIVE" for n in ib)
    # one NIC per GPU behind the same PCIe switch: GPU 2k and NIC k share the switch's upstream bridges
    for k, nic in enumerate(ib):
        gpu_path, nic_path = t["pcie_paths"][f"gpu:{k}"], t["pcie_paths"][f"nic:{nic['name']}"]
        assert gpu_path[1:] == nic_path[1:] and gpu_path[0] != nic_path[0]
        assert nic["numa_node"] == t["gpus"][k]["numa_node"]
    assert all(b["acs_enabled"] is False for path in t["pcie_paths"].values() for b in path)
    assert t["gdr"] == {"module": "nvidia_peermem", "loaded": True}
    assert t["notes"] == []


def test_hgx_readable_output_names_each_gpu_and_peer_set():
    r = cli("--root", HGX)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    gpu_lines = [ln for ln in lines if "NVIDIA H100 80GB HBM3" in ln]
    assert len(gpu_lines) == 8
    assert "18 links via NVSwitch -> GPU 1,2,3,4,5,6,7" in gpu_lines[0]
    assert "GPUDirect RDMA: nvidia_peermem loaded" in lines


def test_node_root_from_environment_is_honoured():
    r = cli("--json", env={"GPUPERF_SYSFS_ROOT": L40S, "GPUPERF_CONFIG": "/nonexistent/config.toml"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] == L40S


def test_root_that_is_not_a_recording_is_refused(tmp_path):
    r = cli("--root", str(tmp_path))
    assert r.returncode == 2 and "not a recorded node" in r.stderr


def test_l40s_no_nvlink_rocev2_gid_and_numa_from_sysfs():
    node = load_node(L40S)
    t = node.topology
    assert len(t["gpus"]) == 4
    # gpus.json says NUMA unknown (NVML NotSupported): sysfs numa_node fills it
    assert [g["numa_node"] for g in node.gpus["gpus"]] == [None] * 4
    assert [g["numa_node"] for g in t["gpus"]] == [0, 0, 1, 1]
    assert all(g["nvlink"] == {"links": 0, "via_switch": False, "peers": []} for g in t["gpus"])
    roce = [n for n in t["nics"] if n["kind"] == "roce"]
    assert len(roce) == 1
    assert roce[0]["name"] == "mlx5_0" and roce[0]["netdev"] == "ens1f0np0" and roce[0]["rate_gbps"] == 100.0
    assert roce[0]["gid_index_rocev2"] == 3  # IPv4-mapped RoCE v2 GID, not the link-local v2 at index 1
    assert roce[0]["ipv4"] == ["10.10.0.21"]
    assert [n["name"] for n in t["nics"] if n["kind"] == "ethernet"] == ["eno1"]
    assert t["gdr"] == {"module": "nvidia_peermem", "loaded": False}


@pytest.mark.skipif(not os.path.isdir(H100_VM), reason="h100-vm not recorded yet")
def test_h100_vm_recorded_one_gpu_numa_unknown_gen5_x16():
    t = load_node(H100_VM).topology
    assert len(t["gpus"]) == 1
    g = t["gpus"][0]
    assert g["numa_node"] is None
    assert g["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    assert g["arch"] == "hopper" and g["name"].startswith("NVIDIA H100")
    assert g["nvlink"]["peers"] == []


@pytest.mark.skipif(not os.path.isdir(H200X4_VM), reason="h200x4-vm not recorded yet: the lead records it on 4xH200 "
                    "with `PYTHONPATH=. python3 -m gpuperf topology --record DIR`")
def test_h200x4_vm_four_gpus_18_links_each_reaching_the_other_three():
    t = load_node(H200X4_VM).topology
    assert len(t["gpus"]) == 4
    for g in t["gpus"]:
        assert g["nvlink"]["links"] == 18
        assert g["nvlink"]["peers"] == [i for i in range(4) if i != g["index"]]
        assert g["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}


# --- bad input -----------------------------------------------------------------------------------

def test_garbage_and_truncated_sysfs_files_become_null(tmp_path):
    root = copy_node(L40S, tmp_path)
    dev = os.path.join(root, "sys/bus/pci/devices")
    write(os.path.join(dev, "0000:17:00.0/numa_node"), "garbage")
    write(os.path.join(dev, "0000:17:00.0/local_cpulist"), "0-3,x")
    write(os.path.join(dev, "0000:39:00.0/current_link_speed"), "Unknown")
    write(os.path.join(dev, "0000:16:01.0/config"), b"\x86\x80" * 64)  # only the 256-byte header: ACS unknown
    write(os.path.join(root, "sys/class/infiniband/mlx5_0/ports/1/rate"), b"\xff\xfe")
    write(os.path.join(root, "sys/devices/system/node/node1/cpulist"), "")
    os.unlink(os.path.join(root, "net.json"))
    t = load_node(root).topology
    g0, g1 = t["gpus"][0], t["gpus"][1]
    assert g0["numa_node"] is None and g0["cpus"] is None
    assert t["gpus"][2]["numa_node"] == 1  # untouched neighbours keep their facts
    assert g1["pcie"]["gen"] == 4  # NVML's value stands; sysfs only fills gaps
    assert t["pcie_paths"]["gpu:0"] == [{"bus_id": "0000:16:01.0", "acs_enabled": None, "acs_ctrl": None, "acs_flags": None}]
    nic = next(n for n in t["nics"] if n["name"] == "mlx5_0")
    assert nic["rate_gbps"] is None and nic["state"] == "ACTIVE" and nic["ipv4"] is None
    assert t["numa_nodes"][1]["cpus"] == []
    assert render.render(t)  # the text view copes with the nulls


def test_gpu_with_nvml_error_marker_is_null_with_a_note(tmp_path):
    root = copy_node(HGX, tmp_path)
    path = os.path.join(root, "gpus.json")
    snap = json.load(open(path))
    snap["gpus"][3] = {"index": 3, "error": "nvmlDeviceGetHandleByIndex: GPU is lost"}
    write(path, json.dumps(snap))
    t = load_node(root).topology
    g3 = t["gpus"][3]
    assert g3["index"] == 3 and g3["uuid"] is None and g3["bus_id"] is None
    assert g3["nvlink"] == {"links": None, "via_switch": None, "peers": None}
    assert any("GPU 3" in n and "GPU is lost" in n for n in t["notes"])
    assert t["gpus"][0]["nvlink"]["peers"] == [1, 2, 4, 5, 6, 7]  # GPU 3 cannot be confirmed reachable
    assert "gpu:3" not in t["pcie_paths"] and len(t["gpus"]) == 8


def test_wrongly_typed_gpus_json_values_are_unknown(tmp_path):
    root = copy_node(L40S, tmp_path)
    path = os.path.join(root, "gpus.json")
    snap = json.load(open(path))
    snap["gpus"][1].update(numa_node="x", pcie={"gen": "4", "width": None}, bus_id="../../etc", name=7)
    write(path, json.dumps(snap))
    g = load_node(root).topology["gpus"][1]
    assert g["name"] is None and g["bus_id"] is None
    assert g["numa_node"] is None and g["cpus"] is None  # no sysfs device to fall back to
    assert g["pcie"] == {"gen": None, "width": None, "max_gen": None, "max_width": None}


def test_unreadable_gpus_json_falls_back_to_sysfs_gpus(tmp_path):
    root = copy_node(HGX, tmp_path)
    write(os.path.join(root, "gpus.json"), "{not json")
    node = load_node(root)
    t = node.topology
    assert "unreadable NVML snapshot" in node.gpus["error"]
    assert [g["bus_id"] for g in t["gpus"]] == sorted(g["bus_id"] for g in load_node(HGX).topology["gpus"])
    assert all(g["uuid"] is None and g["nvlink"]["links"] is None for g in t["gpus"])
    assert [g["numa_node"] for g in t["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert any("sysfs only" in n for n in t["notes"])


def test_load_node_on_a_directory_that_is_no_recording_says_so(tmp_path):
    t = load_node(str(tmp_path)).topology
    assert t["gpus"] == [] and t["numa_nodes"] == [] and t["gdr"]["loaded"] is None
    assert any("not a recorded node" in n for n in t["notes"])


def test_missing_gpus_json_is_an_error_in_the_snapshot(tmp_path):
    root = copy_node(L40S, tmp_path)
    os.unlink(os.path.join(root, "gpus.json"))
    assert "no NVML snapshot recorded" in load_snapshot(root)["error"]


def test_acs_redirect_on_one_bridge_is_reported(tmp_path):
    root = copy_node(L40S, tmp_path)
    cfg = bytearray(open(os.path.join(root, "sys/bus/pci/devices/0000:98:01.0/config"), "rb").read())
    off = 0x148
    assert int.from_bytes(cfg[off:off + 2], "little") == pcie.ACS_CAP_ID
    cfg[off + 6:off + 8] = (0x01 | 0x04 | 0x08 | 0x10).to_bytes(2, "little")
    write(os.path.join(root, "sys/bus/pci/devices/0000:98:01.0/config"), bytes(cfg))
    paths = load_node(root).topology["pcie_paths"]
    assert paths["gpu:2"] == [{"bus_id": "0000:98:01.0", "acs_enabled": True, "acs_ctrl": "0x001d",
                               "acs_flags": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]}]
    assert paths["gpu:3"][0]["acs_enabled"] is False


def test_parse_acs_without_capability_and_with_a_looping_chain():
    no_acs = bytearray(4096)
    no_acs[0x100:0x104] = (0x0001 | (1 << 16) | (0x140 << 20)).to_bytes(4, "little")
    no_acs[0x140:0x144] = (0x000B | (1 << 16)).to_bytes(4, "little")  # vendor-specific, last
    assert pcie.parse_acs(bytes(no_acs)) == pcie.Acs(None, False)
    loop = bytearray(4096)
    loop[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # points at itself
    assert pcie.parse_acs(bytes(loop)) == pcie.Acs(None, False)
    assert pcie.parse_acs(None) == pcie.Acs(None, None)


# --- pure parts ----------------------------------------------------------------------------------

def test_nvlink_view_direct_links_switch_links_and_unknown_remotes():
    def gpu(i, bus, links, p2p=None):
        return {"index": i, "bus_id": bus, "nvlink": {"links": links}, "nvlink_p2p": p2p}

    def lk(rtype, rbus=None):
        return {"active": True, "remote_type": rtype, "remote_bus_id": rbus}

    buses = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    view = nvlink_view([
        gpu(0, buses[0], [lk("gpu", buses[1])] * 4 + [{"active": False, "remote_type": None}]),
        gpu(1, buses[1], [lk("gpu", buses[0])] * 4),
        gpu(2, buses[2], [lk(None)] * 2, p2p=[0]),
    ])
    assert view[0] == {"links": 4, "via_switch": False, "peers": [1]}
    assert view[1] == {"links": 4, "via_switch": False, "peers": [0]}
    assert view[2] == {"links": 2, "via_switch": None, "peers": [0]}  # remote unknown: NVML P2P status decides
    assert nvlink_view([gpu(0, buses[0], [lk(None)])])[0]["peers"] is None


def test_cpulist_parse_and_render_round_trip():
    cpus = parse_cpulist("0-3,8,10-11")
    assert cpus == [0, 1, 2, 3, 8, 10, 11]
    assert render.cpulist(cpus) == "0-3,8,10-11"
    assert parse_cpulist("3-1") is None and parse_cpulist("a") is None and parse_cpulist(None) is None


def test_parse_ifconf_folds_labels():
    def ifreq(name: str, ip: str) -> bytes:
        return name.encode().ljust(16, b"\0") + struct.pack("<HH", socket.AF_INET, 0) + socket.inet_aton(ip) + bytes(16)

    data = ifreq("lo", "127.0.0.1") + ifreq("eth0", "10.0.0.5") + ifreq("eth0:1", "10.0.0.6")
    assert parse_ifconf(data) == {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5", "10.0.0.6"]}


def test_bus_id_normalisation():
    assert nvmlsnap.norm_bus_id(b"00000000:9A:00.0") == "0000:9a:00.0"
    assert nvmlsnap.norm_bus_id("junk") is None


# --- the recorder ----------------------------------------------------------------------------------

@pytest.mark.parametrize("node", [HGX, L40S])
def test_mirror_of_what_discovery_read_reproduces_the_topology(tmp_path, node):
    """Record a fixture as if it were live: the mirrored tree must give the same topology."""
    accesses = []
    snap = load_snapshot(node)
    original = discover(Root(node, log=lambda kind, p: accesses.append((kind, p))), snap, source="x")
    mirror = record._Mirror(str(tmp_path))
    for kind, p in accesses:
        mirror.add(kind, p)
    copied_root = str(tmp_path) + os.path.abspath(node)
    copied = discover(Root(copied_root), snap, source="x")
    assert copied == original
    assert not os.path.exists(os.path.join(copied_root, "gpus.json"))  # only what discovery read
    assert os.path.islink(os.path.join(copied_root, "sys/class/infiniband/mlx5_0"))  # links stay links


def test_cli_record_this_machine_then_read_it_back(tmp_path):
    dest = str(tmp_path / "rec")
    r = cli("--record", dest)
    assert r.returncode == 0, r.stderr
    assert os.path.isfile(os.path.join(dest, "gpus.json")) and os.path.isdir(os.path.join(dest, "sys"))
    live = json.loads(cli("--json", env={"GPUPERF_CONFIG": "/nonexistent"}).stdout)
    back = json.loads(cli("--json", "--root", dest).stdout)
    for key in ("hostname", "gpus", "numa_nodes", "cpus", "nics", "pcie_paths", "gdr"):
        assert back[key] == live[key], key
    again = cli("--record", dest)
    assert again.returncode == 1 and "not empty" in again.stderr


def test_import_stays_light():
    code = ("import sys; import gpuperf.topology as t; t.load_node(%r); "
            "bad = [m for m in ('pynvml', 'zmq', 'psutil', 'prometheus_client') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)") % HGX
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stdout + r.stderr


# NVIDIA's GDS troubleshooting guide ("Displaying GDS NVIDIA FS Driver Statistics"): the stats file's head
NVFS_STATS = ("GDS Version: 1.0.0.71\nNVFS statistics(ver: 4.0)\nNVFS Driver(version: 2:7:47)\n"
              "Mellanox PeerDirect Supported: True\nIO stats: Enabled, peer IO stats: Enabled\n")


def _with_nvidia_fs(tmp_path, stats: str | None = NVFS_STATS) -> str:
    """The recorded h100-vm node with GPUDirect Storage's module loaded (as /sys/module and procfs show it)."""
    node = tmp_path / "h100-vm-gds"
    shutil.copytree(H100_VM, node, symlinks=True)
    (node / "sys" / "module" / "nvidia_fs").mkdir(parents=True)
    (node / "sys" / "module" / "nvidia_fs" / "initstate").write_text("live\n")
    if stats is not None:
        (node / "proc" / "driver" / "nvidia-fs").mkdir(parents=True)
        (node / "proc" / "driver" / "nvidia-fs" / "stats").write_text(stats)
    return str(node)


def test_gpudirect_storage_is_told_from_the_nvidia_fs_module():
    assert load_node(H100_VM).topology["gds"] == {"module": "nvidia_fs", "loaded": False}   # recorded: absent


def test_gpudirect_storage_loaded_with_its_driver_version(tmp_path):
    t = load_node(_with_nvidia_fs(tmp_path)).topology
    assert t["gds"] == {"module": "nvidia_fs", "loaded": True, "version": "2.7.47"}
    assert "GPUDirect Storage: nvidia_fs loaded (version 2.7.47)" in render.render(t).splitlines()
    # the module without a readable stats file (procfs not recorded, or not readable): loaded, no version
    assert load_node(_with_nvidia_fs(tmp_path / "b", stats=None)).topology["gds"] == \
        {"module": "nvidia_fs", "loaded": True}
