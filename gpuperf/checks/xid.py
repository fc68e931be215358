"""XID events of the live node from the kernel log (/dev/kmsg), corroborated by NVML's event API where the daemon runs.

The NVIDIA driver logs ``NVRM: Xid (PCI:0000:9a:00): 79, pid=..., GPU has fallen off the bus.``
/dev/kmsg gives each record with its time since boot in microseconds, so no wall clock is parsed
from text. ``parse_kmsg_record`` is pure; ``read_kmsg`` is the I/O edge.

Only records the kernel itself wrote count, and only when the driver's text opens the message: a user
can put that text into a kernel record (a program named ``NVRM: Xid (PCI:...): 79,`` that segfaults
is quoted by the kernel's segfault line, its file name in the middle of it) and, through a syslog
daemon, into a record of facility ``user`` (the kernel refuses facility 0 from user space). So the
record's facility must be 0 (``kern``) and the match is anchored at the message's first character:
the segfault line starts with the process's ``comm``, which the kernel cuts at 15 characters, shorter
than ``NVRM: Xid (PCI:x:xx:xx): N``.

Where the node daemon runs, its NVML event set (``nvmlDeviceRegisterEvents`` with
``nvmlEventTypeXidCriticalError``, polled by ``nvmlEventSetWait``) has watched the GPUs since it
started: a kernel-log XID on a watched GPU, after the set was opened and old enough for the daemon to
have polled since, counts only when NVML saw the same XID on that GPU (``corroborate``). A kernel
record NVML never saw drains nothing.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from typing import Any

KMSG = "/dev/kmsg"
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\): (\d{1,6})\b")
_MAX_RECORDS = 200_000  # a kernel ring buffer holds far fewer; bounds the loop on a flooding log
CORROBORATE_S = 30.0    # kernel time vs the daemon's poll time of the same XID (it polls every sweep)


@dataclass(frozen=True)
class XidEvent:
    """One XID: the GPU's bus id prefix (``0000:9a:00``, no function), the XID and its wall time."""

    bus: str
    xid: int
    t: float


@dataclass(frozen=True)
class NvmlSeen:
    """What NVML's XID event API saw: watching ``buses`` (bus prefixes) from ``since`` to its last poll
    (``polled``), wall times; ``events`` are (bus prefix, XID, time polled)."""

    since: float
    polled: float
    buses: frozenset[str]
    events: tuple[tuple[str, int, float], ...]


def corroborate(events: list[XidEvent], seen: NvmlSeen) -> tuple[list[XidEvent], list[XidEvent]]:
    """(kept, dropped): a kernel-log XID NVML could have seen, and had time to, but did not, is dropped."""
    kept, dropped = [], []
    for e in events:
        could_not_see = e.bus not in seen.buses or e.t < seen.since or e.t > seen.polled - CORROBORATE_S
        if could_not_see or any(b == e.bus and x == e.xid and abs(t - e.t) <= CORROBORATE_S for b, x, t in seen.events):
            kept.append(e)
        else:
            dropped.append(e)
    return kept, dropped


def parse_kmsg_record(record: str, boot_wall: float) -> XidEvent | None:
    """One /dev/kmsg record (``prio,seq,usec,flags;text``) -> XidEvent, or None when it is not an XID."""
    head, sep, text = record.partition(";")
    if not sep:
        return None
    m = _XID.match(text)  # at the message's start: a user's text quoted inside a record never counts
    if not m:
        return None
    fields = head.split(",")
    try:
        prio, usec = int(fields[0]), int(fields[2])
    except (IndexError, ValueError):
        return None
    if prio >> 3 != 0 or prio < 0:  # facility kern only: what user space writes into the log is not the driver
        return None
    domain = m.group(1)[-4:].lower().rjust(4, "0")  # NVRM may print an 8-digit domain
    return XidEvent(f"{domain}:{m.group(2).lower()}:{m.group(3).lower()}", int(m.group(4)), boot_wall + usec / 1e6)


def read_kmsg(path: str = KMSG) -> list[XidEvent]:
    """Every XID still in the kernel ring buffer; OSError when the log cannot be opened."""
    # kmsg timestamps count from boot on the monotonic clock
    boot_wall = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    events: list[XidEvent] = []
    try:
        for _ in range(_MAX_RECORDS):
            try:
                data = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record was overwritten while we read: go on
                    continue
                if e.errno == errno.EAGAIN:
                    break
                raise
            if not data:
                break
            # /dev/kmsg returns one record per read; a saved copy (tests) many, one per line
            for line in data.decode("utf-8", "replace").splitlines():
                ev = parse_kmsg_record(line, boot_wall)
                if ev is not None:
                    events.append(ev)
    finally:
        os.close(fd)
    return events


def bus_prefix(bus_id: str) -> str:
    """'0000:9a:00.0' -> '0000:9a:00', the form XID lines name a GPU by."""
    return bus_id.lower().rsplit(".", 1)[0]


def merge_into_snapshot(snap: dict[str, Any], events: list[XidEvent]) -> list[XidEvent]:
    """Add events to the matching GPUs' ``xid_events`` (in place); returns those matching no GPU."""
    by_bus = {bus_prefix(str(g.get("bus_id") or "")): g for g in snap.get("gpus") or [] if g.get("bus_id")}
    unmatched = []
    for ev in events:
        g = by_bus.get(ev.bus)
        if g is None:
            unmatched.append(ev)
            continue
        g.setdefault("xid_events", []).append({"xid": ev.xid, "t": ev.t})
    return unmatched
