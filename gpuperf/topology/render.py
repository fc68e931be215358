"""The topology dict as text for people (``gpuperf topology``)."""

from __future__ import annotations

from typing import Any


def cpulist(cpus: list[int] | None) -> str:
    """Sorted ints -> kernel list form ``0-55,112-167``; ``?`` when unknown."""
    if cpus is None:
        return "?"
    if not cpus:
        return "-"
    ranges, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:  # type: ignore[list-item]
        if c is not None and c == prev + 1:
            prev = c
            continue
        ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(ranges)


def _v(x: Any, unit: str = "") -> str:
    return "?" if x is None else f"{x}{unit}"


def _link(p: dict[str, Any]) -> str:
    cur = f"gen{_v(p.get('gen'))} x{_v(p.get('width'))}"
    top = f"gen{_v(p.get('max_gen'))} x{_v(p.get('max_width'))}"
    return cur if cur == top else f"{cur} (max {top})"


def _nvlink(nv: dict[str, Any]) -> str:
    links = nv.get("links")
    if links is None:
        return "?"
    if links == 0:
        return "none"
    via = {True: " via NVSwitch", False: " direct", None: ""}[nv.get("via_switch")]
    peers = nv.get("peers")
    to = "?" if peers is None else (",".join(map(str, peers)) or "-")
    return f"{links} links{via} -> GPU {to}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _acs(b: dict[str, Any]) -> str:
    state = {True: "ACS ON", False: "acs off", None: "acs ?"}[b.get("acs_enabled")]
    return f"{b['bus_id']} ({state})"


def render(t: dict[str, Any]) -> str:
    """Readable multi-line text of a ``gpuperf.topology.v1`` dict."""
    out = [f"node {_v(t.get('hostname'))}  source {t.get('source')}  driver {_v(t.get('driver_version'))}"]
    gpus = t.get("gpus") or []
    out.append(f"GPUs ({len(gpus)})")
    if gpus:
        rows = [["idx", "name", "bus id", "arch", "numa", "cpus", "pcie", "nvlink"]]
        for g in gpus:
            rows.append([str(g["index"]), _v(g.get("name")), _v(g.get("bus_id")), _v(g.get("arch")),
                         _v(g.get("numa_node")), cpulist(g.get("cpus")), _link(g.get("pcie") or {}),
                         _nvlink(g.get("nvlink") or {})])
        out += _table(rows)
    out.append(f"NUMA nodes ({len(t.get('numa_nodes') or [])})")
    for n in t.get("numa_nodes") or []:
        mem = n.get("mem_total_mib")
        out.append(f"  {n['id']}: cpus {cpulist(n.get('cpus'))}  memory {'?' if mem is None else f'{mem / 1024:.1f} GiB'}")
    nics = t.get("nics") or []
    out.append(f"NICs ({len(nics)})")
    if nics:
        rows = [["name", "kind", "state", "rate", "numa", "bus id", "netdev", "rocev2 gid", "ipv4"]]
        for n in nics:
            rate = n.get("rate_gbps")
            rows.append([f"{n['name']}" + (f"/{n['port']}" if n.get("port") else ""), _v(n.get("kind")),
                         _v(n.get("state")), "?" if rate is None else f"{rate:g} Gb/s", _v(n.get("numa_node")),
                         _v(n.get("bus_id")), _v(n.get("netdev")),
                         _v(n.get("gid_index_rocev2")) if n.get("kind") == "roce" else "-",
                         "?" if n.get("ipv4") is None else (",".join(n["ipv4"]) or "-")])
        out += _table(rows)
    out.append("PCIe paths (device <- bridges up to the root port)")
    for dev, path in (t.get("pcie_paths") or {}).items():
        out.append(f"  {dev}: " + ("?" if path is None else (" <- ".join(_acs(b) for b in path) or "on the root bus")))
    gdr = t.get("gdr") or {}
    state = {True: "loaded", False: "not loaded", None: "unknown"}[gdr.get("loaded")]
    out.append(f"GPUDirect RDMA: {_v(gdr.get('module'))} {state}")
    gds = t.get("gds") or {}
    state = {True: "loaded", False: "not loaded", None: "unknown"}[gds.get("loaded")]
    version = f" (version {gds['version']})" if gds.get("version") else ""
    out.append(f"GPUDirect Storage: {_v(gds.get('module'))} {state}{version}")
    for note in t.get("notes") or []:
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"
