"""The controller's edge: fold each arriving node summary into the fingerprints and, under ``fleet.policy
= "drain"``, drain that node when one of its GPUs is now flagged. Never raises into the collector."""

from __future__ import annotations

from typing import Any

from gpuperf.files import log
from gpuperf.fleet import policy
from gpuperf.fleet.fingerprint import FleetStore, default_path
from gpuperf.fleet.ranking import rank


def on_node_summary(cfg: Any, summary: dict[str, Any], slurm: Any = None,
                    store: FleetStore | None = None) -> dict[str, Any]:
    """Fold one node summary; what was done ({"gpus": n, "actions": [...]}, or {"error": ...})."""
    return on_node_summaries(cfg, [summary], slurm, store)


def on_node_summaries(cfg: Any, summaries: list[dict[str, Any]], slurm: Any = None,
                      store: FleetStore | None = None) -> dict[str, Any]:
    """Fold node summaries in one transaction, then rank the GPUs they moved, once each; what was done.

    ``store``: an open FleetStore the caller keeps (the controller service: opening one costs ~3 ms,
    more than the fold, at a hundred summaries a second); left open."""
    lg = log.get("fleet")
    summaries = [s for s in summaries if s.get("fleet")]
    if not summaries:
        return {"gpus": 0, "actions": []}
    own = store is None
    try:
        store = store or FleetStore(default_path(cfg))
        try:
            updated: dict[str, list[dict[str, Any]]] = {}
            n = store.ingest_many(summaries, updated=updated)
            out: dict[str, Any] = {"gpus": n, "actions": []}
            if not n:
                return out
            # the GPUs these summaries moved, each as last folded (the node's others did not change)
            rows = {node: list({(r["idx"], r["uuid"]): r for r in rs}.values()) for node, rs in updated.items()}
            # one read of the sketches for every model of the batch (not one per summary)
            stats = store.model_stats({r["model"] for rs in rows.values() for r in rs})
            ranks = {node: rank(rs, stats, cfg.fleet.z) for node, rs in rows.items()}
            whole: dict[str, list] = {}
            if cfg.fleet.policy == "drain":
                # a drain names the node's worst GPU and counts all its flagged ones, not only those this batch
                # moved (one flagged earlier may have been held by the drain bound); read only for such nodes
                nodes_rows = {node: store.gpus(node) for node, rs in ranks.items() if any(g.flagged for g in rs)}
                more = {r["model"] for rs in nodes_rows.values() for r in rs} - set(stats)
                if more:
                    stats.update(store.model_stats(more))
                whole = {node: rank(rs, stats, cfg.fleet.z) for node, rs in nodes_rows.items()}
        finally:
            if own:
                store.close()
        for node, rs in ranks.items():
            flagged = [g for g in rs if g.flagged]
            for g in flagged:
                lg.warning("fleet: flagged %s", g.headline)
            if flagged and cfg.fleet.policy == "drain":
                from gpuperf.access.slurm import Slurm

                slurm = slurm or Slurm(cfg.general.slurm_bin_dir)
                acts = policy.decide(whole.get(node, rs), slurm.node_reasons(), "drain", cfg.checks.max_drained_share,
                                     only={node})
                out["actions"] += policy.apply(acts, slurm, lg)
        return out
    except Exception as e:  # noqa: BLE001 - the fleet view is a bonus: the summaries are stored regardless
        lg.error("fleet: node summaries of jobs %s not folded: %s: %s",
                 ",".join(str(s.get("job_id")) for s in summaries[:5]), type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {e}"}
