"""One job's GPU figures *under load* and *in communication phases*, folded per sample.

A fleet fingerprint compares like with like: the SM clock, power and temperature of a GPU idling
between kernels say nothing about its health, so they are folded only while SM active is at least
``LOAD_SM_ACTIVE_PCT`` (NVML utilisation >= ``LOAD_UTIL_PCT`` where a GPU has no GPM/DCGM SM activity).
Link rates count only in samples where that link carries at least ``COMM_MIN_BPS`` (a communication
phase): an all-reduce at 17% SM active is still a full-speed NVLink measurement.

The SM clock is also kept apart for samples *not* held by the power cap (``sm_clock_free_mhz``): a GEMM
at the power limit runs at ~1,400 MHz on a healthy H100 and a memory-bound kernel at 1,980, so the mean
over all loaded samples says more about the job mix than about the board; the uncapped clock does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuperf.samplers.base import GpuSample

LOAD_SM_ACTIVE_PCT = 50.0
LOAD_UTIL_PCT = 90.0
COMM_MIN_BPS = 1e9          # 1 GB/s tx+rx: well above idle chatter (~10 MB/s), far below any real collective
LOAD_FIELDS = ("sm_clock_mhz", "power_w", "temp_c")
FREE_CLOCK = "sm_clock_free_mhz"
POWER_CAP_BIT = 0x4           # nvmlClocksEventReasonSwPowerCap
LINKS = ("nvlink", "pcie")


def under_load(s: GpuSample) -> bool:
    """The sample shows a GPU working (SM active, else NVML utilisation, over the threshold)."""
    if s.sm_active_pct is not None:
        return s.sm_active_pct >= LOAD_SM_ACTIVE_PCT
    return s.util_gpu_pct is not None and s.util_gpu_pct >= LOAD_UTIL_PCT


@dataclass
class LoadStats:
    """Time-weighted sums under load and per-link bytes in communication phases."""

    busy_s: float = 0.0
    wsum: dict[str, float] = field(default_factory=dict)      # field -> sum(value * seconds) under load
    wsec: dict[str, float] = field(default_factory=dict)      # field -> seconds with a value under load
    throttle_s: dict[str, float] = field(default_factory=dict)  # reason -> seconds under load
    comm_s: dict[str, float] = field(default_factory=dict)    # link -> seconds in communication phases
    comm_bytes: dict[str, float] = field(default_factory=dict)

    def fold(self, s: GpuSample, w_s: float, reasons: dict[str, int]) -> None:
        """Fold one sample that held ``w_s`` seconds (``reasons``: throttle name -> NVML bit)."""
        if under_load(s):
            self.busy_s += w_s
            for name in LOAD_FIELDS:
                v = getattr(s, name)
                if v is not None and v == v:
                    self.wsum[name] = self.wsum.get(name, 0.0) + v * w_s
                    self.wsec[name] = self.wsec.get(name, 0.0) + w_s
            if s.sm_clock_mhz is not None and s.sm_clock_mhz == s.sm_clock_mhz and not (s.throttle_reasons or 0) & POWER_CAP_BIT:
                self.wsum[FREE_CLOCK] = self.wsum.get(FREE_CLOCK, 0.0) + s.sm_clock_mhz * w_s
                self.wsec[FREE_CLOCK] = self.wsec.get(FREE_CLOCK, 0.0) + w_s
            if s.throttle_reasons:
                for reason, bit in reasons.items():
                    if s.throttle_reasons & bit:
                        self.throttle_s[reason] = self.throttle_s.get(reason, 0.0) + w_s
        for link in LINKS:
            tx, rx = getattr(s, f"{link}_tx_bps"), getattr(s, f"{link}_rx_bps")
            rate = (tx or 0.0) + (rx or 0.0)
            if rate >= COMM_MIN_BPS:
                self.comm_s[link] = self.comm_s.get(link, 0.0) + w_s
                self.comm_bytes[link] = self.comm_bytes.get(link, 0.0) + rate * w_s

    def to_dict(self) -> dict[str, Any]:
        """Contract form: ``busy_s``, the means under load, throttle seconds under load, comm rates."""
        out: dict[str, Any] = {"busy_s": self.busy_s}
        for name in LOAD_FIELDS + (FREE_CLOCK,):
            sec = self.wsec.get(name, 0.0)
            out[name] = self.wsum[name] / sec if sec > 0 else None
        out["free_clock_s"] = self.wsec.get(FREE_CLOCK, 0.0)
        out["throttle_s"] = dict(self.throttle_s)
        for link in LINKS:
            sec = self.comm_s.get(link, 0.0)
            out[f"{link}_comm_s"] = sec
            out[f"{link}_comm_bps"] = self.comm_bytes[link] / sec if sec > 0 else None
        return out

    def to_state(self) -> dict[str, Any]:
        """Full state as plain data."""
        return {"busy_s": self.busy_s, "wsum": dict(self.wsum), "wsec": dict(self.wsec),
                "throttle_s": dict(self.throttle_s), "comm_s": dict(self.comm_s), "comm_bytes": dict(self.comm_bytes)}

    @classmethod
    def from_state(cls, d: dict[str, Any] | None) -> "LoadStats":
        """Inverse of to_state (an older state without it starts empty)."""
        if not d:
            return cls()
        return cls(busy_s=float(d["busy_s"]), wsum=dict(d["wsum"]), wsec=dict(d["wsec"]),
                   throttle_s=dict(d["throttle_s"]), comm_s=dict(d["comm_s"]), comm_bytes=dict(d["comm_bytes"]))


def same_board(a: str, b: str) -> bool:
    """Two spellings of one GPU UUID: NVML's ``GPU-<hex>`` and PyTorch's bare ``<hex>`` (the probe's),
    seen on a real H100 under Slurm (benchmarks/results/gpu/)."""
    def bare(u: str) -> str:
        u = str(u).strip().lower()
        return u[4:] if u.startswith("gpu-") else u

    return bare(a) == bare(b)


def node_figures(aggregates: dict[str, Any], names: dict[str, Any] | None = None,
                 probes: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The fleet's per-GPU figures of one node's job (the node summary's ``fleet`` member; the merged job
    summary and the AdminComment leave it out): index, uuid, model, seconds, load figures, XIDs seen, and
    the node's latest active-probe figures of that board (``probes``: ``probe.load()``)."""
    out = []
    for idx, g in sorted((aggregates.get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        if not isinstance(g, dict) or not isinstance(g.get("load"), dict):
            continue  # aggregates from before the fleet figures
        e = {"gpu": int(idx), "uuid": g.get("uuid"), "name": g.get("name") or (names or {}).get(str(idx)),
             "seconds": g.get("seconds"), "load": g["load"],
             "xids": [int(x["xid"]) for x in g.get("xids") or [] if isinstance(x, dict) and "xid" in x],
             "xid_count": int(g.get("xid_count") or 0), "errors": g.get("error_growth")}
        pr = (probes or {}).get(str(idx))
        if isinstance(pr, dict) and (pr.get("uuid") is None or g.get("uuid") is None
                                     or same_board(pr["uuid"], g["uuid"])):
            e["probe"] = pr
        out.append(e)
    return out
