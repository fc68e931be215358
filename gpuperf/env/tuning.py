"""``gpuperf tune``'s decision: does a candidate variable win clearly enough to become a policy rule?

Pure. Per collective and size, the candidate's bandwidth over the baseline's is a paired per-round
ratio with a 95% interval (``gpuperf.env.interval``). A candidate wins when the interval lies above
1 and reaches past the tolerance (+-2% from 1 MiB, +-5% below) at every size that matters, and it
is a proven loss nowhere at or above 1 MiB. Anything less writes no rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuperf.env import interval as iv
from gpuperf.env.ncclbench import MIB, SetResult, human


@dataclass(frozen=True)
class SizeCheck:
    """One collective at one size: the paired ratio interval, its class, and whether it counts."""

    coll: str
    size: int
    ratio: iv.Interval
    verdict: str  # interval.classify: win, loss, same, unsettled, unmeasured
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
        rs = [c.ratio.ratio for c in self.checks if c.matters and c.ratio.ratio]
        return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else 1.0

    def evidence(self) -> dict[str, Any]:
        """What a written rule records about its measurement: per collective and size, ratio and 95% interval."""
        m = [c for c in self.checks if c.ratio.lo is not None]
        return {"collective": [c.coll for c in m], "sizes": [c.size for c in m],
                "ratio": [round(c.ratio.ratio, 4) for c in m], "ci95_low": [round(c.ratio.lo, 4) for c in m],
                "ci95_high": [round(c.ratio.hi, 4) for c in m], "paired_rounds": [c.ratio.n for c in m],
                "gain_geomean": round(self.gain(), 4)}


def decide(base: SetResult, cand: SetResult, size_list: list[int], matter_min: int = MIB,
           matter_max: int | None = None, no_loss_from: int = MIB, colls: tuple[str, ...] = ("allreduce",)) -> Verdict:
    """Judge one candidate against the baseline on the collectives and sizes measured."""
    if base.errors or cand.errors or not any(base.rounds) or not any(cand.rounds):
        # a launch that failed under the candidate may have failed because of it: never a rule
        errs = cand.errors or base.errors or ["nothing measured"]
        return Verdict(cand.name, cand.env, False, f"measurement failed: {errs[0][:200]}")
    checks = []
    for coll in colls:
        for s in size_list:
            ratio = iv.ratio_interval(iv.paired_ratios(base.per_round(s, coll), cand.per_round(s, coll)))
            kind = iv.classify(ratio, iv.tolerance(s))
            matters = s >= matter_min and (matter_max is None or s <= matter_max)
            loses = s >= no_loss_from and (kind == "loss" or ratio.ratio is None)
            checks.append(SizeCheck(coll, s, ratio, kind, matters, kind == "win", loses))
    losing = [c for c in checks if c.loses]
    if losing:
        worst = min(losing, key=lambda c: c.ratio.ratio or 0)
        return Verdict(cand.name, cand.env, False, f"loses at {worst.coll} {human(worst.size)} "
                       f"({iv.fmt(worst.ratio)}: {worst.verdict})", checks)
    matter = [c for c in checks if c.matters]
    if not matter:
        return Verdict(cand.name, cand.env, False, "no size that matters was measured", checks)
    flat = [c for c in matter if not c.wins]
    if flat:
        c = flat[0]
        return Verdict(cand.name, cand.env, False, f"no proven win at {c.coll} {human(c.size)} "
                       f"({iv.fmt(c.ratio)}: {c.verdict})", checks)
    v = Verdict(cand.name, cand.env, True, "", checks)
    lows = min(c.ratio.lo for c in matter if c.ratio.lo is not None)
    return Verdict(cand.name, cand.env, True, f"wins at every size that matters (geomean {_pct(v.gain())}, "
                   f"every 95% interval above 1, lowest bound {lows:.3f}, {matter[0].ratio.n} paired rounds) "
                   f"and is a proven loss nowhere >= {human(no_loss_from)}", checks)


def default_is_best(verdicts: list[Verdict]) -> bool:
    """True when every candidate is proven no better than the baseline somewhere that matters (same or loss)."""
    return bool(verdicts) and all(
        any(c.matters and c.verdict in ("same", "loss") for c in v.checks) or any(c.loses for c in v.checks)
        for v in verdicts)


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def best_per_variable(verdicts: list[Verdict]) -> list[Verdict]:
    """Accepted verdicts, largest gain first, skipping any that sets a variable a better one sets; input order."""
    taken: set[str] = set()
    keep = []
    for v in sorted((v for v in verdicts if v.accepted), key=lambda v: -v.gain()):
        if taken.isdisjoint(v.env):
            keep.append(v)
            taken.update(v.env)
    return [v for v in verdicts if v in keep]
