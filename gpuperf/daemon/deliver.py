"""What happens to a finalised job's aggregates, whoever finalised it (the epilog, or the daemon for a
job whose epilog ran while it was down): ``<run_dir>/jobs/<id>/aggregates.json``, the node summary
beside it (``node_summary.json``), and the summary sent to the controller.

Pending markers (``<state_dir>/pending/``) are how a hook that could not reach the daemon leaves work
for it: ``register-<id>.json`` and ``finalize-<id>.json``, each the request's ``job`` member plus the
hook's context.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpuperf import jobstate, log


def pending_dir(state_dir: str) -> Path:
    """Directory of pending markers."""
    return Path(state_dir) / "pending"


def write_pending(state_dir: str, op: str, job: dict[str, Any], context: dict[str, Any] | None = None) -> Path:
    """Leave a marker for the daemon (root-only file): op is register or finalize."""
    path = pending_dir(state_dir) / f"{op}-{int(job['job_id'])}.json"
    jobstate.write_json(path, {"op": op, "job": job, "context": context or {}}, mode=0o600)
    return path


def read_pending(state_dir: str) -> list[tuple[Path, dict[str, Any]]]:
    """Pending markers, registrations first, oldest first; unreadable ones are moved aside, not lost."""
    d = pending_dir(state_dir)
    try:
        names = os.listdir(d)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        p = d / name
        data = jobstate.read_json(p)
        if not isinstance(data, dict) or data.get("op") not in ("register", "finalize") or not isinstance(data.get("job"), dict):
            log.get("daemon").error("pending marker %s is unreadable; kept as %s.bad", p, p.name)
            try:
                os.replace(p, p.with_suffix(".bad"))
            except OSError:
                pass
            continue
        out.append((p, data))
    out.sort(key=lambda x: (x[1]["op"] != "register", x[0].stat().st_mtime if x[0].exists() else 0))
    return out


def deliver(cfg: Any, aggregates: dict[str, Any], context: dict[str, Any], send: bool = True) -> dict[str, Any]:
    """Write the aggregates and the node summary into the job's dir and send the summary; never raises.

    Returns what was done: {"aggregates": path|None, "summary": path|None, "sent": bool, "errors": [...]}."""
    out: dict[str, Any] = {"aggregates": None, "summary": None, "sent": False, "errors": []}
    job_id = aggregates.get("job_id")
    d = jobstate.job_dir(cfg.general.run_dir, int(job_id))
    try:
        jobstate.write_json(d / "aggregates.json", aggregates)
        out["aggregates"] = str(d / "aggregates.json")
    except (OSError, TypeError, ValueError) as e:
        out["errors"].append(f"aggregates.json: {e}")
    try:
        from gpuperf.summary import node_summary
    except ImportError as e:
        out["errors"].append(f"no summary module: {e}")
        return out
    try:
        from gpuperf.fleet import probe as fleet_probe  # here: the prolog imports this module for write_pending

        ctx = dict(context)
        ctx.setdefault("job_id", job_id)
        ctx.setdefault("node", aggregates.get("node"))
        ctx.setdefault("job_dir", str(d))
        ctx.setdefault("probe", fleet_probe.load(cfg.general.state_dir))   # latest active-probe figures, if any
        summary = node_summary(aggregates, ctx)
        if isinstance(context.get("controller_series"), dict):
            summary["series"] = context["controller_series"]  # gpuperf.series.v1: the controller charts from it
        jobstate.write_json(d / "node_summary.json", summary)
        out["summary"] = str(d / "node_summary.json")
    except Exception as e:  # noqa: BLE001 - a summary bug must not lose the aggregates written above
        out["errors"].append(f"node summary: {type(e).__name__}: {e}")
        log.get("daemon").error("job %s: node summary failed: %s: %s", job_id, type(e).__name__, e)
        return out
    if send:
        try:
            from gpuperf.controller.transport import send_node_summary

            send_node_summary(cfg, summary)
            out["sent"] = True
        except ImportError as e:
            out["errors"].append(f"no transport: {e}")
        except Exception as e:  # noqa: BLE001 - controller down: the summary stays on the node
            out["errors"].append(f"send: {type(e).__name__}: {e}")
    return out


def dumps(obj: Any) -> str:
    """Compact JSON (for logs)."""
    return json.dumps(obj, separators=(",", ":"), default=str)
