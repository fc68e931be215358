"""A job's per-GPU time series from the first source that has them: Prometheus (when the admin set
``report.prometheus_url``: the same view from any host, at full precision), the node's daemon while
it still holds them, the series the nodes sent to the controller with their summaries. A source
that cannot answer is skipped and named in the report's source line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuperf.controller import clusterstore

SOURCES = ("auto", "prometheus", "daemon", "controller")


@dataclass
class Series:
    """A job's series (None: no source had them), the source that gave them, and why others did not."""

    data: dict | None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """Where the series came from (and what was skipped), for the report's source line."""
        skipped = "; ".join(self.notes)
        if self.data:
            return f"series from {self.source}" + (f" ({skipped})" if skipped else "")
        return "no time series" + (f": {skipped}" if skipped else "")


def _from_daemon(cfg: Any, job_id: int, max_points: int) -> dict | None:
    try:
        from gpuperf.daemon import client

        return client.request(cfg, "series", {"job_id": job_id, "max_points": max_points}).get("series") or None
    except Exception:  # noqa: BLE001 - no daemon or job gone: the page has no charts, says so
        return None


def _from_controller(cfg: Any, job_id: int, offsets: dict[str, float]) -> dict | None:
    """The series the job's nodes sent with their summaries, from the controller's store (any host)."""
    from gpuperf.model import series as series_mod

    try:
        with clusterstore.ClusterStore(clusterstore.default_path(cfg), readonly=True) as store:
            parts = store.node_series(job_id)
    except Exception:  # noqa: BLE001 - no store readable here: the page says it has no series
        return None
    out: dict = {}
    for node, value in parts.items():
        got = series_mod.expand(node, value)
        # a node whose clock was off: its series go onto the controller's clock, as its summary did
        out.update(series_mod.shifted(got, -offsets[node]) if node in offsets else got)
    return out or None


def _from_prometheus(cfg: Any, s: dict, max_points: int) -> dict | None:
    from gpuperf.model import series as series_mod
    from gpuperf.report import promseries

    r = cfg.report
    # no more points than the controller's series keep: a line per GPU, whatever the page's own bound
    points = min(max_points, series_mod.MAX_POINTS)
    return promseries.job_series(r.prometheus_url, s, points, r.prometheus_node_label, r.prometheus_scrape_s,
                                 r.prometheus_timeout_s) or None


def job_series(cfg: Any, job_id: int, s: dict, max_points: int, which: str = "auto") -> Series:
    """The per-GPU series of raw job ``job_id`` from the first source that has them. A failing source
    is noted, never raised."""
    steps: list[tuple[str, Any]] = []
    if which in ("auto", "prometheus"):
        if cfg.report.prometheus_url:
            from gpuperf.report import promseries

            steps.append((promseries.describe(cfg.report.prometheus_url), lambda: _from_prometheus(cfg, s, max_points)))
        elif which == "prometheus":
            return Series(None, notes=["Prometheus: report.prometheus_url is not set"])
    if which in ("auto", "daemon"):
        steps.append(("node daemon", lambda: _from_daemon(cfg, job_id, max_points)))
    if which in ("auto", "controller"):
        offsets = (s.get("quality") or {}).get("clock_offsets_s") or {}
        steps.append(("controller store", lambda: _from_controller(cfg, job_id, offsets)))
    notes = []
    for name, fn in steps:
        try:
            got = fn()
        except Exception as e:  # noqa: BLE001 - a source that cannot answer means the next one (PrometheusError included)
            notes.append(f"{name}: {e}")
            continue
        if got:
            return Series(got, name, notes)
        # the daemon and the store are only worth naming when asked for: they are absent on most hosts
        if name.startswith("Prometheus") or which != "auto":
            notes.append(f"{name}: no data for this job")
    return Series(None, notes=notes)
