"""The fleet's view of one job's GPUs, for its report: which of them the fleet flags now, and why."""

from __future__ import annotations

import sqlite3
from typing import Any

from gpuperf.fleet.fingerprint import FleetStore, default_path
from gpuperf.fleet.ranking import rank


def job_fleet(cfg: Any, summary: dict[str, Any], path: str | None = None) -> dict[str, Any] | None:
    """{"flagged": [GpuRank dicts of the job's GPUs the fleet flags]}; None when the fleet store cannot be
    read here (a user's report on a node, no controller store): the report then shows XIDs only."""
    want = {(str(g.get("node")), int(g.get("gpu", -1))) for g in summary.get("gpus") or []}
    if not want:
        return None
    try:
        store = FleetStore(path or default_path(cfg), readonly=True)
    except (OSError, ValueError, sqlite3.Error):
        return None
    try:
        rows = [r for node in sorted({n for n, _ in want}) for r in store.gpus(node) if (r["node"], r["idx"]) in want]
        ranks = rank(rows, store.model_stats({r["model"] for r in rows}), cfg.fleet.z)
    except Exception:  # noqa: BLE001 - a locked or older store costs this section, never the report
        return None
    finally:
        store.close()
    return {"flagged": [g.to_dict() for g in ranks if g.flagged]}
