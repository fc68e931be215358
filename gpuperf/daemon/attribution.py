"""Which Slurm job a GPU process belongs to, and what does not match the registrations.

A process's job comes from its own environment (``SLURM_JOB_ID`` in ``/proc/PID/environ``), else its
ancestors' (a program that cleared its environment still descends from the job's task), else another
process of the same cgroup whose environment names the job. Cgroup *names* are never parsed: Slurm 26
names job cgroups by SLUID, older releases by job id, and both are site-configurable. Over 400 lines: the
check of the answers against the registrations (``Mismatches``) reads the processes through the same reader.

Results are cached by (pid, process start time), so a reused pid never inherits a stale answer and a
sweep costs one ``stat`` read per GPU process after the first.

A process's environment is its user's to write: anyone can start a program with ``SLURM_JOB_ID`` of
another job. With ``job_uid`` set (the daemon's registrations), a claim is believed only from a process
of the claimed job's user (or root); a claim from another user falls through to the ancestors and the
cgroup, as a cleared environment does. ``/proc/PID/environ`` is read in chunks with a bound (the kernel
allows up to 6 MiB of arguments and environment), never whole.

Reading another process's environment reads its memory: a user who maps a FUSE file over its own
environment pages and never answers makes that read block for ever (issue 36, finding 2). The read runs
on a helper thread (``procread.Deadline``) and is waited for at most ``ENVIRON_DEADLINE_S``: a process whose read
does not return is skipped from then on and named once in the log; its user's further processes are
skipped without waiting once ``MAX_STUCK_PER_UID`` of their reads hang (each holds one thread, blocked in
the kernel until the read returns).

The same environment says whether a profiler is injected into the process (``parse_environ_profiler``:
Nsight Compute, Nsight Systems, another CUPTI injection tool): such a tool replays or traces the
job's kernels and shares the GPU's performance counters, so the sweep counts that job's activity
figures on that GPU as missing (``model/profiled.py``). Its answer is cached like the job's. The
markers are the user's to set as well: they only blank the figures of the process's own job.

``/proc/PID/maps`` of a job's CUDA process says which framework its advice may name (``diagnosis/frameworks.py``):
read once per process through the same deadline (it takes the memory-map lock a FUSE fault holds), bounded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from gpuperf.daemon.procread import Deadline, read_maps
from gpuperf.diagnosis import frameworks

_ENV_KEYS = (b"SLURM_JOB_ID=", b"SLURM_JOBID=")
ENVIRON_MAX_BYTES = 8 << 20   # above the kernel's 6 MiB for arguments + environment
_CHUNK = 64 << 10
MAX_ANCESTORS = 8
MAX_CGROUP_PEERS = 64

NSIGHT_COMPUTE, NSIGHT_SYSTEMS, CUPTI_INJECTION = "Nsight Compute", "Nsight Systems", "CUPTI injection"
PROFILERS = (NSIGHT_COMPUTE, NSIGHT_SYSTEMS, CUPTI_INJECTION)   # the first found names the process's profiler
# What a profiler puts in its target's environment (variable prefix "NAME=", the value it must have or
# None for any non-empty one, the tool). Never what a CUDA base image sets (NV_CUDA_*, NV_LIBCUBLAS_*,
# NV_CUDA_NSIGHT_COMPUTE_VERSION are in every process of such an image). Nsight Compute's three are in the
# profiled process's environment on a real H100 (benchmarks/results/gpu/cost_h100_python_hooks.json, ncu.gpu_processes),
# and programs that detect ncu test them; NV_TPS_LAUNCH_TOKEN only with ncu's value: Nsight Graphics sets
# the same name to "Frame Debugger". Nsight Systems sets NSYS_PROFILING_SESSION_ID when its session starts,
# beside CUDA_INJECTION64_PATH, which alone is any CUPTI injection library (CUDA loads it into the process).
_PROFILER_KEYS: tuple[tuple[bytes, bytes | None, str], ...] = (
    (b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=", None, NSIGHT_COMPUTE),
    (b"NV_COMPUTE_PROFILER_PERFWORKS_DIR=", None, NSIGHT_COMPUTE),
    (b"NV_TPS_LAUNCH_TOKEN=", b"Interactive Profile", NSIGHT_COMPUTE),
    (b"NSYS_PROFILING_SESSION_ID=", None, NSIGHT_SYSTEMS),
    (b"CUDA_INJECTION64_PATH=", None, CUPTI_INJECTION),
)
_PROFILER_PREFIXES = tuple(k for k, _, _ in _PROFILER_KEYS)


def parse_environ_job(data: bytes) -> int | None:
    """SLURM_JOB_ID from the NUL-separated contents of /proc/PID/environ."""
    for entry in data.split(b"\0"):
        for key in _ENV_KEYS:
            if entry.startswith(key):
                try:
                    return int(entry[len(key):])
                except ValueError:
                    return None
    return None


def profiler_in(entries: Iterable[bytes]) -> str | None:
    """The profiler injected into a process (one of PROFILERS, or None) from its environment's entries."""
    found: set[str] = set()
    for entry in entries:
        if not entry.startswith(_PROFILER_PREFIXES):
            continue
        for key, want, tool in _PROFILER_KEYS:
            if entry.startswith(key):
                value = entry[len(key):]
                if value and (want is None or value == want):
                    if tool == PROFILERS[0]:
                        return tool          # nothing outranks it: no need to read on
                    found.add(tool)
    return next((t for t in PROFILERS if t in found), None)


def parse_environ_profiler(data: bytes) -> str | None:
    """The profiler injected into a process from the NUL-separated contents of /proc/PID/environ (at most
    ENVIRON_MAX_BYTES of it read, as the daemon's reader does)."""
    return profiler_in(data[:ENVIRON_MAX_BYTES].split(b"\0"))


def parse_stat(data: str) -> tuple[int, int] | None:
    """(ppid, starttime ticks) from /proc/PID/stat (the command may hold spaces and parentheses)."""
    rparen = data.rfind(")")
    if rparen < 0:
        return None
    rest = data[rparen + 2:].split()
    try:
        return int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None


def parse_cgroup(data: str) -> str | None:
    """The process's cgroup path: the v2 entry ('0::/path'), else the first v1 hierarchy's."""
    first = None
    for line in data.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if first is None and ("cpuacct" in parts[1].split(",") or "memory" in parts[1].split(",")):
            first = (parts[1], parts[2])
    return f"{first[0]}:{first[1]}" if first else None


@dataclass
class Attributor:
    """Maps pids to job ids through procfs (``proc_root``) and cgroupfs (``cgroup_root``)."""

    proc_root: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    job_uid: Callable[[int], int | None] | None = None   # registered job -> its uid (None: not registered)
    _cache: dict[tuple[int, int], int | None] = field(default_factory=dict)
    _profilers: dict[tuple[int, int], str | None] = field(default_factory=dict)
    _cgroup_jobs: dict[str, int] = field(default_factory=dict)
    deadline: Deadline = field(default_factory=Deadline)   # environ and maps reads run off the caller's thread
    _frameworks: dict[tuple[int, int], list[str] | None] = field(default_factory=dict)

    def _read(self, pid: int, name: str, binary: bool = False) -> bytes | str | None:
        try:
            with open(os.path.join(self.proc_root, str(pid), name), "rb" if binary else "r") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None

    def _stat(self, pid: int) -> tuple[int, int] | None:
        s = self._read(pid, "stat")
        return parse_stat(s) if isinstance(s, str) else None

    def _env_job(self, pid: int) -> int | None:
        job = self._scan_environ(pid)
        return job if job is None or self._claim_ok(pid, job) else None

    def _scan_environ(self, pid: int) -> int | None:
        """SLURM_JOB_ID from /proc/PID/environ (the first entry naming it), read within the deadline."""
        def scan() -> int | None:
            for e in self._environ_entries(pid):
                if e.startswith(_ENV_KEYS):
                    return parse_environ_job(e)
            return None
        return self.deadline.call(pid, self._owner(pid), scan)

    def _owner(self, pid: int) -> int | None:
        try:
            return os.stat(os.path.join(self.proc_root, str(pid))).st_uid
        except OSError:
            return None

    def _environ_entries(self, pid: int) -> Iterator[bytes]:
        """The entries of /proc/PID/environ, read in chunks up to ENVIRON_MAX_BYTES (memory stays ~2 chunks,
        whatever its size); none past the bound, none of a process gone."""
        try:
            with open(os.path.join(self.proc_root, str(pid), "environ"), "rb", buffering=0) as f:
                tail, total = b"", 0
                while total < ENVIRON_MAX_BYTES:
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        if tail:
                            yield tail
                        return
                    total += len(chunk)
                    entries = (tail + chunk).split(b"\0")
                    tail = entries.pop()[-_CHUNK:]  # an entry cut by the chunk end (values are <= 128 KiB)
                    yield from entries
        except OSError:
            return

    def _claim_ok(self, pid: int, job: int) -> bool:
        """Whether this process may claim ``job``: its owner is the job's user or root (job_uid decides)."""
        if self.job_uid is None:
            return True
        want = self.job_uid(job)
        if want is None:
            return True                      # an unregistered job: the mismatch rule reports it anyway
        try:
            owner = os.stat(os.path.join(self.proc_root, str(pid))).st_uid
        except OSError:
            return False
        return owner in (want, 0)

    def job_of(self, pid: int) -> int | None:
        """The Slurm job id of a process, or None (no job, or gone)."""
        st = self._stat(pid)
        if st is None:
            return None
        return self.job_of_known(pid, st[0], st[1])

    def job_of_known(self, pid: int, ppid: int, start_ticks: int) -> int | None:
        """job_of for a process whose stat the caller already read."""
        key = (pid, start_ticks)
        if key in self._cache:
            return self._cache[key]
        job = self._resolve(pid, ppid)
        if len(self._cache) > 10000:
            self._cache.clear()
        self._cache[key] = job
        return job

    def present(self, pid: int) -> bool:
        """Whether procfs shows process ``pid`` (NVML may list one that has exited since it sampled)."""
        return os.path.exists(os.path.join(self.proc_root, str(pid), "stat"))

    def job_and_profiler(self, pid: int) -> tuple[int | None, str | None]:
        """(job, profiler) of a process: ``job_of``, and the profiler injected into it (None: none, or no job:
        a profiler only matters to the job it profiles). One stat read; the environment once per process."""
        st = self._stat(pid)
        if st is None:
            return None, None
        job = self.job_of_known(pid, st[0], st[1])
        if job is None:
            return None, None
        key = (pid, st[1])
        if key not in self._profilers:
            if len(self._profilers) > 10000:
                self._profilers.clear()
            self._profilers[key] = self.deadline.call(pid, self._owner(pid),
                                                      lambda: profiler_in(self._environ_entries(pid)))
        return job, self._profilers[key]

    def frameworks_of(self, pid: int) -> list[str] | None:
        """The frameworks a process mapped (``diagnosis.frameworks.from_maps`` of /proc/PID/maps, read bounded and
        within the deadline, as the environment is), once per process; None: not read (gone, or hung)."""
        st = self._stat(pid)
        if st is None:
            return None
        key = (pid, st[1])
        if key not in self._frameworks:
            if len(self._frameworks) > 10000:
                self._frameworks.clear()
            self._frameworks[key] = self.deadline.call(pid, self._owner(pid), lambda: self._maps(pid))
        return self._frameworks[key]

    def _maps(self, pid: int) -> list[str] | None:
        text = read_maps(self.proc_root, pid, frameworks.MAX_BYTES)
        return None if text is None else frameworks.from_maps(text)

    def _resolve(self, pid: int, ppid: int) -> int | None:
        job = self._env_job(pid)
        if job is not None:
            self._learn_cgroup(pid, job)
            return job
        cur = ppid
        for _ in range(MAX_ANCESTORS):
            if cur <= 1:
                break
            job = self._env_job(cur)
            if job is not None:
                return job
            st = self._stat(cur)
            if st is None:
                break
            cur = st[0]
        return self._cgroup_job(pid)

    def _learn_cgroup(self, pid: int, job: int) -> None:
        cg = self._read(pid, "cgroup")
        path = parse_cgroup(cg) if isinstance(cg, str) else None
        if path:
            self._cgroup_jobs[path] = job

    def _cgroup_job(self, pid: int) -> int | None:
        """The job of another process in the same cgroup whose environment names it."""
        cg = self._read(pid, "cgroup")
        path = parse_cgroup(cg) if isinstance(cg, str) else None
        if not path or path in ("/", ""):
            return None
        if path in self._cgroup_jobs:
            return self._cgroup_jobs[path]
        fs_path = path.split(":", 1)[1] if ":" in path and not path.startswith("/") else path
        hierarchy = path.split(":", 1)[0].split(",")[0] if ":" in path and not path.startswith("/") else ""
        procs_file = Path(self.cgroup_root, hierarchy, fs_path.lstrip("/"), "cgroup.procs")
        try:
            peers = [int(x) for x in procs_file.read_text().split()][:MAX_CGROUP_PEERS]
        except (OSError, ValueError):
            return None
        for peer in peers:
            if peer != pid:
                job = self._env_job(peer)
                if job is not None:
                    self._cgroup_jobs[path] = job
                    return job
        return None


@dataclass
class Mismatch:
    """A process on an allocated GPU that is not of a job registered on it, or a job's process on a GPU
    it did not register."""

    gpu: int
    pid: int
    job_id: int | None                  # the process's job (None: no job)
    registered: tuple[int, ...]         # jobs registered on that GPU


def mismatches(gpu: int, procs: Iterable[tuple[int, int | None]], registered: Iterable[int]) -> list[Mismatch]:
    """Pure rule: (pid, job) pairs on a GPU against the jobs registered on it.

    A GPU with no registered job and no processes is fine; a process of no job or of an unregistered
    job on any GPU is a mismatch (on an unallocated GPU it is an unaccounted user)."""
    reg = tuple(sorted(set(registered)))
    return [Mismatch(gpu, pid, job, reg) for pid, job in procs if job is None or job not in reg]


class Mismatches:
    """A sweep's GPU processes checked against the registrations (``mismatches``): each mismatch is noted in
    every job registered on that GPU (``foreign_processes``) and, once per (GPU, pid, job), recorded as a
    store event and counted in ``stats["mismatches"]``. It also says which jobs' own processes ran under a
    profiler on which GPU (a "profiler" store event once per GPU, pid and job), for the sweep's fold.

    A process NVML lists but procfs does not show when it is read has exited in between (a job's process
    ending at the job's last sample: its pid is gone, its job unknowable, and it no longer uses the GPU), so
    it is left out; only one NVML keeps listing for ``UNREAD_GRACE_S`` (a pid this daemon's procfs never
    shows) is checked, as a process of no job."""

    SEEN_MAX = 10000
    UNREAD_GRACE_S = 5.0      # NVML drops an exited process within a sweep; a pid it lists this long is there

    def __init__(self, attr: Attributor, running: dict[int, Any], store: Any, stats: dict[str, float]):
        self.attr, self.running, self.store, self.stats = attr, running, store, stats
        self._seen: set[tuple[int, int, int | None]] = set()
        self._profiled_seen: set[tuple[int, int, int]] = set()
        self.frameworks: dict[int, list[str] | None] = {}     # pid -> what it mapped, from the last ``attribute``
        self._unread: dict[tuple[int, int], float] = {}   # (GPU, pid) NVML lists, procfs does not -> since when

    def attribute(self, samples: Iterable[Any]) -> dict[int, list[tuple[int, int | None, str | None]]]:
        """GPU -> (pid, job, profiler) of each sample's processes: the procfs reads, done before the daemon's
        state is locked (a read that hangs costs its deadline once, never a hook's wait). A process procfs
        no longer shows is left out until NVML has listed it for UNREAD_GRACE_S."""
        out: dict[int, list[tuple[int, int | None, str | None]]] = {}
        unread: dict[tuple[int, int], float] = {}
        self.frameworks = {}
        for s in samples:
            for p in s.processes or ():
                pid = p.get("pid") if isinstance(p, dict) else None
                if not isinstance(pid, int):
                    continue
                job, tool = self.attr.job_and_profiler(pid)
                if job is None and not self.attr.present(pid):
                    since = unread[(s.gpu, pid)] = self._unread.get((s.gpu, pid), s.t)
                    if s.t - since < self.UNREAD_GRACE_S:
                        continue
                out.setdefault(s.gpu, []).append((pid, job, tool))
                if job is not None:
                    # the libraries this CUDA process mapped: the framework its job's advice may name
                    self.frameworks[pid] = self.attr.frameworks_of(pid)
        self._unread = unread
        return out

    def check(self, t: float, samples: Iterable[Any], gpu_jobs: dict[int, list[int]],
              attributed: dict[int, list[tuple[int, int | None, str | None]]] | None = None) -> dict[int, dict[int, str]]:
        """Attribute each sample's processes at sample time ``t`` (inside the sweep's transaction; ``attributed``:
        ``attribute(samples)`` done before); returns job -> {gpu: profiler} for the registered jobs whose own
        process on that GPU runs under a profiler."""
        samples = list(samples)
        attributed = self.attribute(samples) if attributed is None else attributed
        profiled: dict[int, dict[int, str]] = {}
        for s in samples:
            procs = attributed.get(s.gpu)
            if not procs:
                continue
            registered = gpu_jobs.get(s.gpu, [])
            pairs = []
            for pid, job, tool in procs:
                pairs.append((pid, job))
                if job in registered and job in self.running:
                    self.running[job].agg.note_frameworks(self.frameworks.get(pid))
                if tool is not None and job in registered:
                    self._note_profiler(t, profiled.setdefault(job, {}), s.gpu, pid, job, tool)
            for m in mismatches(s.gpu, pairs, registered):
                for jid in registered:
                    self.running[jid].agg.gpus[s.gpu].note_foreign(m.pid, m.job_id, t)
                key = (m.gpu, m.pid, m.job_id)
                if key not in self._seen:
                    if len(self._seen) > self.SEEN_MAX:
                        self._seen.clear()
                    self._seen.add(key)
                    self.stats["mismatches"] += 1
                    self.store.add_event(t, registered[0] if registered else m.job_id, "mismatch",
                                         {"gpu": m.gpu, "pid": m.pid, "process_job": m.job_id, "registered": list(m.registered)})
        return profiled

    def _note_profiler(self, t: float, gpus: dict[int, str], gpu: int, pid: int, job: int, tool: str) -> None:
        """A job's process on ``gpu`` under ``tool``: the GPU's profiler for this sweep (the highest-ranked of
        its processes'), recorded as a store event once per (GPU, pid, job)."""
        if gpu not in gpus or PROFILERS.index(tool) < PROFILERS.index(gpus[gpu]):
            gpus[gpu] = tool
        key = (gpu, pid, job)
        if key not in self._profiled_seen:
            if len(self._profiled_seen) > self.SEEN_MAX:
                self._profiled_seen.clear()
            self._profiled_seen.add(key)
            self.store.add_event(t, job, "profiler", {"gpu": gpu, "pid": pid, "tool": tool})
