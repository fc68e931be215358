"""A job's merge as the service computes it (``compute``: node summaries in; merged summary, its stored
bytes and its AdminComment out), and the thread that computes a large job's (``LargeMerges``).

A job of thousands of nodes takes seconds to merge (8,192 nodes: ~10 s, benchmarks/controller_bigjob.py):
on the scheduler's thread that would hold every other job's merge and write back as long. ``LargeMerges``
computes one such job at a time on a thread of its own, reading its node summaries through a connection of
its own; the scheduler applies the result (store, queue) at its next tick, and meanwhile merges and writes
the other jobs (the two share the interpreter: each runs about half the time while both are busy). One
at a time bounds the memory: one large job's GPUs held at once.
"""

from __future__ import annotations

import queue as queue_mod
import threading
from dataclasses import dataclass
from typing import Any, Callable

from gpuperf.diagnosis import jobsummary
from gpuperf.files import log
from gpuperf.model import admincomment
from gpuperf.controller import clusterstore, merge

LARGE_NODES = 256        # a job of more nodes than this is merged off the scheduler's thread
# what a node's summary holds that the join of several (``model.summary.join``) never reads: a job of 8,192
# nodes holds ~40 % less while it merges (the node's own diagnosis and totals, its fleet figures)
JOIN_UNUSED = ("fleet", "job", "diagnosis", "estimates")


PHASE_NODES = 32         # a large job's phases are judged from this many of its nodes' series, spread over its list


def trim_for(nodes: list[str]) -> Callable[[str, dict], None]:
    """What a merge of a job on ``nodes`` drops from each node summary as it is read (``JOIN_UNUSED``; of a job
    of more than ``PHASE_NODES``, the phase series of all but that many nodes, evenly spread: 8,192 nodes'
    series held at once took 34 s and 549 MiB; the phases of a job that ran alike everywhere are as well
    judged from 32 nodes' GPUs, and a node unlike the rest shows in every GPU's spread and the worst GPUs)."""
    step = max(1, -(-len(nodes) // PHASE_NODES))
    sampled = set(nodes[::step])

    def trim(node: str, s: dict) -> None:
        for k in JOIN_UNUSED:
            s.pop(k, None)
        if node not in sampled:
            s.pop(jobsummary.PHASE_SERIES, None)
    return trim


@dataclass
class Merged:
    """What a merge made: the summary (None: nothing to keep, a job without GPUs), its stored bytes, the
    AdminComment (None: none to write) and why there is none when one was due."""

    job_id: int
    reported: list[str]
    summary: dict | None
    raw: bytes | None
    text: str | None
    error: str | None = None


def compute(cfg: Any, e: Any, parts: dict[str, dict], copies: dict[str, int], late: bool, orphan: bool = False) -> Merged:
    """Merge one job's node summaries (``e``: its queue row) and encode its AdminComment (pure but for the clock)."""
    merged = merge.merge_job(parts, e.nodes, {"job_id": e.job_id, "user": e.user, "uid": e.uid},
                             None if orphan else e.ended, copies, thresholds=cfg.report.thresholds,
                             orphan_after_s=cfg.controller.orphan_after_s if orphan else None, late=late)
    if not orphan and not (merged.get("job") or {}).get("gpu_count") and parts and not cfg.report.cpu_jobs:
        # nodes of an older gpuperf still report jobs that held no GPU: nothing to say, nothing to write
        return Merged(e.job_id, sorted(parts), None, None, None)
    # one JSON encoding and compression serves the store and the AdminComment's payload
    raw = admincomment.compressed(merged)
    if orphan or not cfg.report.admin_comment:
        return Merged(e.job_id, sorted(parts), merged, raw, None)
    try:
        # an array task's or het component's name (slurmctld's notice) in the headline only
        return Merged(e.job_id, sorted(parts), merged, raw, admincomment.encode(merged, raw=raw, name=e.job_ref))
    except admincomment.AdminCommentError as err:
        return Merged(e.job_id, sorted(parts), merged, raw, None, str(err))


def record(e: Any, m: Merged, now: float) -> dict[str, Any]:
    """What ``merge.record`` keeps of a merge (node lists of a large job as their counts)."""
    return {"nodes": e.nodes if len(e.nodes) <= LARGE_NODES else len(e.nodes),
            "reported": m.reported if len(m.reported) <= LARGE_NODES else len(m.reported),
            "waited_s": round(now - e.ended, 2), "partial": (m.summary or {})["quality"]["partial"],
            "class": (m.summary or {})["diagnosis"]["class"]}


class LargeMerges:
    """One thread merging large jobs one at a time; ``take()`` hands the scheduler what is done."""

    def __init__(self, cfg: Any, store_path: str):
        self.cfg, self.store_path = cfg, store_path
        self.todo: queue_mod.Queue = queue_mod.Queue()
        self.done: queue_mod.Queue[tuple[Any, Merged | None]] = queue_mod.Queue()
        self.running: set[int] = set()     # queued or merging (the scheduler's thread only)
        self._thread: threading.Thread | None = None

    def submit(self, e: Any, copies: dict[str, int], late: bool) -> None:
        """Merge this job (its queue row) on the thread; no-op while it is already there."""
        if e.job_id in self.running:
            return
        self.running.add(e.job_id)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="large-merges", daemon=True)
            self._thread.start()
        self.todo.put((e, copies, late))

    def take(self) -> list[tuple[Any, Merged | None]]:
        """(queue row, result) of the merges finished since the last call; None: no node had reported."""
        out = []
        while True:
            try:
                e, m = self.done.get_nowait()
            except queue_mod.Empty:
                return out
            self.running.discard(e.job_id)
            out.append((e, m))

    def close(self) -> None:
        """Let the thread end after the merge it is in."""
        self.todo.put(None)

    def _loop(self) -> None:
        store = None
        while (item := self.todo.get()) is not None:
            e, copies, late = item
            try:
                if store is None:
                    store = clusterstore.ClusterStore(self.store_path, readonly=True)
                parts = store.node_summaries(e.job_id, trim=trim_for(e.nodes))
                store.db.rollback()   # no read transaction held open between jobs (the WAL may checkpoint)
                self.done.put((e, compute(self.cfg, e, parts, copies, late) if parts else None))
            except Exception as err:  # noqa: BLE001 - the scheduler merges it again; this thread goes on
                log.get("controller").error("job %s: large merge failed: %s: %s", e.job_id, type(err).__name__, err)
                self.done.put((e, Merged(e.job_id, [], None, None, None, f"{type(err).__name__}: {err}")))
        if store is not None:
            store.close()
