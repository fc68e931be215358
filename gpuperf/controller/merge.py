"""One job's node summaries -> its merged summary, with what happened on the way said in it.

The controller service calls ``merge_job`` when every node of the job reported or
``controller.merge_wait_s`` passed since slurmctld reported the job ended; nodes still missing make
the summary partial and are named. Besides ``jobsummary.merge`` this says, in ``quality.reasons``:

- a node that delivered its summary more than once (retries after a lost reply: the last is kept);
- a node whose clock is off from the controller's by more than ``SKEW_S`` (its job end against
  slurmctld's): its start and end are moved onto the controller's clock before merging, and the
  offset is kept in ``quality.clock_offsets_s`` so the report moves its time series too;
- node summaries of a job slurmctld never reported ending (``orphan``): kept, flagged, no AdminComment.

``record`` leaves ``<run_dir>/jobs/<id>/merge.json`` (the shape of a hook record, step ``merge``).
"""

from __future__ import annotations

import time
from typing import Any

from gpuperf.files import jobstate, log
from gpuperf.diagnosis import jobsummary

SKEW_S = 120.0
MERGE_RECORD = "merge"


def clock_offset(s: dict, ctld_end: float | None) -> float | None:
    """Seconds the node's clock is ahead of the controller's (judged at the job's end), None when unknown."""
    end = s.get("end")
    if ctld_end is None or not isinstance(end, (int, float)):
        return None
    return float(end) - ctld_end


def _on_controller_clock(s: dict, offset: float) -> dict:
    s = dict(s)
    for k in ("start", "end"):
        if isinstance(s.get(k), (int, float)):
            s[k] = s[k] - offset
    if isinstance(s.get(jobsummary.PHASE_SERIES), dict):
        # the phases' evidence moves with the node's times, so the merged phases line up across nodes
        s[jobsummary.PHASE_SERIES] = {g: dict(v, t=[x - offset for x in v.get("t") or [] if isinstance(x, (int, float))])
                                      for g, v in s[jobsummary.PHASE_SERIES].items() if isinstance(v, dict)}
    return s


def merge_job(parts: dict[str, dict], expected: list[str], ident: dict[str, Any], ctld_end: float | None,
              copies: dict[str, int] | None = None, thresholds: dict | None = None, orphan_after_s: float | None = None,
              late: bool = False) -> dict:
    """The merged summary of one job (pure): parts are node -> node summary as stored."""
    notes: list[str] = []
    offsets: dict[str, float] = {}
    fixed = []
    for node, s in sorted(parts.items()):
        off = clock_offset(s, ctld_end)
        if off is not None and abs(off) > SKEW_S:
            offsets[node] = round(off, 1)
            notes.append(f"{node}: clock {abs(off):.0f} s {'ahead of' if off > 0 else 'behind'} the controller's "
                         f"(job end by its clock vs slurmctld's); its times are moved onto the controller's clock")
            s = _on_controller_clock(s, off)
        fixed.append(s)
    for node, n in sorted((copies or {}).items()):
        if n > 1:
            notes.append(f"{node}: delivered its summary {n} times (a resend after a lost reply); the last one is kept")
    merged = jobsummary.merge(fixed, expected, thresholds=thresholds)
    merged["job_id"] = int(ident["job_id"])
    # slurmctld's word on the owner wins over the nodes' (reports are shown to this uid only)
    for k in ("user", "uid"):
        if ident.get(k) is not None:
            merged[k] = ident[k]
    q = merged["quality"]
    if orphan_after_s is not None:
        notes.append(f"slurmctld never reported this job ending (no EpilogSlurmctld notice {orphan_after_s:.0f} s "
                     "after its last node summary): it may never have run here; no AdminComment written")
        q["orphan"] = True
    if notes:
        q["reasons"] = list(q.get("reasons") or []) + notes
    if offsets:
        q["clock_offsets_s"] = offsets
    if late:
        q["remerged"] = True
    return merged


def record(run_dir: str, job_id: int, data: dict[str, Any], started: float) -> None:
    """Leave merge.json for the job (what was merged and how long after the job's end); never raises."""
    rec = {"context": {"hook": MERGE_RECORD, "job_id": job_id}, "started": started,
           "data": {"merge": data}, "steps": {"merge": {"ok": True, "ms": round((time.time() - started) * 1000, 3)}}}
    try:
        jobstate.write_json(jobstate.job_dir(run_dir, job_id) / f"{MERGE_RECORD}.json", rec)
    except OSError as e:
        log.get("controller").warning("job %s: cannot record the merge: %s", job_id, e.strerror)
