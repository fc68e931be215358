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

from gpuperf.files import jobstate, log


def node_links(cfg: Any) -> dict[str, Any]:
    """``gpu_links`` ({index: {"gen", "width"}}), ``gpudirect_rdma``, ``gpudirect_storage`` and ``cpus_online`` (the
    CPUs a task's affinity record may name) from the node's topology (the daemon's health checks keep it fresh);
    {} where it cannot be read: the summary then uses the GPU model's link and the job's CPUs as the plan has them."""
    try:
        from gpuperf import topology

        topo = topology.load_node_once(topology.node_root(cfg)).topology
        links = {str(g["index"]): {"gen": (g.get("pcie") or {}).get("gen"), "width": (g.get("pcie") or {}).get("width")}
                 for g in topo.get("gpus") or [] if isinstance(g, dict) and "index" in g}
        return {"gpu_links": links, "gpudirect_rdma": (topo.get("gdr") or {}).get("loaded"),
                "gpudirect_storage": (topo.get("gds") or {}).get("loaded"),
                "cpus_online": list((topo.get("cpus") or {}).get("online") or [])}
    except Exception as e:  # noqa: BLE001 - the node's topology is evidence, never a reason to lose the summary
        log.get("daemon").warning("summary without the node's PCIe links: %s: %s", type(e).__name__, e)
        return {}


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
    out = _read_entries(pending_dir(state_dir), "pending marker", lambda d: d.get("op") in ("register", "finalize")
                        and isinstance(d.get("job"), dict))
    out.sort(key=lambda x: x[1]["op"] != "register")   # stable: oldest first within each op
    return out


def _read_entries(d: Path, what: str, valid: Any) -> list[tuple[Path, dict[str, Any]]]:
    """The JSON entries of a root-only directory, oldest first; one that is not ``valid`` is kept as .bad."""
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
        if not isinstance(data, dict) or not valid(data):
            log.get("daemon").error("%s %s is unreadable; kept as %s.bad", what, p, p.name)
            try:
                os.replace(p, p.with_suffix(".bad"))
            except OSError:
                pass
            continue
        out.append((p, data))
    out.sort(key=lambda x: x[0].stat().st_mtime if x[0].exists() else 0)
    return out


def outbox_dir(state_dir: str) -> Path:
    """Directory of finalised jobs the daemon has still to deliver (``<state_dir>/outbox``, root only)."""
    return Path(state_dir) / "outbox"


def write_outbox(state_dir: str, aggregates: dict[str, Any], context: dict[str, Any]) -> Path:
    """Keep a finalised job for delivery on disk (root-only file) before anyone is told it is taken."""
    path = outbox_dir(state_dir) / f"{int(aggregates['job_id'])}.json"
    jobstate.write_json(path, {"aggregates": aggregates, "context": context}, mode=0o600)
    return path


def read_outbox(state_dir: str) -> list[tuple[Path, dict[str, Any]]]:
    """The jobs left to deliver, oldest first; an unreadable entry is moved aside (``.bad``), not lost."""
    return _read_entries(outbox_dir(state_dir), "outbox entry",
                         lambda d: isinstance(d.get("aggregates"), dict) and "job_id" in d["aggregates"])


def deliver(cfg: Any, aggregates: dict[str, Any], context: dict[str, Any], send: bool = True) -> dict[str, Any]:
    """Write the aggregates and the node summary into the job's dir and send the summary; never raises.

    Returns what was done: {"aggregates": path|None, "summary": path|None, "sent": bool, "errors": [...],
    "retry": bool (sending failed in a way a later try may not)}."""
    out, summary = write(cfg, aggregates, context)
    if send and summary is not None:
        out.update(send_summary(cfg, summary, errors=out["errors"]))
    return out


def write(cfg: Any, aggregates: dict[str, Any], context: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The aggregates and the node summary written into the job's dir; (what was done, the summary or None)."""
    out: dict[str, Any] = {"aggregates": None, "summary": None, "sent": False, "errors": [], "retry": False}
    job_id = aggregates.get("job_id")
    d = jobstate.job_dir(cfg.general.run_dir, int(job_id))
    try:
        jobstate.write_json(d / "aggregates.json", aggregates)
        out["aggregates"] = str(d / "aggregates.json")
    except (OSError, TypeError, ValueError) as e:
        out["errors"].append(f"aggregates.json: {e}")
    try:
        from gpuperf.diagnosis.jobsummary import node_summary
    except ImportError as e:
        out["errors"].append(f"no summary module: {e}")
        return out, None
    try:
        from gpuperf.checks import probe as fleet_probe  # here: the prolog imports this module for write_pending

        ctx = dict(context)
        ctx.setdefault("job_id", job_id)
        ctx.setdefault("node", aggregates.get("node"))
        ctx.setdefault("job_dir", str(d))
        ctx.setdefault("probe", fleet_probe.load(cfg.general.state_dir))   # latest active-probe figures, if any
        for k, v in node_links(cfg).items():
            ctx.setdefault(k, v)           # each GPU's PCIe link and GPUDirect RDMA: the diagnosis's transfer rule
        summary = node_summary(aggregates, ctx)
        if isinstance(context.get("controller_series"), dict):
            summary["series"] = context["controller_series"]  # gpuperf.series.v1: the controller charts from it
        if isinstance(context.get("series"), dict):
            # the evidence of this node's phases, kept with its judgement: a merge of several nodes judges the
            # job from every node's, as this node judged its part (``jobsummary.merge``), never without them
            summary["phase_series"] = context["series"]
        jobstate.write_json(d / "node_summary.json", summary)
        out["summary"] = str(d / "node_summary.json")
    except Exception as e:  # noqa: BLE001 - a summary bug must not lose the aggregates written above
        out["errors"].append(f"node summary: {type(e).__name__}: {e}")
        log.get("daemon").error("job %s: node summary failed: %s: %s", job_id, type(e).__name__, e)
        return out, None
    return out, summary


# what a node summary carries besides its judgement: charts (``series``) and the phases' evidence for the
# controller's merge (``phase_series``); readers are served the judgement, and their series apart
EVIDENCE_KEYS = ("series", "phase_series")


def stored_summary(run_dir: str, job_id: int) -> dict[str, Any] | None:
    """The node summary this node made and kept at the job's end (``node_summary.json``), without its series;
    None when there is none (not finalised here, or pruned). The judgement in it is the one the node sent."""
    from gpuperf.model.summary import SCHEMA

    s = jobstate.read_json(jobstate.job_dir(run_dir, job_id) / "node_summary.json")   # root's file, root's dir
    if not isinstance(s, dict) or s.get("schema") != SCHEMA:
        return None
    return {k: v for k, v in s.items() if k not in EVIDENCE_KEYS}


def send_summary(cfg: Any, summary: dict[str, Any], attempts: int = 3, errors: list[str] | None = None) -> dict[str, Any]:
    """Send a node summary to the controller; {"sent": bool, "retry": bool, "errors": [...]}, never raises."""
    errors = errors if errors is not None else []
    try:
        from gpuperf.controller.transport import Refused, send_node_summary

        send_node_summary(cfg, summary, attempts=attempts)
        return {"sent": True, "retry": False, "errors": errors}
    except ImportError as e:
        errors.append(f"no transport: {e}")
        return {"sent": False, "retry": False, "errors": errors}
    except Exception as e:  # noqa: BLE001 - controller down: kept for a later try (the daemon's outbox)
        errors.append(f"send: {type(e).__name__}: {e}")
        return {"sent": False, "retry": not isinstance(e, Refused), "errors": errors}


def dumps(obj: Any) -> str:
    """Compact JSON (for logs)."""
    return json.dumps(obj, separators=(",", ":"), default=str)
