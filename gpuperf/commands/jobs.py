"""``gpuperf jobs [JOBID...] [--since 7d] [--user U] [--sort waste|energy|gpu-hours] [--source auto|store|sacct] [--cpu-jobs] [--json]``.

Jobs are shown as Slurm users name them (``8_3``, ``10+1``; ``gpuperf.jobrecords``); a JOBID names
one job, every task of an array (``8``) or every component of a het job, whenever it ended. Jobs
that held no GPU are left out unless ``--cpu-jobs`` (gpuperf has nothing to say about them).

Two sources, the same rows. Admins on the controller read its store (every job, with the state of
its AdminComment: ``acct-pending`` while the service retries, ``acct-unavailable`` past the retry
horizon). Everyone else, on any host, reads the AdminComments in sacct: one ``sacct`` call for the
whole period (``gpuperf.report.sacctrows``), their own jobs only unless admin.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import sys
import time
from datetime import datetime

from gpuperf.files import config as config_mod
from gpuperf.jobrecords import JobRecords, JobRefError, is_admin
from gpuperf.controller import clusterstore

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """'7d', '12h', '30m', '2w' (ago) or an ISO date/time -> unix time; ValueError otherwise."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: use a duration like 7d, 12h, 30m, 2w or an ISO date like 2026-11-01") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf jobs``."""
    p.add_argument("jobs", nargs="*", metavar="JOBID",
                   help="only these jobs: 12, 8 (every task of array 8), 8_3, 10 (every component), 10+1")
    p.add_argument("--since", default=None,
                   help="jobs that ended since (7d, 12h, 2w, or an ISO date; default 7d, or any time with JOBIDs)")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--sort", choices=tuple(k for k in clusterstore.SORTS if k != "end"), default="waste",
                   help="largest first by wasted GPU-hours (default), energy or GPU-hours")
    p.add_argument("--limit", type=int, default=50, help="at most this many jobs (0: all; default 50)")
    p.add_argument("--source", choices=("auto", "store", "sacct"), default="auto",
                   help="the controller's store or sacct's AdminComments (auto: the store when readable by an admin)")
    p.add_argument("--cpu-jobs", action="store_true", help="list jobs that held no GPU too")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


_ACCT_FLAGS = {"write": " acct-pending", "merge": " acct-pending", "unavailable": " acct-unavailable",
               "orphan": " never-ended"}


def _fmt_rows(rows: list[dict]) -> str:
    head = f"{'JOBID':>14} {'USER':<12} {'END':<16} {'GPUS':>4} {'GPU-H':>9} {'WASTED':>9} {'KWH':>9}  CLASS"
    lines = [head]
    for r in rows:
        end = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["end"])) if r["end"] else "-"
        flags = (" imbalanced" if r["imbalanced"] else "") + (" partial" if r["partial"] else "")
        flags += _ACCT_FLAGS.get(r.get("accounting") or "", "")
        kwh = (r["energy_j"] or 0.0) / 3.6e6
        lines.append(f"{r.get('job') or r['job_id']:>14} {str(r['user'] or '?')[:12]:<12} {end:<16} {r['gpus'] or 0:>4} "
                     f"{r['gpu_hours'] or 0:>9.2f} {r['wasted_gpu_hours'] or 0:>9.2f} {kwh:>9.2f}  {r['class'] or '?'}{flags}")
    return "\n".join(lines) + "\n"


def _named(records: JobRecords, refs: list[str]) -> tuple[list[int] | None, str | None]:
    """Raw ids of the jobs ``refs`` name (None: no filter), or an error to print."""
    if not refs:
        return None, None
    raw: list[int] = []
    for text in refs:
        try:
            raw += [j.raw for j in records.jobs(text)]
        except JobRefError as e:
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - SlurmError: an array task cannot be resolved without Slurm
            return None, f"cannot resolve job {text}: {e}"
    return raw, None


def run(args: argparse.Namespace) -> int:
    """List jobs; 0 on success, 1 when the store cannot be read or the user is not allowed, 2 on bad input."""
    cfg = config_mod.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    records = JobRecords(cfg)
    job_ids, error = _named(records, args.jobs)
    if error:
        print(f"gpuperf jobs: {error}", file=sys.stderr)
        return 2
    try:
        since = parse_since(args.since or "7d") if args.since or job_ids is None else None
    except ValueError as e:
        print(f"gpuperf jobs: {e}", file=sys.stderr)
        return 2
    uid = os.getuid()
    user = args.user
    if not is_admin(cfg, uid):
        me = pwd.getpwuid(uid).pw_name
        if user not in (None, me):
            print(f"gpuperf jobs: only admins may list other users' jobs", file=sys.stderr)
            return 1
        user = me
    path = clusterstore.default_path(cfg)
    source = args.source
    if source == "auto":
        source = "store" if is_admin(cfg, uid) and os.access(path, os.R_OK) else "sacct"
    if source == "sacct":
        rows = _from_sacct(cfg, since, user if user is not None else ("ALL" if is_admin(cfg, uid) else None),
                           args.sort, args.limit or None, job_ids, args.cpu_jobs)
        if rows is None:
            return 1
    else:
        try:
            with clusterstore.ClusterStore(path, readonly=True) as store:
                rows = store.jobs(since=since, user=user, sort=args.sort, limit=args.limit or None,
                                  job_ids=job_ids, cpu_jobs=args.cpu_jobs)
        except (OSError, clusterstore.sqlite3.Error) as e:
            print(f"gpuperf jobs: cannot read the controller's store {path}: {e}", file=sys.stderr)
            return 1
        # the store keeps Slurm's raw ids: sacct names them as users do (8_3), where it answers; a
        # period's listing in one call over the period, named jobs by their ids
        start = None if since is None else datetime.fromtimestamp(since - 86400).strftime("%Y-%m-%dT%H:%M:%S")
        shown = records.names([r["job_id"] for r in rows], start) if rows else {}
        for r in rows:
            r["job"] = shown.get(r["job_id"], str(r["job_id"]))
    if args.json:
        # one write: json.dump's many small writes cost seconds for 100,000 rows
        sys.stdout.write(json.dumps(rows, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(_fmt_rows(rows))
    return 0


def _from_sacct(cfg, since: float | None, user: str | None, sort: str, limit: int | None,
                job_ids: list[int] | None = None, cpu_jobs: bool = False) -> list[dict] | None:
    """Rows from one sacct call over the period (or of ``job_ids``); None (and a message) when sacct fails."""
    from gpuperf.report import sacctrows
    from gpuperf.access.slurm import Slurm, SlurmError

    if job_ids is not None and not job_ids:
        return []
    start = datetime.fromtimestamp(since or 0).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        lines = Slurm(cfg.general.slurm_bin_dir).sacct_rows(sacctrows.FIELDS, start, user, job_ids=job_ids)
    except SlurmError as e:
        print(f"gpuperf jobs: sacct failed: {e}", file=sys.stderr)
        return None
    if job_ids is not None:
        lines = [r for r in lines if r.get("JobIDRaw", "").isdigit() and int(r["JobIDRaw"]) in set(job_ids)]
    rows, without = sacctrows.rows(lines, sort, None)
    # the period's start filters on start in sacct; keep the store's meaning (ended since)
    rows = [r for r in rows if since is None or r["end"] is None or r["end"] >= since]
    if not cpu_jobs:
        rows = [r for r in rows if r.get("gpus")]  # an AdminComment of an older gpuperf for a CPU-only job
    if without:
        print(f"gpuperf jobs: {without} GPU job(s) in the period have no gpuperf AdminComment (yet)", file=sys.stderr)
    return rows[:limit] if limit else rows
