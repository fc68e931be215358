"""``gpuperf top [--once] [--json] [--interval S]``: live per-GPU view of this node's jobs.

Polls the daemon's ``live`` op: root through the control socket (every GPU and job), anyone else
through the user socket, where the daemon shows only the caller's own jobs and their GPUs.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gpuperf.files import config as config_mod
from gpuperf.model.aggregates import THROTTLE_BITS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf top``."""
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="print one live snapshot as JSON and exit")
    p.add_argument("--interval", type=float, default=1.0, help="refresh interval in seconds (default 1)")


def _fmt(v: Any, digits: int = 0, suffix: str = "") -> str:
    return "-" if v is None else f"{v:.{digits}f}{suffix}"


def rows(live: dict[str, Any], names: dict[int, str] | None = None) -> list[list[str]]:
    """Table rows (one per GPU) from a ``live`` reply, jobs as users name them (``names``: raw id -> ``8_3``):
    pure, for the terminal and the tests."""
    owner: dict[int, list[str]] = {}
    for j in live.get("jobs", []):
        name = (names or {}).get(j["job_id"], j["job_id"])
        for g in j.get("gpus", []):
            owner.setdefault(int(g), []).append(f"{name} ({j.get('user') or j.get('uid')})")
    out = []
    for g in live.get("gpus", []):
        reasons = [r for r, bit in THROTTLE_BITS.items() if (g.get("throttle_reasons") or 0) & bit]
        mem = g.get("mem_used_mib")
        total = g.get("mem_total_mib")
        out.append([str(g["gpu"]), ", ".join(owner.get(int(g["gpu"]), [])) or "-",
                    _fmt(g.get("util_gpu_pct"), 0, "%"), _fmt(g.get("sm_active_pct"), 0, "%"),
                    _fmt(g.get("tensor_active_pct"), 0, "%"), _fmt(g.get("dram_active_pct"), 0, "%"),
                    f"{_fmt(mem and mem / 1024, 1)}/{_fmt(total and total / 1024, 0)} GiB",
                    _fmt(g.get("power_w"), 0, " W"), _fmt(g.get("temp_c"), 0, " C"), ",".join(reasons) or "-"])
    return out


HEADERS = ["GPU", "job (user)", "util", "SM", "tensor", "DRAM", "memory", "power", "temp", "throttle"]


class Names:
    """Jobs' names as users know them (``8_3``), asked of Slurm once per new set of jobs."""

    def __init__(self, cfg: Any):
        self.cfg, self.known, self.asked = cfg, {}, set()

    def __call__(self, live: dict[str, Any]) -> dict[int, str]:
        ids = {j["job_id"] for j in live.get("jobs", [])} - self.asked
        if ids:
            from gpuperf.jobrecords import JobRecords

            self.asked |= ids
            self.known.update(JobRecords(self.cfg).names(sorted(ids)))
        return self.known


def table(live: dict[str, Any], names: dict[int, str] | None = None):
    """A rich Table of the live snapshot."""
    from rich.table import Table

    t = Table(title=f"gpuperf top — {live.get('node', '')}  {time.strftime('%H:%M:%S')}", expand=False)
    for h in HEADERS:
        t.add_column(h, justify="left" if h in ("job (user)", "throttle") else "right")
    from rich.text import Text

    from gpuperf.files.safeio import printable

    for r in rows(live, names):
        t.add_row(*(Text(printable(str(c))) for c in r))   # literal: never rich markup, no control bytes
    if not live.get("gpus"):
        t.caption = "no GPUs of yours are in use on this node" if live.get("jobs") == [] else "no samples yet"
    return t


def run(args: argparse.Namespace) -> int:
    """Show the live view; exit 2 when the daemon does not answer."""
    from gpuperf.daemon import client

    cfg = config_mod.load_or_defaults()

    def fetch() -> dict[str, Any]:
        return client.request(cfg, "live")

    try:
        live = fetch()
    except (client.DaemonUnavailable, client.DaemonRefused) as e:
        print(f"gpuperf top: {e}")
        return 2
    if args.json:
        print(json.dumps(live, indent=1, sort_keys=True))
        return 0
    from rich.console import Console
    from rich.live import Live

    console = Console()
    names = Names(cfg)
    if args.once:
        console.print(table(live, names(live)))
        return 0
    with Live(table(live, names(live)), console=console, refresh_per_second=4) as view:
        while True:
            time.sleep(max(0.2, args.interval))
            try:
                live = fetch()
            except (client.DaemonUnavailable, client.DaemonRefused) as e:
                console.print(f"gpuperf top: {e}")
                return 2
            view.update(table(live, names(live)))
