"""``gpuperf report JOBID [--json] [--html FILE]``: a job's efficiency report.

Time series (the terminal chart, the HTML page's charts) come from Prometheus when the admin set
``report.prometheus_url`` (the same view from any host, at full precision), else from the node's
daemon while it still holds them, else from the series the nodes sent to the controller with their
summaries; a source that cannot answer is skipped and named in the report's source line. The summary comes from the first source that has it: the node daemon (running jobs, live), the
controller's store, the node daemon's store of finished jobs, and finally the AdminComment in
sacct, so a report survives the loss of the node. Users read only their own jobs; root and
``general.admin_users`` read all.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
from dataclasses import dataclass, field
from typing import Any

from gpuperf.model import admincomment
from gpuperf.diagnosis import jobsummary
from gpuperf.files import config as config_mod, jobstate
from gpuperf import diagnosis
from gpuperf.controller import clusterstore
from gpuperf.access.slurm import Slurm, SlurmError


SERIES_SOURCES = ("auto", "prometheus", "daemon", "controller")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf report``."""
    p.add_argument("job_id", type=int, metavar="JOBID")
    p.add_argument("--json", action="store_true", help="print the full summary (gpuperf.summary.v1) as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE")
    p.add_argument("--source", choices=("auto", "daemon", "controller", "sacct"), default="auto",
                   help="where to read the summary (default: the first that has it)")
    p.add_argument("--series-source", choices=SERIES_SOURCES, default="auto",
                   help="where to read the time series (default: Prometheus when configured, the node daemon, "
                        "the controller store: the first that has them)")


@dataclass
class Found:
    """A job's summary, where it came from, and its series when the node still has them."""

    summary: dict
    source: str
    series: dict | None = None
    tried: list[str] = field(default_factory=list)


def is_admin(cfg, uid: int) -> bool:
    """root, or a user named in ``general.admin_users``."""
    if uid == 0:
        return True
    try:
        return pwd.getpwuid(uid).pw_name in cfg.general.admin_users
    except KeyError:
        return False


def _from_daemon(cfg, job_id: int, want_live: bool) -> dict | None:
    from gpuperf.daemon import client

    got = client.job_aggregates(cfg, job_id)
    aggs, reg = got.get("aggregates"), got.get("job") or {}
    if not aggs or (got.get("state") == "running") != want_live:
        return None
    ctx = {"job_id": job_id, "user": reg.get("user"), "uid": reg.get("uid"),
           "job_dir": str(jobstate.job_dir(cfg.general.run_dir, job_id)), "thresholds": cfg.report.thresholds}
    s = jobsummary.node_summary(aggs, ctx)
    s["live"] = want_live
    return s


def _series(cfg, job_id: int, max_points: int) -> dict | None:
    try:
        from gpuperf.daemon import client

        return client.request(cfg, "series", {"job_id": job_id, "max_points": max_points}).get("series") or None
    except Exception:  # noqa: BLE001 - no daemon or job gone: the page has no charts, says so
        return None


def _series_from_controller(cfg, job_id: int, offsets: dict[str, float]) -> dict | None:
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


def _series_from_prometheus(cfg, s: dict, max_points: int) -> dict | None:
    from gpuperf.model import series as series_mod
    from gpuperf.report import promseries

    r = cfg.report
    # no more points than the controller's series keep: a line per GPU, whatever the page's own bound
    points = min(max_points, series_mod.MAX_POINTS)
    return promseries.job_series(r.prometheus_url, s, points, r.prometheus_node_label, r.prometheus_scrape_s,
                                 r.prometheus_timeout_s) or None


def job_series(cfg, job_id: int, s: dict, max_points: int, which: str = "auto") -> Series:
    """The job's per-GPU series from the first source that has them: Prometheus (when configured), the
    node's daemon, the controller's store. A failing source is noted, never raised."""
    steps: list[tuple[str, Any]] = []
    if which in ("auto", "prometheus"):
        if cfg.report.prometheus_url:
            from gpuperf.report import promseries

            steps.append((promseries.describe(cfg.report.prometheus_url), lambda: _series_from_prometheus(cfg, s, max_points)))
        elif which == "prometheus":
            return Series(None, notes=["Prometheus: report.prometheus_url is not set"])
    if which in ("auto", "daemon"):
        steps.append(("node daemon", lambda: _series(cfg, job_id, max_points)))
    if which in ("auto", "controller"):
        offsets = (s.get("quality") or {}).get("clock_offsets_s") or {}
        steps.append(("controller store", lambda: _series_from_controller(cfg, job_id, offsets)))
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


def _from_controller(cfg, job_id: int) -> dict | None:
    with clusterstore.ClusterStore(clusterstore.default_path(cfg), readonly=True) as store:
        return store.job(job_id)


def _from_job_dir(cfg, job_id: int) -> dict | None:
    s = jobstate.read_json(jobstate.job_dir(cfg.general.run_dir, job_id) / "node_summary.json")
    return s if isinstance(s, dict) and s.get("schema") == jobsummary.SCHEMA else None


def _from_sacct(cfg, job_id: int) -> dict | None:
    text = Slurm(cfg.general.slurm_bin_dir).admin_comment(job_id)
    if not admincomment.is_admincomment(text):
        return None
    return admincomment.decode(text)


def find(cfg, job_id: int, source: str = "auto") -> Found | None:
    """The job's summary from the first source that has it (errors of a source are noted, not raised)."""
    steps: list[tuple[str, Any]] = []
    if source in ("auto", "daemon"):
        steps.append(("daemon (running)", lambda: _from_daemon(cfg, job_id, True)))
    if source in ("auto", "controller"):
        steps.append(("controller store", lambda: _from_controller(cfg, job_id)))
    if source in ("auto", "daemon"):
        steps.append(("node daemon store", lambda: _from_daemon(cfg, job_id, False)))
        steps.append(("node job dir", lambda: _from_job_dir(cfg, job_id)))
    if source in ("auto", "sacct"):
        steps.append(("sacct AdminComment", lambda: _from_sacct(cfg, job_id)))
    tried = []
    for name, fn in steps:
        try:
            s = fn()
        except Exception as e:  # noqa: BLE001 - a missing daemon/store/sacct just means the next source
            tried.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if s:
            return Found(s, name, tried=tried)
        tried.append(f"{name}: no summary")
    return Found({}, "", tried=tried) if tried else None


def owner_uid(cfg, job_id: int, s: dict) -> int | None:
    """The job's uid: from the summary, else from sacct."""
    if isinstance(s.get("uid"), int):
        return s["uid"]
    try:
        uid = Slurm(cfg.general.slurm_bin_dir).sacct_job(job_id, ("JobID", "UID")).get("UID", "")
        return int(uid) if uid.isdigit() else None
    except SlurmError:
        return None


def run(args: argparse.Namespace) -> int:
    """Print (or write) the report; 0 on success, 1 when not found or not allowed, 2 on a config error."""
    cfg = config_mod.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    found = find(cfg, args.job_id, args.source)
    if found is None or not found.summary:
        print(f"gpuperf report: no summary for job {args.job_id}", file=sys.stderr)
        for t in (found.tried if found else []):
            print(f"  {t}", file=sys.stderr)
        return 1
    s = found.summary
    caller = os.getuid()
    if not is_admin(cfg, caller) and owner_uid(cfg, args.job_id, s) != caller:
        print(f"gpuperf report: job {args.job_id} is not yours; only its owner and admins may read it", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(s, indent=1, sort_keys=True))
    if args.html:
        from gpuperf.report import html

        # whatever source had the summary: the series come from their own sources
        got = job_series(cfg, args.job_id, s, cfg.report.html_max_points, args.series_source)
        if got.data:
            # the series add evidence (bursts) the summary alone cannot show
            s = dict(s, diagnosis=diagnosis.diagnose(s, got.data, cfg.report.thresholds).to_dict())
        from gpuperf.fleet.jobview import job_fleet

        page = html.render(s, got.data, cfg.report.html_max_points, fleet=job_fleet(cfg, s), series_note=got.line())
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as e:
            print(f"gpuperf report: cannot write {args.html}: {e.strerror}", file=sys.stderr)
            return 1
        print(f"wrote {args.html} ({len(page) // 1024} KiB, summary from {found.source}; {got.line()})", file=sys.stderr)
    if not args.json and not args.html:
        from gpuperf.report import terminal

        width = min(os.get_terminal_size().columns, 130) if sys.stdout.isatty() else 110
        sys.stdout.write(terminal.render(s, width=width, color=sys.stdout.isatty()))
        got = job_series(cfg, args.job_id, s, cfg.report.html_max_points, args.series_source)
        if got.data:
            from gpuperf.report import timechart

            sys.stdout.write("\n" + timechart.render(got.data, width=width, color=sys.stdout.isatty()))
        print(f"(summary from {found.source}; {got.line()})")
    return 0
