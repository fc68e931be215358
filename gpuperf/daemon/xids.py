"""XIDs from NVML's event API (``nvmlq.XidEvents``), polled once per sweep: each is recorded as a daemon
event and in every running job's aggregates for that GPU (``xids``), so the job's report and the fleet
fingerprints count it. The health checks read XIDs from the kernel log (``checks/xid.py``); in the
daemon they count one only where these events corroborate it (``Witness.seen``)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Protocol

from gpuperf.checks.xid import NvmlSeen, bus_prefix


class XidSource(Protocol):
    """Anything that yields (GPU index, XID) pairs seen since the last call, without blocking."""

    def poll(self) -> list[tuple[int, int]]: ...


def open_source(sampler: Any, log: Any) -> XidSource | None:
    """NVML's event set over the sampler's GPUs when the sampler is NVML's; None otherwise (replay, DCGM)."""
    if getattr(sampler, "name", None) != "nvml":
        return None
    try:
        from gpuperf.access import nvmlq

        src = nvmlq.XidEvents(list(range(sampler.gpu_count())))
    except Exception as e:  # noqa: BLE001 - no events: XIDs still reach the checks through the kernel log
        log.warning("XID events unavailable: %s: %s", type(e).__name__, e)
        return None
    log.info("XID events from NVML on GPU(s) %s", src.watched)
    return src


def poll(source: XidSource | None, log: Any) -> list[tuple[int, int]]:
    """The events since the last poll (none when there is no source or it fails)."""
    if source is None:
        return []
    try:
        return source.poll()
    except Exception as e:  # noqa: BLE001 - a broken event set costs the events, not the sweep
        log.warning("XID event poll failed: %s: %s", type(e).__name__, e)
        return []


def record(got: list[tuple[int, int]], t: float, running: dict[int, Any], store: Any, log: Any) -> None:
    """Record each (GPU, XID): a store event, and in every running job on that GPU (inside a transaction)."""
    for gpu, xid in got:
        jobs = [jid for jid, rj in running.items() if gpu in rj.agg.gpus]
        for jid in jobs:
            running[jid].agg.gpus[gpu].fleet.note_xid(xid, t)
        store.add_event(t, jobs[0] if jobs else None, "xid", {"gpu": gpu, "xid": xid, "jobs": jobs})
        log.warning("XID %d on GPU %d (jobs %s)", xid, gpu, jobs or "none")


class Witness:
    """An XidSource that remembers what it delivered (the last ``keep`` events, the time of each poll),
    so the health checks can ask whether NVML saw a kernel-log XID (``seen``)."""

    def __init__(self, source: XidSource, clock: Callable[[], float] = time.time, keep: int = 256):
        self.source, self.clock = source, clock
        self.since = self.polled = clock()
        self.watched = list(getattr(source, "watched", []))
        self._events: deque[tuple[int, int, float]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def poll(self) -> list[tuple[int, int]]:
        """The source's events since the last poll, remembered with the poll's time."""
        got = self.source.poll()
        t = self.clock()
        with self._lock:
            self._events.extend((gpu, xid, t) for gpu, xid in got)
            self.polled = t
        return got

    def close(self) -> None:
        """Close the source."""
        if hasattr(self.source, "close"):
            self.source.close()

    def seen(self, snap: dict[str, Any]) -> NvmlSeen:
        """What NVML saw, its GPUs named by bus (``snap``: the node's GPUs, index -> bus id)."""
        bus = {int(g["index"]): bus_prefix(str(g["bus_id"])) for g in snap.get("gpus") or []
               if isinstance(g.get("index"), int) and g.get("bus_id")}
        with self._lock:
            events, polled = list(self._events), self.polled
        return NvmlSeen(self.since, polled, frozenset(bus[i] for i in self.watched if i in bus),
                        tuple((bus[g], x, t) for g, x, t in events if g in bus))


def witnessed(source: XidSource | None) -> Witness | None:
    """``source`` remembered by a Witness (None stays None)."""
    return Witness(source) if source is not None else None


def seen_by(source: Any, snap: dict[str, Any]) -> NvmlSeen | None:
    """What ``source`` saw when it is a Witness; None (no corroboration) otherwise."""
    return source.seen(snap) if isinstance(source, Witness) else None
