"""The terminal report of a job (``gpuperf report JOBID``): bars per GPU, diagnosis, recommendations.

A summary holds strings a job's user chose (variable names and values, file names, the job's own
records) and an admin reads this report: every string is made printable first (control bytes such as
ESC, which starts a terminal escape or an OSC 8 hyperlink, become ``\\xNN``), and every cell is a
``Text``, never a string rich would read as markup (``[link=...]``, ``[/x]`` which raises).
"""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuperf.files.safeio import printable_json
from gpuperf.report import rates, units

BAR_WIDTH = 10


def _row(t: Table, *cells: Any) -> None:
    """A table row whose string cells are literal text (rich would parse a str cell as markup)."""
    t.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def _pct(x: float | None) -> str:
    return units.pct(x)


def _bar(pct: float | None, good_high: bool = True) -> Text:
    """A 10-cell bar with the value; green/yellow/red where higher is better (or worse)."""
    if pct is None:
        return Text("·" * BAR_WIDTH + "  n/a", style="dim")
    p = max(0.0, min(100.0, pct))
    full = int(round(p / 100 * BAR_WIDTH))
    score = p if good_high else 100 - p
    style = "green" if score >= 60 else "yellow" if score >= 25 else "red"
    return Text("█" * full, style=style) + Text("░" * (BAR_WIDTH - full), style="dim") + Text(f" {units.pct(p):>4}")


def _bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} EB"


def _rate(n: float | None) -> str:
    """Bytes per second, or 'n/a' (never 'n/a/s')."""
    return "n/a" if n is None else f"{_bytes(n)}/s"


def _power(job: dict) -> str:
    """Mean power per GPU and summed over the job, and the highest one GPU drew, each labelled."""
    mean, n = job.get("power_mean_w"), job.get("gpu_count") or 0
    if mean is None:
        return "n/a"
    per = f"mean {mean / n:.0f} W per GPU ({mean:.0f} W over {n} GPUs)" if n > 1 else f"mean {mean:.0f} W"
    peak = job.get("power_max_w")
    return (per + (f", peak {peak:.0f} W on one GPU" if peak is not None else "")
            + f"; mean {_pct(job.get('power_mean_pct_of_limit'))} of the power limit")


def fmt_duration(s: float | None) -> str:
    """Seconds as [Nd ]HH:MM:SS (n/a for None)."""
    if s is None:
        return "n/a"
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _when(t: float | None) -> str:
    return "n/a" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _header(s: dict) -> Text:
    job, q = s.get("job") or {}, s.get("quality") or {}
    names = sorted({g.get("name") or "?" for g in s.get("gpus") or []})
    t = Text()
    t.append(f"Job {s.get('job_ref') or s.get('job_id')}", style="bold")
    t.append(f"  user {s.get('user') or '?'}  nodes {','.join(s.get('nodes') or []) or '?'}"
             f"  {job.get('gpu_count', 0)} GPU(s) {', '.join(names)}\n")
    t.append(f"{_when(s.get('start'))} → {_when(s.get('end'))}  wall {fmt_duration(s.get('wall_s'))}"
             f"  {units.gpu_time(job.get('gpu_hours', 0))}, {units.gpu_time(job.get('wasted_gpu_hours', 0))} wasted")
    if s.get("live"):
        t.append("  [running: live from the node daemon]", style="cyan")
    if q.get("partial"):
        t.append("\nPARTIAL: " + "; ".join(q.get("reasons") or []), style="bold yellow")
    return t


def _diagnosis(s: dict) -> Panel:
    d = s.get("diagnosis") or {}
    body = Text()
    cls = str(d.get("class") or "unknown")
    body.append(cls.replace("_", "-").upper(), style="bold magenta")
    if d.get("busy_class"):
        body.append(f"  (working GPUs: {str(d['busy_class']).replace('_', '-')})", style="magenta")
    if d.get("imbalanced"):
        body.append("  + IMBALANCED", style="bold yellow")
    if d.get("confidence") and d["confidence"] != "high":
        body.append(f"  confidence {d['confidence']}", style="yellow")
    for e in d.get("evidence") or []:
        body.append(f"\n  • {e}")
    for ph in d.get("phases") or []:
        body.append(f"\n  ◦ phase {_when(ph.get('start'))} → {_when(ph.get('end'))}: "
                    f"{str(ph.get('class')).replace('_', '-')}, {ph.get('share_pct', 0):.0f}% of the GPU-hours")
    for n in d.get("notes") or []:
        body.append(f"\n  ! {n}", style="yellow")
    recs = d.get("recommendations") or []
    if recs:
        body.append("\nRecommendations:", style="bold")
        for i, r in enumerate(recs, 1):
            body.append(f"\n  {i}. {r}")
    return Panel(body, title="Diagnosis", expand=True)


def _gpu_table(s: dict) -> Table:
    multi = len(s.get("nodes") or []) > 1
    t = Table(title="Per GPU (means over the job)", expand=False, pad_edge=False)
    t.add_column("GPU", justify="right")
    for name in ("SM active", "Tensor", "DRAM"):
        t.add_column(name)
    t.add_column("Util", justify="right")
    t.add_column("Mem peak")
    t.add_column("Power W", justify="right")
    t.add_column("kWh", justify="right")
    t.add_column("Idle", justify="right")
    for g in s.get("gpus") or []:
        label = f"{g.get('node')}:{g.get('gpu')}" if multi else str(g.get("gpu"))
        util = Text(_pct(g.get("util_gpu_pct")))
        if (g.get("util_minus_sm_pct") or 0) >= 40:
            util.stylize("bold red")     # the "100% utilization, little SM work" trap
        power = "n/a" if g.get("power_mean_w") is None else f"{g['power_mean_w']:.0f}/{g.get('power_limit_w') or 0:.0f}"
        kwh = "n/a" if g.get("energy_kwh") is None else f"{g['energy_kwh']:.3f}"
        _row(t, label, _bar(g.get("sm_active_pct")), _bar(g.get("tensor_active_pct")),
                  _bar(g.get("dram_active_pct"), good_high=False), util, _bar(g.get("mem_peak_pct")),
                  power, kwh, _pct(g.get("idle_pct")))
    return t


def _totals(s: dict) -> Table:
    job = s.get("job") or {}
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    thr = job.get("throttle_s") or {}
    _row(t, "Energy", f"{units.energy(job.get('energy_kwh') or 0)} ({job.get('energy_j') or 0:,.0f} J)")
    _row(t, "Power", _power(job))
    _row(t, "Utilization vs SM", f"NVML util {_pct(job.get('util_gpu_pct'))}, SM active {_pct(job.get('sm_active_pct'))}"
                                   f" (difference {_pct(job.get('util_minus_sm_pct'))})")
    _row(t, "NVLink", f"{_bytes((job.get('nvlink_tx_bytes') or 0) + (job.get('nvlink_rx_bytes') or 0))}, "
                        f"{_rate(job.get('nvlink_bps'))} per GPU")
    _row(t, "PCIe", f"{_bytes((job.get('pcie_tx_bytes') or 0) + (job.get('pcie_rx_bytes') or 0))}, "
                      f"{_rate(job.get('pcie_bps'))} per GPU")
    _row(t, "Throttling", ", ".join(f"{k} {v:.0f} s" for k, v in thr.items() if v) or "none")
    _row(t, "Idle", f"{job.get('idle_s') or 0:.0f} GPU-s without a kernel ({_pct(job.get('idle_pct'))})")
    if job.get("profiled_s"):
        _row(t, "Profiler", Text(profiler_line(job), style="yellow"))
    for node, h in (s.get("hosts") or {}).items():
        rss = "n/a" if h.get("rss_peak_mib") is None else f"{h['rss_peak_mib']:.0f} MiB"
        src = f" (from the {h['cpu_source']})" if h.get("cpu_source") == "cgroup" else ""
        _row(t, f"Host {node}", f"CPU efficiency {_pct(h.get('cpu_efficiency_pct'))} of {h.get('cpus_allocated') or '?'} CPUs{src}, "
                                  f"RSS peak {rss}, I/O wait {_pct(h.get('iowait_pct'))}")
    e = s.get("estimates") or {}
    if e.get("model"):
        line = "\n".join(rates.lines(s))
        if e.get("intensity_flop_per_byte") is not None:
            line += f"\n{e['intensity_flop_per_byte']:.0f} FLOP/B, {e['roofline_side']}-side of the roofline (ridge {e['ridge_flop_per_byte']:.0f})"
        _row(t, "Estimates", Text(f"{e['model']}: " + line + "\n(" + rates.METHOD + ")", style="italic"))
    elif e:
        _row(t, "Estimates", Text(e.get("note") or "n/a", style="italic"))
    return t


def profiler_line(job: dict) -> str:
    """The job's time under a profiler, said as missing figures (the terminal and HTML reports)."""
    tools = ", ".join(f"{k} {v:.0f} GPU-s" for k, v in (job.get("profilers") or {}).items() if isinstance(v, (int, float)))
    return (f"{tools or str(job['profiled_s']) + ' GPU-s'} under a profiler: SM, tensor, DRAM, link and utilization "
            "figures of that time are missing, not zero (the means above are over the rest)")


def _setup(s: dict) -> Table | None:
    env, aff = s.get("env") or {}, s.get("affinity") or {}
    if not env and not aff:
        return None
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for node, e in env.items():
        items = e.get("vars", e) if isinstance(e, dict) else {}
        vals = [f"{k}={v.get('value') if isinstance(v, dict) else v}" for k, v in items.items()] if isinstance(items, dict) else []
        _row(t, f"Env {node}", " ".join(vals) or "none")
    for node, a in aff.items():
        _row(t, f"Affinity {node}", _affinity_text(a))
    return t


def _affinity_text(a: Any) -> str:
    if isinstance(a, dict):
        parts = []
        for k, v in a.items():
            if isinstance(v, dict) and "cpus" in v:
                parts.append(f"rank {k}: GPU {v.get('gpu')} cpus {_cpus(v.get('cpus'))}")
        if parts:
            return "; ".join(parts)
    return str(a)[:200]


def _cpus(c: Any) -> str:
    if isinstance(c, list) and c and all(isinstance(x, int) for x in c):
        if c == list(range(c[0], c[-1] + 1)):
            return f"{c[0]}-{c[-1]}"
        return ",".join(map(str, c))
    return str(c)


def _quality(s: dict) -> Text:
    q = s.get("quality") or {}
    t = Text(f"{q.get('samples', 0)} samples, {q.get('gaps', 0)} gap(s) totalling {q.get('gap_s') or 0:.0f} s", style="dim")
    if q.get("nodes_missing"):
        t.append(f"; no summary from {', '.join(q['nodes_missing'])}", style="yellow")
    for reason in q.get("ignored") or []:
        t.append(f"\n{reason}", style="yellow")
    if (s.get("truncated")):
        t.append(f"; from the AdminComment without {', '.join(s['truncated'])}", style="dim")
    return t


def renderable(s: dict) -> Group:
    """The report as a rich renderable."""
    s = printable_json(s)   # every string of it, keys too: no control byte reaches the terminal
    parts: list[Any] = [_header(s), _diagnosis(s)]
    if s.get("gpus"):
        parts.append(_gpu_table(s))
    parts.append(_totals(s))
    setup = _setup(s)
    if setup is not None:
        parts.append(setup)
    parts.append(_quality(s))
    return Group(*parts)


def render(s: dict, width: int = 110, color: bool = False) -> str:
    """The report as text (ANSI colours when ``color``)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                      highlight=False)
    console.print(renderable(s))
    return buf.getvalue()
