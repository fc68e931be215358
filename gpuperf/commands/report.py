"""``gpuperf report JOBID [--json] [--html FILE]``: a job's efficiency report.

JOBID as Slurm users write it: ``12``, ``8_3`` (an array task), ``10+1`` (a het component), a step
(``12.0``: the report is the whole allocation's). Finding the job, its summary and its series is
``gpuperf.jobrecords`` (sources and their order are named there); this module only renders. Users
read only their own jobs; root and ``general.admin_users`` read all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from gpuperf.files import config as config_mod
from gpuperf.jobrecords import JobLookupError, JobRecords, JobRefError, is_admin, series, summaries
from gpuperf.model.profiled import mask_series

__all__ = ["add_arguments", "run", "is_admin"]

def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf report``."""
    p.add_argument("job_id", metavar="JOBID", help="12, 8_3 (array task), 10+1 (het component), 12.0 (step)")
    p.add_argument("--json", action="store_true", help="print the full summary (gpuperf.summary.v1) as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE")
    p.add_argument("--source", choices=summaries.SOURCES, default="auto",
                   help="where to read the summary (default: the first that has it)")
    p.add_argument("--series-source", choices=series.SOURCES, default="auto",
                   help="where to read the time series (default: Prometheus when configured, the node daemon, "
                        "the controller store: the first that has them)")


def run(args: argparse.Namespace) -> int:
    """Print (or write) the report; 0 on success, 1 when not found or not allowed, 2 on a malformed JOBID
    or a config error."""
    cfg = config_mod.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    records = JobRecords(cfg)
    try:
        job = records.job(args.job_id)
    except JobRefError as e:
        print(f"gpuperf report: {e}", file=sys.stderr)
        return 2
    except JobLookupError as e:
        print(f"gpuperf report: {e}", file=sys.stderr)
        return 1
    found = records.summary(job, args.source)
    if found is None or not found.summary:
        print(f"gpuperf report: no summary for job {job.name}", file=sys.stderr)
        for t in (found.tried if found else []):
            print(f"  {t}", file=sys.stderr)
        return 1
    s = found.summary
    caller = os.getuid()
    if not is_admin(cfg, caller) and records.owner_uid(job, s) != caller:
        print(f"gpuperf report: job {job.name} is not yours; only its owner and admins may read it", file=sys.stderr)
        return 1
    step = args.job_id.strip() if "." in args.job_id else None
    if step:
        # gpuperf measures allocations: a step's own figures do not exist, say so rather than pretend
        print(f"gpuperf report: {step} is a step; the figures are job {job.name}'s, all its steps together",
              file=sys.stderr)
    if args.json:
        print(json.dumps(s, indent=1, sort_keys=True))
    if args.html:
        from gpuperf.report import html

        # whatever source had the summary: the series come from their own sources, for the charts only; the
        # judgement is the stored one, as every other reader shows it (issue 35)
        got = _masked(records.series(job, s, cfg.report.html_max_points, args.series_source), s)
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
        _slurm_figures(cfg, job.raw, s)
        got = _masked(records.series(job, s, cfg.report.html_max_points, args.series_source), s)
        if got.data:
            from gpuperf.report import timechart

            sys.stdout.write("\n" + timechart.render(got.data, width=width, color=sys.stdout.isatty()))
        print(f"(summary from {found.source}; {got.line()})")
    return 0


def _slurm_figures(cfg, job_id: int, s: dict) -> None:
    """Slurm's own gres/gpuutil and gres/gpumem beside gpuperf's, where the release recorded them (one sacct call)."""
    from gpuperf.access.slurm import Slurm
    from gpuperf.report import slurmtres

    text = slurmtres.line(s, slurmtres.read(Slurm(cfg.general.slurm_bin_dir), job_id, int((s.get("job") or {}).get("gpu_count") or 0)))
    if text:
        print(text)


def _masked(got: series.Series, s: dict) -> series.Series:
    """The series without the activity figures of the time the job ran under a profiler (the summary's
    ``profiled_spans``): the charts show them missing, as the summary does, not the profiler's readings."""
    if not got.data or not (s.get("job") or {}).get("profiled_s"):
        return got
    return dataclasses.replace(got, data=mask_series(got.data, [g for g in s.get("gpus") or [] if isinstance(g, dict)]))
