"""The job's affinity as its report shows it: what each task applied, else what the prolog planned.

The prolog (``prolog.affinityplan``) leaves in the job's directory the plan (``affinity.plan``, the
format of ``gpuperf.affinity.plan``), its planned view (``affinity.json``) and an ``applied/``
directory owned by the job's user, where each task (SPANK plugin or ``gpuperf-run``) records what it
applied. This module reads them back for the job model (``model.summary``); ``applied/`` only through
``gpuperf.files.safeio``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from gpuperf.affinity import plan as affinity
from gpuperf.files import jobstate, safeio

PLAN_FILE = "affinity.plan"
APPLIED_DIR = "applied"
REPORT_FILE = "affinity.json"  # the planned view the summary reads until tasks report (see report())


def applied_records(run_dir: str, job_id: int, ignored: safeio.Ignored | None = None) -> list[dict[str, str]]:
    """What each task applied (``applied/<step>.<rank>`` lines), sorted by step and rank; [] when none."""
    return _applied_in(jobstate.job_dir(run_dir, job_id) / APPLIED_DIR, ignored)


APPLIED_MAX_BYTES = 4096  # one line per task (a few hundred bytes)


def _applied_in(d: Path, ignored: safeio.Ignored | None = None) -> list[dict[str, str]]:
    # the job's user owns applied/: read it only through safeio (FIFOs, links, huge files are refused)
    ignored = ignored if ignored is not None else safeio.Ignored()
    out = []
    for name, data in safeio.read_dir(d, max_bytes=APPLIED_MAX_BYTES, ignored=ignored, label=APPLIED_DIR):
        try:
            rec = affinity.parse_applied_line(safeio.text_of(data))
        except ValueError as e:
            ignored.add(f"{APPLIED_DIR}/{name}", f"not an affinity record ({str(e)[:80]})")
            continue
        # the rank becomes a key of the report: a user's "rank=statuses" must not overwrite another
        if not rec["rank"].isdigit() or len(rec["rank"]) > 6:
            ignored.add(f"{APPLIED_DIR}/{name}", "rank is not a number")
            continue
        out.append(rec)
    return sorted(out, key=lambda r: (r.get("step", ""), int(r["rank"])))


def report(job_dir: str | Path, ignored: safeio.Ignored | None = None,
           node_cpus: Iterable[int] | None = None) -> dict[str, Any] | None:
    """The job's affinity for its report: per rank (latest step) GPU, NUMA node, CPUs, what happened.

    ``{"<rank>": {"gpu", "numa", "cpus": [..], "status", "mem", "step"}, "statuses": {status: n},
    "warnings": [..], "noop": str|None, "cpus_source": str}``; before any task ran, the ranks are the
    prolog's plan for one rank per GPU (status "planned"). None when the prolog left nothing.

    A task's ``cpus=`` (its user writes it) is cut to the job's CPUs as the plan recorded them (the
    prolog took them from the job's cgroup, within the node's) and to ``node_cpus`` (the node's online
    CPUs) where given: CPUs outside are dropped and the record named in ``ignored``.
    """
    d = Path(job_dir)
    ignored = ignored if ignored is not None else safeio.Ignored()
    planned = jobstate.read_json(d / REPORT_FILE)
    try:
        parsed = affinity.parse_plan_text((d / PLAN_FILE).read_text())
    except (OSError, ValueError):
        parsed = None
    if planned is None and parsed is None:
        return None
    out: dict[str, Any] = dict(planned or {})
    records = _applied_in(d / APPLIED_DIR, ignored)
    allowed = _allowed(parsed.cpus if parsed is not None else (), node_cpus)
    if records:
        out = {k: v for k, v in out.items() if not k.isdigit()}  # what tasks applied replaces the plan
        # the latest step of each rank; the batch step counts only where no srun step ran
        def order(r: dict[str, str]) -> tuple[int, int]:
            step = r.get("step", "")
            return (0 if not step.isdigit() else 1, int(step) if step.isdigit() else 0)

        for r in sorted(records, key=order):
            out[r.get("rank", "0")] = {
                "gpu": r.get("gpus"), "numa": r.get("numa"), "status": r.get("status"), "mem": r.get("mem"),
                "step": r.get("step"), "cpus": _cpus(r, ignored, allowed),
            }
        counts: dict[str, int] = {}
        for r in records:
            counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
        out["statuses"] = counts
    if parsed is not None:
        out["warnings"], out["noop"] = parsed.warnings, parsed.noop
    return out


def _allowed(job: Iterable[int], node: Iterable[int] | None) -> set[int] | None:
    """The CPUs a task of the job may name: the job's (the plan's) within the node's; None when neither is known."""
    job_set, node_set = set(job), set(node) if node is not None else None
    if job_set and node_set:
        return job_set & node_set
    return job_set or node_set or None


def _cpus(rec: dict[str, str], ignored: safeio.Ignored | None, allowed: set[int] | None = None) -> list[int]:
    """A task's ``cpus=`` as ids within ``allowed``; a list that is not one (or names a CPU no node has) is
    refused, CPUs outside ``allowed`` (the job's allocation on this node) dropped: either is said."""
    text = rec.get("cpus")
    name = f"{APPLIED_DIR}/{rec.get('step', '')}.{rec.get('rank', '')}"
    try:
        cpus = affinity.parse_cpu_list(text) if text and text != "none" else []
    except ValueError as e:
        if ignored is not None:
            ignored.add(name, f"cpus: {str(e)[:80]}")
        return []
    if allowed is None:
        return cpus
    kept = [c for c in cpus if c in allowed]
    if len(kept) < len(cpus) and ignored is not None:
        outside = affinity.format_cpu_list(c for c in cpus if c not in allowed)
        ignored.add(name, f"cpus: claims CPUs outside the job's allocation {affinity.format_cpu_list(allowed)[:40]}: "
                          f"{outside[:40]} dropped")
    return kept
