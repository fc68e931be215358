"""The controller's receiver of node summaries: authenticate (munge), validate, store, reply.

``Collector.run`` is one thread of the controller service (``gpuperf.controller.service``). It listens
on ``controller.bind:controller.port`` (``intake``: a peer is authenticated before its body is read, every
buffer bounded), takes every message read whole within a short gathering window (up to ``BATCH``),
keeps the good ones in the cluster store in one transaction and only then replies, so an
acknowledged summary is on disk. It never waits on anything but its socket and the store: merging
and AdminComment writes happen elsewhere, so a slow or absent accounting database cannot make a
node's delivery time out. ``arrived`` hands the service each stored summary, so it can merge a
node that missed its job's merge again and fold the summary into the fleet view, off this thread.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from gpuperf.files import log
from gpuperf.model import summary as summary_mod
from gpuperf.controller import clusterstore, intake, transport

BATCH = 256
# after the first message of a quiet spell, wait this long for more: one store commit then covers the
# deliveries of a burst (at 100 summaries/s, -10 % of the collector's CPU); a node's reply comes this much later
GATHER_S = 0.02
ARRIVED_PARSED = 2000   # parsed summaries waiting for the scheduler at most; past it, only their fleet figures


def validate(s: dict) -> None:
    """A node summary the store can keep: schema, integer job id, exactly one node name."""
    if s.get("schema") != summary_mod.SCHEMA:
        raise ValueError(f"schema {s.get('schema')!r} is not {summary_mod.SCHEMA}")
    jid = s.get("job_id")
    if isinstance(jid, bool) or not isinstance(jid, int) or jid <= 0:
        raise ValueError("job_id must be a positive integer")
    nodes = s.get("nodes")
    if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], str) or not nodes[0]:
        raise ValueError("a node summary names exactly one node")
    if not isinstance(s.get("gpus"), list):
        raise ValueError("gpus must be a list")


def check(frames: list[bytes], allowed: set[int], munge_socket: str) -> tuple[dict | None, dict[str, Any]]:
    """One message -> (summary to store or None, the reply); logs what it rejects.

    The summary comes back with ``_sender_uid`` and ``_series`` (the series frame, unparsed) added."""
    try:
        sender, s, series = transport.unpack_message(frames, allowed, munge_socket)
    except transport.AuthError as e:
        log.get("collector").warning("rejected node summary: %s", e)
        return None, {"ok": False, "error": f"not authenticated: {e}"}
    except ValueError as e:
        log.get("collector").warning("rejected malformed node summary: %s", e)
        return None, {"ok": False, "error": f"malformed: {e}"}
    return checked(sender, s, series)


def opened(m: intake.Message) -> tuple[dict | None, dict[str, Any]]:
    """A message the intake authenticated -> (summary to store or None, the reply), as ``check``."""
    try:
        s = transport.open_body(m.digest, m.body, m.series)
    except transport.AuthError as e:
        log.get("collector").warning("rejected node summary from %s: %s", m.conn.host, e)
        return None, {"ok": False, "error": f"not authenticated: {e}"}
    except ValueError as e:
        log.get("collector").warning("rejected malformed node summary from %s: %s", m.conn.host, e)
        return None, {"ok": False, "error": f"malformed: {e}"}
    return checked(m.sender, s, m.series)


def checked(sender: transport.Sender, s: dict, series: bytes | None) -> tuple[dict | None, dict[str, Any]]:
    """A decoded summary validated: (it with ``_sender_uid`` and ``_series``, the reply) or (None, the refusal)."""
    try:
        validate(s)
    except ValueError as e:
        log.get("collector").warning("rejected malformed node summary: %s", e)
        return None, {"ok": False, "error": f"malformed: {e}"}
    s["_sender_uid"] = sender.uid
    s["_series"] = series
    return s, {"ok": True, "job_id": s["job_id"], "node": s["nodes"][0]}


class Collector:
    """The ingestion thread: socket -> store, nothing else."""

    def __init__(self, cfg, store_path: str, arrived: "queue.Queue[dict] | None" = None):
        self.cfg, self.store_path, self.arrived = cfg, store_path, arrived
        self.allowed = transport.allowed_uids(cfg)
        self.received = 0
        self.cpu_s = 0.0  # CPU of this thread taking summaries in (benchmarks, status line)

    def run(self, stop: threading.Event, on_ready: Callable[[str], None] | None = None) -> None:
        """Receive node summaries until ``stop`` is set."""
        logger = log.get("collector")
        listener = intake.Intake(self.cfg.controller.bind, self.cfg.controller.port, self.allowed,
                                 self.cfg.controller.munge_socket)
        store = clusterstore.ClusterStore(self.store_path)
        logger.info("collector listening on %s, store %s, senders uid %s", listener.endpoint, store.path,
                    sorted(self.allowed))
        if on_ready:
            on_ready(listener.endpoint)
        self.intake = listener
        try:
            waiting: list[intake.Message] = []
            gather_until = 0.0
            while not stop.is_set():
                now = time.monotonic()
                waiting += listener.poll(max(0.0, gather_until - now) if waiting else 0.2)
                if waiting and not gather_until:
                    gather_until = time.monotonic() + GATHER_S
                if waiting and (time.monotonic() >= gather_until or len(waiting) >= BATCH):
                    t0 = time.thread_time()
                    self._batch(listener, store, waiting[:BATCH])
                    self.cpu_s += time.thread_time() - t0
                    waiting, gather_until = waiting[BATCH:], 0.0
        finally:
            listener.close()
            store.close()

    def _batch(self, listener: intake.Intake, store: clusterstore.ClusterStore, msgs: list[intake.Message]) -> None:
        """Store the good ones in one transaction, then reply to all."""
        replies: list[tuple[intake.Conn, dict]] = []
        stored: list[dict] = []
        for m in msgs:
            try:
                s, reply = opened(m)
                if s is not None:
                    uid, series = s.pop("_sender_uid"), s.pop("_series")
                    # as received, the body and the series frame are already the compressed JSON the store
                    # keeps; a summary with its series inside (an older node) is split here
                    blob = m.body if "series" not in s else None
                    store.put_node_summary(s, uid, blob=blob, series=series, commit=False)
                    stored.append(s)
            except Exception as e:  # noqa: BLE001 - one bad message must not stop the collector
                log.get("collector").error("node summary failed: %s: %s", type(e).__name__, e)
                # not kept (a store locked past its timeout, a bug): the node keeps it and sends it again
                reply = {"ok": False, "error": f"internal error: {type(e).__name__}", "retry": True}
            replies.append((m.conn, reply))
        if stored:
            try:
                store.db.commit()
            except Exception as e:  # noqa: BLE001 - not on disk: no node may believe it was kept
                store.db.rollback()
                log.get("collector").error("store commit failed: %s", e)
                replies = [(c, {"ok": False, "error": f"store: {e}", "retry": True} if r.get("ok") else r)
                           for c, r in replies]
                stored = []
        for conn, reply in replies:
            listener.reply(conn, reply)
        self.received += len(stored)
        if self.arrived is not None:
            for s in stored:
                # past ARRIVED_PARSED a scheduler behind (a loaded machine) gets what the fleet fold reads, and
                # merges from the store: parsed summaries waiting for it grew to 1.8 GB at 20,000 nodes
                self.arrived.put(s if self.arrived.qsize() < ARRIVED_PARSED else
                                 {k: s.get(k) for k in ("job_id", "nodes", "end", "fleet")} | {"_light": True})
