"""Pure decisions around the checks' results: the drain reason, the safety bound, and whether a node may resume."""

from __future__ import annotations

from dataclasses import dataclass

from gpuperf.checks.base import CheckResult

PREFIX = "gpuperf:"
MAX_REASON = 240  # sinfo -R shows it whole; keep it one readable line


def drain_reason(failing: list[CheckResult]) -> str:
    """'gpuperf: <code>: <detail>' of the first failure, naming the other failing codes."""
    first = failing[0]
    more = f" (+{len(failing) - 1} more: {', '.join(r.code for r in failing[1:])})" if len(failing) > 1 else ""
    # Slurm keeps the reason verbatim; newlines and '|' would break sinfo's one-line output
    detail = " ".join(first.detail.replace("|", "/").split())
    room = MAX_REASON - len(f"{PREFIX} {first.code}: ") - len(more)
    if len(detail) > room:
        detail = detail[: max(room - 3, 0)] + "..."
    return f"{PREFIX} {first.code}: {detail}{more}"


def is_drained(state: str) -> bool:
    """sinfo's %T of a node that takes no new jobs because of a drain (drained, draining, drain)."""
    return "drain" in state.lower()


@dataclass(frozen=True)
class DrainBound:
    """The cluster-wide safety bound: how many nodes gpuperf has drained, of how many."""

    drained_by_gpuperf: int
    nodes: int
    max_share: float

    @property
    def share(self) -> float:
        """Share of the cluster's nodes drained by gpuperf now."""
        return self.drained_by_gpuperf / self.nodes if self.nodes else 0.0

    @property
    def allows(self) -> bool:
        """False while more than ``max_share`` of the nodes are drained by gpuperf."""
        return self.share <= self.max_share

    def describe(self) -> str:
        """One line for the log and the job's record."""
        return (f"{self.drained_by_gpuperf} of {self.nodes} nodes drained by gpuperf "
                f"({self.share:.0%}, bound checks.max_drained_share={self.max_share:.0%})")


def drain_bound(nodes: dict[str, tuple[str, str]], max_share: float) -> DrainBound:
    """The bound from ``Slurm.node_reasons()`` (node -> (state, reason))."""
    ours = sum(1 for state, reason in nodes.values() if is_drained(state) and reason.startswith(PREFIX))
    return DrainBound(ours, len(nodes), max_share)


def resume_decision(state: str, reason: str, results: list[CheckResult]) -> tuple[bool, str]:
    """Resume only a node gpuperf drained, and only when no check fails or errs now."""
    if not is_drained(state):
        return False, f"node is not drained (state {state})"
    if not reason.startswith(PREFIX):
        return False, f"drained for another reason, left alone: {reason or '(none)'}"
    bad = [r for r in results if r.status in ("fail", "error")]
    if bad:
        return False, "checks still not passing: " + ", ".join(f"{r.code} {r.status}" for r in bad)
    return True, f"all checks pass; was drained with: {reason}"
