"""Per-job streaming aggregates: every sample is folded in as it arrives, so finalising costs the same
for a 1-minute and a 30-day job.

Time weighting: a sample stands for the time since the job's previous sweep (the first one for one
nominal interval). A silence longer than ``GAP_FACTOR`` intervals is recorded in ``gaps`` and the
sample after it weighs one interval only, so a daemon restart never inflates a metric.

Percentiles come from a sparse log-bucket histogram (relative error under 1%, ``HIST_GAMMA``) weighted
by seconds; mean/min/max are exact.

Shared GPUs (sharding, several jobs on one GPU): a GPU's samples are attributed in full to every job on
it (a GPU-level quantity cannot be split), the GPU is flagged ``shared`` with ``shared_s``, and its
energy is integrated power divided equally among the jobs on it at each sample (the cumulative
counter cannot be split, so it is not used for a GPU that was ever shared).

Energy: the cumulative NVML counter read at job start and end (and rarely between) when the last
reading is recent (within ``GAP_FACTOR`` intervals of the last sample); otherwise integrated power.

A sample taken while the job's own process on that GPU ran under a profiler has its activity figures
folded as missing, and its time counted in ``profiled_s`` (``model/profiled.py``).

``to_dict()`` is the contract (docs/CONTRACTS.md); ``to_state()``/``from_state()`` (alias
``from_dict``) hold the full state, histograms included, for the daemon's store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from gpuperf.model.gpustate import FleetGpu
from gpuperf.model import profiled as prof
from gpuperf.model.hostaggregate import HostAggregate
from gpuperf.samplers.base import METRIC_FIELDS, GpuSample

STATE_SCHEMA = "gpuperf.aggregates-state.v1"
HIST_GAMMA = 1.02
_INV_LOG_GAMMA = 1.0 / math.log(HIST_GAMMA)
_ZERO_KEY = -(10**6)          # bucket of values <= _ZERO
_ZERO = 1e-9
GAP_FACTOR = 5.0               # silence longer than this many intervals is a gap
IDLE_SM_ACTIVE_PCT = 1.0       # with no NVML util, SM active below this is idle
MAX_FOREIGN = 32               # foreign processes kept per GPU (first seen)
# nvmlClocksEventReasons bits (nvml.h) -> contract names
THROTTLE_BITS: dict[str, int] = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}
# static per-GPU facts: kept as facts, not as metric statistics
_STATIC = ("mem_total_mib", "power_limit_w")
FOLDED_FIELDS: tuple[str, ...] = tuple(f for f in METRIC_FIELDS if f not in _STATIC)


def _bucket(v: float) -> int:
    return _ZERO_KEY if v <= _ZERO else math.ceil(math.log(v) * _INV_LOG_GAMMA)


def _bucket_value(k: int) -> float:
    return 0.0 if k == _ZERO_KEY else 2.0 * HIST_GAMMA**k / (HIST_GAMMA + 1.0)


@dataclass
class MetricStat:
    """Time-weighted statistics of one metric: exact mean/min/max, histogram percentiles."""

    n: int = 0
    weight_s: float = 0.0
    wsum: float = 0.0
    min: float | None = None
    max: float | None = None
    hist: dict[int, float] = field(default_factory=dict)

    def add(self, v: float, w_s: float) -> None:
        """Fold one value that held for ``w_s`` seconds."""
        self.n += 1
        self.weight_s += w_s
        self.wsum += v * w_s
        if self.min is None or v < self.min:
            self.min = v
        if self.max is None or v > self.max:
            self.max = v
        k = _bucket(v)
        self.hist[k] = self.hist.get(k, 0.0) + w_s

    def quantile(self, q: float) -> float | None:
        """The time-weighted q-quantile (0..1), within the histogram's relative error."""
        if not self.hist or self.weight_s <= 0:
            return self.min
        target = q * sum(self.hist.values())
        acc = 0.0
        for k in sorted(self.hist):
            acc += self.hist[k]
            if acc >= target:
                return min(max(_bucket_value(k), self.min), self.max)  # type: ignore[type-var]
        return self.max

    def summary(self) -> dict[str, float | None]:
        """mean/min/max/p50/p95 as the contract names them."""
        mean = self.wsum / self.weight_s if self.weight_s > 0 else None
        return {"mean": mean, "min": self.min, "max": self.max, "p50": self.quantile(0.5), "p95": self.quantile(0.95)}

    def to_state(self) -> dict[str, Any]:
        """Full state as plain data."""
        return {"n": self.n, "w": self.weight_s, "s": self.wsum, "min": self.min, "max": self.max,
                "h": {str(k): v for k, v in self.hist.items()}}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "MetricStat":
        """Inverse of to_state."""
        return cls(n=int(d["n"]), weight_s=float(d["w"]), wsum=float(d["s"]), min=d["min"], max=d["max"],
                   hist={int(k): float(v) for k, v in d["h"].items()})


@dataclass
class GpuAggregate:
    """One GPU of one job."""

    gpu: int
    samples: int = 0
    seconds: float = 0.0
    metrics: dict[str, MetricStat] = field(default_factory=dict)
    idle_s: float = 0.0
    throttle_s: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in THROTTLE_BITS})
    bytes: dict[str, float] = field(default_factory=lambda: {"nvlink_tx": 0.0, "nvlink_rx": 0.0, "pcie_tx": 0.0, "pcie_rx": 0.0})
    power_energy_j: float = 0.0         # integrated power (divided among sharing jobs)
    shared_s: float = 0.0
    energy_start_j: float | None = None
    energy_last_j: float | None = None
    energy_last_t: float | None = None
    counter_ok: bool = True
    name: str | None = None
    uuid: str | None = None
    mem_total_mib: float | None = None
    power_limit_w: float | None = None
    foreign: dict[str, dict[str, Any]] = field(default_factory=dict)
    profiled_s: float = 0.0             # seconds under a profiler: activity figures missing, not folded
    profilers: dict[str, float] = field(default_factory=dict)          # tool -> seconds
    profiled_spans: list[list[float]] = field(default_factory=list)    # [[t0, t1]], for the series' mask
    fleet: FleetGpu = field(default_factory=FleetGpu)   # figures under load, XIDs, error growth (gpuperf/fleet)

    def fold(self, s: GpuSample, w_s: float, sharing: int = 1, profiler: str | None = None) -> None:
        """Fold one sample weighing ``w_s`` seconds; ``sharing`` is the number of jobs on the GPU; ``profiler``:
        the tool the job's process on this GPU ran under (its activity figures are then missing)."""
        if profiler:
            s = prof.without_counters(s)
            self.profiled_s += w_s
            self.profilers[profiler] = self.profilers.get(profiler, 0.0) + w_s
            prof.add_span(self.profiled_spans, s.t - w_s, s.t)
        self.samples += 1
        self.seconds += w_s
        metrics = self.metrics
        for name in FOLDED_FIELDS:
            v = getattr(s, name)
            if v is not None and v == v:       # NaN from a backend is "unknown", never folded
                st = metrics.get(name)
                if st is None:
                    st = metrics[name] = MetricStat()
                st.add(float(v), w_s)
        if s.util_gpu_pct is not None:
            idle = s.util_gpu_pct <= 0
        else:
            idle = s.sm_active_pct is not None and s.sm_active_pct < IDLE_SM_ACTIVE_PCT
        if idle:
            self.idle_s += w_s
        if s.throttle_reasons:
            for reason, bit in THROTTLE_BITS.items():
                if s.throttle_reasons & bit:
                    self.throttle_s[reason] += w_s
        b = self.bytes
        if s.nvlink_tx_bps is not None:
            b["nvlink_tx"] += s.nvlink_tx_bps * w_s
        if s.nvlink_rx_bps is not None:
            b["nvlink_rx"] += s.nvlink_rx_bps * w_s
        if s.pcie_tx_bps is not None:
            b["pcie_tx"] += s.pcie_tx_bps * w_s
        if s.pcie_rx_bps is not None:
            b["pcie_rx"] += s.pcie_rx_bps * w_s
        if s.power_w is not None:
            self.power_energy_j += s.power_w * w_s / max(1, sharing)
        if sharing > 1:
            self.shared_s += w_s
        if s.mem_total_mib is not None:
            self.mem_total_mib = s.mem_total_mib
        if s.power_limit_w is not None:
            self.power_limit_w = s.power_limit_w
        self.fleet.fold(s, w_s, THROTTLE_BITS)

    def energy_reading(self, energy_j: float | None, t: float) -> None:
        """Record a reading of the cumulative energy counter (the first one is the start)."""
        if energy_j is None:
            return
        if self.energy_start_j is None:
            self.energy_start_j = energy_j
        elif energy_j < (self.energy_last_j if self.energy_last_j is not None else self.energy_start_j):
            self.counter_ok = False        # counter went backwards: driver reloaded
        self.energy_last_j, self.energy_last_t = energy_j, t

    def note_foreign(self, pid: int, job_id: int | None, t: float) -> None:
        """A process of another job, or of none, on this (allocated) GPU."""
        key = str(pid)
        f = self.foreign.get(key)
        if f is not None:
            f["last_t"] = t
        elif len(self.foreign) < MAX_FOREIGN:
            self.foreign[key] = {"pid": pid, "job_id": job_id, "first_t": t, "last_t": t}

    def energy(self, last_sample_t: float | None, interval_s: float) -> tuple[float | None, str]:
        """(energy_j, source): the counter when usable, else integrated power."""
        counter_fresh = (self.energy_last_t is not None and last_sample_t is not None
                         and self.energy_last_t >= last_sample_t - GAP_FACTOR * interval_s)
        if (self.counter_ok and self.shared_s == 0 and counter_fresh and self.energy_start_j is not None
                and self.energy_last_j is not None):
            return self.energy_last_j - self.energy_start_j, "counter"
        if self.samples == 0:
            return None, "integrated"
        return self.power_energy_j, "integrated"

    def to_dict(self, last_sample_t: float | None, interval_s: float) -> dict[str, Any]:
        """Contract form of this GPU's aggregates."""
        energy_j, source = self.energy(last_sample_t, interval_s)
        return {
            "samples": self.samples,
            "seconds": self.seconds,
            "metrics": {k: v.summary() for k, v in sorted(self.metrics.items())},
            "idle_s": self.idle_s,
            "throttle_s": dict(self.throttle_s),
            "energy_j": energy_j,
            "energy_source": source,
            # None, not 0, where the rate was never measured (no NVLink, no GPM/counters)
            **{f"{k}_bytes": (v if f"{k}_bps" in self.metrics else None) for k, v in self.bytes.items()},
            "mem_total_mib": self.mem_total_mib,
            "power_limit_w": self.power_limit_w,
            "name": self.name,
            "uuid": self.uuid,
            **self.fleet.to_dict(),
            "shared": self.shared_s > 0,
            "shared_s": self.shared_s,
            "foreign_processes": [dict(v) for v in self.foreign.values()],
            "profiled_s": self.profiled_s,
            "profilers": dict(self.profilers),
            "profiled_spans": [list(sp) for sp in self.profiled_spans],
        }

    def to_state(self) -> dict[str, Any]:
        """Full state as plain data."""
        return {"gpu": self.gpu, "samples": self.samples, "seconds": self.seconds,
                "metrics": {k: v.to_state() for k, v in self.metrics.items()}, "idle_s": self.idle_s,
                "throttle_s": dict(self.throttle_s), "bytes": dict(self.bytes),
                "power_energy_j": self.power_energy_j, "shared_s": self.shared_s,
                "energy_start_j": self.energy_start_j, "energy_last_j": self.energy_last_j,
                "energy_last_t": self.energy_last_t, "counter_ok": self.counter_ok, "name": self.name,
                "uuid": self.uuid, **self.fleet.to_state(),
                "mem_total_mib": self.mem_total_mib, "power_limit_w": self.power_limit_w,
                "foreign": {k: dict(v) for k, v in self.foreign.items()}, "profiled_s": self.profiled_s,
                "profilers": dict(self.profilers), "profiled_spans": [list(sp) for sp in self.profiled_spans]}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "GpuAggregate":
        """Inverse of to_state."""
        g = cls(gpu=int(d["gpu"]))
        for k in ("samples", "seconds", "idle_s", "power_energy_j", "shared_s", "energy_start_j", "energy_last_j",
                  "energy_last_t", "counter_ok", "name", "mem_total_mib", "power_limit_w"):
            setattr(g, k, d[k])
        g.metrics = {k: MetricStat.from_state(v) for k, v in d["metrics"].items()}
        g.throttle_s = {k: float(d["throttle_s"].get(k, 0.0)) for k in THROTTLE_BITS}
        g.bytes = {k: float(v) for k, v in d["bytes"].items()}
        g.foreign = {str(k): dict(v) for k, v in d["foreign"].items()}
        g.uuid = d.get("uuid")      # states checkpointed before the fleet figures have neither
        g.fleet = FleetGpu.from_state(d)
        g.profiled_s = float(d.get("profiled_s") or 0.0)      # states from before profilers were told apart
        g.profilers = {str(k): float(v) for k, v in (d.get("profilers") or {}).items()}
        g.profiled_spans = [[float(a), float(b)] for a, b in d.get("profiled_spans") or []]
        return g


@dataclass
class JobAggregates:
    """All aggregates of one job on one node."""

    job_id: int
    node: str | None
    gpus: dict[int, GpuAggregate]
    start: float
    interval_s: float = 1.0
    end: float | None = None
    last_t: float | None = None
    gaps: list[list[float]] = field(default_factory=list)
    partial: bool = False
    host: HostAggregate = field(default_factory=HostAggregate)
    frameworks: list[str] | None = None     # what the job's CUDA processes mapped (diagnosis/frameworks.py); None: unread

    @classmethod
    def new(cls, job_id: int, node: str | None, gpus: Iterable[int], start: float, interval_s: float,
            cpus: int | None = None, names: dict[int, str | None] | None = None,
            uuids: dict[int, str | None] | None = None) -> "JobAggregates":
        """Empty aggregates of a job holding ``gpus`` (``names``: GPU model by index, for the report's peaks;
        ``uuids``: the boards, for the fleet fingerprints)."""
        names, uuids = names or {}, uuids or {}
        return cls(job_id=job_id, node=node, gpus={g: GpuAggregate(g, name=names.get(g), uuid=uuids.get(g)) for g in gpus},
                   start=start, interval_s=interval_s, host=HostAggregate(cpus_allocated=cpus))

    def weight(self, t: float) -> float | None:
        """Seconds the sweep at ``t`` stands for; None for a sweep not after the previous one."""
        if self.last_t is None:
            return self.interval_s
        dt = t - self.last_t
        if dt <= 0:
            return None
        if dt > GAP_FACTOR * self.interval_s:
            self.add_gap(self.last_t, t)
            return self.interval_s
        return dt

    def add_gap(self, t0: float, t1: float) -> None:
        """Record a time with no samples (daemon down, sweeps lost)."""
        if self.gaps and self.gaps[-1][1] >= t0:
            self.gaps[-1][1] = max(self.gaps[-1][1], t1)
        else:
            self.gaps.append([t0, t1])

    def add_sweep(self, t: float, samples: Iterable[GpuSample], sharing: dict[int, int] | None = None,
                  profiled: dict[int, str] | None = None) -> bool:
        """Fold one sweep's samples of this job's GPUs; ``sharing``: gpu -> jobs on it; ``profiled``: gpu -> the
        profiler the job's process there ran under. False if skipped."""
        w = self.weight(t)
        if w is None:
            return False
        for s in samples:
            g = self.gpus.get(s.gpu)
            if g is not None:
                g.fold(s, w, sharing.get(s.gpu, 1) if sharing else 1, profiled.get(s.gpu) if profiled else None)
        self.last_t = t
        return True

    def note_frameworks(self, names: list[str] | None) -> None:
        """Add the frameworks one of the job's CUDA processes mapped (None: its maps were not read)."""
        if names is not None:
            self.frameworks = sorted(set(self.frameworks or []) | {str(n) for n in names})

    def error_counters(self, counters: dict[str, dict[str, int]], at_end: bool) -> None:
        """Record the error counters (``model.gpuerrors.counters``) at register or at the end."""
        for idx, g in self.gpus.items():
            c = counters.get(str(idx))
            if c is not None:
                g.fleet.note_errors(c, at_end)

    def energy_reading(self, readings: dict[int, float | None], t: float) -> None:
        """Record cumulative energy counter readings (gpu -> joules)."""
        for gpu, j in readings.items():
            g = self.gpus.get(int(gpu))
            if g is not None:
                g.energy_reading(j, t)

    def to_dict(self) -> dict[str, Any]:
        """The aggregates contract (docs/CONTRACTS.md)."""
        end = self.end if self.end is not None else self.last_t
        wall = (end - self.start) if end is not None else None
        return {
            "job_id": self.job_id,
            "node": self.node,
            "gpus": {str(k): g.to_dict(self.last_t, self.interval_s) for k, g in sorted(self.gpus.items())},
            "host": self.host.to_dict(wall),
            "start": self.start,
            "end": self.end,
            "last_sample_t": self.last_t,
            "interval_s": self.interval_s,
            "gaps": [list(g) for g in self.gaps],
            "partial": self.partial,
            "frameworks": None if self.frameworks is None else list(self.frameworks),
        }

    def to_state(self) -> dict[str, Any]:
        """Full state (histograms included) for the store."""
        return {"schema": STATE_SCHEMA, "job_id": self.job_id, "node": self.node, "start": self.start,
                "interval_s": self.interval_s, "end": self.end, "last_t": self.last_t,
                "gaps": [list(g) for g in self.gaps], "partial": self.partial, "host": self.host.to_state(),
                "gpus": [g.to_state() for g in self.gpus.values()], "frameworks": self.frameworks}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "JobAggregates":
        """Inverse of to_state; ValueError for a state of another schema."""
        if d.get("schema") != STATE_SCHEMA:
            raise ValueError(f"not an aggregates state: schema {d.get('schema')!r}")
        gpus = {int(g["gpu"]): GpuAggregate.from_state(g) for g in d["gpus"]}
        return cls(job_id=int(d["job_id"]), node=d["node"], gpus=gpus, start=float(d["start"]),
                   interval_s=float(d["interval_s"]), end=d["end"], last_t=d["last_t"],
                   gaps=[list(g) for g in d["gaps"]], partial=bool(d["partial"]), host=HostAggregate.from_state(d["host"]),
                   frameworks=[str(x) for x in d["frameworks"]] if isinstance(d.get("frameworks"), list) else None)

    from_dict = from_state
