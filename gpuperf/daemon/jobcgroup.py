"""The job's CPU time from its cgroup: every process that ever ran in the job counts, even one that
started and ended between two scans (a process scan sees only the living and what they reaped).

Which job a process belongs to comes from its environment (``attribution``); this module only finds
the job's level in that process's own cgroup path: the parent of its step's directory, which Slurm
names ``step_<s>`` in every release (cgroup v1 ``slurm[_<node>]/uid_<uid>/job_<id>/step_<s>/task_<t>``;
v2 to 25.11 ``.../slurmstepd.scope/job_<id>/step_<s>/user/task_<t>``; v2 from 26.05
``.../slurmstepd.scope/<SLUID>/step_<s>/user/task_<t>``, the job's directory named by its SLUID alone,
read from 26.05.5's cgroup_v2.so). No job id is read from the path; a path without a step directory
falls back to a ``job_`` component (tests/data/cgroups: one recorded path per layout). Counters: v2 ``cpu.stat`` ``usage_usec``; v1 ``cpuacct.usage`` (ns),
present where Slurm tracks the job with ``jobacct_gather/cgroup`` (or a cpuacct-constraining
plugin). Where neither exists the daemon keeps the process scan's figure.
"""

from __future__ import annotations

import os

_V1_DIRS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
_V2_DIRS = ("", "unified")


def cpu_cgroup_lines(data: str) -> tuple[str | None, str | None]:
    """(v1 cpuacct path, v2 path) from the text of /proc/PID/cgroup; None where absent."""
    v1 = v2 = None
    for line in data.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpuacct" in parts[1].split(","):
            v1 = parts[2]
    return v1, v2


def job_level(path: str | None) -> str | None:
    """The job's ancestor of a cgroup path: the parent of its ``step_`` directory ('/a/job_7/step_0/task_0'
    and '/a/<sluid>/step_0/user/task_0' -> '/a/job_7', '/a/<sluid>'), else its ``job_`` component; None without."""
    if not path:
        return None
    parts = path.split("/")
    for i, p in enumerate(parts):
        if p.startswith("step_") and len(p) > 5 and i > 1:
            return "/".join(parts[:i])
    for i, p in enumerate(parts):
        if p.startswith("job_") and len(p) > 4:
            return "/".join(parts[: i + 1])
    return None


def locate(proc_cgroup: str, cgroup_root: str = "/sys/fs/cgroup") -> str | None:
    """The directory of the job's CPU counter for a process of the job (its /proc/PID/cgroup text).

    v1 cpuacct first (a hybrid host keeps Slurm's v1 hierarchies beside an unused unified one)."""
    v1, v2 = cpu_cgroup_lines(proc_cgroup)
    for path, dirs, counter in ((v1, _V1_DIRS, "cpuacct.usage"), (v2, _V2_DIRS, "cpu.stat")):
        job = job_level(path)
        if job is None:
            continue
        for d in dirs:
            full = os.path.join(cgroup_root, d, job.lstrip("/")) if d else os.path.join(cgroup_root, job.lstrip("/"))
            if os.path.isfile(os.path.join(full, counter)):
                return full
    return None


def parse_cpu_stat(text: str) -> float | None:
    """usage_usec of a v2 cpu.stat, in seconds."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            try:
                return int(value) / 1e6
            except ValueError:
                return None
    return None


def read_cpu_s(directory: str) -> float | None:
    """CPU seconds (user+system) used in the cgroup so far; None when it is gone or unreadable."""
    try:
        with open(os.path.join(directory, "cpuacct.usage")) as f:
            return int(f.read().strip()) / 1e9
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return None
    try:
        with open(os.path.join(directory, "cpu.stat")) as f:
            return parse_cpu_stat(f.read())
    except OSError:
        return None
