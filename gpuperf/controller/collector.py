"""The controller's receiver of node summaries: authenticate (munge), validate, store.

``serve(cfg)`` binds a ROUTER socket on ``controller.bind:controller.port`` and keeps every
authenticated node summary in the cluster store, where ``gpuperf-epilog-slurmctld`` picks them up.
A summary arriving after its job was merged as partial is merged again. Run it on the
controller: ``python3 -m gpuperf.controller.collector`` (as root or SlurmUser); ``add_arguments``/``run``
let ``gpuperf collector`` register it as a subcommand.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any, Callable

import zmq

from gpuperf import config as config_mod
from gpuperf import log, summary as summary_mod
from gpuperf.controller import clusterstore, transport
from gpuperf.fleet import ingest as fleet_ingest


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


def handle(frames: list[bytes], store: clusterstore.ClusterStore, allowed: set[int], cfg) -> dict[str, Any]:
    """One message -> the reply; stores the summary only when authenticated and valid."""
    logger = log.get("collector")
    try:
        sender, s = transport.unpack(frames, allowed, cfg.controller.munge_socket)
        validate(s)
    except transport.AuthError as e:
        logger.warning("rejected node summary: %s", e)
        return {"ok": False, "error": f"not authenticated: {e}"}
    except ValueError as e:
        logger.warning("rejected malformed node summary: %s", e)
        return {"ok": False, "error": f"malformed: {e}"}
    store.put_node_summary(s, sender.uid)
    logger.info("node summary of job %s from %s (uid %s)", s["job_id"], s["nodes"][0], sender.uid)
    _remerge_if_late(store, s, cfg)
    fleet_ingest.on_node_summary(cfg, s)
    return {"ok": True, "job_id": s["job_id"], "node": s["nodes"][0]}


def _remerge_if_late(store: clusterstore.ClusterStore, s: dict, cfg) -> None:
    """A node that missed the merge: merge again so the stored summary includes it."""
    merged = store.job(s["job_id"])
    if not merged or s["nodes"][0] not in (merged.get("quality") or {}).get("nodes_missing", []):
        return
    from gpuperf.controller import merge as merge_step

    merge_step.finish(cfg, store, int(s["job_id"]), merged["quality"]["nodes_expected"],
                      {"user": merged.get("user"), "uid": merged.get("uid")}, late=True)


def serve(cfg, stop: threading.Event | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Receive node summaries until ``stop`` is set (or forever)."""
    logger = log.get("collector")
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    # bound before any parsing: a peer cannot make the collector buffer more than this
    sock.setsockopt(zmq.MAXMSGSIZE, transport.MAX_BODY_BYTES + 65536)
    endpoint = f"tcp://{cfg.controller.bind}:{cfg.controller.port}"
    sock.bind(endpoint)
    store = clusterstore.ClusterStore(clusterstore.default_path(cfg))
    allowed = transport.allowed_uids(cfg)
    logger.info("collector listening on %s, store %s, senders uid %s", endpoint, store.path, sorted(allowed))
    if on_ready:
        on_ready(endpoint)
    try:
        while stop is None or not stop.is_set():
            if not sock.poll(200):
                continue
            msg = sock.recv_multipart()
            # ROUTER framing from a REQ peer: identity, empty delimiter, then the message
            if len(msg) < 2 or msg[1] != b"":
                continue
            ident, frames = msg[0], msg[2:]
            try:
                reply = handle(frames, store, allowed, cfg)
            except Exception as e:  # noqa: BLE001 - one bad message must not stop the collector
                logger.error("node summary failed: %s: %s", type(e).__name__, e)
                reply = {"ok": False, "error": f"internal error: {type(e).__name__}"}
            sock.send_multipart([ident, b"", json.dumps(reply).encode()])
    finally:
        sock.close()
        store.close()


def add_arguments(p) -> None:
    """Arguments of ``gpuperf collector`` (none: everything is in ``[controller]``)."""


def run(args=None) -> int:
    """``gpuperf collector``: the same as main()."""
    return main()


def main() -> int:
    """Entry point: run the collector with the node's config until SIGTERM/SIGINT."""
    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as e:
        print(f"gpuperf collector: {e}", file=sys.stderr)
        return 2
    log.setup("collector", cfg.general.log_file, cfg.general.log_level, stderr=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    serve(cfg, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
