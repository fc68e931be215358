"""What the fleet keeps of one GPU in one job's aggregates: figures under load (``load.LoadStats``), the
XID events NVML reported, and the error counters at the job's start and end (``errors``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuperf.model.gpuerrors import growth
from gpuperf.model.load import LoadStats
from gpuperf.samplers.base import GpuSample

MAX_XIDS = 32                  # XID events kept per GPU (first seen; a storm is counted in xid_count)


@dataclass
class FleetGpu:
    """The fleet's part of a ``GpuAggregate``."""

    load: LoadStats = field(default_factory=LoadStats)
    xids: list[dict[str, Any]] = field(default_factory=list)
    xid_count: int = 0
    errors_start: dict[str, int] | None = None
    errors_end: dict[str, int] | None = None

    def fold(self, s: GpuSample, w_s: float, reasons: dict[str, int]) -> None:
        """Fold one sample (see ``LoadStats.fold``)."""
        self.load.fold(s, w_s, reasons)

    def note_xid(self, xid: int, t: float) -> None:
        """An XID event on this GPU while the job ran."""
        self.xid_count += 1
        if len(self.xids) < MAX_XIDS:
            self.xids.append({"xid": int(xid), "t": t})

    def note_errors(self, counters: dict[str, int], at_end: bool) -> None:
        """The error counters at register (first reading kept) or at the end (latest kept)."""
        if at_end:
            self.errors_end = dict(counters)
        elif self.errors_start is None:
            self.errors_start = dict(counters)

    def to_dict(self) -> dict[str, Any]:
        """Contract members of the GPU's aggregates: load, xids, xid_count, error_growth."""
        return {"load": self.load.to_dict(), "xids": [dict(x) for x in self.xids], "xid_count": self.xid_count,
                "error_growth": growth(self.errors_start, self.errors_end)}

    def to_state(self) -> dict[str, Any]:
        """State members (kept beside the GPU's other state)."""
        return {"load": self.load.to_state(), "xids": [dict(x) for x in self.xids], "xid_count": self.xid_count,
                "errors_start": self.errors_start, "errors_end": self.errors_end}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "FleetGpu":
        """Inverse of to_state; a state from before the fleet figures starts empty."""
        return cls(load=LoadStats.from_state(d.get("load")), xids=[dict(x) for x in d.get("xids") or []],
                   xid_count=int(d.get("xid_count") or 0), errors_start=d.get("errors_start"),
                   errors_end=d.get("errors_end"))
