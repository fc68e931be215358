"""How many requests each user may send the daemon's user socket: a token bucket per uid.

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
