"""Numbers as a person writes them, for every renderer (terminal, HTML, mail): pure.

A share under one percent reads '<1%', not '0%' nor plotly's '500µ %'; a time reads in s, min or h by its
size; a job of a few seconds reads in GPU-seconds and Wh, not '0.00 GPU-hours' and '0.000 kWh'.
"""

from __future__ import annotations

import math


def _num(x: object) -> float | None:
    if not isinstance(x, (int, float)) or isinstance(x, bool) or math.isnan(x):
        return None
    return float(x)


def pct(x: object, sign: bool = True) -> str:
    """'42%', '0%' (exactly none), '<1%' (some, under one), '>99%' (not quite all), 'n/a'."""
    v = _num(x)
    if v is None:
        return "n/a"
    if v <= 0:
        text = "0"
    elif v < 1:
        text = "<1"
    elif 99 < v < 100:
        text = ">99"
    else:
        text = f"{v:.0f}"
    return text + ("%" if sign else "")


def duration(seconds: object) -> str:
    """'4 s', '2.5 min', '3.2 h', 'n/a'."""
    v = _num(seconds)
    if v is None:
        return "n/a"
    if v < 90:
        return f"{v:.0f} s" if v >= 10 or v == int(v) else f"{v:.1f} s"
    if v < 90 * 60:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def time_axis(span_s: float) -> tuple[float, str]:
    """(seconds per unit, unit) for a time axis spanning ``span_s``: s up to 2 min, min up to 2 h, else h."""
    if span_s <= 120:
        return 1.0, "s"
    if span_s <= 2 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def gpu_time(hours: object) -> str:
    """'40 GPU-seconds', '12.5 GPU-minutes', '3.20 GPU-hours'."""
    v = _num(hours)
    if v is None:
        return "n/a GPU-hours"
    if v * 3600 < 0.5:
        return "<1 GPU-second"
    if v * 3600 < 60:
        return f"{v * 3600:.0f} GPU-seconds"
    if v < 1:
        return f"{v * 60:.1f} GPU-minutes"
    return f"{v:.2f} GPU-hours"


def energy(kwh: object) -> str:
    """'0.42 kWh', or Wh under a tenth of a kWh ('35 Wh')."""
    v = _num(kwh)
    if v is None:
        return "n/a kWh"
    return f"{v * 1000:.0f} Wh" if v < 0.1 else f"{v:.2f} kWh"
