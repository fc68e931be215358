"""``gpuperf jobs [--since 7d] [--user U] [--sort waste|energy|gpu-hours] [--source auto|store|sacct] [--json]``.

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
from gpuperf.commands.report import is_admin
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
    p.add_argument("--since", default="7d", help="jobs that ended since (7d, 12h, 2w, or an ISO date; default 7d)")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--sort", choices=tuple(k for k in clusterstore.SORTS if k != "end"), default="waste",
                   help="largest first by wasted GPU-hours (default), energy or GPU-hours")
    p.add_argument("--limit", type=int, default=50, help="at most this many jobs (0: all; default 50)")
    p.add_argument("--source", choices=("auto", "store", "sacct"), default="auto",
                   help="the controller's store or sacct's AdminComments (auto: the store when readable by an admin)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


_ACCT_FLAGS = {"write": " acct-pending", "merge": " acct-pending", "unavailable": " acct-unavailable",
               "orphan": " never-ended"}


def _fmt_rows(rows: list[dict]) -> str:
    head = f"{'JOBID':>10} {'USER':<12} {'END':<16} {'GPUS':>4} {'GPU-H':>9} {'WASTED':>9} {'KWH':>9}  CLASS"
    lines = [head]
    for r in rows:
        end = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["end"])) if r["end"] else "-"
        flags = (" imbalanced" if r["imbalanced"] else "") + (" partial" if r["partial"] else "")
        flags += _ACCT_FLAGS.get(r.get("accounting") or "", "")
        kwh = (r["energy_j"] or 0.0) / 3.6e6
        lines.append(f"{r['job_id']:>10} {str(r['user'] or '?')[:12]:<12} {end:<16} {r['gpus'] or 0:>4} "
                     f"{r['gpu_hours'] or 0:>9.2f} {r['wasted_gpu_hours'] or 0:>9.2f} {kwh:>9.2f}  {r['class'] or '?'}{flags}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """List jobs; 0 on success, 1 when the store cannot be read or the user is not allowed, 2 on bad input."""
    cfg = config_mod.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    try:
        since = parse_since(args.since)
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
                           args.sort, args.limit or None)
        if rows is None:
            return 1
    else:
        try:
            with clusterstore.ClusterStore(path, readonly=True) as store:
                rows = store.jobs(since=since, user=user, sort=args.sort, limit=args.limit or None)
        except (OSError, clusterstore.sqlite3.Error) as e:
            print(f"gpuperf jobs: cannot read the controller's store {path}: {e}", file=sys.stderr)
            return 1
    if args.json:
        # one write: json.dump's many small writes cost seconds for 100,000 rows
        sys.stdout.write(json.dumps(rows, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(_fmt_rows(rows))
    return 0


def _from_sacct(cfg, since: float, user: str | None, sort: str, limit: int | None) -> list[dict] | None:
    """Rows from one sacct call over the period; None (and a message) when sacct fails."""
    from gpuperf.report import sacctrows
    from gpuperf.access.slurm import Slurm, SlurmError

    start = datetime.fromtimestamp(since).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        lines = Slurm(cfg.general.slurm_bin_dir).sacct_rows(sacctrows.FIELDS, start, user)
    except SlurmError as e:
        print(f"gpuperf jobs: sacct failed: {e}", file=sys.stderr)
        return None
    rows, without = sacctrows.rows(lines, sort, limit)
    # the period's start filters on start in sacct; keep the store's meaning (ended since)
    rows = [r for r in rows if r["end"] is None or r["end"] >= since]
    if without:
        print(f"gpuperf jobs: {without} GPU job(s) in the period have no gpuperf AdminComment (yet)", file=sys.stderr)
    return rows
