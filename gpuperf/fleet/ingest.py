"""The controller's edge: fold each arriving node summary into the fingerprints and, under ``fleet.policy
= "drain"``, drain that node when one of its GPUs is now flagged. Never raises into the collector."""

from __future__ import annotations

from typing import Any

from gpuperf import log
from gpuperf.fleet import policy
from gpuperf.fleet.fingerprint import FleetStore, default_path
from gpuperf.fleet.ranking import GpuRank, rank


def node_ranks(store: FleetStore, node: str, z: float) -> list[GpuRank]:
    """The ranks of one node's GPUs against their models' fleet stats (no scan of the fleet)."""
    rows = store.gpus(node)
    return rank(rows, store.model_stats({r["model"] for r in rows}), z)


def on_node_summary(cfg: Any, summary: dict[str, Any], slurm: Any = None,
                    store: FleetStore | None = None) -> dict[str, Any]:
    """Fold one node summary; what was done ({"gpus": n, "actions": [...]}, or {"error": ...}).

    ``store``: an open FleetStore the caller keeps (the controller service: opening one costs ~3 ms,
    more than the fold, at a hundred summaries a second); left open."""
    lg = log.get("fleet")
    if not summary.get("fleet"):
        return {"gpus": 0, "actions": []}
    own = store is None
    try:
        store = store or FleetStore(default_path(cfg))
        try:
            n = store.ingest(summary)
            out: dict[str, Any] = {"gpus": n, "actions": []}
            node = str((summary.get("nodes") or [""])[0])
            if not n:
                return out
            ranks = node_ranks(store, node, cfg.fleet.z)
        finally:
            if own:
                store.close()
        flagged = [g for g in ranks if g.flagged]
        for g in flagged:
            lg.warning("fleet: flagged %s", g.headline)
        if flagged and cfg.fleet.policy == "drain":
            from gpuperf.slurm import Slurm

            slurm = slurm or Slurm(cfg.general.slurm_bin_dir)
            acts = policy.decide(ranks, slurm.node_reasons(), "drain", cfg.checks.max_drained_share, only={node})
            out["actions"] = policy.apply(acts, slurm, lg)
        return out
    except Exception as e:  # noqa: BLE001 - the fleet view is a bonus: the summary is stored regardless
        lg.error("fleet: node summary of job %s not folded: %s: %s", summary.get("job_id"), type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {e}"}
