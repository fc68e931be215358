"""Is environment B faster, slower or the same as A? Confidence intervals on per-round ratios.

Pure. Each round launches A and B as fresh processes back to back (alternating which goes first), so
slow drift of the machine hits both alike and the pair's ratio cancels it. The interval is a
t-interval on the log of those per-round ratios (the ratio of two bandwidths is multiplicative, and
its logarithm is close to normal even at small sizes, where one slow launch halves a value). A
result is a ``win`` (whole interval above 1), a ``loss`` (whole interval below 1), ``same`` (the
interval lies within +-tolerance: no difference that matters) or ``unsettled`` (more rounds needed).
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Sequence

MIB = 1 << 20
# tolerance for "no difference": the bars of issue 16 (2% from 1 MiB on, 5% below)
TOL_LARGE, TOL_SMALL = 0.02, 0.05
# two-sided 95% Student t quantiles by degrees of freedom (no scipy on the nodes)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


class Interval(NamedTuple):
    """Ratio B/A (geometric mean of the per-round ratios) with its 95% interval, over ``n`` paired rounds."""

    n: int
    ratio: float | None
    lo: float | None
    hi: float | None


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (next smaller tabulated df beyond 20)."""
    if df < 1:
        raise ValueError("needs at least 1 degree of freedom")
    return _T975[max(k for k in _T975 if k <= df)]


def paired_ratios(base: Sequence[float | None], cand: Sequence[float | None]) -> list[float]:
    """Per-round cand/base ratios for the rounds where both were measured (index = round)."""
    return [c / b for b, c in zip(base, cand) if b and c and b > 0 and c > 0]


def ratio_interval(ratios: Sequence[float]) -> Interval:
    """The 95% t-interval of the geometric-mean ratio; lo/hi None with fewer than 2 rounds."""
    logs = [math.log(r) for r in ratios if r > 0]
    n = len(logs)
    if n == 0:
        return Interval(0, None, None, None)
    m = statistics.fmean(logs)
    if n < 2:
        return Interval(1, math.exp(m), None, None)
    half = t975(n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return Interval(n, math.exp(m), math.exp(m - half), math.exp(m + half))


def tolerance(size: int) -> float:
    """The +-band inside which a difference does not matter at this message size."""
    return TOL_LARGE if size >= MIB else TOL_SMALL


def classify(iv: Interval, tol: float) -> str:
    """'same' (within +-tol), 'win', 'loss', 'unsettled' (interval too wide) or 'unmeasured'."""
    if iv.lo is None or iv.hi is None:
        return "unmeasured"
    if iv.lo >= 1 - tol and iv.hi <= 1 + tol:
        return "same"  # equivalence first: a significant 0.3% is no difference that matters
    if iv.lo > 1:
        return "win"
    if iv.hi < 1:
        return "loss"
    return "unsettled"


def below_bar(iv: Interval, tol: float) -> bool:
    """True when the whole interval lies below 1 - tol: a proven loss larger than the tolerance."""
    return iv.hi is not None and iv.hi < 1 - tol


def clears_bar(iv: Interval, tol: float) -> bool:
    """True when the whole interval lies at or above 1 - tol: any loss is proven smaller than the tolerance."""
    return iv.lo is not None and iv.lo >= 1 - tol


def fmt(iv: Interval) -> str:
    """'0.998 [0.991, 1.005]' (or what was measured)."""
    if iv.ratio is None:
        return "n/a"
    if iv.lo is None:
        return f"{iv.ratio:.3f} (1 round)"
    return f"{iv.ratio:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]"
