"""The controller's receiver of node summaries: authenticate (munge), validate, store, reply.

``Collector.run`` is one thread of the controller service (``gpuperf.controller.service``). It binds a
ROUTER socket on ``controller.bind:controller.port``, reads every message waiting (up to ``BATCH``),
keeps the good ones in the cluster store in one transaction and only then replies, so an
acknowledged summary is on disk. It never waits on anything but its socket and the store: merging
and AdminComment writes happen elsewhere, so a slow or absent accounting database cannot make a
node's delivery time out. ``arrived`` hands the service each stored summary, so it can merge a
node that missed its job's merge again and fold the summary into the fleet view, off this thread.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any, Callable

import zmq

from gpuperf.files import log
from gpuperf.model import summary as summary_mod
from gpuperf.controller import clusterstore, transport

BATCH = 256
# after the first message of a quiet spell, wait this long for more: one store commit then covers the
# deliveries of a burst (at 100 summaries/s, -10 % of the collector's CPU); a node's reply comes this much later
GATHER_S = 0.02


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
    logger = log.get("collector")
    try:
        sender, s, series = transport.unpack_message(frames, allowed, munge_socket)
        validate(s)
    except transport.AuthError as e:
        logger.warning("rejected node summary: %s", e)
        return None, {"ok": False, "error": f"not authenticated: {e}"}
    except ValueError as e:
        logger.warning("rejected malformed node summary: %s", e)
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
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        # bound before any parsing: a peer cannot make the collector buffer more than this
        sock.setsockopt(zmq.MAXMSGSIZE, transport.MAX_BODY_BYTES + 65536)
        endpoint = f"tcp://{self.cfg.controller.bind}:{self.cfg.controller.port}"
        sock.bind(endpoint)
        store = clusterstore.ClusterStore(self.store_path)
        logger.info("collector listening on %s, store %s, senders uid %s", endpoint, store.path, sorted(self.allowed))
        if on_ready:
            on_ready(endpoint)
        try:
            while not stop.is_set():
                if sock.poll(200):
                    stop.wait(GATHER_S)
                    t0 = time.thread_time()
                    self._batch(sock, store)
                    self.cpu_s += time.thread_time() - t0
        finally:
            sock.close()
            store.close()

    def _batch(self, sock: zmq.Socket, store: clusterstore.ClusterStore) -> None:
        """Everything waiting (up to BATCH): store the good ones in one transaction, then reply to all."""
        replies: list[tuple[bytes, dict]] = []
        stored: list[dict] = []
        while len(replies) < BATCH:
            try:
                msg = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            # ROUTER framing from a REQ peer: identity, empty delimiter, then the message
            if len(msg) < 2 or msg[1] != b"":
                continue
            ident, frames = msg[0], msg[2:]
            try:
                s, reply = check(frames, self.allowed, self.cfg.controller.munge_socket)
                if s is not None:
                    uid, series = s.pop("_sender_uid"), s.pop("_series")
                    # as received, the body and the series frame are already the compressed JSON the store
                    # keeps; a summary with its series inside (an older node) is split here
                    blob = frames[2] if "series" not in s else None
                    store.put_node_summary(s, uid, blob=blob, series=series, commit=False)
                    stored.append(s)
            except Exception as e:  # noqa: BLE001 - one bad message must not stop the collector
                log.get("collector").error("node summary failed: %s: %s", type(e).__name__, e)
                reply = {"ok": False, "error": f"internal error: {type(e).__name__}"}
            replies.append((ident, reply))
        if stored:
            try:
                store.db.commit()
            except Exception as e:  # noqa: BLE001 - not on disk: no node may believe it was kept
                store.db.rollback()
                log.get("collector").error("store commit failed: %s", e)
                replies = [(i, {"ok": False, "error": f"store: {e}"} if r.get("ok") else r) for i, r in replies]
                stored = []
        for ident, reply in replies:
            sock.send_multipart([ident, b"", json.dumps(reply).encode()])
        self.received += len(stored)
        if self.arrived is not None:
            for s in stored:
                self.arrived.put(s)
