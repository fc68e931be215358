"""The affinity plan: which CPUs and memory each local rank of a job uses, next to its GPU(s).

Pure: a topology (``gpuperf.topology.v1``) and the job's allocation on this node in, a plan out.
The prolog writes the plan as a small text file (``plan_text``) that the SPANK plugin
(``wrappers/gpuperf_spank.c``) and ``gpuperf-run`` read; ``parse_plan_text`` is the reader's
side of that format, so both ends of the contract live here.

Format, one record per line (the C plugin only reads ``noop=`` and ``tasks=`` lines)::

    # gpuperf affinity plan v1
    job=12 cpus_source=cgroup cpus=0-27 gpus=0-7
    warn=free text
    noop=free text                               # nothing to pin for this job
    tasks=2 rank=0 gpus=0-3 numa=0 cpus=0-13,112-125 mems=0 policy=bind omp_threads=14 omp_places={0,112}:14
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

PLAN_HEADER = "# gpuperf affinity plan v1"
MEM_POLICIES = ("bind", "prefer", "none")


@dataclass(frozen=True)
class Allocation:
    """What the job holds on this node: physical GPU indices and the CPUs it may run on."""

    gpus: tuple[int, ...]
    cpus: tuple[int, ...]
    cpus_source: str = "unknown"  # cgroup | scontrol | all | self


@dataclass(frozen=True)
class RankPlan:
    """One local rank's binding; empty ``cpus`` means: leave this rank as Slurm placed it."""

    rank: int
    gpus: tuple[int, ...]
    numa_nodes: tuple[int, ...]
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    mem_policy: str  # bind | prefer | none
    omp_num_threads: int | None
    omp_places: str | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


@dataclass
class AffinityPlan:
    """The binding of every local rank of a step with ``tasks`` tasks on this node."""

    tasks: int
    ranks: list[RankPlan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    noop: str | None = None  # why nothing is pinned at all (one NUMA node, no GPUs, ...)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"tasks": self.tasks, "ranks": [r.to_dict() for r in self.ranks],
                "warnings": list(self.warnings), "noop": self.noop}


# --- CPU lists --------------------------------------------------------------------------------

MAX_CPU_ID = 16383          # Linux's NR_CPUS is at most 8192 (x86 MAXSMP); twice that leaves room
MAX_CPU_LIST_CHARS = 65536  # "0,2,4,...,8190" is 20 KiB; a longer list is not one the kernel or Slurm wrote


def parse_cpu_list(text: str, max_cpu: int = MAX_CPU_ID) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; raises ValueError on anything else.

    Bounded whatever the text (a user writes some of these lists: ``applied/`` records, a job name that
    fakes ``scontrol``'s fields): a CPU id above ``max_cpu`` or a text over ``MAX_CPU_LIST_CHARS`` is a
    ValueError, and the work is one pass over the ranges plus at most ``max_cpu + 1`` ids."""
    text = text.strip()
    if not text:
        return []
    if len(text) > MAX_CPU_LIST_CHARS:
        raise ValueError(f"CPU list of {len(text)} characters, over {MAX_CPU_LIST_CHARS}")
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not _cpu_id(lo) or (sep and not _cpu_id(hi)):
            raise ValueError(f"not a CPU list: {text[:80]!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"descending range {part!r} in {text[:80]!r}")
        if b > max_cpu:
            raise ValueError(f"CPU {b} above the highest CPU id {max_cpu} in {text[:80]!r}")
        ranges.append((a, b))
    out = bytearray(max(b for _, b in ranges) + 1)   # ranges overlap: one mark per CPU, never per range
    for a, b in ranges:
        out[a:b + 1] = b"\x01" * (b + 1 - a)
    return [i for i, v in enumerate(out) if v]


def _cpu_id(s: str) -> bool:
    return s.isascii() and s.isdigit() and len(s) <= 9   # "٣" is a digit to str.isdigit; 10 digits is no CPU


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's cpulist form); '' for none."""
    xs = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def format_omp_places(places: list[tuple[int, ...]]) -> str:
    """Places as OpenMP's interval notation: [(0,112),(1,113)] -> '{0,112}:2'."""
    parts: list[str] = []
    i = 0
    while i < len(places):
        j = i
        # a run of places each one CPU further than the last collapses into '{place}:len'
        while (j + 1 < len(places) and len(places[j + 1]) == len(places[j])
               and all(b == a + 1 for a, b in zip(places[j], places[j + 1]))):
            j += 1
        first = "{" + ",".join(map(str, places[i])) + "}"
        parts.append(first if i == j else f"{first}:{j - i + 1}")
        i = j + 1
    return ",".join(parts)


def slurm_ids_to_os(ids: Iterable[int], topology: Mapping[str, Any], sockets: int, cores_per_socket: int,
                    threads_per_core: int) -> list[int] | None:
    """Slurm's abstract CPU ids (``scontrol show job -d`` CPU_IDs: socket, core, thread order) as OS CPU ids.

    Sockets are the NUMA nodes with CPUs taken in order (several per socket when their count is a
    multiple); ids past what the node has are dropped, so the result is never more than the job holds.
    None when the node's NUMA layout cannot be matched to Slurm's sockets.
    """
    numa = sorted((int(n["id"]), sorted(n.get("cpus") or [])) for n in topology.get("numa_nodes") or [])
    numa = [cs for _, cs in numa if cs]
    if sockets < 1 or cores_per_socket < 1 or threads_per_core < 1 or not numa or len(numa) % sockets:
        return None
    siblings = (topology.get("cpus") or {}).get("siblings") or {}
    per = len(numa) // sockets
    socket_cores = [_cores(sorted(c for cs in numa[s * per:(s + 1) * per] for c in cs), siblings, True)
                    for s in range(sockets)]
    out = set()
    for a in ids:
        s, rest = divmod(a, cores_per_socket * threads_per_core)
        c, t = divmod(rest, threads_per_core)
        if s < len(socket_cores) and c < len(socket_cores[s]) and t < len(socket_cores[s][c]):
            out.add(socket_cores[s][c][t])
    return sorted(out)


# --- the plan ---------------------------------------------------------------------------------

def assign_gpus(gpus: Iterable[int], tasks: int) -> list[tuple[int, ...]]:
    """GPUs of each local rank: contiguous blocks when there are enough, shared evenly otherwise."""
    g = sorted(gpus)
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    if not g:
        return [() for _ in range(tasks)]
    if tasks <= len(g):
        return [tuple(c) for c in _even_chunks(g, tasks)]
    return [(g[r * len(g) // tasks],) for r in range(tasks)]


def _cores(cpus: list[int], siblings: Mapping[str, list[int]], hyperthreads: bool) -> list[tuple[int, ...]]:
    """The available CPUs grouped into cores (SMT siblings together), ordered by first CPU."""
    avail = set(cpus)
    cores: dict[int, tuple[int, ...]] = {}
    for c in cpus:
        sib = siblings.get(str(c)) or [c]
        threads = tuple(sorted(s for s in set(sib) | {c} if s in avail))
        key = min(set(sib) | {c})
        cores[key] = threads
    out = [cores[k] for k in sorted(cores)]
    return [t[:1] for t in out] if not hyperthreads else out


def _split(cores: list[tuple[int, ...]], k: int) -> list[list[tuple[int, ...]]]:
    """Places for each of k ranks: whole cores when there are enough, single CPUs next, then shared."""
    if not cores:
        return [[] for _ in range(k)]
    units = cores
    if len(cores) < k:
        units = [(t,) for core in cores for t in core]
        if len(units) < k:
            # fewer CPUs than ranks: ranks share CPUs round-robin rather than go unpinned
            return [[units[r % len(units)]] for r in range(k)]
    return _even_chunks(units, k)


def _even_chunks(items: list, k: int) -> list[list]:
    """``items`` in k consecutive chunks whose sizes differ by at most one, the larger ones first."""
    base, extra = divmod(len(items), k)
    out, i = [], 0
    for r in range(k):
        n = base + (1 if r < extra else 0)
        out.append(list(items[i:i + n]))
        i += n
    return out


def node_noop(topology: Mapping[str, Any]) -> str | None:
    """Why no plan on this node can change a task's binding, whatever the job (None: it may)."""
    with_cpus = [n for n in topology.get("numa_nodes") or [] if n.get("cpus")]
    return f"{len(with_cpus) or 'no'} NUMA node with CPUs: pinning changes nothing" if len(with_cpus) <= 1 else None


def plan(topology: Mapping[str, Any], alloc: Allocation, tasks: int,
         mem_policy: str = "bind", hyperthreads: bool = True) -> AffinityPlan:
    """Plan the binding of ``tasks`` local ranks of a job with ``alloc`` on a node with ``topology``."""
    if mem_policy not in MEM_POLICIES:
        raise ValueError(f"mem_policy must be one of {MEM_POLICIES}, got {mem_policy!r}")
    result = AffinityPlan(tasks=tasks)
    numa_cpus = {int(n["id"]): sorted(n.get("cpus") or []) for n in topology.get("numa_nodes") or []}
    numa_with_cpus = [n for n, cs in numa_cpus.items() if cs]
    gpu_numa = {int(g["index"]): g.get("numa_node") for g in topology.get("gpus") or []}
    siblings = (topology.get("cpus") or {}).get("siblings") or {}
    if len(numa_with_cpus) <= 1:
        result.noop = node_noop(topology)
        return result
    if not alloc.gpus:
        result.noop = "no GPUs for the job on this node: Slurm's binding kept"
        return result
    if all(gpu_numa.get(g) is None for g in alloc.gpus):
        result.noop = "NUMA node of the job's GPUs unknown: Slurm's binding kept"
        return result

    job_cpus = set(alloc.cpus)
    rank_gpus = assign_gpus(alloc.gpus, tasks)
    rank_numa: list[tuple[int, ...]] = []
    for r, gs in enumerate(rank_gpus):
        nodes = {gpu_numa.get(g) for g in gs}
        if None in nodes:
            unknown = [g for g in gs if gpu_numa.get(g) is None]
            result.warnings.append(f"rank {r}: NUMA node of GPU {format_cpu_list(unknown)} unknown: not pinned")
            nodes = set()
        rank_numa.append(tuple(sorted(n for n in nodes if n is not None)))

    places: dict[int, list[tuple[int, ...]]] = {r: [] for r in range(tasks)}
    for node in sorted({n for ns in rank_numa for n in ns}):
        sharing = [r for r in range(tasks) if node in rank_numa[r]]
        local = [c for c in numa_cpus.get(node, []) if c in job_cpus]
        if not local:
            gpus_here = sorted(g for r in sharing for g in rank_gpus[r] if gpu_numa.get(g) == node)
            where = sorted({n for n, cs in numa_cpus.items() if job_cpus & set(cs)})
            result.warnings.append(
                f"GPU {format_cpu_list(gpus_here)} on NUMA {node} but the job's CPUs "
                f"{format_cpu_list(job_cpus) or '(none)'} are on NUMA {format_cpu_list(where) or '?'}: "
                f"rank {format_cpu_list(sharing)} not pinned (cross-socket traffic; ask for CPUs on that socket)")
            continue
        for r, share in zip(sharing, _split(_cores(local, siblings, hyperthreads), len(sharing))):
            places[r].extend(share)

    for r in range(tasks):
        pl = _dedup(places[r])
        cpus = tuple(sorted({c for p in pl for c in p}))
        if cpus and all(set(numa_cpus.get(n, [])) & job_cpus for n in rank_numa[r]):
            mems, policy = _mem(rank_numa[r], mem_policy)
        else:
            # a rank missing CPUs on one of its GPUs' nodes binds no memory either: nothing half-done
            cpus, pl, mems, policy = (), [], (), "none"
        result.ranks.append(RankPlan(
            rank=r, gpus=rank_gpus[r], numa_nodes=rank_numa[r], cpus=cpus, mems=mems, mem_policy=policy,
            omp_num_threads=len(pl) or None, omp_places=format_omp_places(pl) or None))
    return result


def _dedup(places: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    seen: set[tuple[int, ...]] = set()
    return [p for p in places if not (p in seen or seen.add(p))]


def _mem(nodes: tuple[int, ...], mem_policy: str) -> tuple[tuple[int, ...], str]:
    if mem_policy == "bind" and nodes:
        return nodes, "bind"
    if mem_policy == "prefer" and len(nodes) == 1:
        return nodes, "prefer"
    # preferring one of several nodes would favour one GPU's side arbitrarily: leave it local
    return (), "none"


def plan_counts(alloc: Allocation, known: Iterable[int] = ()) -> list[int]:
    """Task counts to plan for: the prolog cannot know each step's shape, so 1..max(8, GPUs) and the known ones."""
    # not capped by the CPU count: ranks share CPUs when there are more ranks than CPUs
    counts = set(range(1, max(8, len(alloc.gpus)) + 1))
    counts.update(t for t in known if t and t >= 1)
    return sorted(counts)


# --- the plan file ----------------------------------------------------------------------------

def plan_text(job_id: int, alloc: Allocation, plans: list[AffinityPlan]) -> str:
    """The plan file the SPANK plugin reads: one ``tasks= rank=`` line per rank of each task count."""
    lines = [PLAN_HEADER,
             f"job={job_id} cpus_source={alloc.cpus_source} cpus={format_cpu_list(alloc.cpus) or 'none'} "
             f"gpus={format_cpu_list(alloc.gpus) or 'none'}"]
    seen_warn: set[str] = set()
    for p in plans:
        for w in p.warnings:
            if w not in seen_warn:
                seen_warn.add(w)
                lines.append("warn=" + " ".join(w.split()))
    noop = next((p.noop for p in plans if p.noop), None)
    if noop:
        lines.append("noop=" + noop)
    else:
        for p in plans:
            lines.extend(rank_line(p.tasks, r) for r in p.ranks)
    return "\n".join(lines) + "\n"


def rank_line(tasks: int, r: RankPlan) -> str:
    """One rank's line of the plan file."""
    return (f"tasks={tasks} rank={r.rank} gpus={format_cpu_list(r.gpus) or 'none'} "
            f"numa={format_cpu_list(r.numa_nodes) or 'none'} cpus={format_cpu_list(r.cpus) or 'none'} "
            f"mems={format_cpu_list(r.mems) or 'none'} policy={r.mem_policy} "
            f"omp_threads={r.omp_num_threads or 0} omp_places={r.omp_places or 'none'}")


@dataclass
class ParsedPlan:
    """A plan file read back: the rank lines by (tasks, rank), the no-op reason and warnings."""

    job_id: int | None
    ranks: dict[tuple[int, int], RankPlan]
    noop: str | None
    warnings: list[str]
    cpus: tuple[int, ...] = ()   # the job's CPUs on this node as the prolog found them (its cgroup's); () unknown


def _ints(value: str) -> tuple[int, ...]:
    return () if value == "none" else tuple(parse_cpu_list(value))


def parse_plan_text(text: str) -> ParsedPlan:
    """Read a plan file; raises ValueError naming the line when it is not one."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != PLAN_HEADER:
        raise ValueError(f"not a gpuperf affinity plan (first line must be {PLAN_HEADER!r})")
    job_id, noop, warnings, ranks, cpus = None, None, [], {}, ()
    for n, line in enumerate(lines[1:], 2):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("noop="):
            noop = line[5:]
        elif line.startswith("warn="):
            warnings.append(line[5:])
        elif line.startswith("job="):
            kv = dict(tok.partition("=")[::2] for tok in line.split())
            job_id = int(kv["job"]) if kv.get("job", "").isdigit() else None
            try:
                cpus = _ints(kv.get("cpus", "none"))
            except ValueError as e:
                raise ValueError(f"plan line {n}: {e}") from None
        elif line.startswith("tasks="):
            try:
                kv = dict(tok.partition("=")[::2] for tok in line.split())
                r = RankPlan(rank=int(kv["rank"]), gpus=_ints(kv["gpus"]), numa_nodes=_ints(kv["numa"]),
                             cpus=_ints(kv["cpus"]), mems=_ints(kv["mems"]), mem_policy=kv["policy"],
                             omp_num_threads=int(kv["omp_threads"]) or None,
                             omp_places=None if kv["omp_places"] == "none" else kv["omp_places"])
                if r.mem_policy not in MEM_POLICIES:
                    raise ValueError(f"policy {r.mem_policy!r}")
                ranks[(int(kv["tasks"]), r.rank)] = r
            except (KeyError, ValueError) as e:
                raise ValueError(f"plan line {n}: {e}: {line!r}") from None
        else:
            raise ValueError(f"plan line {n}: unknown record: {line!r}")
    return ParsedPlan(job_id=job_id, ranks=ranks, noop=noop, warnings=warnings, cpus=cpus)


# --- the applied record -----------------------------------------------------------------------

APPLIED_KEYS = ("job", "step", "rank", "tasks", "pid", "status", "gpus", "numa", "cpus", "policy", "mem", "us")


def applied_line(values: Mapping[str, Any]) -> str:
    """One task's applied record, the same line the SPANK plugin writes."""
    return " ".join(f"{k}={values.get(k, 'none')}" for k in APPLIED_KEYS) + "\n"


def parse_applied_line(text: str) -> dict[str, str]:
    """An applied record back into ``{key: value}``; raises ValueError when it is not one."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    rec = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
    if "status" not in rec or "rank" not in rec:
        raise ValueError(f"not an applied record: {line!r}")
    return rec
