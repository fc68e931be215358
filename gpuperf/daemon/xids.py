"""XIDs from NVML's event API (``nvmlq.XidEvents``), polled once per sweep: each is recorded as a daemon
event and in every running job's aggregates for that GPU (``xids``), so the job's report and the fleet
fingerprints count it. The kernel-log reader (``checks/xid.py``) stays for the health checks."""

from __future__ import annotations

from typing import Any, Protocol


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
