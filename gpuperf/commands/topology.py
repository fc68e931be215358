"""``gpuperf topology``: show this node's topology (text or --json), read a recorded node, or record one."""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf topology``."""
    p.add_argument("--json", action="store_true", help="print the gpuperf.topology.v1 JSON")
    p.add_argument("--root", metavar="DIR", help="read a recorded node (DIR/sys, DIR/gpus.json) instead of the live one")
    p.add_argument("--record", metavar="DIR", help="record the live node's sysfs subset and NVML snapshot into DIR")
    p.add_argument("--gpus-json", action="store_true", help="print the NVML snapshot (gpuperf.gpus.v1) instead")


def _configured_root() -> str:
    # the recorder runs on bare GPU machines: a config that cannot be loaded must not stop it
    try:
        from gpuperf.files import config

        return config.load_or_defaults().general.node_root
    except Exception:  # noqa: BLE001
        return os.environ.get("GPUPERF_SYSFS_ROOT", "")


def run(args: argparse.Namespace) -> int:
    """Entry of ``gpuperf topology``."""
    from gpuperf.topology import load_node, render

    if args.record:
        from gpuperf.topology.record import RecordError, record

        try:
            topo = record(args.record)
        except (RecordError, OSError) as e:
            print(f"gpuperf topology: cannot record: {e}", file=sys.stderr)
            return 1
        print(f"recorded {len(topo['gpus'])} GPU(s), {len(topo['nics'])} NIC(s) into {os.path.abspath(args.record)}")
        return 0
    root = args.root if args.root is not None else _configured_root()
    if root and not os.path.isdir(os.path.join(root, "sys")):
        print(f"gpuperf topology: {root} is not a recorded node (no {os.path.join(root, 'sys')})", file=sys.stderr)
        return 2
    node = load_node(root)
    if args.gpus_json:
        print(json.dumps(node.gpus, indent=1))
    elif args.json:
        print(json.dumps(node.topology, indent=1))
    else:
        sys.stdout.write(render.render(node.topology))
    return 0
