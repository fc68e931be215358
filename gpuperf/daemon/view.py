"""What the node last showed: the latest sweep (for ``live`` and ``ping``) and the immutable snapshot the
/metrics thread reads (``metrics.View``), replaced after each sweep and each job registered or finalised."""

from __future__ import annotations

from typing import Any

from gpuperf.daemon.jobs import Registry
from gpuperf.samplers.base import GpuSample


class LiveView:
    """The latest samples and the /metrics snapshot, from ``registry`` (the running jobs) and ``stats``."""

    def __init__(self, registry: Registry, stats: dict[str, float]):
        self.registry, self.stats = registry, stats
        self.latest: list[GpuSample] = []
        self.latest_t: float | None = None
        self._view: dict[str, Any] = {"samples": [], "jobs": [], "stats": {}}

    def note_sweep(self, t: float, samples: list[GpuSample]) -> None:
        """A sweep was sampled at ``t``."""
        self.latest, self.latest_t = samples, t

    def publish(self) -> None:
        """Replace the snapshot (one assignment: the /metrics thread reads the old one or the new one whole)."""
        self._view = {"samples": list(self.latest), "jobs": self.registry.listing(), "stats": dict(self.stats)}

    def current(self) -> dict[str, Any]:
        """The latest snapshot (any thread)."""
        return self._view
