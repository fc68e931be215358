"""``gpuperf tune``'s decision: does a candidate variable win clearly enough to become a policy rule?

Pure. A candidate wins when, at every size that matters, its median bus bandwidth beats the
baseline's by more than the run-to-run spread of either, and it loses nowhere at or above 1 MiB
(a deficit larger than the spread, or more than 2%, is a loss).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuperf.env.ncclbench import MIB, SetResult, human

MAX_TOLERATED_LOSS = 0.02  # even when runs are noisy, a 2% deficit counts as a loss


@dataclass(frozen=True)
class SizeCheck:
    """One size: candidate/baseline median ratio and the noise it is judged against."""

    size: int
    ratio: float | None
    spread: float
    matters: bool
    wins: bool
    loses: bool


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate becomes a rule, why, and the evidence."""

    name: str
    env: dict[str, str]
    accepted: bool
    reason: str
    checks: list[SizeCheck] = field(default_factory=list)

    def gain(self) -> float:
        """Geometric-mean ratio over the sizes that matter (1.0 when none measured)."""
        rs = [c.ratio for c in self.checks if c.matters and c.ratio]
        return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else 1.0

    def evidence(self) -> dict[str, Any]:
        """What a written rule records about its measurement."""
        m = [c for c in self.checks if c.ratio is not None]
        return {"sizes": [c.size for c in m], "ratio": [round(c.ratio, 4) for c in m],
                "spread": [round(c.spread, 4) for c in m], "gain_geomean": round(self.gain(), 4)}


def decide(base: SetResult, cand: SetResult, size_list: list[int], matter_min: int = MIB,
           matter_max: int | None = None, no_loss_from: int = MIB) -> Verdict:
    """Judge one candidate against the baseline on the sizes measured."""
    if base.errors or cand.errors:
        return Verdict(cand.name, cand.env, False, f"measurement failed: {(cand.errors or base.errors)[0][:200]}")
    checks = []
    for s in size_list:
        b, c = base.median(s), cand.median(s)
        ratio = c / b if b and c else None
        noise = max(base.spread(s), cand.spread(s))
        matters = s >= matter_min and (matter_max is None or s <= matter_max)
        wins = ratio is not None and ratio - 1 > noise
        loses = s >= no_loss_from and (ratio is None or ratio < 1 - min(noise, MAX_TOLERATED_LOSS))
        checks.append(SizeCheck(s, ratio, noise, matters, wins, loses))
    losing = [c for c in checks if c.loses]
    if losing:
        worst = min(losing, key=lambda c: c.ratio or 0)
        return Verdict(cand.name, cand.env, False, f"loses at {human(worst.size)} "
                       f"({_pct(worst.ratio)} vs spread {worst.spread * 100:.1f}%)", checks)
    matter = [c for c in checks if c.matters]
    if not matter:
        return Verdict(cand.name, cand.env, False, "no size that matters was measured", checks)
    flat = [c for c in matter if not c.wins]
    if flat:
        c = flat[0]
        return Verdict(cand.name, cand.env, False, f"no clear win at {human(c.size)} "
                       f"({_pct(c.ratio)} within spread {c.spread * 100:.1f}%)", checks)
    v = Verdict(cand.name, cand.env, True, "", checks)
    return Verdict(cand.name, cand.env, True, f"wins at every size that matters (geomean {_pct(v.gain())}, "
                   f"each beyond the run-to-run spread) and loses nowhere >= {human(no_loss_from)}", checks)


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def best_per_variable(verdicts: list[Verdict]) -> list[Verdict]:
    """Accepted verdicts, at most one per variable (the largest gain), in input order."""
    best: dict[str, Verdict] = {}
    for v in verdicts:
        if not v.accepted:
            continue
        key = ",".join(sorted(v.env))
        if key not in best or v.gain() > best[key].gain():
            best[key] = v
    return [v for v in verdicts if v in best.values()]
