"""Node topology: GPUs, NUMA, CPUs, NICs, PCIe paths/ACS and GPUDirect RDMA, live or from a recorded node.

Public API (importing this package is cheap: pynvml is imported only for a live read)::

    from gpuperf.topology import load_node
    node = load_node(cfg.general.node_root)   # "" / None: live (/sys + NVML); "DIR": DIR/sys + DIR/gpus.json
    node.topology   # dict, schema gpuperf.topology.v1 (docs/CONTRACTS.md); node.topology["notes"]: what was unknown and why
    node.gpus       # dict, schema gpuperf.gpus.v1: the NVML snapshot incl. live health state
                    #   (ECC, row remap, retired pages, NVLink link states/errors, persistence, throttle, PCIe).
                    #   NVML unavailable: {"error": "...", "gpus": []}; one broken GPU: {"index": i, "error": "..."}
    node.root       # the recorded DIR, or None when live

Other entry points: ``discover.discover(Root, snapshot)`` (pure assembly), ``nvmlsnap.snapshot()``
(live NVML only), ``record.record(DIR)`` (write a recorded node), ``render.render(topology)`` (text).
A recorded node is ``DIR/sys/...`` (the sysfs subset read), ``DIR/proc/sys/kernel/hostname``,
``DIR/net.json`` (IPv4 addresses) and ``DIR/gpus.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

GPUS_JSON = "gpus.json"


@dataclass
class Node:
    """One node's topology and NVML snapshot, read together."""

    topology: dict[str, Any]
    gpus: dict[str, Any]
    root: str | None


def load_snapshot(root: str | None, health: bool = True) -> dict[str, Any]:
    """The gpus.json dict: from ``root/gpus.json`` when root is set, else live NVML. Never raises."""
    from gpuperf.topology import nvmlsnap

    if not root:
        return nvmlsnap.snapshot(health=health)
    path = os.path.join(root, GPUS_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            snap = json.load(f)
    except FileNotFoundError:
        return nvmlsnap.empty(f"{path}: no NVML snapshot recorded")
    except (OSError, ValueError) as e:
        return nvmlsnap.empty(f"{path}: unreadable NVML snapshot ({e})")
    if not isinstance(snap, dict) or not isinstance(snap.get("gpus", []), list):
        return nvmlsnap.empty(f"{path}: not a gpuperf.gpus.v1 object")
    snap.setdefault("gpus", [])
    return snap


def load_node(root: str | None = None, health: bool = True) -> Node:
    """Read the node: live when ``root`` is empty, else the recorded node in ``root``. Never raises on bad data."""
    from gpuperf.topology.discover import discover
    from gpuperf.topology.sysfs import Root

    root = root or None
    snap = load_snapshot(root, health=health)
    topo = discover(Root(root or "/"), snap, source=root or "live")
    return Node(topology=topo, gpus=snap, root=root)


_ONCE: dict[tuple[str | None, bool], Node] = {}


def load_node_once(root: str | None = None, health: bool = True) -> Node:
    """``load_node`` memoised for the life of a short process: one hook run reads the node once.

    A read with health state also serves a later request without it. Long-running processes
    (the daemon) must call ``load_node`` so they see the node change.
    """
    key = root or None
    node = _ONCE.get((key, True)) or _ONCE.get((key, health))
    if node is None:
        node = _ONCE[(key, health)] = load_node(key, health=health)
    return node


def remember(node: Node, root: str | None = None) -> None:
    """Make ``node`` (read with health state) what ``load_node_once`` returns for ``root`` from now on:
    the daemon refreshes it with every health check, so the prolog steps it runs see a fresh node."""
    _ONCE[(root or None, True)] = node


def node_root(cfg: Any = None) -> str:
    """The configured node root: ``cfg.general.node_root`` (which already honours $GPUPERF_SYSFS_ROOT), else the env."""
    if cfg is not None:
        try:
            return str(cfg.general.node_root or "")
        except AttributeError:
            pass
    return os.environ.get("GPUPERF_SYSFS_ROOT", "")
