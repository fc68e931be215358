"""The host side of one job on this node, folded like the GPUs' aggregates: CPU time (the job's cgroup
counter where Slurm keeps one, else its processes' with reaped children), RSS peak, I/O wait, and the
node's NIC/IB byte counters over the job. Part of ``JobAggregates`` (``host``); the daemon's host scan
(``daemon.hostscan``) feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class HostAggregate:
    """Host side of one job on this node: CPU time, RSS peak, I/O wait, node NIC/IB bytes."""

    cpus_allocated: int | None = None
    exited_cpu_s: float = 0.0
    exited_iowait_s: float = 0.0
    # process key "pid:start" -> [cpu_s, iowait_s, ppid]: cumulative, cpu_s including reaped children
    live: dict[str, list[float]] = field(default_factory=dict)
    rss_peak_mib: float | None = None
    net_start: dict[str, list[float]] = field(default_factory=dict)  # nic -> [rx_bytes, tx_bytes]
    net_last: dict[str, list[float]] = field(default_factory=dict)
    iowait_known: bool = True        # False where the kernel keeps no delay accounting
    cgroup: str | None = None        # the job's CPU-counter cgroup directory, once found (jobcgroup)
    cgroup_cpu_s: float | None = None

    def update_cgroup(self, cpu_s: float | None) -> None:
        """Fold a reading of the job cgroup's CPU counter (it only grows; a gone cgroup keeps the last)."""
        if cpu_s is not None and (self.cgroup_cpu_s is None or cpu_s > self.cgroup_cpu_s):
            self.cgroup_cpu_s = cpu_s

    def update_procs(self, procs: dict[str, tuple[float, float, int]], rss_mib: float | None) -> None:
        """Fold a scan of the job's live processes: key -> (cpu_s, iowait_s, ppid), RSS summed over them.

        ``cpu_s`` is a process's own CPU time plus that of the children it reaped (utime+stime+cutime+
        cstime), so short-lived children count. A process gone since the last scan adds its last CPU
        time only when its parent is no longer a live process of the job (else the parent's cutime
        carries it now); its I/O wait always (children's I/O wait is not accumulated by the kernel)."""
        live_pids = {int(k.split(":", 1)[0]) for k in procs}
        for key in [k for k in self.live if k not in procs]:
            v = self.live.pop(key)
            ppid = int(v[2]) if len(v) > 2 else -1
            if ppid not in live_pids:
                self.exited_cpu_s += v[0]
            self.exited_iowait_s += v[1]
        for key, (cpu, io, ppid) in procs.items():
            self.live[key] = [float(cpu), float(io), int(ppid)]
        if rss_mib is not None and (self.rss_peak_mib is None or rss_mib > self.rss_peak_mib):
            self.rss_peak_mib = rss_mib

    def update_net(self, counters: dict[str, tuple[float, float]]) -> None:
        """Node NIC/IB byte counters now: nic -> (rx_bytes, tx_bytes); the first reading is the start."""
        for nic, (rx, tx) in counters.items():
            if nic not in self.net_start:
                self.net_start[nic] = [float(rx), float(tx)]
            self.net_last[nic] = [float(rx), float(tx)]

    @property
    def procs_cpu_s(self) -> float:
        """CPU time (user+system) the process scans saw, exited processes included."""
        return self.exited_cpu_s + sum(v[0] for v in self.live.values())

    @property
    def cpu_time_s(self) -> float:
        """The job's CPU time: the larger of the cgroup's counter and the process scans (both can only miss time)."""
        return max(self.procs_cpu_s, self.cgroup_cpu_s or 0.0)

    @property
    def cpu_source(self) -> str:
        """Where cpu_time_s came from: 'cgroup' or 'processes'."""
        return "cgroup" if self.cgroup_cpu_s is not None and self.cgroup_cpu_s >= self.procs_cpu_s else "processes"

    @property
    def iowait_s(self) -> float:
        """Block I/O delay of the job's processes (delay accounting), exited ones included."""
        return self.exited_iowait_s + sum(v[1] for v in self.live.values())

    def to_dict(self, wall_s: float | None) -> dict[str, Any]:
        """Contract form. iowait_pct: share of (CPU + I/O wait) time spent waiting for block I/O."""
        io = self.iowait_s if self.iowait_known else None
        busy = self.cpu_time_s + (io or 0.0)
        net = {}
        for nic, (rx, tx) in self.net_last.items():
            rx0, tx0 = self.net_start.get(nic, (rx, tx))
            # a counter that went backwards (reset) gives None, never a negative number
            net[nic] = {"rx_bytes": rx - rx0 if rx >= rx0 else None, "tx_bytes": tx - tx0 if tx >= tx0 else None}
        return {"cpu_time_s": self.cpu_time_s, "cpu_source": self.cpu_source, "cpu_time_procs_s": self.procs_cpu_s,
                "cpus_allocated": self.cpus_allocated, "wall_s": wall_s,
                "rss_peak_mib": self.rss_peak_mib, "iowait_s": io,
                "iowait_pct": 100.0 * io / busy if io is not None and busy > 0 else None,
                "net_bytes": net}

    def to_state(self) -> dict[str, Any]:
        """Full state as plain data."""
        return {"cpus_allocated": self.cpus_allocated, "exited_cpu_s": self.exited_cpu_s,
                "exited_iowait_s": self.exited_iowait_s, "live": self.live, "rss_peak_mib": self.rss_peak_mib,
                "net_start": self.net_start, "net_last": self.net_last, "iowait_known": self.iowait_known,
                "cgroup": self.cgroup, "cgroup_cpu_s": self.cgroup_cpu_s}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "HostAggregate":
        """Inverse of to_state."""
        return cls(cpus_allocated=d["cpus_allocated"], exited_cpu_s=float(d["exited_cpu_s"]),
                   exited_iowait_s=float(d["exited_iowait_s"]), live={k: list(v) for k, v in d["live"].items()},
                   rss_peak_mib=d["rss_peak_mib"], net_start={k: list(v) for k, v in d["net_start"].items()},
                   net_last={k: list(v) for k, v in d["net_last"].items()},
                   iowait_known=bool(d.get("iowait_known", True)), cgroup=d.get("cgroup"),
                   cgroup_cpu_s=d.get("cgroup_cpu_s"))
