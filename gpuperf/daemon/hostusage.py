"""Host side of each job: CPU time, RSS and block-I/O wait of its processes, and the node's NIC and
InfiniBand byte counters (a multi-node job whose NCCL traffic went over TCP shows on the NIC, not IB).

The job's processes are found by one pass over procfs: each process is attributed once (cached by pid
and start time, ``attribution.Attributor``) and read once per scan from ``/proc/PID/stat`` (utime,
stime, rss, delayacct_blkio_ticks), so a scan costs one small read per process on the node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gpuperf.daemon.attribution import Attributor

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


@dataclass
class ProcUsage:
    """One process from /proc/PID/stat."""

    pid: int
    ppid: int
    start_ticks: int
    cpu_s: float              # own user+system time
    children_cpu_s: float     # user+system time of reaped children (cutime+cstime)
    iowait_s: float
    rss_mib: float


def parse_stat_usage(pid: int, data: str) -> ProcUsage | None:
    """Parse /proc/PID/stat into a ProcUsage (None for a line that does not parse)."""
    rparen = data.rfind(")")
    if rparen < 0:
        return None
    f = data[rparen + 2:].split()
    try:
        # fields after the command, 0-based: 1 ppid, 11 utime, 12 stime, 13 cutime, 14 cstime,
        # 19 starttime, 21 rss, 39 delayacct_blkio_ticks
        blk = int(f[39]) if len(f) > 39 else 0
        return ProcUsage(pid, int(f[1]), int(f[19]), (int(f[11]) + int(f[12])) * _TICK_S,
                         (int(f[13]) + int(f[14])) * _TICK_S, blk * _TICK_S, int(f[21]) * _PAGE_MIB)
    except (IndexError, ValueError):
        return None


@dataclass
class JobUsage:
    """The live processes of one job at one scan."""

    # "pid:start" -> (cpu_s with reaped children, iowait_s, ppid)
    procs: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    rss_mib: float = 0.0


def scan_jobs(attr: Attributor, jobs: set[int], skip: set[int] | None = None) -> dict[int, JobUsage]:
    """One pass over procfs: usage of the live processes of each job in ``jobs``.

    ``skip`` (kept by the caller between scans) holds pids found to be of no job: they are not read
    again while they live, so a scan reads only new processes and the jobs' own. The cost: a pid of
    no job that exits and is reused by a job's process before the next scan is missed until then."""
    out: dict[int, JobUsage] = {j: JobUsage() for j in jobs}
    if not jobs:
        return out
    try:
        names = os.listdir(attr.proc_root)
    except OSError:
        return out
    live: set[int] = set()
    me = os.getpid()
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        live.add(pid)
        if skip is not None and pid in skip:
            continue
        try:
            with open(os.path.join(attr.proc_root, name, "stat")) as fh:
                u = parse_stat_usage(pid, fh.read())
        except (OSError, UnicodeDecodeError):
            continue
        if u is None or u.pid == me:
            continue
        job = attr.job_of_known(pid, u.ppid, u.start_ticks)
        if job in out:
            ju = out[job]
            ju.procs[f"{pid}:{u.start_ticks}"] = (u.cpu_s + u.children_cpu_s, u.iowait_s, u.ppid)
            ju.rss_mib += u.rss_mib
        elif job is None and skip is not None:
            skip.add(pid)
    if skip is not None:
        skip &= live
    return out


def delay_accounting(proc_root: str = "/proc") -> bool:
    """Whether the kernel accounts block-I/O delay per task (kernel.task_delayacct; always on before 5.14)."""
    try:
        with open(os.path.join(proc_root, "sys", "kernel", "task_delayacct")) as f:
            return f.read().strip() != "0"
    except OSError:
        return True


def net_counters(sys_root: str = "/sys") -> dict[str, tuple[float, float]]:
    """Node byte counters: NICs (psutil) and IB ports (sysfs, 4-byte units): name -> (rx_bytes, tx_bytes)."""
    out: dict[str, tuple[float, float]] = {}
    if sys_root in ("/sys", ""):
        try:
            for nic, c in psutil.net_io_counters(pernic=True).items():
                if nic != "lo":
                    out[nic] = (float(c.bytes_recv), float(c.bytes_sent))
        except OSError:
            pass
    else:
        for dev in _listdir(Path(sys_root, "class", "net")):
            stats = Path(sys_root, "class", "net", dev, "statistics")
            rx, tx = _read_num(stats / "rx_bytes"), _read_num(stats / "tx_bytes")
            if dev != "lo" and rx is not None and tx is not None:
                out[dev] = (rx, tx)
    ib = Path(sys_root or "/sys", "class", "infiniband")
    for dev in _listdir(ib):
        for port in _listdir(ib / dev / "ports"):
            c = ib / dev / "ports" / port / "counters"
            rx, tx = _read_num(c / "port_rcv_data"), _read_num(c / "port_xmit_data")
            if rx is not None and tx is not None:
                out[f"{dev}:{port}"] = (rx * 4.0, tx * 4.0)
    return out


def _listdir(p: Path) -> list[str]:
    try:
        return sorted(os.listdir(p))
    except OSError:
        return []


def _read_num(p: Path) -> float | None:
    try:
        return float(p.read_text().strip())
    except (OSError, ValueError):
        return None
