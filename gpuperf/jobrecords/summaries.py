"""A job's summary from the first source that has it, in this order: the node daemon (running jobs,
live), the controller's store, the AdminComment in sacct, the node daemon's kept summary of a finished
job, the node's job directory.

A finished job's judgement (class, phases, rates, advice) is made once, where its series are: the node at
the job's end, the controller's merge for a job of several nodes; every source here serves that stored
judgement as it was made, never one rebuilt from aggregates (issue 35). The controller's (its store, or
the AdminComment, which its job's owner can read) comes before a node's: for a job of several nodes it is
the whole job's. Only a running job is judged here, from its live aggregates, and says so (``live``).

Every source is keyed by Slurm's raw job id (``gpuperf.jobrecords.resolve`` turns ``8_3`` into it);
a source that cannot answer is noted and the next one asked.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass, field
from typing import Any

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.controller import clusterstore
from gpuperf.files import jobstate
from gpuperf.diagnosis import jobsummary
from gpuperf.model import admincomment

SOURCES = ("auto", "daemon", "controller", "sacct")


@dataclass
class Found:
    """A job's summary, where it came from, and its series when the node still has them."""

    summary: dict
    source: str
    series: dict | None = None
    tried: list[str] = field(default_factory=list)


def is_admin(cfg: Any, uid: int) -> bool:
    """root, or a user named in ``general.admin_users``."""
    if uid == 0:
        return True
    try:
        return pwd.getpwuid(uid).pw_name in cfg.general.admin_users
    except KeyError:
        return False


def _from_daemon(cfg: Any, job_id: int, want_live: bool) -> dict | None:
    """The daemon's word on the job: running, a live summary of it so far (labelled ``live``); finished, the
    node summary it kept at the job's end (its ``job`` op serves it to the job's owner); else None."""
    from gpuperf.daemon import client

    got = client.request(cfg, "job", {"job_id": int(job_id)})
    if (got.get("state") == "running") != want_live:
        return None
    if not want_live:
        kept = got.get("summary")
        return kept if isinstance(kept, dict) and kept.get("schema") == jobsummary.SCHEMA else None
    aggs, reg = got.get("aggregates"), got.get("job") or {}
    if not aggs:
        return None
    ctx = {"job_id": job_id, "user": reg.get("user"), "uid": reg.get("uid"),
           "job_dir": str(jobstate.job_dir(cfg.general.run_dir, job_id)), "thresholds": cfg.report.thresholds}
    s = jobsummary.node_summary(aggs, ctx)
    s["live"] = True      # in progress: a judgement of the job so far, not the one its end will keep
    return s


def _from_controller(cfg: Any, job_id: int) -> dict | None:
    with clusterstore.ClusterStore(clusterstore.default_path(cfg), readonly=True) as store:
        return store.job(job_id)


def _from_job_dir(cfg: Any, job_id: int) -> dict | None:
    from gpuperf.daemon import deliver

    return deliver.stored_summary(cfg.general.run_dir, job_id)


def _from_sacct(cfg: Any, job_id: int) -> dict | None:
    text = Slurm(cfg.general.slurm_bin_dir).admin_comment(job_id)
    if not admincomment.is_admincomment(text):
        return None
    return admincomment.decode(text)


def find(cfg: Any, job_id: int, source: str = "auto") -> Found | None:
    """The summary of raw job ``job_id`` from the first source that has it (errors noted, not raised)."""
    steps: list[tuple[str, Any]] = []
    if source in ("auto", "daemon"):
        steps.append(("daemon (running)", lambda: _from_daemon(cfg, job_id, True)))
    if source in ("auto", "controller"):
        steps.append(("controller store", lambda: _from_controller(cfg, job_id)))
    if source in ("auto", "sacct"):
        # the controller's judgement, which the owner can read: for a job of several nodes, the whole job's
        steps.append(("sacct AdminComment", lambda: _from_sacct(cfg, job_id)))
    if source in ("auto", "daemon"):
        steps.append(("node daemon store", lambda: _from_daemon(cfg, job_id, False)))
        steps.append(("node job dir", lambda: _from_job_dir(cfg, job_id)))
    tried = []
    for name, fn in steps:
        try:
            s = fn()
        except Exception as e:  # noqa: BLE001 - a missing daemon/store/sacct just means the next source
            tried.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if s:
            return Found(s, name, tried=tried)
        tried.append(f"{name}: no summary")
    return Found({}, "", tried=tried) if tried else None


def owner_uid(cfg: Any, job_id: int, s: dict) -> int | None:
    """The job's uid: from the summary, else from sacct."""
    if isinstance(s.get("uid"), int):
        return s["uid"]
    try:
        uid = Slurm(cfg.general.slurm_bin_dir).sacct_job(job_id, ("JobID", "UID")).get("UID", "")
        return int(uid) if uid.isdigit() else None
    except SlurmError:
        return None
