"""EpilogSlurmctld step: merge the job's node summaries, write the AdminComment, store the job.

Waits at most ``controller.merge_wait_s`` for a summary from every node of the job's nodelist
(the collector puts them in the cluster store); nodes still missing then make the summary
partial and are named in it. The AdminComment goes through ``sacctmgr`` because scontrol
refuses finished jobs (FACTS.md); the job reaches the database a little after it ends, so the
write is retried for ``controller.admin_comment_wait_s``.

Slurm keeps the job COMPLETING, holding its nodes, while EpilogSlurmctld runs (docs/SLURM_NOTES.md),
so the hook does not wait: it starts a detached worker (``python -m gpuperf.controller.merge``, its own
session, so slurmctld neither waits for nor kills it) and returns. The worker records what it did in
``<run_dir>/jobs/<id>/merge.json`` (same shape as a hook record, step ``merge``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from gpuperf import admincomment, log
from gpuperf import summary as summary_mod
from gpuperf.controller import clusterstore
from gpuperf.slurm import Slurm, SlurmError

POLL_S = 0.25


def _has_gpus(job: dict[str, str]) -> bool | None:
    """Whether slurmctld's record of the job allocated GPUs (None when it no longer knows the job)."""
    if not job:
        return None
    tres = job.get("AllocTRES") or job.get("TRES") or ""
    return "gres/gpu" in tres or job.get("Gres", "") not in ("", "(null)")


def collector_listening(cfg, timeout_s: float = 0.5) -> bool:
    """Whether the collector accepts connections on this controller (when it does not, nothing can arrive)."""
    host = cfg.controller.bind if cfg.controller.bind not in ("", "0.0.0.0", "*", "::") else "127.0.0.1"
    try:
        with socket.create_connection((host, cfg.controller.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_nodes(store: clusterstore.ClusterStore, job_id: int, nodes: list[str], wait_s: float) -> dict[str, dict]:
    """The node summaries present when all nodes reported or ``wait_s`` passed, whichever is first."""
    deadline = time.monotonic() + wait_s
    while True:
        found = store.node_summaries(job_id)
        if nodes and all(n in found for n in nodes):
            return found
        if time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def write_admin_comment(cfg, job_id: int, text: str) -> bool:
    """Write the AdminComment with sacctmgr, retrying until sacct shows it; False if it never did."""
    slurm = Slurm(cfg.general.slurm_bin_dir)
    deadline = time.monotonic() + cfg.controller.admin_comment_wait_s
    last = ""
    while True:
        try:
            slurm.set_admin_comment_db(job_id, text)
            if slurm.admin_comment(job_id).strip().lower() == text.lower():
                return True
            last = "sacct does not show it yet (job not in the database)"
        except SlurmError as e:
            last = str(e)
        if time.monotonic() >= deadline:
            log.get("merge").warning("job %s: AdminComment not written: %s", job_id, last)
            return False
        time.sleep(1.0)


def finish(cfg, store: clusterstore.ClusterStore, job_id: int, expected: list[str], ident: dict,
           late: bool = False) -> dict:
    """Merge what the store holds for a job, store it and write its AdminComment; the merged summary."""
    parts = store.node_summaries(job_id)
    merged = summary_mod.merge(list(parts.values()), expected, thresholds=cfg.report.thresholds)
    merged["job_id"] = job_id
    # slurmctld's word on the owner wins over the nodes' (reports are shown to this uid only)
    for k in ("user", "uid"):
        if ident.get(k) is not None:
            merged[k] = ident[k]
    if late:
        merged["quality"]["remerged"] = True
    store.put_job(merged)
    if cfg.report.admin_comment:
        write_admin_comment(cfg, job_id, admincomment.encode(merged))
    return merged


def run_merge(cfg, job_id: int, nodes: list[str], ident: dict) -> dict:
    """Wait for the nodes (bounded), merge, store, write the AdminComment; what happened."""
    t0 = time.monotonic()
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as store:
        # without a collector no summary can arrive: merge at once rather than wait for nothing
        wait_s = cfg.controller.merge_wait_s if collector_listening(cfg) else 0.0
        if wait_s == 0.0:
            log.get("merge").warning("job %s: no collector on port %s; merging without waiting",
                                     job_id, cfg.controller.port)
        found = wait_for_nodes(store, job_id, nodes, wait_s)
        merged = finish(cfg, store, job_id, nodes, ident)
    return {"nodes": nodes, "reported": sorted(found), "waited_s": round(time.monotonic() - t0, 2),
            "partial": merged["quality"]["partial"], "class": merged["diagnosis"]["class"]}


MERGE_RECORD = "merge"


def _spawn_worker(job_id: int, nodes: list[str], ident: dict) -> int | None:
    """Start the detached merge worker; its pid, or None when it could not start."""
    arg = json.dumps({"job_id": job_id, "nodes": nodes, "ident": ident})
    try:
        p = subprocess.Popen([sys.executable, "-m", "gpuperf.controller.merge", arg], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                             close_fds=True)  # slurmctld must not wait on its pipes
    except OSError as e:
        log.get("merge").warning("job %s: merge worker not started (%s): merging in the hook", job_id, e.strerror)
        return None
    return p.pid


def step(ctx, cfg, state) -> None:
    """The EpilogSlurmctld step (runs as SlurmUser on the controller): hand the merge to a worker."""
    if ctx.job_id is None:
        return
    slurm = Slurm(cfg.general.slurm_bin_dir)
    has_gpus = _has_gpus(slurm.show_job(ctx.job_id))
    if has_gpus is False:
        state.data["merge"] = {"skipped": "job allocated no GPUs"}
        return
    nodes = slurm.hostnames(ctx.nodelist) if ctx.nodelist else []
    ident = {"user": ctx.user, "uid": ctx.uid}
    pid = _spawn_worker(ctx.job_id, nodes, ident)
    if pid is not None:
        state.data["merge"] = {"deferred": f"{MERGE_RECORD}.json", "worker_pid": pid, "nodes": nodes}
        return
    state.data["merge"] = run_merge(cfg, ctx.job_id, nodes, ident)


def _worker(arg: str) -> int:
    """The detached worker: merge one job and leave ``merge.json``; never raises."""
    from gpuperf import config, jobstate

    cfg = config.load_or_defaults()
    logger = log.setup("merge", cfg.general.log_file, cfg.general.log_level, stderr=False)
    started = time.time()
    t0 = time.perf_counter()
    try:
        req = json.loads(arg)
        job_id, nodes, ident = int(req["job_id"]), [str(n) for n in req["nodes"]], dict(req["ident"])
    except (ValueError, KeyError, TypeError) as e:
        logger.error("merge worker: bad argument %r: %s", arg[:200], e)
        return 2
    rec: dict = {"context": {"hook": MERGE_RECORD, "job_id": job_id, "pid": os.getpid()}, "started": started}
    try:
        rec["data"] = {"merge": run_merge(cfg, job_id, nodes, ident)}
        rec["steps"] = {"merge": {"ok": True}}
    except Exception as e:  # noqa: BLE001 - recorded and logged; the job is long gone
        rec["data"] = {"merge": {"error": f"{type(e).__name__}: {e}"}}
        rec["steps"] = {"merge": {"ok": False, "error": f"{type(e).__name__}: {e}"}}
        logger.error("job %s: merge failed: %s: %s", job_id, type(e).__name__, e)
    rec["steps"]["merge"]["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    try:
        jobstate.write_json(jobstate.job_dir(cfg.general.run_dir, job_id) / f"{MERGE_RECORD}.json", rec)
    except OSError as e:
        logger.warning("job %s: cannot record the merge: %s", job_id, e.strerror)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m gpuperf.controller.merge JSON   (started by gpuperf-epilog-slurmctld)", file=sys.stderr)
        sys.exit(2)
    sys.exit(_worker(sys.argv[1]))
