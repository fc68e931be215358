"""All-reduce bus bandwidth under different environments (torch.distributed, one process per GPU).

The launcher (``measure``) runs one fresh set of worker processes per environment and round, so
each environment gets its own NCCL initialisation, and rounds interleave the environments so drift
hits them all alike. Workers (``python -m gpuperf.env.ncclbench --worker``) time ``iters`` all-reduces
per repeat after warm-ups and report per-op seconds (the slowest rank's). Pure helpers turn that into
bus bandwidth, medians and run-to-run spread. Needs torch only where measurements run.
"""

from __future__ import annotations

import argparse
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

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ALWAYS = {"NCCL_NVLS_ENABLE": "0"}  # NVLS costs GPU memory and is off on shared machines (FACTS.md)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min to max bytes, inclusive."""
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def busbw_gbps(nbytes: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth (nccl-tests' definition): bytes/time * 2(n-1)/n, in GB/s."""
    return nbytes / seconds * (2 * (world - 1) / world) / 1e9 if seconds > 0 else 0.0


def human(nbytes: int) -> str:
    """8192 -> '8 KiB'."""
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


@dataclass
class SetResult:
    """One environment's measurements: per size, the bus bandwidth of every repeat of every round."""

    name: str
    env: dict[str, str]
    rounds: list[dict[int, list[float]]] = field(default_factory=list)  # per round: size -> busbw per repeat
    errors: list[str] = field(default_factory=list)

    def samples(self, size: int) -> list[float]:
        """Every busbw sample for one size."""
        return [x for r in self.rounds for x in r.get(size, [])]

    def median(self, size: int) -> float | None:
        """Median bus bandwidth at one size."""
        s = self.samples(size)
        return statistics.median(s) if s else None

    def spread(self, size: int) -> float:
        """Run-to-run spread at one size: relative range of the per-round medians (repeats if one round)."""
        per_round = [statistics.median(r[size]) for r in self.rounds if r.get(size)]
        vals = per_round if len(per_round) > 1 else self.samples(size)
        if len(vals) < 2:
            return 0.0
        mid = statistics.median(vals)
        return (max(vals) - min(vals)) / mid if mid > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"name": self.name, "env": self.env, "errors": self.errors,
                "rounds": [{str(k): v for k, v in r.items()} for r in self.rounds]}


# --- launcher --------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(base: dict[str, str]) -> dict[str, str]:
    """The parent's environment without any NCCL/CUDA tuning or gpuperf markers: 'NCCL defaults'."""
    drop = ("NCCL_", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS",
            "GPUPERF_ENV_SET", "GPUPERF_OMP", "TORCH_NCCL")
    return {k: v for k, v in base.items() if not k.startswith(drop)}


def run_once(env_set: dict[str, str], world: int, backend: str, device: str, size_list: list[int],
             repeats: int, warmup: int, timeout_s: float) -> dict[int, list[float]]:
    """One fresh group of ``world`` workers under ``env_set``: size -> busbw per repeat. Raises RuntimeError."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r0.json")
        procs = []
        base = {**clean_env(dict(os.environ)), **ALWAYS, **env_set,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world)}
        for rank in range(world):
            env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            argv = [sys.executable, "-m", "gpuperf.env.ncclbench", "--worker", "--backend", backend, "--device", device,
                    "--sizes", ",".join(map(str, size_list)), "--repeats", str(repeats), "--warmup", str(warmup),
                    "--out", out]
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
            raise RuntimeError(f"timed out after {timeout_s:.0f} s") from None
        bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        if bad or not os.path.exists(out):
            with open(os.path.join(d, f"log{bad[0][0] if bad else 0}"), errors="replace") as f:
                tail = "\n".join(f.read().strip().splitlines()[-8:])
            raise RuntimeError(f"workers failed {bad}: {tail}")
        with open(out) as f:
            per_op = json.load(f)["seconds_per_op"]
    return {int(s): [busbw_gbps(int(s), t, world) for t in ts] for s, ts in per_op.items()}


def measure(sets: dict[str, dict[str, str]], world: int, backend: str = "nccl", device: str = "cuda",
            size_list: list[int] | None = None, rounds: int = 3, repeats: int = 5, warmup: int = 5,
            timeout_s: float = 240.0, log=print) -> dict[str, SetResult]:
    """Measure every environment ``rounds`` times, interleaved; failures are recorded, not raised."""
    size_list = size_list or sizes(8 * KIB, GIB)
    results = {name: SetResult(name, env) for name, env in sets.items()}
    for r in range(rounds):
        for name, env in sets.items():
            t0 = time.monotonic()
            try:
                results[name].rounds.append(run_once(env, world, backend, device, size_list, repeats, warmup, timeout_s))
                log(f"round {r + 1}/{rounds} {name}: {time.monotonic() - t0:.1f} s")
            except RuntimeError as e:
                results[name].errors.append(f"round {r + 1}: {e}")
                log(f"round {r + 1}/{rounds} {name}: FAILED {e}")
    return results


# --- worker ----------------------------------------------------------------------------------------

def _worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device(args.device, rank) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(dev)
        try:
            dist.init_process_group(args.backend, rank=rank, world_size=world, device_id=dev)
        except TypeError:  # torch < 2.3 has no device_id
            dist.init_process_group(args.backend, rank=rank, world_size=world)
    else:
        dist.init_process_group(args.backend, rank=rank, world_size=world)

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize(dev)

    size_list = [int(s) for s in args.sizes.split(",")]
    per_op: dict[int, list[float]] = {}
    for nbytes in size_list:
        buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        est = max((time.perf_counter() - t0) / max(1, args.warmup), 1e-6)
        # enough ops per repeat that one repeat lasts ~20 ms: timer and launch noise stay small
        iters = torch.tensor([min(1000, max(2, int(0.02 / est)))], device=dev)
        dist.all_reduce(iters, op=dist.ReduceOp.MAX)  # every rank must run the same count
        n = int(iters.item())
        times = []
        for _ in range(args.repeats):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(buf)
            sync()
            times.append((time.perf_counter() - t0) / n)
        per_op[nbytes] = times
        del buf
    mat = torch.tensor([per_op[s] for s in size_list], dtype=torch.float64, device=dev)
    dist.all_reduce(mat, op=dist.ReduceOp.MAX)  # the slowest rank is the collective's time
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"seconds_per_op": {str(s): mat[i].tolist() for i, s in enumerate(size_list)},
                       "torch": torch.__version__,
                       "nccl": _nccl_version(torch) if args.device == "cuda" else None,
                       "gpu": torch.cuda.get_device_name(dev) if args.device == "cuda" else None}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


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


def _nccl_version(torch: Any) -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)  # older torch: one int, 2xxyy


def versions() -> dict[str, Any]:
    """torch / NCCL / GPU names where torch is importable (for the result's header)."""
    try:
        import torch
    except ImportError:
        return {"torch": None}
    out: dict[str, Any] = {"torch": torch.__version__}
    if torch.cuda.is_available():
        out["nccl"] = _nccl_version(torch)
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out


def main(argv: list[str] | None = None) -> int:
    """Worker entry (``--worker``); the launcher is used from benchmarks/nccl_env.py and gpuperf tune."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    return _worker(args)


if __name__ == "__main__":
    sys.exit(main())
