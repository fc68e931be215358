"""A job's per-GPU time series in the terminal: one sparkline per GPU and metric (rich text).

Takes the renderers' series shape (``{"node:gpu": {"t": [...], field: [...]}}``: from the node's
daemon or from the controller's store, ``gpuperf.series``), averages each line into ``width``
columns over the job's whole span, so every GPU's columns line up in time, and draws eight levels
per column on a fixed scale (0-100 % for activities, 0 to the highest value for power).
"""

from __future__ import annotations

import io
import time

from rich.console import Console
from rich.text import Text

from gpuperf.files.safeio import printable
from gpuperf.report import units

BLOCKS = " ▁▂▃▄▅▆▇█"
# field, title, unit, fixed top of the scale (None: the largest value of any GPU)
METRICS: tuple[tuple[str, str, str, float | None], ...] = (
    ("sm_active_pct", "SM active", "%", 100.0),
    ("tensor_active_pct", "Tensor active", "%", 100.0),
    ("dram_active_pct", "DRAM active", "%", 100.0),
    ("power_w", "Power", "W", None),
)


def columns(t: list[float], y: list[float | None], t0: float, t1: float, width: int) -> list[float | None]:
    """Mean of ``y`` per column of equal time over [t0, t1] (None where no sample fell)."""
    sums, counts = [0.0] * width, [0] * width
    span = max(t1 - t0, 1e-9)
    for x, v in zip(t, y):
        if v is None:
            continue
        c = min(max(int((x - t0) / span * width), 0), width - 1)
        sums[c] += v
        counts[c] += 1
    return [s / n if n else None for s, n in zip(sums, counts)]


def spark(cols: list[float | None], top: float) -> str:
    """One character per column: blank where unknown, else one of eight levels of ``top``."""
    out = []
    for v in cols:
        if v is None:
            out.append("·")
        else:
            out.append(BLOCKS[min(max(int(round(v / top * 8)), 0), 8)] if top > 0 else BLOCKS[0])
    return "".join(out)


def render(series: dict[str, dict[str, list]], width: int = 100, color: bool = False) -> str:
    """The chart as text: a header with the time span, then per metric one sparkline per GPU."""
    lines = {k: v for k, v in series.items() if v.get("t")}
    if not lines:
        return ""
    t0 = min(v["t"][0] for v in lines.values())
    t1 = max(v["t"][-1] for v in lines.values())
    name_w = max(len(k) for k in lines)  # "node:gpu", or the node daemon's own "gpu"
    label_w = name_w + 4
    samples = max(len(v["t"]) for v in lines.values())
    # no more columns than samples: a job of a few seconds draws its samples, not dots between them
    cols_w = min(max(width - label_w - 16, 10), samples)
    out = Text()
    if samples < 2:
        out.append(f"One sample at {time.strftime('%H:%M:%S', time.localtime(t0))}: too short for a chart\n", style="bold")
    else:
        out.append(f"Time series {time.strftime('%H:%M:%S', time.localtime(t0))} → "
                   f"{time.strftime('%H:%M:%S', time.localtime(t1))} ({units.duration(t1 - t0)}, "
                   f"{units.duration((t1 - t0) / cols_w)} per column)\n", style="bold")
    for field, title, unit, top in METRICS:
        rows = {k: columns(v["t"], v.get(field) or [], t0, t1, cols_w) for k, v in lines.items() if v.get(field)}
        rows = {k: c for k, c in rows.items() if any(x is not None for x in c)}
        if not rows:
            continue
        scale = top if top is not None else max(x for c in rows.values() for x in c if x is not None)
        out.append(f"{title} (0-{max(scale, 1.0):.0f} {unit})\n" if samples >= 2 else f"{title} ({unit})\n",
                   style="bold cyan")
        for k in sorted(rows, key=_sort_key):
            vals = [x for x in rows[k] if x is not None]
            mean = sum(vals) / len(vals)
            out.append(f"  GPU {printable(k):<{name_w}} ")
            if samples >= 2:
                out.append(spark(rows[k], scale), style="green")
                out.append("  mean ")
            out.append(f"{units.pct(mean) if unit == '%' else f'{mean:.1f}':>6}\n")
    buf = io.StringIO()
    Console(file=buf, width=width + 10, color_system="auto" if color else None, force_terminal=color,
            highlight=False).print(out, end="")
    return buf.getvalue()


def _sort_key(label: str) -> tuple:
    node, _, gpu = label.rpartition(":")
    return (node, int(gpu) if gpu.isdigit() else gpu)
