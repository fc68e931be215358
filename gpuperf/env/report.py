"""The job's environment as its report shows it: the prolog's plan with what each step exported.

The prolog (``prolog.envplan``) caches the plan in the job's ``env.json``; each step's TaskProlog
(``prolog.envtask``) records under ``env/`` what it exported. Both belong to the job's user (its
TaskProlog reads and writes them), so they are read only through ``gpuperf.files.safeio``. The job
model (``model.summary``) reads them through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuperf.env.plan import CACHE, TASK_DIR
from gpuperf.files import safeio

STEP_MAX_BYTES = 64 << 10  # one step's exports: a few hundred bytes (user-forced values included)


def report(job_dir: str | Path, ignored: safeio.Ignored | None = None) -> dict[str, Any] | None:
    """For the job's report: the plan (env.json) with per-task values filled in from what the steps exported.

    ``{"vars": [{"name", "value", "reason", "rule"}], "skipped", "notes", "disabled",
    "steps": {step: {"exported": [[n, v]], "user_kept": [...], "user_forced": {n: v}}}}``; None without a plan.
    """
    d = Path(job_dir)
    ignored = ignored if ignored is not None else safeio.Ignored()
    # env.json and env/ belong to the job's user (its TaskProlog reads and writes them): safeio only
    plan = safeio.read_json(d / CACHE, ignored=ignored)
    if not isinstance(plan, dict):
        return None
    steps: dict[str, Any] = {}
    for name, data in safeio.read_dir(d / TASK_DIR, max_bytes=STEP_MAX_BYTES, ignored=ignored,
                                      prefix="step-", suffix=".json", label=TASK_DIR):
        try:
            rec = safeio.parse_json(data.decode("utf-8", "replace"))
        except ValueError as e:
            ignored.add(f"{TASK_DIR}/{name}", f"not JSON ({str(e)[:80]})")
            continue
        if isinstance(rec, dict):
            steps[str(rec.get("step") or name[5:-5])[:64]] = {k: rec.get(k) for k in ("exported", "user_kept", "user_forced")}
    seen: dict[str, str] = {}
    for rec in steps.values():
        for pair in _list(rec.get("exported")):
            if isinstance(pair, list) and len(pair) == 2:
                seen.setdefault(str(pair[0]), str(pair[1]))
    out_vars = []
    for v in _list(plan.get("vars")):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            continue
        value = v.get("value") if not v.get("per_task") else seen.get(v["name"], "(per task)")
        out_vars.append({"name": v["name"], "value": value, "reason": v.get("reason"), "rule": v.get("rule")})
    return {"vars": out_vars, "skipped": _list(plan.get("skipped")), "notes": _list(plan.get("notes")),
            "disabled": plan.get("disabled"), "steps": steps}


def _list(x: Any) -> list:
    """A user's JSON value where a list belongs: the list, else none (``"exported": true`` raised before)."""
    return x if isinstance(x, list) else []
