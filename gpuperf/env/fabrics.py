"""Fabric-specific parts of the env policy, each checked against its vendor's published guidance.

Pure. ``detect`` names the fabric from the recorded topology (NIC kinds, names, rates, PCIe paths);
``excluded_nics`` says which RDMA ports are not the GPUs' fabric; ``apply`` adds the variables and
notes a multi-node job needs there. Every reason ends with the source it follows (``SOURCES``).
Workload decisions the vendors also publish (NCCL_ALGO, NCCL_PROTO, buffer sizes) are never set
here: they need an admin rule with ``force = true`` (``gpuperf.env.policy.FORCE_REQUIRED``).
"""

from __future__ import annotations

from typing import Any

from gpuperf.env.plan import EnvPlan, EnvVar, Skipped

SOURCES = {
    "nccl": "NCCL User Guide, Environment Variables: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    "aws": "AWS, Get started with EFA and NCCL: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html; "
           "aws-ofi-nccl environment variables: https://github.com/aws/aws-ofi-nccl/wiki/Environment-Variables",
    "azure": "Microsoft Learn, ND H100 v5 sizes series: "
             "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series; "
             "Azure HPC images' /etc/nccl.conf and /opt/microsoft/ndv5-topo.xml, described in "
             "https://jingchaozhang.github.io/Decoding-Azure-NCCL-Topology-Files/",
    "gcp": "Google Cloud, Maximize GPU network bandwidth with GPUDirect-TCPX: "
           "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx; its NCCL test "
           "manifest: https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/gpudirect-tcpx/"
           "nccl-test.yaml",
}
AZURE_TOPO_FILE = "/opt/microsoft/ndv5-topo.xml"  # shipped by the Azure HPC images for ND H100 v5
TCPX_MIN_GBPS = 100.0  # A3's four GPU NICs run at 200 Gb/s; the host NIC eth0 is slower or unrated


def cite(key: str) -> str:
    """' (source: ...)' for a reason text."""
    return f" (source: {SOURCES[key]})"


def _active(n: dict[str, Any]) -> bool:
    return str(n.get("state") or "").upper() in ("ACTIVE", "UP")


def _rdma(topo: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in topo.get("nics") or [] if n.get("kind") in ("ib", "roce", "efa") and _active(n)]


def hidden_pci(topo: dict[str, Any]) -> bool:
    """True when no GPU shows a PCIe bridge above it (a VM that hides the host's topology from NCCL)."""
    paths = topo.get("pcie_paths") or {}
    gpus = topo.get("gpus") or []
    return bool(gpus) and all(not paths.get(f"gpu:{g.get('index')}") for g in gpus)


def _fast_ethernet(topo: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((n for n in topo.get("nics") or [] if n.get("kind") == "ethernet" and _active(n)
                   and (n.get("rate_gbps") or 0) >= TCPX_MIN_GBPS), key=lambda n: n.get("name") or "")


def detect(topo: dict[str, Any]) -> str | None:
    """'efa', 'azure-ib', 'gcp-tcpx', 'ib', 'roce' or None (no fabric between nodes but TCP)."""
    rdma = _rdma(topo)
    kinds = {n.get("kind") for n in rdma}
    if "efa" in kinds:
        return "efa"
    if "ib" in kinds and (hidden_pci(topo) or any(str(n.get("name")).startswith("mlx5_ib") for n in rdma)):
        return "azure-ib"
    if "ib" in kinds:
        return "ib"
    if "roce" in kinds:
        return "roce"
    if len(_fast_ethernet(topo)) >= 4 and any("H100" in (g.get("name") or "") for g in topo.get("gpus") or []):
        return "gcp-tcpx"
    return None


def _switch_peers(topo: dict[str, Any], a: str, b: str) -> bool:
    paths = topo.get("pcie_paths") or {}
    return len({x.get("bus_id") for x in paths.get(a) or []} & {x.get("bus_id") for x in paths.get(b) or []}) >= 2


def excluded_nics(topo: dict[str, Any]) -> dict[str, str]:
    """RDMA ports that are not the GPUs' fabric, with why: NCCL_IB_HCA leaves them out."""
    out: dict[str, str] = {}
    rdma = [n for n in _rdma(topo) if n.get("kind") in ("ib", "roce")]
    for n in rdma:
        if str(n.get("name")).startswith("mlx5_an"):
            out[n["name"]] = ("Azure's accelerated-networking VF (Ethernet to the VNet), not the InfiniBand fabric"
                              + cite("azure"))
    if hidden_pci(topo):
        return out
    gpus = [g.get("index") for g in topo.get("gpus") or []]
    rails = [n for n in rdma if any(_switch_peers(topo, f"gpu:{g}", f"nic:{n['name']}") for g in gpus)]
    if len(rails) >= len(gpus) > 0:
        # every GPU has a port on its own PCIe switch: ports on no GPU's switch serve storage or management
        for n in rdma:
            if n not in rails and n["name"] not in out:
                out[n["name"]] = ("shares a PCIe switch with no GPU while every GPU has its own rail port: a storage "
                                  "or management HCA, which would slow NCCL's rings if used" + cite("nccl"))
    return out


def _var(plan: EnvPlan, name: str, value: str, why: str, source: str, fabric: str) -> None:
    if plan.get(name) is None:
        plan.vars.append(EnvVar(name, value, why + cite(source), f"fabric:{fabric}"))


def _efa(topo: dict[str, Any], plan: EnvPlan) -> None:
    efa = [n for n in _rdma(topo) if n.get("kind") == "efa"]
    _var(plan, "FI_PROVIDER", "efa", f"{len(efa)} EFA device(s): libfabric must pick its EFA provider, which the "
         "aws-ofi-nccl plugin drives NCCL's inter-node traffic through", "aws", "efa")
    if (topo.get("gdr") or {}).get("loaded") or any(str(g.get("arch") or "").lower() in ("ampere", "hopper", "blackwell")
                                                    for g in topo.get("gpus") or []):
        _var(plan, "FI_EFA_USE_DEVICE_RDMA", "1", "EFA devices of A100/H100 instances (p4d, p5) read and write GPU "
             "memory directly (GPUDirect RDMA over EFA); AWS sets this for them", "aws", "efa")
    plan.notes.append("EFA: NCCL needs the aws-ofi-nccl plugin on the job's library path; NCCL_PROTO=simple is no "
                      "longer needed with aws-ofi-nccl >= 1.5 and gpuperf does not set it" + cite("aws"))


def _azure(topo: dict[str, Any], plan: EnvPlan) -> None:
    _var(plan, "NCCL_TOPO_FILE", AZURE_TOPO_FILE, "this VM hides the host's PCI topology (no bridge above any GPU), "
         "so NCCL cannot tell which HCA is near which GPU; Azure's HPC images ship the ND H100 v5 topology in this "
         "file (a missing file only makes NCCL warn and probe itself)", "azure", "azure-ib")


def _tcpx(topo: dict[str, Any], shape: Any, plan: EnvPlan) -> None:
    gpu_nics = [n["name"] for n in _fast_ethernet(topo)]
    ctrl = plan.get("NCCL_SOCKET_IFNAME")
    ctrl_dev = ctrl.value.lstrip("=") if ctrl else next(
        (n.get("name") for n in topo.get("nics") or [] if n.get("kind") == "ethernet" and n.get("name") not in gpu_nics),
        None)
    _var(plan, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", ",".join(gpu_nics), f"the {len(gpu_nics)} GPU NICs (>= "
         f"{TCPX_MIN_GBPS:.0f} Gb/s each) carry the GPUDirect-TCPX data path", "gcp", "gcp-tcpx")
    if ctrl_dev:
        _var(plan, "NCCL_GPUDIRECTTCPX_CTRL_DEV", ctrl_dev, "the host NIC carries TCPX's control connections",
             "gcp", "gcp-tcpx")
    _var(plan, "NCCL_CROSS_NIC", "0", "each GPU keeps to its own NIC's VPC: rings must not cross NICs", "gcp",
         "gcp-tcpx")
    _var(plan, "NCCL_NSOCKS_PERTHREAD", "4", "Google's TCPX profile: 4 sockets per thread", "gcp", "gcp-tcpx")
    _var(plan, "NCCL_SOCKET_NTHREADS", "1", "Google's TCPX profile: 1 thread per connection", "gcp", "gcp-tcpx")
    plan.notes.append("GPUDirect-TCPX: the job needs the TCPX NCCL plugin on its library path and the receive-data-"
                      "path manager (tcpgpudmarxd) running on the node; Google's profile also forces NCCL_ALGO=Ring, "
                      "NCCL_PROTO=Simple and chunk/buffer sizes, which gpuperf sets only through an admin rule with "
                      "force = true" + cite("gcp"))


def apply(topo: dict[str, Any], shape: Any, plan: EnvPlan) -> str | None:
    """Add the detected fabric's variables and notes to a multi-node plan; the fabric's name."""
    fabric = detect(topo)
    if fabric == "efa":
        _efa(topo, plan)
    elif fabric == "azure-ib":
        _azure(topo, plan)
    elif fabric == "gcp-tcpx":
        _tcpx(topo, shape, plan)
    elif fabric is None:
        plan.skipped.append(Skipped("fabric variables", "no RDMA fabric and no GPUDirect-TCPX NICs: NCCL uses TCP "
                                    "sockets between nodes", "fabric:none"))
    if fabric:
        plan.notes.append(f"fabric: {fabric}")
    return fabric
