"""``gpuperf jobs [--since 7d] [--user U] [--sort waste|energy|gpu-hours] [--json]``: the admin's job list.

Reads the controller's store. Admins see every job; other users only their own (and need read
access to the store, which is private by default: they use ``gpuperf report`` and sacct).
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

from gpuperf import config as config_mod
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
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def _fmt_rows(rows: list[dict]) -> str:
    head = f"{'JOBID':>10} {'USER':<12} {'END':<16} {'GPUS':>4} {'GPU-H':>9} {'WASTED':>9} {'KWH':>9}  CLASS"
    lines = [head]
    for r in rows:
        end = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["end"])) if r["end"] else "-"
        flags = (" imbalanced" if r["imbalanced"] else "") + (" partial" if r["partial"] else "")
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
