"""``gpuperf tune``'s decision: does a candidate variable win clearly enough to become a policy rule?

Pure. Per collective and size, the candidate's bandwidth over the baseline's is a paired per-round
ratio with a 95% interval (``gpuperf.env.interval``). A candidate wins when the interval lies above
1 and reaches past the tolerance (+-2% from 1 MiB, +-5% below) at every size that matters, and no
measured size, large or small, can lose more than the tolerance: an interval wholly below 1 is a
proven loss, and one whose lower bound lies below 1 - tolerance (it spans 1 widely) leaves a loss
possible, so neither is "settled". With ``accept_cost`` (``gpuperf tune --accept-small-loss``) an
admin may take a win at the sizes that matter anyway: the sizes below them that lose or may lose,
with their intervals, go into the verdict's reason, which the written rule carries (``gpuperf env
--explain`` shows it). Anything less writes no rule.
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
    loses: bool   # a proven loss (interval wholly below 1) or nothing measured at this size
    risks: bool = False  # a loss larger than the tolerance is not ruled out (lower bound below 1 - tol)

    def cost(self) -> str:
        """'allreduce 8 KiB 0.622 [0.276, 1.400] (may lose)': this size's interval and what it says."""
        what = "unmeasured" if self.ratio.lo is None else "loses" if self.verdict == "loss" else "may lose"
        return f"{self.coll} {human(self.size)} {iv.fmt(self.ratio)} ({what})"


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
           matter_max: int | None = None, colls: tuple[str, ...] = ("allreduce",),
           accept_cost: bool = False) -> Verdict:
    """Judge one candidate against the baseline on the collectives and sizes measured.

    ``accept_cost``: losses (proven or possible) below the sizes that matter do not reject the
    candidate; they are written into its reason instead."""
    if base.errors or cand.errors or not any(base.rounds) or not any(cand.rounds):
        # a launch that failed under the candidate may have failed because of it: never a rule
        errs = cand.errors or base.errors or ["nothing measured"]
        return Verdict(cand.name, cand.env, False, f"measurement failed: {errs[0][:200]}")
    checks = []
    for coll in colls:
        for s in size_list:
            ratio = iv.ratio_interval(iv.paired_ratios(base.per_round(s, coll), cand.per_round(s, coll)))
            tol = iv.tolerance(s)
            kind = iv.classify(ratio, tol)
            matters = s >= matter_min and (matter_max is None or s <= matter_max)
            loses = kind == "loss" or ratio.ratio is None
            checks.append(SizeCheck(coll, s, ratio, kind, matters, kind == "win", loses,
                                    loses or not iv.clears_bar(ratio, tol)))
    matter = [c for c in checks if c.matters]
    # a proven loss where it matters always rejects; below (or above) those sizes, a loss or a possible
    # one rejects only without the admin's consent
    costly = [c for c in checks if (c.loses and c.matters) or (c.risks and not c.matters and not accept_cost)]
    proven = [c for c in costly if c.loses]
    if not proven and not matter:
        return Verdict(cand.name, cand.env, False, "no size that matters was measured", checks)
    flat = [c for c in matter if not c.wins]
    if flat and not proven:
        c = flat[0]
        return Verdict(cand.name, cand.env, False, f"no proven win at {c.coll} {human(c.size)} "
                       f"({iv.fmt(c.ratio)}: {c.verdict})", checks)
    if costly:
        worst = min(proven or costly, key=lambda c: c.ratio.lo if c.ratio.lo is not None else 0.0)
        what = "loses" if worst.loses else "may lose"
        why = (f"{what} at {worst.coll} {human(worst.size)} ({iv.fmt(worst.ratio)}: {worst.verdict}"
               + ("" if worst.loses else f", a loss down to {worst.ratio.lo:.3f} not ruled out") + ")")
        others = [c.cost() for c in costly if c is not worst]
        if others:
            why += "; also " + ", ".join(others)
        if not flat and not any(c.matters for c in costly):
            why += (f"; wins at every size >= {human(matter_min)}: --accept-small-loss would take that win and "
                    "write these sizes into the rule")
        return Verdict(cand.name, cand.env, False, why, checks)
    v = Verdict(cand.name, cand.env, True, "", checks)
    lows = min(c.ratio.lo for c in matter if c.ratio.lo is not None)
    why = (f"wins at every size that matters (geomean {_pct(v.gain())}, every 95% interval above 1, lowest bound "
           f"{lows:.3f}, {matter[0].ratio.n} paired rounds)")
    paid = [c for c in checks if c.risks]
    if paid:
        why += (f"; accepted with a cost (--accept-small-loss): {', '.join(c.cost() for c in paid)}")
    else:
        low_all = min(c.ratio.lo for c in checks if c.ratio.lo is not None)
        why += f" and no measured size can lose more than its tolerance (lowest bound anywhere {low_all:.3f})"
    return Verdict(cand.name, cand.env, True, why, checks)


def default_is_best(verdicts: list[Verdict]) -> bool:
    """True when every candidate is proven no better than the baseline somewhere that matters (same or loss)."""
    return bool(verdicts) and all(
        any(c.matters and c.verdict in ("same", "loss") for c in v.checks) or any(c.loses and c.matters for c in v.checks)
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
