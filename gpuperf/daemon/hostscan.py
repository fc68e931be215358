"""Host side of the running jobs: fold each job's process usage, CPU cgroup counter and the node's NIC/IB counters."""

from __future__ import annotations

import os
import threading
from typing import Any

from gpuperf.daemon import hostusage, jobcgroup
from gpuperf.daemon.attribution import Attributor


def sys_root(cfg: Any) -> str:
    """The sysfs root (under ``general.node_root`` in tests)."""
    root = cfg.general.node_root
    return os.path.join(root, "sys") if root else "/sys"


def scan(running: dict[int, Any], attr: Attributor, nonjob_pids: set[int], sysroot: str, log: Any,
         lock: Any = None) -> None:
    """Fold one host scan into every running job's ``agg.host`` (a failed scan is logged and skipped); the
    procfs and sysfs reads are done before ``lock`` (the daemon's state) is taken for the fold."""
    try:
        usage = hostusage.scan_jobs(attr, set(running), nonjob_pids)
        net = hostusage.net_counters(sysroot)
    except Exception as e:  # noqa: BLE001 - host figures are a bonus; sampling goes on
        log.warning("host scan failed: %s: %s", type(e).__name__, e)
        return
    io_known = hostusage.delay_accounting(attr.proc_root)
    with lock if lock is not None else threading.RLock():
        _fold(running, usage, net, io_known, attr)


def _fold(running: dict[int, Any], usage: dict[int, Any], net: Any, io_known: bool, attr: Attributor) -> None:
    for jid, rj in running.items():
        u = usage.get(jid)
        host = rj.agg.host
        host.iowait_known = host.iowait_known and io_known
        if u is not None and u.procs:
            host.update_procs(u.procs, u.rss_mib)
            if host.cgroup is None:
                host.cgroup = job_cgroup(attr, u.procs)
        if host.cgroup is not None:
            host.update_cgroup(jobcgroup.read_cpu_s(host.cgroup))
        host.update_net(net)


class HostScanner:
    """The host scan chore: ``scan()`` folds one pass over procfs and sysfs into the running jobs; it keeps
    the pids found to be of no job between scans (``hostusage.scan_jobs`` skips them)."""

    def __init__(self, running: dict[int, Any], attr: Attributor, sysroot: str, log: Any, lock: Any = None):
        self.running, self.attr, self.sysroot, self.log = running, attr, sysroot, log
        self.nonjob_pids: set[int] = set()
        self.lock = lock   # the daemon's state lock, taken for the fold only

    def scan(self, t: float | None = None) -> None:
        """Fold the running jobs' process usage and the node's NIC/IB counters."""
        scan(self.running, self.attr, self.nonjob_pids, self.sysroot, self.log, self.lock)


def job_cgroup(attr: Attributor, procs: dict[str, Any]) -> str | None:
    """The job's CPU-counter cgroup, found from one of its live processes (None: not tracked by cgroup)."""
    for key in procs:
        try:
            with open(os.path.join(attr.proc_root, key.split(":", 1)[0], "cgroup")) as f:
                found = jobcgroup.locate(f.read(), attr.cgroup_root)
        except OSError:
            continue
        return found
    return None
