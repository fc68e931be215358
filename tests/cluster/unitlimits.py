"""gpuperf's root processes as their packaged systemd units run them, where there is no systemd: the unit's
``MemoryMax`` as a memory cgroup of their own, systemd's default file limit (soft 1,024, hard 524,288), and the
figures that say whether they held (peak RSS, the cgroup's peak, OOM kills, descriptors, threads).

Read from ``packaging/*.service``, never restated: ``unit_memory_max``, ``unit_argv``. ``Cgroup`` is
cgroup v2 (``memory.max``) where the unified hierarchy is mounted, else v1's memory controller
(``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes`` where present); ``Cgroup.unavailable()``
says why none can be made here. ``start`` runs a command inside one from its first instruction.
Used by benchmarks/socket_floods.py and tests/integration/test_hostile_files_slurm.py. Root only.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
SYSTEMD_NOFILE = (1024, 524288)      # systemd's DefaultLimitNOFILE (v240 on): soft 1,024 (select() safe), hard 512 Ki
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def unit_setting(unit: str | Path, key: str) -> str | None:
    """The last ``key=`` value of the [Service] section of ``packaging/<unit>`` (or a path); None if unset."""
    path = Path(unit) if "/" in str(unit) else PACKAGING / str(unit)
    value, section = None, ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and line.startswith(key + "="):
            value = line.split("=", 1)[1].strip()
    return value


def unit_memory_max(unit: str | Path) -> int:
    """The unit's ``MemoryMax=`` in bytes (systemd's 1024-based K/M/G/T suffixes); ValueError when unset,
    ``infinity`` or a percentage (no fixed limit to test against)."""
    v = unit_setting(unit, "MemoryMax")
    m = re.fullmatch(r"(\d+)([KMGT]?)", v or "")
    if not m:
        raise ValueError(f"{unit}: MemoryMax={v!r} is not a fixed size")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def unit_argv(unit: str | Path, prefix: str | None = None) -> list[str]:
    """The unit's ``ExecStart=`` as argv, its ``/opt/gpuperf`` moved to ``prefix`` (an editable install)."""
    argv = shlex.split(unit_setting(unit, "ExecStart") or "")
    if not argv:
        raise ValueError(f"{unit}: no ExecStart")
    if prefix and argv[0].startswith("/opt/gpuperf/"):
        argv[0] = prefix.rstrip("/") + argv[0][len("/opt/gpuperf"):]
    return argv


def _v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


class Cgroup:
    """A memory cgroup of its own with ``limit`` bytes (v2 if mounted, else v1's memory controller)."""

    @staticmethod
    def unavailable() -> str | None:
        """Why no memory cgroup can be made here (None: one can)."""
        if os.geteuid() != 0:
            return "not root"
        if _v2():
            ctl = Path("/sys/fs/cgroup/cgroup.subtree_control")
            try:
                if "memory" not in ctl.read_text().split():
                    return "cgroup v2: the root cgroup does not hand the memory controller to children"
            except OSError as e:
                return f"cgroup v2: {ctl}: {e.strerror}"
            return None if os.access("/sys/fs/cgroup", os.W_OK) else "cgroup v2: /sys/fs/cgroup is not writable"
        mem = Path("/sys/fs/cgroup/memory")
        if not (mem / "memory.limit_in_bytes").exists():
            return "no cgroup v2 and no cgroup v1 memory controller mounted at /sys/fs/cgroup/memory"
        return None if os.access(mem, os.W_OK) else f"{mem} is not writable"

    def __init__(self, name: str, limit: int):
        self.v2 = _v2()
        self.path = Path("/sys/fs/cgroup" if self.v2 else "/sys/fs/cgroup/memory") / name
        self.path.mkdir(exist_ok=True)
        self.limit = limit
        try:
            (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(limit))
            if not self.v2:   # no swap to escape to (absent without swap accounting)
                self._try("memory.memsw.limit_in_bytes", str(limit))
        except OSError:
            self.remove()
            raise

    def _try(self, f: str, v: str) -> bool:
        try:
            (self.path / f).write_text(v)
            return True
        except OSError:
            return False

    def _int(self, f: str) -> int:
        try:
            return int((self.path / f).read_text())
        except (OSError, ValueError):
            return -1

    def add(self, pid: int) -> None:
        """Move ``pid`` in; v1 moves the memory it holds already with it (where the kernel still can)."""
        if not self.v2:
            self._try("memory.move_charge_at_immigrate", "3")
        (self.path / "cgroup.procs").write_text(str(pid))

    def join(self) -> None:
        """Move the calling process in (from a ``preexec_fn``: everything after is charged here)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def usage(self) -> int:
        return self._int("memory.current" if self.v2 else "memory.usage_in_bytes")

    def peak(self) -> int:
        """The group's peak usage (v1: since the last ``reset_peak``; v2: since it was made)."""
        return self._int("memory.peak" if self.v2 else "memory.max_usage_in_bytes")

    def reset_peak(self) -> None:
        """v1 only (v2 resets ``memory.peak`` per open file, not for the next reader)."""
        if not self.v2:
            self._try("memory.max_usage_in_bytes", "0")

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this group (v1 ``memory.oom_control``, v2 ``memory.events``)."""
        try:
            text = (self.path / ("memory.events" if self.v2 else "memory.oom_control")).read_text()
        except OSError:
            return -1
        for line in text.splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self, timeout: float = 5.0) -> bool:
        """rmdir once its processes are gone; whether it is gone."""
        end = time.time() + timeout
        while self.path.exists():
            try:
                self.path.rmdir()
            except FileNotFoundError:
                break
            except OSError:
                if time.time() > end:
                    return False
                time.sleep(0.1)
        return True


def start(argv: list[str], cgroup: Cgroup | None, nofile: tuple[int, int] = SYSTEMD_NOFILE, **popen) -> subprocess.Popen:
    """``argv`` in ``cgroup`` (None: none) from its first instruction, with the file limit ``nofile`` (soft,
    hard; where the hard one cannot be set, the soft one under the hard limit there is)."""
    def pre() -> None:
        if cgroup is not None:
            cgroup.join()
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
        except (ValueError, OSError):
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile[0], hard), hard))

    return subprocess.Popen(argv, preexec_fn=pre, **popen)


def stop(p: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; reaped."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def proc_status(pid: int, key: str) -> int:
    """A number of /proc/PID/status (``VmRSS``, ``VmHWM`` in KiB, ``Threads``); -1 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def proc_nofile(pid: int) -> tuple[int, int]:
    """The process's file limit now (soft, hard); (-1, -1) when gone."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    except (OSError, ValueError):
        pass
    return -1, -1


def proc_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


class Watch:
    """Samples a process's RSS, descriptors and threads every ``every`` s until stopped: the peaks."""

    def __init__(self, pid: int, every: float = 0.1):
        self.pid, self.every, self.stop_ev = pid, every, threading.Event()
        self.rss_kib = self.fds = self.threads = 0
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop_ev.wait(self.every):
            self.rss_kib = max(self.rss_kib, proc_status(self.pid, "VmRSS"))
            self.fds = max(self.fds, proc_fds(self.pid))
            self.threads = max(self.threads, proc_status(self.pid, "Threads"))

    def stop(self) -> "Watch":
        self.stop_ev.set()
        self.t.join()
        return self
