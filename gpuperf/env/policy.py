"""The NCCL/CUDA environment for a job: node topology + job shape -> variables, each with its reason.

Pure: no I/O. The policy sets only what the node's system configuration decides (which
interface, which HCAs, which GID index, GPUDirect RDMA) plus allocator and thread defaults, and
never NCCL's algorithm or protocol (FACTS.md: forcing ``NCCL_ALGO=Tree`` costs about 30% of
all-reduce bandwidth on 4xH200). Admin rules (``gpuperf.env.rules``) then add, change or forbid
variables; a variable the user set always wins over both.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Sequence

# the plan as data and the per-task part live in env.plan (the TaskProlog imports only that); every
# name stays importable from here
from gpuperf.env import fabrics
from gpuperf.env.plan import (  # noqa: F401
    AFFINITY_OMP_MARKER, ALIASES, FORCE_REQUIRED, MARKER, SCHEMA, USER_WINS, VARIABLE_CLASSES, EnvPlan, EnvVar,
    Skipped, _vstr, affinity_omp_marker, drop_user_set, finalize_task, injected, marker, off_reason, omp_threads,
    parse_version, user_set,
)


# Interfaces that never carry the cluster address (containers, VMs, tunnels).
VIRTUAL_IFACE_PREFIXES = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "kube")

GID_AUTO_NCCL = (2, 21, 0)  # NCCL finds the RoCE v2 GID index itself from here on (IB_GID_INDEX default -1)
NCCL_LL128_CORRUPTION = (2, 18, 1)  # FACTS.md: relaxed ordering + LL128 + Tree corrupted data on HGX H100


class JobShape(NamedTuple):
    """What the policy needs to know about the job on this node."""

    gpus: tuple[int, ...] = ()  # node GPU indices allocated to the job
    nodes: int = 1
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    user_set: frozenset[str] = frozenset()
    nccl_version: tuple[int, int, int] | None = None
    nccl_source: str | None = None  # where the version was found
    node_name: str | None = None
    node_addrs: tuple[str, ...] = ()  # IPv4 addresses the node's name resolves to
    partition: str | None = None


class RuleLike(Protocol):
    """What the policy needs from an admin rule (``gpuperf.env.rules.Rule``)."""

    name: str
    set: dict[str, str]
    forbid: tuple[str, ...]
    reason: str

    def matches(self, facts: dict[str, Any]) -> bool: ...


# --- small readers of the topology value ------------------------------------------------------------

def _active(nic: dict[str, Any]) -> bool:
    return str(nic.get("state") or "").upper() in ("ACTIVE", "UP")


def _iface(nic: dict[str, Any]) -> str | None:
    return nic.get("netdev") or (nic.get("name") if nic.get("kind") == "ethernet" else None)


def is_virtual_iface(name: str) -> bool:
    """True for interfaces that never carry the cluster address (lo, docker, veth, virbr, ...)."""
    return name.startswith(VIRTUAL_IFACE_PREFIXES)


def _bridges(topo: dict[str, Any], key: str) -> list[str]:
    return [b.get("bus_id") for b in (topo.get("pcie_paths") or {}).get(key) or [] if b.get("bus_id")]


def _shared_bridges(topo: dict[str, Any], a: str, b: str) -> int:
    return len(set(_bridges(topo, a)) & set(_bridges(topo, b)))


def _same_switch(topo: dict[str, Any], gpu: int, nic: str) -> bool:
    # one shared bridge is the root port alone (traffic crosses the root complex: NCCL's PHB);
    # two or more means a PCIe switch above both (PIX/PXB), where GPUDirect RDMA is fast
    return _shared_bridges(topo, f"gpu:{gpu}", f"nic:{nic}") >= 2


def rail_order(topo: dict[str, Any], nics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NICs ordered by rail: for each GPU in index order its nearest unused NIC, then the rest by name."""
    gpus = sorted(topo.get("gpus") or [], key=lambda g: g.get("index", 0))
    left = sorted(nics, key=lambda n: n["name"])
    out: list[dict[str, Any]] = []
    for g in gpus:
        if not left:
            break
        key = f"gpu:{g.get('index')}"

        def closeness(n: dict[str, Any]) -> tuple[int, int]:
            same_numa = g.get("numa_node") is not None and g.get("numa_node") == n.get("numa_node")
            return (_shared_bridges(topo, key, f"nic:{n['name']}"), int(same_numa))

        best = max(left, key=closeness)  # max keeps the first (by name) among equals
        if closeness(best) == (0, 0):
            continue  # this GPU has no NIC nearer than any other: no rail to claim
        out.append(best)
        left.remove(best)
    return out + left


def node_facts(topo: dict[str, Any], shape: JobShape) -> dict[str, Any]:
    """Facts admin rules match on: GPU models, interconnect, NIC kinds, node name, partition, nodes."""
    gpus = topo.get("gpus") or []
    nvlink = any(((g.get("nvlink") or {}).get("links") or 0) > 0 for g in gpus)
    return {
        "gpu_model": sorted({g.get("name") or "" for g in gpus} - {""}),
        "interconnect": ["nvlink" if nvlink else "pcie"] if gpus else [],
        "nic_kind": sorted({n.get("kind") for n in topo.get("nics") or [] if _active(n) and n.get("kind")}),
        "node": [shape.node_name or topo.get("hostname") or ""],
        "partition": [shape.partition] if shape.partition else [],
        "multi_node": shape.nodes > 1,
    }


# --- the built-in rules ------------------------------------------------------------------------------

def _socket_ifname(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> None:
    rule = "default:socket_ifname"
    candidates = []
    for n in topo.get("nics") or []:
        iface = _iface(n)
        if iface and not is_virtual_iface(iface) and n.get("ipv4"):
            candidates.append((iface, list(n.get("ipv4") or [])))
    for iface, addrs in candidates:
        hit = next((a for a in addrs if a in shape.node_addrs), None)
        if hit:
            plan.vars.append(EnvVar("NCCL_SOCKET_IFNAME", f"={iface}",
                                    f"{iface} carries the node's cluster address {hit}; NCCL's bootstrap and socket "
                                    f"transport use it instead of guessing (never lo, docker, veth, virbr)"
                                    + fabrics.cite("nccl"), rule))
            return
    if len(candidates) == 1:
        iface, addrs = candidates[0]
        plan.vars.append(EnvVar("NCCL_SOCKET_IFNAME", f"={iface}",
                                f"{iface} ({addrs[0]}) is the only physical interface with an IPv4 address"
                                + fabrics.cite("nccl"), rule))
        return
    why = ("the node name resolves to no address on a physical interface" if shape.node_addrs
           else "the node's cluster address is unknown")
    plan.skipped.append(Skipped("NCCL_SOCKET_IFNAME", f"{why} and {len(candidates)} interfaces qualify; "
                                "NCCL chooses itself", rule))


def _ib(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> list[dict[str, Any]]:
    rule = "default:ib_hca"
    nics = [n for n in topo.get("nics") or [] if n.get("kind") in ("ib", "roce") and _active(n) and n.get("name")]
    if not nics:
        down = [n.get("name") for n in topo.get("nics") or [] if n.get("kind") in ("ib", "roce")]
        if down:
            plan.notes.append(f"InfiniBand/RoCE port(s) {', '.join(map(str, down))} present but none ACTIVE: NCCL "
                              "falls back to TCP sockets between nodes, far slower")
        plan.skipped.append(Skipped("NCCL_IB_HCA", "no active InfiniBand/RoCE port on this node", rule))
        return []
    for name, why in fabrics.excluded_nics(topo).items():
        nics = [n for n in nics if n["name"] != name]
        plan.skipped.append(Skipped(f"NCCL_IB_HCA: {name}", why, rule))
    ordered = rail_order(topo, nics)
    # '=' makes NCCL match names exactly: without it mlx5_1 would also select mlx5_10..mlx5_17
    value = "=" + ",".join(f"{n['name']}:{n.get('port') or 1}" for n in ordered)
    kinds = "/".join(sorted({n["kind"] for n in ordered})).replace("ib", "InfiniBand").replace("roce", "RoCE")
    plan.vars.append(EnvVar("NCCL_IB_HCA", value,
                            f"the {len(ordered)} active {kinds} port(s) of this node in rail order (nearest to GPU 0 "
                            f"first, by PCIe path); inactive or absent ports are left out" + fabrics.cite("nccl"), rule))
    return ordered


def _gid_index(ordered: list[dict[str, Any]], shape: JobShape, plan: EnvPlan) -> None:
    rule = "default:ib_gid_index"
    roce = [n for n in ordered if n.get("kind") == "roce"]
    if not roce:
        return
    if shape.nccl_version and shape.nccl_version >= GID_AUTO_NCCL:
        plan.skipped.append(Skipped("NCCL_IB_GID_INDEX", f"NCCL {_vstr(shape.nccl_version)} ({shape.nccl_source}) "
                                    f"finds the RoCE v2 GID index itself (since {_vstr(GID_AUTO_NCCL)})", rule))
        return
    found = {n.get("gid_index_rocev2") for n in roce}
    if None in found or len(found) != 1:
        plan.skipped.append(Skipped("NCCL_IB_GID_INDEX", "RoCE ports disagree on (or lack) a RoCE v2 GID index: "
                                    f"{sorted(str(g) for g in found)}; one value cannot fit them all", rule))
        return
    gid = found.pop()
    plan.vars.append(EnvVar("NCCL_IB_GID_INDEX", str(gid),
                            f"GID index {gid} is the RoCE v2 entry found on {', '.join(n['name'] for n in roce)}; "
                            f"NCCL before {_vstr(GID_AUTO_NCCL)} would use index 0 (RoCE v1 / link-local)"
                            + fabrics.cite("nccl"),
                            rule, nccl_below=GID_AUTO_NCCL))


def _gdr(topo: dict[str, Any], shape: JobShape, ordered: list[dict[str, Any]], plan: EnvPlan) -> None:
    rule = "default:net_gdr_level"
    gdr = topo.get("gdr") or {}
    if not gdr.get("loaded"):
        plan.skipped.append(Skipped("NCCL_NET_GDR_LEVEL", "GPUDirect RDMA module not loaded: NCCL stages through "
                                    "host memory whatever the level", rule))
        return
    gpus = list(shape.gpus) or [g.get("index") for g in topo.get("gpus") or []]
    near = {g: [n["name"] for n in ordered if _same_switch(topo, g, n["name"])] for g in gpus}
    far = [g for g, names in near.items() if not names]
    if far:
        plan.skipped.append(Skipped("NCCL_NET_GDR_LEVEL", f"GPU(s) {far} share no PCIe switch with an active NIC: "
                                    "GPUDirect RDMA would cross the root complex, which is slow on many CPUs; "
                                    "measure before forcing a level (gpuperf tune)", rule))
        return
    plan.vars.append(EnvVar("NCCL_NET_GDR_LEVEL", "PXB",
                            f"{gdr.get('module') or 'GPUDirect RDMA'} is loaded and every GPU of the job shares a "
                            "PCIe switch with an active NIC: RDMA goes straight to GPU memory. PXB is NCCL's own "
                            "default, set so that a stale image or nccl.conf value (LOC) cannot switch it off"
                            + fabrics.cite("nccl"), rule))


def _pcie_notes(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> None:
    gpus = [g for g in topo.get("gpus") or [] if not shape.gpus or g.get("index") in shape.gpus]
    nvlink = [g for g in gpus if ((g.get("nvlink") or {}).get("links") or 0) > 0]
    if gpus and not nvlink and len(gpus) > 1:
        plan.notes.append("PCIe-only GPUs: NCCL measures peer-to-peer paths itself; gpuperf forces no P2P level")
    acs = []
    for key, bridges in sorted((topo.get("pcie_paths") or {}).items()):
        for b in bridges or []:
            if b.get("acs_enabled") and b.get("bus_id") not in acs:
                acs.append(b.get("bus_id"))
    if acs:
        plan.notes.append(f"ACS is enabled on PCIe bridge(s) {', '.join(acs)}: peer-to-peer and GPUDirect RDMA "
                          "traffic is redirected through the root complex (slower; NCCL may hang or report "
                          "IBV_WC_LOC_PROT_ERR). Disable ACS in the BIOS or with setpci on bare metal")


# compute capability by architecture, for topologies that record the architecture only (NVML's name for it)
ARCH_CC = {"blackwell": (10, 0), "hopper": (9, 0), "ada": (8, 9), "ampere": (8, 0), "turing": (7, 5),
           "volta": (7, 0), "pascal": (6, 0)}


def _cc(g: dict[str, Any]) -> tuple[int, int] | None:
    cc = g.get("cuda_cc")
    if cc and len(cc) >= 2:
        return (int(cc[0]), int(cc[1]))
    return ARCH_CC.get(str(g.get("arch") or "").lower())


def cuda_default_order(gpus: list[dict[str, Any]]) -> list[int] | None:
    """NVML indices in CUDA's default (FASTEST_FIRST) order: compute capability descending, then PCI bus id.

    None when a GPU's compute capability is unknown and the models differ (the order cannot be told).
    """
    if any(_cc(g) is None for g in gpus) and len({g.get("name") for g in gpus}) > 1:
        return None

    def key(g: dict[str, Any]) -> tuple[int, int, str]:
        cc = _cc(g) or (0, 0)
        return (-cc[0], -cc[1], str(g.get("bus_id") or "").lower())
    return [g.get("index") for g in sorted(gpus, key=key)]


def _cuda_order(topo: dict[str, Any], plan: EnvPlan) -> None:
    rule = "default:cuda_device_order"
    gpus = topo.get("gpus") or []
    pci = [g.get("index") for g in sorted(gpus, key=lambda g: str(g.get("bus_id") or "").lower())]
    cuda = cuda_default_order(gpus)
    if cuda == pci:
        # measured on 2x H200 (benchmarks/results/h200x2/followup.log): both orders name the same GPUs
        plan.skipped.append(Skipped("CUDA_DEVICE_ORDER", "CUDA's default order (compute capability, then PCI bus) "
                                    "is already the PCI order NVML and Slurm use on this node", rule))
        return
    names = {g.get("index"): g.get("name") for g in gpus}
    how = (f"CUDA's default order would be GPUs {cuda} ({names.get(cuda[0])} first)" if cuda
           else "CUDA's default order cannot be told (a compute capability is unknown) and may be another")
    plan.vars.append(EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID",
                            f"this node's GPUs differ ({', '.join(sorted({str(n) for n in names.values()}))}): {how}, "
                            f"not the PCI order {pci} that NVML, nvidia-smi and Slurm's CUDA_VISIBLE_DEVICES use; with "
                            "PCI_BUS_ID, CUDA device N is the GPU everything else calls N (CUDA Programming Guide, "
                            "'CUDA Environment Variables': "
                            "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars)", rule))


def _common(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> None:
    _cuda_order(topo, plan)
    plan.vars.append(EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                            "PyTorch's allocator grows segments instead of fragmenting memory: on a workload of "
                            "variable-length steps it reserved 1.15x the allocated peak instead of 2.08x, and under "
                            "a cap 0 of 200 steps hit OOM instead of 48 (benchmarks/alloc_fragmentation.py, H200; "
                            "PyTorch >= 2.1). The old name is the one every PyTorch "
                            "reads (2.9.1 ignores expandable_segments under PYTORCH_ALLOC_CONF); 2.8-2.11 warn "
                            "that it is deprecated", "default:pytorch_alloc"))
    rule = "default:omp_threads"
    gpt = max(1, shape.gpus_per_task or 1)
    if shape.cpus_per_task:
        plan.vars.append(omp_threads(shape.cpus_per_task, gpt))
    else:
        plan.vars.append(EnvVar("OMP_NUM_THREADS", "", "the task's CPUs divided by its GPUs, decided in each task",
                                rule, per_task="omp_threads"))


def _version_notes(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> None:
    if shape.nccl_version is None:
        return
    plan.notes.append(f"NCCL {_vstr(shape.nccl_version)} found ({shape.nccl_source})")
    hopper = any((g.get("arch") or "").lower() == "hopper" for g in topo.get("gpus") or [])
    if shape.nccl_version == NCCL_LL128_CORRUPTION and hopper:
        plan.notes.append("NCCL 2.18.1 is known to corrupt data on HGX H100 (relaxed ordering + LL128 + Tree): "
                          "upgrade NCCL")


def defaults(topo: dict[str, Any], shape: JobShape) -> EnvPlan:
    """The built-in policy (no admin rules, no user variables)."""
    plan = EnvPlan()
    if not shape.gpus:
        plan.disabled = "no GPU of this node is allocated to the job"
        return plan
    _common(topo, shape, plan)
    if shape.nodes > 1:
        _socket_ifname(topo, shape, plan)
        ordered = _ib(topo, shape, plan)
        _gid_index(ordered, shape, plan)
        if ordered:
            _gdr(topo, shape, ordered, plan)
        fabrics.apply(topo, shape, plan)
    else:
        plan.skipped.append(Skipped("NCCL_SOCKET_IFNAME, NCCL_IB_*", "single-node job: NCCL uses NVLink/PCIe/shared "
                                    "memory and picks its bootstrap interface itself", "default:network"))
    _pcie_notes(topo, shape, plan)
    _version_notes(topo, shape, plan)
    return plan


def apply_rules(plan: EnvPlan, rules: Sequence[RuleLike], facts: dict[str, Any]) -> EnvPlan:
    """Admin rules in order: ``set`` adds or changes, ``forbid`` removes and blocks later sets."""
    forbidden: dict[str, str] = {}
    for r in rules:
        if not r.matches(facts):
            continue
        rule = f"admin:{r.name}"
        for name in r.forbid:
            forbidden[name] = rule
            if plan.get(name):
                plan.vars = [v for v in plan.vars if v.name != name]
                plan.skipped.append(Skipped(name, f"forbidden by admin rule '{r.name}': {r.reason}", rule))
        for name, value in r.set.items():
            if name in forbidden:
                plan.skipped.append(Skipped(name, f"set by rule '{r.name}' but forbidden by {forbidden[name]}", rule))
                continue
            var = EnvVar(name, str(value), r.reason or f"admin rule '{r.name}'", rule)
            old = plan.get(name)
            if old:
                plan.vars[plan.vars.index(old)] = var
            else:
                plan.vars.append(var)
    return plan


def plan(topo: dict[str, Any], shape: JobShape, rules: Sequence[RuleLike] = ()) -> EnvPlan:
    """The job's environment: built-in policy, then admin rules, then the user's own variables win."""
    p = defaults(topo, shape)
    if p.disabled:
        return p
    apply_rules(p, rules, node_facts(topo, shape))
    return drop_user_set(p, shape.user_set)


