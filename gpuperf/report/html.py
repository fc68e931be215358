"""The job report as one self-contained HTML page: plotly charts with plotly.js inlined, no fetches.

Charts: SM active, tensor active, DRAM active, power and NVLink per GPU over time (when a series
is available: from Prometheus, the node daemon's store or the controller's; the page says which),
and the job on its GPU's roofline (always, when the GPU model is known). Series longer than ``max_points`` are averaged into buckets first.
"""

from __future__ import annotations

import html as html_mod
import json
import math
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from gpuperf.model import gpuspecs
from gpuperf.diagnosis import roofline
from gpuperf.report import fleetsection, rates, terminal, units

# chart id, title, unit, the series fields summed into the line, scale to the unit
CHARTS: tuple[tuple[str, str, str, tuple[str, ...], float], ...] = (
    ("sm", "SM active", "%", ("sm_active_pct",), 1.0),
    ("tensor", "Tensor pipe active", "%", ("tensor_active_pct",), 1.0),
    ("dram", "DRAM active", "%", ("dram_active_pct",), 1.0),
    ("power", "Power", "W", ("power_w",), 1.0),
    ("nvlink", "NVLink tx+rx", "GB/s", ("nvlink_tx_bps", "nvlink_rx_bps"), 1e-9),
)
_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "png"}}


def downsample(t: list[float], ys: list[list[float | None]], max_points: int) -> tuple[list[float], list[list[float | None]]]:
    """Average into at most max_points equal-count buckets (None values skipped)."""
    n = len(t)
    if n <= max_points:
        return t, ys
    step = n / max_points
    out_t: list[float] = []
    out_ys: list[list[float | None]] = [[] for _ in ys]
    for b in range(max_points):
        lo, hi = int(b * step), int((b + 1) * step)
        out_t.append(sum(t[lo:hi]) / (hi - lo))
        for y, o in zip(ys, out_ys):
            vals = [v for v in y[lo:hi] if v is not None]
            o.append(sum(vals) / len(vals) if vals else None)
    return out_t, out_ys


def _combine(s: dict, fields: tuple[str, ...], scale: float) -> list[float | None]:
    cols = [s.get(f) for f in fields]
    if any(c is None for c in cols):
        return []
    out = []
    for vals in zip(*cols):
        out.append(None if any(v is None for v in vals) else sum(vals) * scale)
    return out


DATE_AXIS_FROM_S = 3600.0  # a job of an hour or more: wall-clock time; shorter: time since its start in s or min


def chartable(series: dict[str, dict]) -> bool:
    """Whether any GPU's series has two samples or more (one sample draws no line: the page shows figures)."""
    return any(len(v.get("t") or []) >= 2 for v in series.values())


def _time_figure(title: str, unit: str, series: dict[str, dict], fields: tuple[str, ...], scale: float,
                 max_points: int) -> go.Figure | None:
    lines = {k: v for k, v in series.items() if len(v.get("t") or []) >= 2}
    if not lines:
        return None
    t0 = min(v["t"][0] for v in lines.values())
    span = max(v["t"][-1] for v in lines.values()) - t0
    per, tunit = units.time_axis(span)
    dated = span >= DATE_AXIS_FROM_S
    fig = go.Figure()
    top = 0.0
    for label, s in sorted(lines.items(), key=lambda kv: _sort_key(kv[0])):
        y = _combine(s, fields, scale)
        if not y or all(v is None for v in y):
            continue
        t2, (y2,) = downsample(list(s["t"]), [y], max_points)
        top = max([top] + [v for v in y2 if v is not None])
        # a date axis reads epoch milliseconds; a short job reads best as time since its start
        x = [v * 1000.0 for v in t2] if dated else [(v - t0) / per for v in t2]
        fig.add_trace(go.Scatter(x=x, y=y2, mode="lines+markers" if len(t2) < 20 else "lines", name=f"GPU {label}",
                                 line={"width": 1.2}))
    if not fig.data:
        return None
    # a share is 0-100 %; other units from 0 to at least 1: plotly's own range for near-zero values
    # ticks in SI prefixes ("500µ %") a person does not read
    yrange = [0, 100] if unit == "%" else [0, max(top * 1.05, 1.0)]
    xaxis = {"type": "date"} if dated else {"title": f"time since start ({tunit})", "rangemode": "tozero"}
    fig.update_layout(title=title, height=300, margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      xaxis=xaxis, yaxis={"title": unit, "range": yrange},
                      legend={"font": {"size": 10}}, template="plotly_white")
    return fig


def _sort_key(label: str) -> tuple:
    node, _, gpu = label.rpartition(":")
    return (node, int(gpu) if gpu.isdigit() else gpu)


def roofline_figure(s: dict) -> go.Figure | None:
    """The GPU's roofline (dense BF16 peak, DRAM bandwidth) with the job and each GPU on it (estimates)."""
    e = s.get("estimates") or {}
    if not e.get("model"):
        return None
    peak, bw = e["peak_tensor_tflops"], e["peak_mem_bw_gbps"]
    ridge = peak * 1e3 / bw
    xs = [10 ** (k / 10) for k in range(-10, 51)]           # 0.1 .. 100,000 FLOP/byte
    roof = [min(peak, x * bw / 1e3) for x in xs]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=roof, mode="lines", name=f"{e['model']} roofline (dense BF16, {bw:.0f} GB/s)",
                             line={"color": "black", "width": 2}))
    fig.add_vline(x=ridge, line_dash="dot", line_color="grey")
    spec_pts = []
    for g in s.get("gpus") or []:
        pt = _gpu_point(g)
        if pt:
            spec_pts.append((f"GPU {g.get('node')}:{g.get('gpu')}", *pt))
    if spec_pts:
        fig.add_trace(go.Scatter(x=[p[1] for p in spec_pts], y=[p[2] for p in spec_pts], mode="markers",
                                 name="each GPU (estimate)", text=[p[0] for p in spec_pts], marker={"size": 7, "opacity": 0.6}))
    if e.get("intensity_flop_per_byte") is not None:
        fig.add_trace(go.Scatter(x=[e["intensity_flop_per_byte"]], y=[e["tflops_est_per_gpu"]], mode="markers+text",
                                 name="job (estimate)", text=["job"], textposition="top center",
                                 marker={"size": 14, "symbol": "star", "color": "crimson"}))
    fig.update_layout(title="Roofline (estimate: activity × dense peak at the clock run)", height=420,
                      xaxis={"type": "log", "title": "arithmetic intensity, FLOP per DRAM byte"},
                      yaxis={"type": "log", "title": "TFLOP/s per GPU"}, template="plotly_white",
                      margin={"l": 60, "r": 20, "t": 40, "b": 50})
    return fig


def _gpu_point(g: dict) -> tuple[float, float] | None:
    """(FLOP per DRAM byte, TFLOP/s) of one GPU, estimated as the summary's estimates are (clock-scaled)."""
    spec = gpuspecs.lookup(g.get("name"))
    if spec is None:
        return None
    est = roofline.gpu_estimate(g, spec)
    tflops, gbps = est["tflops"], est["dram_gbps"]
    if not tflops or not gbps or tflops <= 0:
        return None
    return tflops * 1e3 / gbps, tflops


def _fig_html(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} .sub{color:#555;margin-bottom:12px}
.diag{border:2px solid #7a3e9d;border-radius:8px;padding:12px 16px;margin:12px 0}
.cls{font-size:20px;font-weight:700;color:#7a3e9d} .imb{color:#b8860b;font-weight:700}
.partial{background:#fff3cd;border:1px solid #e0c36c;padding:8px;border-radius:6px}
table{border-collapse:collapse;font-size:13px} td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.est{font-style:italic;color:#555} .note{color:#8a6d00} pre{background:#f7f7f7;padding:8px;overflow:auto}
"""


def _e(x: Any) -> str:
    return html_mod.escape(str(x))


def _n(x: Any, nd: int = 0, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{nd}f}{unit}"


def _summary_html(s: dict) -> str:
    d, job, q = s.get("diagnosis") or {}, s.get("job") or {}, s.get("quality") or {}
    parts = [f"<h1>gpuperf report: job {_e(s.get('job_ref') or s.get('job_id'))}</h1>",
             f"<div class='sub'>user {_e(s.get('user') or '?')} · nodes {_e(', '.join(s.get('nodes') or []))} · "
             f"{_e(job.get('gpu_count', 0))} GPU(s) · wall {_e(terminal.fmt_duration(s.get('wall_s')))} · "
             f"{_e(units.gpu_time(job.get('gpu_hours')))}, {_e(units.gpu_time(job.get('wasted_gpu_hours')))} wasted · "
             f"{_e(units.energy(job.get('energy_kwh')))}</div>"]
    if s.get("live"):
        parts.append("<div class='partial' id='live'>Running: live from the node daemon, the job so far (its end keeps "
                     "the judgement every reader then shows)</div>")
    if q.get("partial"):
        parts.append(f"<div class='partial'>Partial summary: {_e('; '.join(q.get('reasons') or []))}</div>")
    for reason in q.get("ignored") or []:
        parts.append(f"<div class='partial'>{_e(reason)}</div>")
    diag = [f"<div class='diag'><span class='cls' id='diagnosis-class'>{_e(str(d.get('class') or 'unknown').replace('_', '-'))}</span>"]
    if d.get("busy_class"):
        diag.append(f" <span class='sub'>(working GPUs: {_e(str(d['busy_class']).replace('_', '-'))})</span>")
    if d.get("imbalanced"):
        diag.append(" <span class='imb'>+ imbalanced</span>")
    if d.get("confidence") and d["confidence"] != "high":
        diag.append(f" <span class='imb'>confidence {_e(d['confidence'])}</span>")
    diag.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in d.get("evidence") or []) + "</ul>")
    if d.get("phases"):
        diag.append("<b>Phases</b><ol id='phases'>" + "".join(
            f"<li>{_e(terminal.fmt_duration(ph.get('end', 0) - ph.get('start', 0)))}: "
            f"{_e(str(ph.get('class')).replace('_', '-'))}, {_n(ph.get('share_pct'))}% of the GPU-hours</li>"
            for ph in d["phases"]) + "</ol>")
    if d.get("notes"):
        diag.append("<ul>" + "".join(f"<li class='note'>{_e(x)}</li>" for x in d["notes"]) + "</ul>")
    if d.get("recommendations"):
        diag.append("<b>Recommendations</b><ol id='recommendations'>" +
                    "".join(f"<li>{_e(x)}</li>" for x in d["recommendations"]) + "</ol>")
    parts.append("".join(diag) + "</div>")
    cols = (("GPU", None), ("SM %", "sm_active_pct"), ("Tensor %", "tensor_active_pct"), ("DRAM %", "dram_active_pct"),
            ("Util %", "util_gpu_pct"), ("Mem peak %", "mem_peak_pct"), ("Power W", "power_mean_w"),
            ("Limit W", "power_limit_w"), ("kWh", "energy_kwh"), ("Idle %", "idle_pct"))
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c, _ in cols) + "</tr>"]
    for g in s.get("gpus") or []:
        cells = [f"{_e(g.get('node'))}:{_e(g.get('gpu'))}"] + [
            _e(units.pct(g.get(k), sign=False)) if c.endswith("%") else _n(g.get(k), 3 if k == "energy_kwh" else 0)
            for c, k in cols[1:]]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts.append("<h2>Per GPU</h2><table id='gpus'>" + "".join(rows) + "</table>")
    if job.get("profiled_s"):
        parts.append(f"<p class='note' id='profiler'>{_e(terminal.profiler_line(job))}</p>")
    e = s.get("estimates") or {}
    if e.get("model"):
        parts.append(f"<p class='est'>{_e(e['model'])}: " + "<br>".join(_e(x) for x in rates.lines(s))
                     + f"<br>{_e(rates.METHOD)}. Peaks: {_e(e['source'])}.</p>")
    return "\n".join(parts)


def render(s: dict, series: dict[str, dict] | None = None, max_points: int = 2000, fleet: dict | None = None,
           series_note: str | None = None) -> str:
    """The whole page: summary, diagnosis, fleet health (``fleet``: ``gpuperf.fleet.jobview``), time-series
    charts per GPU (``series_note``: where they came from), roofline; plotly.js inline."""
    figs: list[tuple[str, go.Figure]] = []
    if series:
        for cid, title, unit, fields, scale in CHARTS:
            f = _time_figure(title, unit, series, fields, scale, max_points)
            if f is not None:
                figs.append((f"chart-{cid}", f))
    roof = roofline_figure(s)
    if roof is not None:
        figs.append(("chart-roofline", roof))
    body = [_summary_html(s), fleetsection.render(s, fleet)]
    if not series:
        why = ((series_note or "").removeprefix("no time series").removeprefix(": ")
               or "the node's store no longer holds this job (summary from the controller or sacct)")
        body.append(f"<p class='note' id='no-series'>No time series: {_e(why)}.</p>")
    else:
        if series_note:
            body.append(f"<p class='sub' id='series-source'>Time {_e(series_note)}.</p>")
        if not chartable(series):
            n = max(len(v.get("t") or []) for v in series.values())
            body.append(f"<p class='note' id='short-series'>Too short for charts ({n} sample{'s' if n != 1 else ''} "
                        "per GPU): the figures above are the job's.</p>")
    body += [f"<div class='chart'>{_fig_html(f, cid)}</div>" for cid, f in figs]
    body.append("<h2>Summary (gpuperf.summary.v1)</h2><details><summary>JSON</summary><pre>"
                + _e(json.dumps(s, indent=1, sort_keys=True)) + "</pre></details>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>gpuperf job {_e(s.get('job_ref') or s.get('job_id'))}</title><style>{_CSS}</style>"
            f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>"
            + "\n".join(body) + "</body></html>")
