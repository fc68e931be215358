"""The env plan on each fabric's recorded node, checked against the vendor guidance its reasons cite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuperf.env import fabrics, policy as ep, rules as envrules
from gpuperf.env.policy import JobShape

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"
FABRICS = {"dgx-h100-ndr": "ib", "roce-h100-400g": "roce", "aws-p5-efa": "efa", "azure-ndv5": "azure-ib",
           "gcp-a3-tcpx": "gcp-tcpx"}
WORKLOAD = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_P2P_LEVEL", "NCCL_MIN_NCHANNELS")


def node(name: str) -> dict:
    from gpuperf.topology import load_node

    return load_node(str(NODES / name), health=False).topology


def shape(name: str, topo: dict, nodes: int = 2, nccl=None) -> JobShape:
    """The job on all 8 GPUs; the node's cluster address is the first address net.json lists."""
    first = next(iter(json.loads((NODES / name / "net.json").read_text())["ipv4"].values()))
    host = {"dgx-h100-ndr": "10.0.1.11", "roce-h100-400g": "10.0.2.21", "gcp-a3-tcpx": "10.128.0.5"}.get(name, first[0])
    return JobShape(gpus=tuple(g["index"] for g in topo["gpus"]), nodes=nodes, cpus_per_task=64, gpus_per_task=8,
                    node_addrs=(host,), node_name=topo.get("hostname"), nccl_version=nccl, nccl_source="test")


def plan(name: str, rules=(), nccl=None) -> ep.EnvPlan:
    topo = node(name)
    return ep.plan(topo, shape(name, topo, nccl=nccl), rules)


def values(p: ep.EnvPlan) -> dict[str, str]:
    return {v.name: v.value for v in p.vars}


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_every_fabric_is_detected_and_every_network_reason_names_its_source(name):
    topo = node(name)
    assert fabrics.detect(topo) == FABRICS[name]
    p = plan(name)
    network = [v for v in p.vars if v.rule.startswith("fabric:") or v.name.startswith(("NCCL_", "FI_"))]
    assert network, p
    for v in network:
        assert "(source: " in v.reason and "https://" in v.reason, (v.name, v.reason)
    for name_ in WORKLOAD:  # vendors' workload advice needs an admin rule with force = true
        assert name_ not in values(p)
    single = ep.plan(topo, shape(name, topo, nodes=1))
    assert not [v for v in single.names() if v.startswith(("NCCL_", "FI_"))]  # one node: no fabric in use


def test_ib_ndr_uses_the_eight_rail_hcas_and_leaves_the_storage_hcas_out():
    p = plan("dgx-h100-ndr")
    v = values(p)
    assert v["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert v["NCCL_NET_GDR_LEVEL"] == "PXB" and v["NCCL_SOCKET_IFNAME"] == "=eno1np0"
    left_out = {s.name: s.reason for s in p.skipped if s.name.startswith("NCCL_IB_HCA: ")}
    assert set(left_out) == {"NCCL_IB_HCA: mlx5_8", "NCCL_IB_HCA: mlx5_9"}
    assert all("storage" in r and "docs.nvidia.com/deeplearning/nccl" in r for r in left_out.values())


def test_roce_gid_index_by_nccl_version_and_traffic_class_from_an_admin_rule():
    rule = envrules.parse([{"name": "fabric-a-tc", "match": {"nic_kind": "roce"}, "set": {"NCCL_IB_TC": "106"},
                            "reason": "lossless RDMA class: DSCP 26, ECN (106 = 26 << 2 | 2); NCCL_IB_TC in "
                                      "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"}])
    old = plan("roce-h100-400g", rule, nccl=(2, 20, 5))
    v = values(old)
    assert v["NCCL_IB_GID_INDEX"] == "3"  # the RoCE v2 entry of the mlx5 GID table: ::ffff:IPv4
    assert v["NCCL_IB_TC"] == "106" and "https://" in old.get("NCCL_IB_TC").reason
    assert old.get("NCCL_IB_TC").rule == "admin:fabric-a-tc"
    new = plan("roce-h100-400g", rule, nccl=(2, 23, 4))
    assert "NCCL_IB_GID_INDEX" not in values(new)  # NCCL >= 2.21 picks the RoCE v2 GID itself
    assert any(s.name == "NCCL_IB_GID_INDEX" and "2.21" in s.reason for s in new.skipped)
    assert "NCCL_IB_TC" not in values(plan("dgx-h100-ndr", rule))  # InfiniBand: the RoCE rule does not match


def test_aws_p5_efa_sets_libfabric_not_infiniband_variables():
    p = plan("aws-p5-efa")
    v = values(p)
    assert v["FI_PROVIDER"] == "efa" and v["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "docs.aws.amazon.com" in p.get("FI_PROVIDER").reason
    assert v["NCCL_SOCKET_IFNAME"] == "=ens32"  # bootstrap over the ENA port, the one with an address
    assert "NCCL_IB_HCA" not in v and "NCCL_PROTO" not in v
    assert any("aws-ofi-nccl" in n for n in p.notes)
    assert len([n for n in node("aws-p5-efa")["nics"] if n["kind"] == "efa"]) == 32


def test_azure_ndv5_hidden_topology_gets_the_topology_file_and_not_the_vnet_vf():
    topo = node("azure-ndv5")
    assert fabrics.hidden_pci(topo)
    p = plan("azure-ndv5")
    v = values(p)
    assert v["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv5-topo.xml" and "learn.microsoft.com" in p.get("NCCL_TOPO_FILE").reason
    assert v["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_ib{i}:1" for i in range(8))
    assert any(s.name == "NCCL_IB_HCA: mlx5_an0" for s in p.skipped)
    assert v["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_gcp_a3_tcpx_names_the_gpu_nics_and_the_control_nic():
    p = plan("gcp-a3-tcpx")
    v = values(p)
    assert v["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert v["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0" and v["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert v["NCCL_CROSS_NIC"] == "0" and v["NCCL_NSOCKS_PERTHREAD"] == "4" and v["NCCL_SOCKET_NTHREADS"] == "1"
    assert "cloud.google.com" in p.get("NCCL_CROSS_NIC").reason
    assert any("NCCL_ALGO=Ring" in n and "force = true" in n for n in p.notes)


def test_a_node_without_any_fabric_says_so():
    p = plan("mixed-a100-h100")
    assert fabrics.detect(node("mixed-a100-h100")) is None
    assert any(s.rule == "fabric:none" for s in p.skipped)
