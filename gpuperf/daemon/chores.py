"""The loop's timing: sampling ticks, and the periodic chores run after a sweep (each a name, a period,
a condition; ``run_due`` runs the due ones)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable


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
