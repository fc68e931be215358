"""Reads of another process's memory (``/proc/PID/environ``, ``/proc/PID/maps``) off the caller's thread, with a
deadline.

Such a read faults in the target's pages: a user who maps a FUSE file over its own environment and never
answers makes it block for ever (issue 36, finding 2), and the daemon's loop, its sweeps and its sockets
with it. ``Deadline.call`` runs the read on a helper thread and waits ``ENVIRON_DEADLINE_S``; a process
whose read did not return is skipped from then on and named once in the log. The hung thread stays
blocked in the kernel until the read returns; a user whose processes hold ``MAX_STUCK_PER_UID`` of them
has the rest of its processes skipped without a wait or a thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any, Callable

ENVIRON_DEADLINE_S = 0.2     # a real environ read takes microseconds; a FUSE page never answers
MAX_STUCK_PER_UID = 4        # reads of one user's processes left hanging before the rest are skipped


class Deadline:
    """Runs reads of a process's memory (``/proc/PID/environ``) on a helper thread, waiting ``deadline_s``.

    ``call(pid, uid, fn)`` gives ``fn()``'s result, or None when the read did not return in time (that pid
    is skipped from then on) or is skipped (a pid that hung before; a uid with ``max_per_uid`` hanging
    reads). A hung read keeps its thread; the next read gets a new one."""

    def __init__(self, deadline_s: float = ENVIRON_DEADLINE_S, max_per_uid: int = MAX_STUCK_PER_UID,
                 log: Any = None):
        self.deadline_s, self.max_per_uid = deadline_s, max_per_uid
        self.log = log or logging.getLogger("gpuperf.daemon")
        self.stuck: dict[int, tuple[int | None, threading.Thread]] = {}   # pid -> (its uid, the hung thread)
        self._q: queue.SimpleQueue[Any] | None = None
        self._uids_named: set[int | None] = set()
        self._t: threading.Thread | None = None

    def _worker(self) -> queue.SimpleQueue[Any]:
        if self._q is None:
            q: queue.SimpleQueue[Any] = queue.SimpleQueue()
            t = threading.Thread(target=self._serve, args=(q,), name="gpuperf-procread", daemon=True)
            t.start()
            self._q, self._t = q, t
        return self._q

    @staticmethod
    def _serve(q: queue.SimpleQueue[Any]) -> None:
        while True:
            job = q.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append(fn())
            except Exception:  # noqa: BLE001 - a read that fails is a read that found nothing
                box.append(None)
            done.set()

    def hung(self, uid: int | None) -> int:
        """Reads of ``uid``'s processes hanging now."""
        for pid in [p for p, (_, t) in self.stuck.items() if not t.is_alive()]:
            del self.stuck[pid]
        return sum(1 for u, _ in self.stuck.values() if u == uid)

    def call(self, pid: int, uid: int | None, fn: Callable[[], Any]) -> Any:
        """``fn()`` run off this thread for process ``pid`` of ``uid``, or None (hung, or skipped)."""
        if pid in self.stuck:
            return None
        if self.stuck and self.hung(uid) >= self.max_per_uid:
            if uid not in self._uids_named:
                self._uids_named.add(uid)
                self.log.warning("uid %s: %d reads of its processes' memory hang: the rest of its processes "
                                 "are not read", uid, self.max_per_uid)
            return None
        box: list[Any] = []
        done = threading.Event()
        q = self._worker()
        q.put((fn, box, done))
        if done.wait(self.deadline_s):
            return box[0] if box else None
        # the read hangs (a FUSE page that never answers): its thread stays blocked; the next read gets a new one
        self.stuck[pid] = (uid, self._t)
        q.put(None)
        self._q = None
        self.log.warning("pid %d (uid %s): /proc/%d/environ did not answer in %.1f s: skipped", pid, uid, pid,
                         self.deadline_s)
        return None


def read_maps(proc_root: str, pid: int, max_bytes: int, chunk: int = 64 << 10) -> str | None:
    """``/proc/PID/maps`` (the regions a process mapped), at most ``max_bytes`` of it, read in chunks; None when the
    process is gone or unreadable. Call it through ``Deadline.call``: the read takes the process's memory-map lock,
    which a process blocked in a page fault (a FUSE file that never answers) holds."""
    try:
        with open(os.path.join(proc_root, str(pid), "maps"), "rb", buffering=0) as f:
            parts, total = [], 0
            while total < max_bytes:
                got = f.read(chunk)
                if not got:
                    break
                parts.append(got)
                total += len(got)
    except OSError:
        return None
    return b"".join(parts)[:max_bytes].decode("utf-8", "replace")
