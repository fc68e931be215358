"""``gpuperf fleet [--json] [--limit N] [--apply]``: GPUs and nodes ranked by how far they fall from their
model's fleet median, with the evidence (admins; reads the controller's fleet store)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys

from gpuperf.files import config as config_mod
from gpuperf.files import log
from gpuperf.jobrecords import is_admin
from gpuperf.fleet import policy
from gpuperf.fleet.fingerprint import FleetStore, default_path
from gpuperf.fleet.ranking import GpuRank, rank, rank_nodes


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf fleet``."""
    p.add_argument("--json", action="store_true", help="GPUs, nodes and model medians as JSON")
    p.add_argument("--limit", type=int, default=20, help="at most this many GPUs and nodes (0: all; default 20)")
    p.add_argument("--apply", action="store_true",
                   help="carry out fleet.policy now: drain nodes with flagged GPUs (policy drain), resume those cleared")
    p.add_argument("--store", help="fleet store to read (default: fleet.store)")


def build(store: FleetStore, z: float) -> tuple[list[GpuRank], list[dict], dict]:
    """(GPU ranks, node ranks, model stats) over the whole fleet."""
    stats = store.model_stats()
    ranks = rank(store.gpus(), stats, z)
    return ranks, rank_nodes(ranks), stats


def render(ranks: list[GpuRank], nodes: list[dict], stats: dict, limit: int) -> str:
    """The terminal listing: flagged GPUs with evidence, then the worst nodes, then each model's medians."""
    lim = limit or None
    flagged = [g for g in ranks if g.flagged]
    lines = [f"{len(ranks)} GPUs on {len(nodes)} nodes; {len(flagged)} flagged"]
    lines.append(f"\n{'SCORE':>6}  {'FLAG':<4}  GPU")
    for g in ranks[:lim]:
        lines.append(f"{g.score:>6.1f}  {'yes' if g.flagged else '':<4}  {g.headline}")
    lines.append(f"\n{'NODE':<16} {'FLAGGED':>7} {'SCORE':>6}")
    for n in nodes[:lim]:
        lines.append(f"{n['node']:<16} {n['flagged']:>7} {n['score']:>6.1f}")
    lines.append("\nmodel medians (p25-p75):")
    for model, ms in sorted(stats.items()):
        parts = [f"{m} {s['median']:.1f} ({s['p25']:.1f}-{s['p75']:.1f}, {s['n']} GPUs)" for m, s in sorted(ms.items())]
        lines.append(f"  {model}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Rank the fleet; 0 on success, 1 when the store cannot be read or the caller is no admin."""
    cfg = config_mod.load()
    if not is_admin(cfg, os.getuid()):
        print("gpuperf fleet: for admins (general.admin_users)", file=sys.stderr)
        return 1
    path = args.store or default_path(cfg)
    try:
        store = FleetStore(path, readonly=not args.apply)
        try:
            ranks, nodes, stats = build(store, cfg.fleet.z)
        finally:
            store.close()
    except (OSError, ValueError, sqlite3.Error) as e:  # missing, unreadable, not a database
        print(f"gpuperf fleet: cannot read the fleet store {path}: {e}", file=sys.stderr)
        return 1
    actions: list[dict] = []
    if args.apply:
        from gpuperf.access.slurm import Slurm, SlurmError

        slurm = Slurm(cfg.general.slurm_bin_dir)
        try:
            acts = policy.decide(ranks, slurm.node_reasons(), cfg.fleet.policy, cfg.checks.max_drained_share)
        except SlurmError as e:
            print(f"gpuperf fleet: cannot read node states: {e}", file=sys.stderr)
            return 1
        actions = policy.apply(acts, slurm, log.get("fleet"))
    lim = args.limit or None
    if args.json:
        out = {"gpus": [g.to_dict() for g in ranks[:lim]], "nodes": nodes[:lim], "models": stats,
               "flagged": sum(g.flagged for g in ranks), "total_gpus": len(ranks), "actions": actions}
        sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(render(ranks, nodes, stats, args.limit))
        for a in actions:
            sys.stdout.write(f"{a['action']} {a['node']}: {a.get('reason', '')}"
                             f"{' (' + a['why'] + ')' if a.get('why') else ''}{' ERROR ' + a['error'] if a.get('error') else ''}\n")
    return 0
