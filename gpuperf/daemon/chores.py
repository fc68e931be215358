"""The loop's timing: sampling ticks, and the periodic chores run after a sweep (each a name, a period,
a condition; ``run_due`` runs the due ones); ``JobDirPruner``, the chore that forgets old job records."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection

from gpuperf.files import jobdirs


@dataclass
class Chore:
    """One periodic task: ``run(t)`` every ``every_s`` seconds of sample time while ``only_if()`` holds."""

    name: str
    every_s: float
    run: Callable[[float], None]
    only_if: Callable[[], bool] | None = None


class Chores:
    """The chores in their order, and when each last ran."""

    def __init__(self, chores: list[Chore]):
        self.chores = chores
        self.last = {c.name: 0.0 for c in chores}

    def run_due(self, t: float) -> None:
        """Run, in order, every chore whose period has passed at sample time ``t`` (errors propagate)."""
        for c in self.chores:
            if (c.only_if is None or c.only_if()) and t - self.last[c.name] >= c.every_s:
                self.last[c.name] = t
                c.run(t)


class Ticks:
    """The sampling ticks on the monotonic clock: a sweep that overruns skips the ticks it covered, never queues them."""

    def __init__(self, interval_s: float, now: Callable[[], float] = time.monotonic):
        self.interval_s, self.now = interval_s, now
        self.next = now()

    def wait_ms(self, cap_ms: int) -> int:
        """Milliseconds until the next tick (at most ``cap_ms``)."""
        # whole milliseconds, rounded up: a sub-millisecond timeout polls with 0 and would spin to the tick
        return min(math.ceil(max(0.0, (self.next - self.now()) * 1000.0)), cap_ms)

    def due(self) -> bool:
        """The next tick has come."""
        return self.now() >= self.next

    def advance(self) -> int:
        """Move to the next tick after a sweep; the number of ticks skipped because the sweep overran."""
        self.next += self.interval_s
        skipped = 0
        while self.now() > self.next:
            self.next += self.interval_s
            skipped += 1
        return skipped


class JobDirPruner:
    """Removes the run_dir records of jobs long over (``gpuperf.jobdirs``), never a job in ``registered()``;
    in a thread of its own, so a record directory a job filled with files cannot stall sampling."""

    def __init__(self, run_dir: str, keep_days: float, registered: Callable[[], Collection[int]], log: Any):
        self.run_dir, self.keep_days, self.registered, self.log = run_dir, keep_days, registered, log
        self.thread: threading.Thread | None = None

    def start(self, t: float | None = None) -> None:
        """Start one pass unless the previous one is still going."""
        if self.thread is not None and self.thread.is_alive():
            return
        keep = set(self.registered())

        def run() -> None:
            jobdirs.prune_logged(self.log, self.run_dir, self.keep_days, keep=keep)

        self.thread = threading.Thread(target=run, name="jobdirs", daemon=True)
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the pass under way, if any."""
        if self.thread is not None:
            self.thread.join(timeout)
