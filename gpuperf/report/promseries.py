"""A job's per-GPU time series from Prometheus (where the admin runs one), over its HTTP API.

The node daemons export one gauge per metric labelled ``gpu`` and no job label
(``gpuperf.daemon.metrics``). A job is joined to its series by node, GPU index and time window, all
read from its summary, not through ``gpuperf_job_gpu_info{jobid,...}``: the summary already names the
job's GPUs and times, and the info series exists only while the daemon holds the job.

One ``/api/v1/query_range`` per metric over the job's span (the six sent at once), with a step that keeps at most
``points`` points per line and never below the scrape interval; each point is
``avg_over_time`` of its step (the mean of the samples in it, as the daemon's own downsampling
averages) and is placed at the middle of its step. Values come back in the renderers' shape and
units (``{"node:gpu": {"t": [...], "sm_active_pct": [...]}}``). Pure functions plus one I/O edge
(``fetch``, stdlib urllib).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuperf.daemon.metrics import _unit_name  # the exporter's own naming: the names queried are the names exported
from gpuperf.model.series import FIELDS as SERIES_FIELDS


def _metric(field: str) -> tuple[str, float]:
    name, scale = _unit_name(field)
    return f"gpuperf_gpu_{name}", 1.0 / scale


# series field -> (exported metric, factor from the metric's base unit back to the field's unit)
METRICS: dict[str, tuple[str, float]] = {f: _metric(f) for f in SERIES_FIELDS}
_RE2_SPECIAL = set("\\.+*?()|[]{}^$")


class PrometheusError(Exception):
    """Prometheus could not be asked or answered an error: the message says which, in one line."""


@dataclass(frozen=True)
class Window:
    """What to ask for: the job's GPUs per node and its span (epoch seconds)."""

    gpus: dict[str, frozenset[int]]
    start: float
    end: float


def job_window(s: dict, now: float | None = None) -> Window | None:
    """The job's nodes, GPU indices and span from its summary; None when it names no GPU or no start."""
    gpus: dict[str, set[int]] = {}
    for g in s.get("gpus") or []:
        if isinstance(g, dict) and g.get("node") and isinstance(g.get("gpu"), int):
            gpus.setdefault(str(g["node"]), set()).add(g["gpu"])
    start = s.get("start")
    end = s.get("end") if not s.get("live") else None
    if not gpus or not isinstance(start, (int, float)):
        return None
    end = float(end) if isinstance(end, (int, float)) else (now if now is not None else time.time())
    if end < start:
        return None
    return Window({n: frozenset(v) for n, v in gpus.items()}, float(start), end)


def plan(start: float, end: float, points: int, min_step_s: float) -> tuple[float, float, float]:
    """(first evaluation time, last, step): at most ``points`` steps over [start, end], none shorter than ``min_step_s``."""
    span = end - start
    step = max(min_step_s, span / max(points - 1, 1))
    step = math.ceil(step * 1000) / 1000  # Prometheus takes milliseconds
    # each point averages the step before it: the first one ends a step after the start
    first = start + step if span >= step else end
    return first, end, step


def _re2(text: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def node_matcher(label: str, nodes: list[str]) -> str:
    """PromQL label matcher for the nodes: the label's value is ``node``, ``node:port`` or ``node.domain:port``."""
    alt = "|".join(_re2(n) for n in sorted(nodes))
    regex = f"({alt})([.][^:]*)?(:[0-9]+)?"
    # inside a PromQL string a backslash is escaped itself
    return f'{label}=~"' + regex.replace("\\", "\\\\") + '"'


def query(metric: str, label: str, w: Window, step: float) -> str:
    """The PromQL of one metric: the mean of each step, on the job's nodes and GPUs."""
    gpus = sorted({g for v in w.gpus.values() for g in v})
    sel = f'{node_matcher(label, list(w.gpus))},gpu=~"{"|".join(map(str, gpus))}"'
    return f"avg_over_time({metric}{{{sel}}}[{int(round(step * 1000))}ms])"


def node_of(value: str, nodes: list[str]) -> str | None:
    """Which of the job's nodes a label value names (the longest that matches), else None."""
    best = None
    for n in nodes:
        if value == n or value.startswith((n + ":", n + ".")):
            if best is None or len(n) > len(best):
                best = n
    return best


def parse(answer: dict, field: str, factor: float, label: str, w: Window, step: float,
          into: dict[str, dict[float, dict[str, float | None]]]) -> None:
    """Fold one query_range answer (``matrix``) into ``into``: "node:gpu" -> time -> {field: value}; other GPUs dropped."""
    nodes = list(w.gpus)
    for r in (answer.get("data") or {}).get("result") or []:
        m = r.get("metric") or {}
        node = node_of(str(m.get(label, "")), nodes)
        gpu = m.get("gpu")
        if node is None or not str(gpu).isdigit() or int(gpu) not in w.gpus[node]:
            continue
        rows = into.setdefault(f"{node}:{int(gpu)}", {})
        for t, v in r.get("values") or []:
            try:
                x = float(v) * factor
            except (TypeError, ValueError):
                continue
            # each value is the mean of the step that ends at t
            rows.setdefault(round(float(t) - step / 2, 3), {})[field] = None if math.isnan(x) or math.isinf(x) else x


def columns(rows: dict[str, dict[float, dict[str, float | None]]]) -> dict[str, dict[str, list]]:
    """The renderers' shape: per GPU a time column and one column per field (None where a step had no sample)."""
    out = {}
    for key, by_t in rows.items():
        ts = sorted(by_t)
        fields = sorted({f for v in by_t.values() for f in v})
        out[key] = {"t": ts, **{f: [by_t[t].get(f) for t in ts] for f in fields}}
    return out


def fetch(url: str, path: str, params: dict[str, str], timeout_s: float) -> dict:
    """POST a form to Prometheus' API (long node lists do not fit a URL); the answer's JSON, or PrometheusError."""
    req = urllib.request.Request(url.rstrip("/") + path, data=urllib.parse.urlencode(params).encode(),
                                 headers={"Content-Type": "application/x-www-form-urlencoded"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        raise PrometheusError(f"HTTP {e.code} from {url}: {_error_text(e.read())}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise PrometheusError(f"cannot reach {url}: {reason}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise PrometheusError(f"{url} answered something that is not Prometheus' JSON") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise PrometheusError(f"{url} answered an error: {_error_text(body)}")
    return answer


def _error_text(body: bytes) -> str:
    try:
        a = json.loads(body)
        return f"{a.get('errorType', 'error')}: {a.get('error', '')}"[:300]
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace").strip() or "(empty body)"


def job_series(url: str, s: dict, points: int = 500, label: str = "instance", min_step_s: float = 15.0,
               timeout_s: float = 5.0, now: float | None = None) -> dict[str, dict[str, list]]:
    """The job's per-GPU series from Prometheus ({} when it has none); PrometheusError when it cannot answer."""
    w = job_window(s, now)
    if w is None:
        return {}
    first, last, step = plan(w.start, w.end, points, min_step_s)
    rows: dict[str, dict[float, dict[str, float | None]]] = {}

    def ask(metric: str) -> dict:
        return fetch(url, "/api/v1/query_range", {"query": query(metric, label, w, step), "start": f"{first:.3f}",
                                                  "end": f"{last:.3f}", "step": f"{step:.3f}"}, timeout_s)

    # the six queries at once: Prometheus evaluates them in parallel, and an unreachable server costs one timeout
    with ThreadPoolExecutor(len(METRICS)) as pool:
        answers = list(pool.map(ask, [m for m, _ in METRICS.values()]))  # the first error is raised here
    for (field, (_, factor)), answer in zip(METRICS.items(), answers):
        parse(answer, field, factor, label, w, step, rows)
    return columns(rows)


def describe(url: str) -> str:
    """The source line's name for this Prometheus (the URL without credentials or query)."""
    p = urllib.parse.urlsplit(url)
    return f"Prometheus {p.scheme}://{p.hostname or ''}{':' + str(p.port) if p.port else ''}{p.path.rstrip('/')}"

