"""What the checks remember between runs on a live node: per GPU, when it was last XID-clean and its NVLink error counters.

Kept in ``<state_dir>/health/history.json`` keyed by GPU bus id, so an XID or an error-counter
increase is judged "since the previous clean check" (which precedes the previous job). A GPU's
entry moves forward only when its check passes, so an unresolved fatal XID keeps failing until
it leaves ``checks.xid_window_s``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from gpuperf.files import jobstate
from gpuperf.checks.base import CheckEnv, selected_gpus


def path(state_dir: str) -> Path:
    """The history file."""
    return Path(state_dir) / "health" / "history.json"


def load(state_dir: str) -> dict[str, Any]:
    """The history, or an empty one when absent or unreadable (the checks then use the window only)."""
    data = jobstate.read_json(path(state_dir))
    return data if isinstance(data, dict) and isinstance(data.get("gpus"), dict) else {"gpus": {}}


def env_from(hist: dict[str, Any], now: float | None, live: bool, xid_source: str, xid_error: str | None = None) -> CheckEnv:
    """The CheckEnv the checks judge with, from a loaded history."""
    since, base, base_t = {}, {}, {}
    for bus, e in hist.get("gpus", {}).items():
        if not isinstance(e, dict):
            continue
        if isinstance(e.get("xid_clean_t"), (int, float)):
            since[bus] = float(e["xid_clean_t"])
        if isinstance(e.get("nvlink_errors"), dict):
            base[bus] = e["nvlink_errors"]
            if isinstance(e.get("nvlink_t"), (int, float)) and not isinstance(e.get("nvlink_t"), bool):
                base_t[bus] = float(e["nvlink_t"])
    return CheckEnv(now=now, live=live, xid_since=since, nvlink_baseline=base, nvlink_since=base_t,
                    xid_source=xid_source, xid_error=xid_error)


def link_counters(g: dict[str, Any]) -> dict[str, dict[str, int]]:
    """link -> error counters of one GPU's snapshot entry (known values only)."""
    out = {}
    for link in (g.get("nvlink") or {}).get("links") or []:
        errs = {k: int(v) for k, v in (link.get("errors") or {}).items() if isinstance(v, int)}
        if errs:
            out[str(link.get("link"))] = errs
    return out


def advanced(hist: dict[str, Any], topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any,
             env: CheckEnv) -> dict[str, dict[str, Any]]:
    """Pure: the new entries of the GPUs just checked (bus id -> entry), each moved forward only if clean."""
    from gpuperf.checks.builtin import nvlink_down, xid_fatal

    out: dict[str, dict[str, Any]] = {}
    for g in selected_gpus(snap, job_gpus):
        bus, idx = g.get("bus_id"), g.get("index")
        if not bus or g.get("error") or env.now is None:
            continue
        entry = dict(hist.get("gpus", {}).get(bus) or {})
        if env.xid_error is None and xid_fatal.check(topo, snap, [idx], cfg, env).status == "ok":
            entry["xid_clean_t"] = env.now
        counters = link_counters(g)
        old = entry.get("nvlink_errors") or {}
        reset = any(v < old.get(l, {}).get(k, 0) for l, errs in counters.items() for k, v in errs.items())
        # a warning (corrected CRC errors below the rate that matters) moves the baseline too: the next
        # window starts here, as DCGM's health watch judges each interval on its own
        if counters and (reset or not old or nvlink_down.check(topo, snap, [idx], cfg, env).status in ("ok", "warn")):
            entry["nvlink_errors"] = counters
            entry["nvlink_t"] = env.now
        out[bus] = entry
    return out


def save(state_dir: str, entries: dict[str, dict[str, Any]]) -> None:
    """Merge entries into the history under a lock (two prologs may finish at once); OSError if unwritable."""
    p = path(state_dir)
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(p.parent / "history.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hist = load(state_dir)
        hist["gpus"].update(entries)
        jobstate.write_json(p, hist, mode=0o600)


def remove(state_dir: str) -> None:
    """Forget everything (tests, an admin after a hardware swap)."""
    try:
        os.unlink(path(state_dir))
    except FileNotFoundError:
        pass
