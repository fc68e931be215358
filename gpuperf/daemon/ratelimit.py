"""What each user may cost the daemon: requests on the user socket (a token bucket per uid), lines of root's
log (``LogBudget``) and CPU time (``CpuBudget``).

The user socket is open to every local user (``gpuperf report``, ``gpuperf top``); one user sending
requests in a loop must not take the daemon's time from sampling or from the hooks of other jobs.
Over the limit a request gets a short refusal at once (a REP socket must answer every request).
Pure: the clock is passed in.
"""

from __future__ import annotations

RATE_PER_S = 20.0     # gpuperf top asks once a second; a report a handful of times
BURST = 40.0
MAX_UIDS = 4096       # more distinct callers than this: the oldest buckets are forgotten


class Buckets:
    """Token buckets keyed by uid: ``allow(uid, now)`` spends one token or says no."""

    def __init__(self, rate_per_s: float = RATE_PER_S, burst: float = BURST) -> None:
        self.rate, self.burst = rate_per_s, burst
        self._b: dict[int | None, tuple[float, float]] = {}   # uid -> (tokens, last time)
        self.refused: dict[int | None, int] = {}

    def allow(self, uid: int | None, now: float) -> bool:
        """Whether ``uid`` may be served now (spends a token when so)."""
        tokens, last = self._b.get(uid, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        ok = tokens >= 1.0
        if ok:
            tokens -= 1.0
        else:
            self.refused[uid] = self.refused.get(uid, 0) + 1
        if uid not in self._b and len(self._b) >= MAX_UIDS:
            self._b.pop(next(iter(self._b)))
        self._b[uid] = (tokens, now)
        return ok


LOG_LINES = 10          # lines of root's log one uid's failed requests may cause a minute
LOG_WINDOW_S = 60.0
LOG_CHARS = 300         # each cut to this (a request's text is the user's: 900,000-character keys were seen)


def one_line(text: str, limit: int = LOG_CHARS) -> str:
    """``text`` on one line (newlines and control characters escaped) and at most ``limit`` characters."""
    head = text[:limit * 2].encode("unicode_escape", "backslashreplace").decode("ascii")
    if len(head) <= limit and len(text) <= limit * 2:
        return head
    return f"{head[:limit - 30]}... ({len(text)} characters)"


class LogBudget:
    """Lines of root's log each uid's requests may cause: ``lines`` per ``window_s``; the rest counted and
    said in one line when the uid's next window opens (finding 1 of issue 36: 141 MiB in 10 s from one user)."""

    def __init__(self, lines: int = LOG_LINES, window_s: float = LOG_WINDOW_S) -> None:
        self.lines, self.window_s = lines, window_s
        self._w: dict[int | None, tuple[float, int, int]] = {}   # uid -> (window start, lines logged, held back)

    def take(self, uid: int | None, now: float) -> tuple[bool, int]:
        """(whether a line for ``uid`` may be logged now, lines held back in its window before this one)."""
        start, used, held = self._w.get(uid, (now, 0, 0))
        before = 0
        if now - start >= self.window_s:
            start, used, before, held = now, 0, held, 0
        ok = used < self.lines
        if uid not in self._w and len(self._w) >= MAX_UIDS:
            self._w.pop(next(iter(self._w)))
        self._w[uid] = (start, used + ok, held + (not ok))
        return ok, before


CPU_PER_S = 0.05        # CPU seconds a second one uid's user-socket requests may cost the daemon: a quarter of
CPU_BURST_S = 0.25      # the unit's CPUQuota=20% (a report's series, a task's plan: milliseconds each)


class CpuBudget:
    """CPU time each uid's user-socket requests may take from the daemon: a bucket of ``burst_s`` CPU seconds
    refilled at ``rate`` a second; a uid whose bucket is empty is refused until it refills (finding 5 of
    issue 36: plans parsed at the request rate held the daemon at its CPU quota)."""

    def __init__(self, rate: float = CPU_PER_S, burst_s: float = CPU_BURST_S) -> None:
        self.rate, self.burst = rate, burst_s
        self._b: dict[int | None, tuple[float, float]] = {}   # uid -> (CPU seconds left, last time)
        self.refused: dict[int | None, int] = {}

    def _left(self, uid: int | None, now: float) -> float:
        left, last = self._b.get(uid, (self.burst, now))
        return min(self.burst, left + max(0.0, now - last) * self.rate)

    def allow(self, uid: int | None, now: float) -> bool:
        """Whether ``uid`` has CPU time left for a request now."""
        ok = self._left(uid, now) > 0.0
        if not ok:
            self.refused[uid] = self.refused.get(uid, 0) + 1
        return ok

    def charge(self, uid: int | None, cpu_s: float, now: float) -> None:
        """Spend ``cpu_s`` of ``uid``'s CPU time (a request's cost, measured after it)."""
        if uid not in self._b and len(self._b) >= MAX_UIDS:
            self._b.pop(next(iter(self._b)))
        self._b[uid] = (self._left(uid, now) - cpu_s, now)
