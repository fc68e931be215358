"""Collective bus bandwidth under different environments (torch.distributed, one process per GPU).

The launcher (``measure``) runs one fresh set of worker processes per environment and round, so
each environment gets its own NCCL initialisation (NCCL, CUDA and OpenMP read their variables once
per process), and rounds interleave the environments in alternating order so drift hits them all
alike. One launch measures every collective and size it is given. Workers (``gpuperf.env.ncclworker``)
time ``n`` back-to-back collectives per repeat with CUDA events after warm-ups and report per-op
seconds (the slowest rank's); each rank can be pinned to CPUs next to its GPU (``rank_cpus``), the
same in every environment, so the scheduler's placement is no difference between them.
``gpuperf.env.interval`` turns the per-round values into paired ratios with confidence intervals.
Needs torch only where measurements run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from gpuperf.env import ncclworker

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ALWAYS = {"NCCL_NVLS_ENABLE": "0"}  # NVLS costs GPU memory and is off on shared machines (FACTS.md)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min to max bytes, inclusive."""
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def human(nbytes: int) -> str:
    """8192 -> '8 KiB'."""
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


COLLECTIVES = ("allreduce", "allgather", "reducescatter")
# nccl-tests' bus bandwidth factors: all-reduce moves 2(n-1)/n of the buffer per rank, the others (n-1)/n
_BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
        "reducescatter": lambda n: (n - 1) / n}


def busbw_gbps(nbytes: int, seconds: float, world: int, coll: str = "allreduce") -> float:
    """Bus bandwidth in GB/s of one collective over ``nbytes`` (the full buffer, as nccl-tests counts it).

    ``coll`` may carry a timing after a slash (``allgather/launched``): the factor is the collective's."""
    return nbytes / seconds * _BUS[coll.split("/")[0]](world) / 1e9 if seconds > 0 else 0.0


@dataclass
class SetResult:
    """One environment's measurements, aligned by round: per round, collective -> size -> busbw per repeat.

    A failed round is an empty dict at its index, so rounds stay paired with the other environments'.
    """

    name: str
    env: dict[str, str]
    rounds: list[dict[str, dict[int, list[float]]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    starved: int = 0  # queued repeats the workers took again (see gpuperf.env.ncclworker)

    def per_round(self, size: int, coll: str = "allreduce", best: bool = False) -> list[float | None]:
        """Each round's busbw at one size, the median of its repeats or (``best``) the fastest; None where missing.

        ``best`` suits comparing environments: a variable is constant within a launch, so a repeat slower
        than its siblings is interference from outside the process, not the variable's doing.
        """
        out: list[float | None] = []
        for r in self.rounds:
            xs = r.get(coll, {}).get(size)
            out.append((max(xs) if best else statistics.median(xs)) if xs else None)
        return out

    def samples(self, size: int, coll: str = "allreduce") -> list[float]:
        """Every busbw sample for one size."""
        return [x for r in self.rounds for x in r.get(coll, {}).get(size, [])]

    def median(self, size: int, coll: str = "allreduce") -> float | None:
        """Median bus bandwidth at one size."""
        s = self.samples(size, coll)
        return statistics.median(s) if s else None

    def spread(self, size: int, coll: str = "allreduce") -> float:
        """Run-to-run spread at one size: relative range of the per-round medians (repeats if one round)."""
        per_round = [x for x in self.per_round(size, coll) if x]
        vals = per_round if len(per_round) > 1 else self.samples(size, coll)
        if len(vals) < 2:
            return 0.0
        mid = statistics.median(vals)
        return (max(vals) - min(vals)) / mid if mid > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"name": self.name, "env": self.env, "errors": self.errors, "starved": self.starved,
                "rounds": [{c: {str(k): v for k, v in per.items()} for c, per in r.items()} for r in self.rounds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SetResult":
        """Inverse of to_dict (a recorded ``gpuperf tune`` JSON's ``sets`` entry)."""
        rounds = [{c: {int(k): list(v) for k, v in per.items()} for c, per in r.items()} for r in d.get("rounds") or []]
        return cls(str(d.get("name", "")), dict(d.get("env") or {}), rounds, list(d.get("errors") or []),
                   int(d.get("starved") or 0))


# --- launcher --------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(base: dict[str, str]) -> dict[str, str]:
    """The parent's environment without any NCCL/CUDA tuning or gpuperf markers: 'NCCL defaults'."""
    drop = ("NCCL_", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS",
            "OMP_NUM_THREADS", "GPUPERF_ENV_SET", "GPUPERF_OMP", "TORCH_NCCL")
    return {k: v for k, v in base.items() if not k.startswith(drop)}


def rank_cpus(world: int, root: str | None = None) -> list[list[int]]:
    """CPUs for each of ``world`` ranks on GPUs 0..world-1: gpuperf's affinity plan (the cores next to
    each GPU) where the node has several NUMA nodes, else this process's CPUs in equal disjoint chunks."""
    from gpuperf.affinity import plan as affinity
    from gpuperf import topology

    mine = sorted(os.sched_getaffinity(0))
    try:
        topo = topology.load_node(root, health=False).topology
        plan = affinity.plan(topo, affinity.Allocation(tuple(range(world)), tuple(mine), "self"), world)
        if not plan.noop and len(plan.ranks) == world and all(r.cpus for r in plan.ranks):
            return [list(r.cpus) for r in plan.ranks]
    except Exception:  # noqa: BLE001 - a node we cannot read is pinned the plain way below
        pass
    base, extra = divmod(len(mine), world)
    if base == 0:
        return [mine] * world  # fewer CPUs than ranks: all share them
    out, i = [], 0
    for r in range(world):
        k = base + (1 if r < extra else 0)
        out.append(mine[i:i + k])
        i += k
    return out


def _log_tails(d: str, world: int, lines: int = 3) -> str:
    """The last lines each rank printed (what a hung or failed launch was doing)."""
    out = []
    for rank in range(world):
        try:
            with open(os.path.join(d, f"log{rank}"), errors="replace") as f:
                tail = f.read().strip().splitlines()[-lines:]
        except OSError:
            tail = []
        out.append(f"rank {rank}: " + (" | ".join(tail) or "(nothing)"))
    return "; ".join(out)


def run_once(env_set: dict[str, str], world: int, backend: str, device: str, size_list: list[int],
             repeats: int, warmup: int, timeout_s: float,
             colls: tuple[str, ...] = ("allreduce",), timing: str = "launched",
             pin: list[list[int]] | None = None, meta: dict | None = None) -> dict[str, dict[int, list[float]]]:
    """One fresh group of ``world`` workers under ``env_set``: collective -> size -> busbw per repeat.

    ``timing``: ``launched``, ``queued`` or both comma-separated (``gpuperf.env.ncclworker``); the first
    is keyed by the collective's name, the other as ``coll/timing``. ``pin``: CPUs per rank. ``meta``
    gets the worker's notes: queued repeats taken again (``starved``), its CPUs, its timings.
    Raises RuntimeError when a worker fails or the group outlives ``timeout_s``.
    """
    from gpuperf.affinity.plan import format_cpu_list

    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r0.json")
        procs = []
        base = {**clean_env(dict(os.environ)), **ALWAYS, **env_set,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world)}
        for rank in range(world):
            env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            if pin:
                env["GPUPERF_BENCH_CPUS"] = format_cpu_list(pin[rank % len(pin)])
            argv = [sys.executable, "-m", "gpuperf.env.ncclworker", "--backend", backend, "--device", device,
                    "--sizes", ",".join(map(str, size_list)), "--repeats", str(repeats), "--warmup", str(warmup),
                    "--colls", ",".join(colls), "--timing", timing, "--out", out]
            # output to files, not pipes: a chatty rank (NCCL_DEBUG) must not block on a full pipe
            with open(os.path.join(d, f"log{rank}"), "w") as log_f:
                procs.append(subprocess.Popen(argv, env=env, stdout=log_f, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        deadline = time.monotonic() + timeout_s
        try:
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            for p in procs:
                p.wait()
            raise RuntimeError(f"timed out after {timeout_s:.0f} s: {_log_tails(d, world)}") from None
        bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        if bad or not os.path.exists(out):
            with open(os.path.join(d, f"log{bad[0][0] if bad else 0}"), errors="replace") as f:
                tail = "\n".join(f.read().strip().splitlines()[-8:])
            raise RuntimeError(f"workers failed {bad}: {tail}")
        with open(out) as f:
            got = json.load(f)
        per_op = got["seconds_per_op"]
        if meta is not None:
            meta.update({k: got.get(k) for k in ("starved", "pinned", "timings")})
    return {c: {int(s): [busbw_gbps(int(s), t, world, c) for t in ts] for s, ts in per.items()}
            for c, per in per_op.items()}


def measure(sets: dict[str, dict[str, str]], world: int, backend: str = "nccl", device: str = "cuda",
            size_list: list[int] | None = None, rounds: int = 3, repeats: int = 5, warmup: int = 5,
            timeout_s: float = 240.0, log=print, colls: tuple[str, ...] = ("allreduce",),
            set_sizes: dict[str, list[int]] | None = None, budget_s: float | None = None,
            on_round=None, timing: str = "launched", pin: list[list[int]] | None = None) -> dict[str, SetResult]:
    """Measure every environment up to ``rounds`` times, interleaved; failures are recorded, not raised.

    Odd rounds run the environments in reverse order, so none always follows the same neighbour.
    ``set_sizes`` gives an environment fewer sizes (ablations); with ``budget_s`` no round starts
    that would likely end past the budget (rounds done so far stay paired and usable). ``on_round``
    gets the results after each round (to write partial results). ``timing`` and ``pin``: ``run_once``'s.
    """
    size_list = size_list or sizes(8 * KIB, GIB)
    results = {name: SetResult(name, env) for name, env in sets.items()}
    t_start = time.monotonic()
    for r in range(rounds):
        elapsed = time.monotonic() - t_start
        if budget_s is not None and r > 0 and elapsed + elapsed / r > budget_s:
            log(f"budget: stopping after {r} round(s) ({elapsed:.0f} s of {budget_s:.0f} s)")
            break
        order = list(sets) if r % 2 == 0 else list(reversed(sets))
        for name in order:
            t0 = time.monotonic()
            wanted = (set_sizes or {}).get(name) or size_list
            meta: dict = {}
            try:
                results[name].rounds.append(run_once(sets[name], world, backend, device, wanted, repeats, warmup,
                                                     timeout_s, colls, timing, pin, meta))
                log(f"round {r + 1}/{rounds} {name}: {time.monotonic() - t0:.1f} s"
                    + (f" ({meta['starved']} queued repeat(s) taken again)" if meta.get("starved") else ""))
                results[name].starved += int(meta.get("starved") or 0)
            except RuntimeError as e:
                results[name].rounds.append({})
                results[name].errors.append(f"round {r + 1}: {e}")
                log(f"round {r + 1}/{rounds} {name}: FAILED {e}")
        if on_round:
            on_round(results)
    return results


def gpuperf_exports(nproc: int, root: str | None = None, repo: str | None = None) -> tuple[dict[str, str], dict]:
    """What gpuperf would inject for a one-node job with ``nproc`` GPUs here (``gpuperf env --json``), and its answer.

    Run as a subprocess on a clean environment, so the caller's own NCCL variables count for nothing.
    """
    cmd = [sys.executable, "-m", "gpuperf", "env", "--json", "--gpus", str(nproc), "--nodes", "1"]
    if root:
        cmd += ["--root", root]
    env = clean_env(dict(os.environ))
    if repo:
        env["PYTHONPATH"] = repo
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"gpuperf env failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    answer = json.loads(p.stdout)
    return {n: v for n, v in answer.get("exports", []) if not n.startswith("GPUPERF_")}, answer


def versions() -> dict[str, Any]:
    """torch / NCCL / GPU names where torch is importable (for the result's header)."""
    try:
        import torch
    except ImportError:
        return {"torch": None}
    out: dict[str, Any] = {"torch": torch.__version__}
    if torch.cuda.is_available():
        out["nccl"] = ncclworker.nccl_version(torch)
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out
