"""What the fleet policy does about flagged GPUs: warn only, or drain the node with ``gpuperf: gpu_slow:
<evidence>`` under the health checks' drained-share bound, and resume a node it drained once no GPU of
it is flagged any more. Pure decisions here; ``apply`` is the one edge that calls Slurm."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.policy import MAX_REASON, PREFIX, drain_bound, is_drained
from gpuperf.fleet.ranking import GpuRank

CODE = "gpu_slow"
REASON_PREFIX = f"{PREFIX} {CODE}:"


def drain_reason(flagged: list[GpuRank]) -> str:
    """'gpuperf: gpu_slow: <worst GPU's evidence>' on one line, at most MAX_REASON characters."""
    worst = max(flagged, key=lambda g: g.score)
    more = f" (+{len(flagged) - 1} more GPU)" if len(flagged) > 1 else ""
    detail = " ".join(worst.headline.replace("|", "/").split())   # sinfo prints the reason on one line
    room = MAX_REASON - len(REASON_PREFIX) - 1 - len(more)
    if len(detail) > room:
        detail = detail[: max(room - 3, 0)] + "..."
    return f"{REASON_PREFIX} {detail}{more}"


def decide(ranks: list[GpuRank], nodes: dict[str, tuple[str, str]], policy: str, max_share: float,
           only: set[str] | None = None) -> list[dict[str, Any]]:
    """Actions for the nodes (``only``: these nodes): drain / resume / warn / held (bound reached)."""
    flagged: dict[str, list[GpuRank]] = {}
    for g in ranks:
        if g.flagged:
            flagged.setdefault(g.node, []).append(g)
    actions: list[dict[str, Any]] = []
    bound = drain_bound(nodes, max_share)
    drained_now = bound.drained_by_gpuperf
    for node in sorted(set(flagged) | set(nodes)):
        if only is not None and node not in only:
            continue
        state, reason = nodes.get(node, ("unknown", ""))
        gs = flagged.get(node)
        if gs:
            text = drain_reason(gs)
            if policy != "drain":
                actions.append({"node": node, "action": "warn", "reason": text})
            elif is_drained(state):
                continue  # drained already, by us or an admin: nothing to add
            elif node not in nodes:
                actions.append({"node": node, "action": "warn", "reason": text + " (node unknown to Slurm)"})
            elif (drained_now + 1) / max(len(nodes), 1) > max_share:
                actions.append({"node": node, "action": "held", "reason": text,
                                "why": f"{drained_now} of {len(nodes)} nodes drained by gpuperf "
                                       f"(bound checks.max_drained_share={max_share:.0%})"})
            else:
                drained_now += 1
                actions.append({"node": node, "action": "drain", "reason": text})
        elif is_drained(state) and reason.startswith(REASON_PREFIX):
            actions.append({"node": node, "action": "resume", "reason": reason,
                            "why": "no GPU of the node is flagged any more"})
    return actions


def apply(actions: list[dict[str, Any]], slurm: Any, log: Any) -> list[dict[str, Any]]:
    """Carry out drain/resume actions; each gets ``done`` (and ``error`` when Slurm refused)."""
    for a in actions:
        if a["action"] not in ("drain", "resume"):
            a["done"] = False
            continue
        try:
            if a["action"] == "drain":
                slurm.drain(a["node"], a["reason"])
            else:
                slurm.resume(a["node"])
            a["done"] = True
            log.warning("fleet: %s %s: %s", a["action"], a["node"], a["reason"])
        except Exception as e:  # noqa: BLE001 - a Slurm refusal is reported, never raised into the collector
            a["done"], a["error"] = False, f"{type(e).__name__}: {e}"
    return actions
