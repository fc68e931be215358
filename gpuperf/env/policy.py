"""The NCCL/CUDA environment for a job: node topology + job shape -> variables, each with its reason.

Pure: no I/O. The policy sets only what the node's system configuration decides (which
interface, which HCAs, which GID index, GPUDirect RDMA) plus allocator and thread defaults, and
never NCCL's algorithm or protocol (FACTS.md: forcing ``NCCL_ALGO=Tree`` costs about 30% of
all-reduce bandwidth on 4xH200). Admin rules (``gpuperf.env.rules``) then add, change or forbid
variables; a variable the user set always wins over both.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable, Mapping, NamedTuple, Protocol, Sequence

SCHEMA = "gpuperf.env.v1"
# exported with the variables: NAME:crc32 of each value gpuperf set, so a later step (srun inside a
# batch script, gpuperf-run inside a task) can tell gpuperf's values from the user's own
MARKER = "GPUPERF_ENV_SET"
USER_WINS = "the job set it: the user's value wins"
# other names of the same setting: a user who set one of them has decided it
ALIASES = {"PYTORCH_CUDA_ALLOC_CONF": ("PYTORCH_ALLOC_CONF",)}
AFFINITY_OMP_MARKER = "GPUPERF_OMP"  # the affinity SPANK plugin's record of the OpenMP values it set

# Workload decisions and switches that can disable a transport: an admin rule needs ``force = true``
# to set them (the reason says what goes wrong). The defaults set none of them, except
# NCCL_NET_GDR_LEVEL=PXB, NCCL's own default, where the topology warrants it (see _gdr).
FORCE_REQUIRED: dict[str, str] = {
    "NCCL_ALGO": "forcing an algorithm loses bandwidth at other sizes (Tree: about -30% at >= 32 MiB on 4xH200)",
    "NCCL_PROTO": "forcing a protocol helps some sizes and hurts others",
    "NCCL_P2P_LEVEL": "a wrong level disables NVLink/PCIe peer-to-peer (LOC disables NVLink)",
    "NCCL_P2P_DISABLE": "disables GPU peer-to-peer, NVLink included",
    "NCCL_SHM_DISABLE": "disables shared-memory transport",
    "NCCL_IB_DISABLE": "disables InfiniBand/RoCE",
    "NCCL_NET_GDR_LEVEL": "a wrong level disables GPUDirect RDMA (LOC)",
    "NCCL_NVLS_ENABLE": "NVLink SHARP costs GPU memory; a workload decision",
    "NCCL_MIN_NCHANNELS": "channel counts are a workload decision",
    "NCCL_MAX_NCHANNELS": "channel counts are a workload decision",
    "NCCL_BUFFSIZE": "buffer size is a workload decision",
    "NCCL_NTHREADS": "thread count is a workload decision",
    "NCCL_LAUNCH_MODE": "launch mode is a workload decision",
    "CUDA_DEVICE_MAX_CONNECTIONS": "Megatron tensor-parallel overlap wants 1, FSDP wants more than 1",
    "CUDA_VISIBLE_DEVICES": "Slurm assigns the job's GPUs",
}

# Variable classes gpuperf may inject: a name outside them (LD_PRELOAD, PATH, ...) is refused.
VARIABLE_CLASSES: dict[str, str] = {
    "NCCL_": "NCCL",
    "CUDA_": "CUDA runtime",
    "PYTORCH_": "PyTorch",
    "TORCH_": "PyTorch",
    "OMP_": "OpenMP",
    "UCX_": "UCX",
    "FI_": "libfabric (EFA)",
    "NVSHMEM_": "NVSHMEM",
    "GLOO_": "Gloo",
    "MKL_": "MKL",
}

# Interfaces that never carry the cluster address (containers, VMs, tunnels).
VIRTUAL_IFACE_PREFIXES = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "kube")

GID_AUTO_NCCL = (2, 21, 0)  # NCCL finds the RoCE v2 GID index itself from here on (IB_GID_INDEX default -1)
NCCL_LL128_CORRUPTION = (2, 18, 1)  # FACTS.md: relaxed ordering + LL128 + Tree corrupted data on HGX H100


# NamedTuples and a plain class rather than dataclasses: the TaskProlog imports this module, and
# dataclasses (with inspect) alone costs more than a third of its 50 ms budget
class EnvVar(NamedTuple):
    """One variable to inject, why, and which rule produced it."""

    name: str
    value: str
    reason: str
    rule: str
    # applies only while the job's NCCL is older than this; unknown version: applies
    nccl_below: tuple[int, int, int] | None = None
    # the value is decided in each task from the task's own facts ("omp_threads"), not here
    per_task: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        d = self._asdict()
        d["nccl_below"] = list(self.nccl_below) if self.nccl_below else None
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "EnvVar":
        """Inverse of to_dict."""
        below = d.get("nccl_below")
        return EnvVar(d["name"], str(d["value"]), d.get("reason", ""), d.get("rule", ""),
                      tuple(below) if below else None, d.get("per_task"))


class Skipped(NamedTuple):
    """A variable the policy considered and did not set, and why."""

    name: str
    reason: str
    rule: str


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


class EnvPlan:
    """The ordered variables for one job on one node, with what was skipped and notes for the report."""

    def __init__(self, vars: list[EnvVar] | None = None, skipped: list[Skipped] | None = None,
                 notes: list[str] | None = None, disabled: str | None = None):
        self.vars = list(vars or [])
        self.skipped = list(skipped or [])
        self.notes = list(notes or [])
        self.disabled = disabled  # why nothing is injected (config error, opt-out), else None

    def __repr__(self) -> str:
        return f"EnvPlan(vars={self.vars!r}, skipped={self.skipped!r}, notes={self.notes!r}, disabled={self.disabled!r})"

    def names(self) -> list[str]:
        """Names of the variables to inject, in order."""
        return [v.name for v in self.vars]

    def get(self, name: str) -> EnvVar | None:
        """The variable called ``name``, if the plan sets it."""
        return next((v for v in self.vars if v.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the env.json cache and the report)."""
        return {"schema": SCHEMA, "vars": [v.to_dict() for v in self.vars],
                "skipped": [s._asdict() for s in self.skipped], "notes": list(self.notes), "disabled": self.disabled}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "EnvPlan":
        """Inverse of to_dict; raises ValueError on another schema."""
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} plan: {d.get('schema')!r}")
        return EnvPlan([EnvVar.from_dict(v) for v in d.get("vars", [])],
                       [Skipped(**s) for s in d.get("skipped", [])], list(d.get("notes", [])), d.get("disabled"))


class RuleLike(Protocol):
    """What the policy needs from an admin rule (``gpuperf.env.rules.Rule``)."""

    name: str
    set: dict[str, str]
    forbid: tuple[str, ...]
    reason: str

    def matches(self, facts: dict[str, Any]) -> bool: ...


# --- small readers of the topology value ------------------------------------------------------------

def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """'2.21.5' or '2.21.5-1+cuda12.4' -> (2, 21, 5); None when it does not look like one."""
    if not text:
        return None
    head = text.strip().split("-")[0].split("+")[0]
    parts = head.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:3]):
        return None
    nums = [int(p) for p in parts[:3]] + [0] * (3 - len(parts[:3]))
    return (nums[0], nums[1], nums[2])


def _vstr(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


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
                                    f"transport use it instead of guessing (never lo, docker, veth, virbr)", rule))
            return
    if len(candidates) == 1:
        iface, addrs = candidates[0]
        plan.vars.append(EnvVar("NCCL_SOCKET_IFNAME", f"={iface}",
                                f"{iface} ({addrs[0]}) is the only physical interface with an IPv4 address", rule))
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
        if any(n.get("kind") == "efa" for n in topo.get("nics") or []):
            plan.notes.append("EFA NICs: NCCL reaches them through the aws-ofi-nccl plugin; gpuperf sets no "
                              "network variables for them")
        plan.skipped.append(Skipped("NCCL_IB_HCA", "no active InfiniBand/RoCE port on this node", rule))
        return []
    ordered = rail_order(topo, nics)
    # '=' makes NCCL match names exactly: without it mlx5_1 would also select mlx5_10..mlx5_17
    value = "=" + ",".join(f"{n['name']}:{n.get('port') or 1}" for n in ordered)
    kinds = "/".join(sorted({n["kind"] for n in ordered})).replace("ib", "InfiniBand").replace("roce", "RoCE")
    plan.vars.append(EnvVar("NCCL_IB_HCA", value,
                            f"the {len(ordered)} active {kinds} port(s) of this node in rail order (nearest to GPU 0 "
                            f"first, by PCIe path); inactive or absent ports are left out", rule))
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
                            f"NCCL before {_vstr(GID_AUTO_NCCL)} would use index 0 (RoCE v1 / link-local)",
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
                            "default, set so that a stale image or nccl.conf value (LOC) cannot switch it off", rule))


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


def _common(topo: dict[str, Any], shape: JobShape, plan: EnvPlan) -> None:
    plan.vars.append(EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID",
                            "CUDA's default order (fastest first) can differ from the PCI order that nvidia-smi, "
                            "NVML and Slurm use; with PCI_BUS_ID, CUDA device N is the GPU everything else calls N",
                            "default:cuda_device_order"))
    plan.vars.append(EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                            "PyTorch's allocator grows segments instead of fragmenting memory (fewer OOMs and "
                            "cache flushes in training; PyTorch >= 2.1). The old name is the one every PyTorch "
                            "reads (2.9.1 ignores expandable_segments under PYTORCH_ALLOC_CONF); 2.8-2.11 warn "
                            "that it is deprecated", "default:pytorch_alloc"))
    rule = "default:omp_threads"
    gpt = max(1, shape.gpus_per_task or 1)
    if shape.cpus_per_task:
        plan.vars.append(omp_threads(shape.cpus_per_task, gpt))
    else:
        plan.vars.append(EnvVar("OMP_NUM_THREADS", "", "the task's CPUs divided by its GPUs, decided in each task",
                                rule, per_task="omp_threads"))


def omp_threads(cpus_per_task: int, gpus_per_task: int = 1) -> EnvVar:
    """OMP_NUM_THREADS for a task with these CPUs and GPUs: its CPUs, shared among its GPUs' processes."""
    gpt = max(1, gpus_per_task)
    n = max(1, cpus_per_task // gpt)
    why = f"the task has {cpus_per_task} CPU(s)"
    if gpt > 1:
        why += (f" and {gpt} GPUs; launchers (torchrun, mp.spawn) start one process per GPU that inherits this "
                f"value, so each gets {n}")
    why += "; unset, OpenMP starts one thread per CPU of the whole node and oversubscribes a shared node"
    return EnvVar("OMP_NUM_THREADS", str(n), why, "default:omp_threads")


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


def drop_user_set(plan: EnvPlan, user_set: Iterable[str]) -> EnvPlan:
    """A variable the user set always wins (under any of its names): drop it from the plan and say so."""
    mine = set(user_set)
    for v in [v for v in plan.vars if v.name in mine or mine.intersection(ALIASES.get(v.name, ()))]:
        plan.vars.remove(v)
        plan.skipped.append(Skipped(v.name, USER_WINS, v.rule))
    return plan


def off_reason(config_error: str | None, enabled: bool, gpuperf_opt: str | None) -> str | None:
    """Why nothing is injected for a job (broken config, disabled, the job's GPUPERF=off), or None."""
    if config_error:
        # the admin's policy is unknown: injecting defaults could set what a rule forbids
        return f"config error, nothing injected: {config_error}"
    if not enabled:
        return "env injection disabled in the config ([env] enabled = false)"
    if (gpuperf_opt or "").strip().lower() in ("off", "0", "no", "false"):
        return "the job turned gpuperf off (GPUPERF=off / --gpuperf=off)"
    return None


def plan(topo: dict[str, Any], shape: JobShape, rules: Sequence[RuleLike] = ()) -> EnvPlan:
    """The job's environment: built-in policy, then admin rules, then the user's own variables win."""
    p = defaults(topo, shape)
    if p.disabled:
        return p
    apply_rules(p, rules, node_facts(topo, shape))
    return drop_user_set(p, shape.user_set)


def finalize_task(p: EnvPlan, user_set: Iterable[str], cpus_per_task: int | None, gpus_per_task: int,
                  nccl_version: tuple[int, int, int] | None, nccl_source: str | None = None) -> EnvPlan:
    """Per task: decide per-task values, drop what the found NCCL no longer needs, let the user's variables win."""
    out = EnvPlan(skipped=list(p.skipped), notes=list(p.notes), disabled=p.disabled)
    for v in p.vars:
        if v.nccl_below and nccl_version and nccl_version >= v.nccl_below:
            out.skipped.append(Skipped(v.name, f"NCCL {_vstr(nccl_version)} ({nccl_source}) decides it itself "
                                       f"(since {_vstr(v.nccl_below)})", v.rule))
            continue
        if v.per_task == "omp_threads":
            if not cpus_per_task:
                out.skipped.append(Skipped(v.name, "the task's CPU count is unknown", v.rule))
                continue
            v = omp_threads(cpus_per_task, gpus_per_task)
        out.vars.append(v)
    if nccl_version:
        out.notes.append(f"NCCL {_vstr(nccl_version)} found ({nccl_source})")
    return drop_user_set(out, user_set)


def _crc(value: str) -> str:
    return f"{zlib.crc32(value.encode('utf-8', 'surrogateescape')):08x}"


def marker(exports: Sequence[tuple[str, str]]) -> str:
    """The MARKER value for these exports."""
    return ",".join(f"{n}:{_crc(v)}" for n, v in exports)


def affinity_omp_marker(threads: str) -> str:
    """GPUPERF_OMP for an OMP_NUM_THREADS gpuperf exported: tells the affinity SPANK plugin it may refine it."""
    return f"{threads} none"


def _marked(environ: Mapping[str, str]) -> dict[str, str]:
    ours: dict[str, str] = {}
    for item in (environ.get(MARKER) or "").split(","):
        name, _, crc = item.partition(":")
        if name and crc:
            ours[name] = crc
    return ours


def injected(environ: Mapping[str, str]) -> list[str]:
    """Variables that still hold the value gpuperf exported (an earlier step's injection, inherited)."""
    return [n for n, crc in _marked(environ).items() if n in environ and _crc(environ[n]) == crc]


def user_set(environ: Mapping[str, str]) -> frozenset[str]:
    """Variables of the classes gpuperf injects that the user set (not values gpuperf itself exported)."""
    ours = _marked(environ)
    # the affinity plugin marks the OpenMP values it set as "<threads> <places>" in GPUPERF_OMP
    omp = (environ.get(AFFINITY_OMP_MARKER) or "").split(" ", 1)
    theirs = {"OMP_NUM_THREADS": omp[0], "OMP_PLACES": omp[1] if len(omp) > 1 else None}
    prefixes = tuple(VARIABLE_CLASSES)
    return frozenset(k for k, v in environ.items()
                     if k.startswith(prefixes) and not (k in ours and ours[k] == _crc(v))
                     and not (omp[0] and theirs.get(k) == v))
