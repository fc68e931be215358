"""One rank of a collective bandwidth measurement (``python -m gpuperf.env.ncclworker``), started by
``gpuperf.env.ncclbench.run_once`` once per rank under the environment being measured.

Two timings per collective and size, both with CUDA events on the GPU:

- ``launched``: ``n`` collectives issued back to back from Python, events around them. Below a few
  MiB a collective takes less GPU time than Python and c10d take to issue it, so this times the host's
  issue rate (its scheduling, its clock), not NCCL: one slow host moment halves a small size's figure.
- ``queued``: the same ``n`` collectives queued behind a GPU sleep long enough for the host to issue
  all of them, so the GPU runs them back to back and the events time NCCL alone. One untimed
  collective right before the start event lines the ranks up (it ends on both GPUs together).

Needs torch; on a CPU device (gloo) only the wall-clock ``launched`` timing exists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

# a queued repeat whose host issue took longer than this share of its GPU sleep may have left the GPU
# idle: it is taken again with a longer sleep
STARVED_SHARE = 0.8
MAX_SLEEP_S = 0.1  # the GPU sleep never exceeds this (a stuck host must not hold a launch forever)
# most collectives queued at once: each is several stream entries (events, waits, the kernel), and a
# full launch queue would block the host mid-issue and let the GPU idle again
QUEUED_MOST = 128


def op(dist: Any, coll: str, nbytes: int, world: int, dev: Any, torch: Any) -> Callable[[], Any]:
    """A no-argument callable running one collective over ``nbytes`` (nccl-tests' size convention)."""
    n = max(world, nbytes // 4 // world * world)  # float32 elements, divisible by the world
    if coll == "allreduce":
        buf = torch.ones(n, dtype=torch.float32, device=dev)
        return lambda: dist.all_reduce(buf)
    if coll == "allgather":  # size = the gathered output
        out, inp = torch.empty(n, dtype=torch.float32, device=dev), torch.ones(n // world, dtype=torch.float32, device=dev)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if coll == "reducescatter":  # size = the input that is reduced
        inp, out = torch.ones(n, dtype=torch.float32, device=dev), torch.empty(n // world, dtype=torch.float32, device=dev)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    raise ValueError(f"unknown collective {coll!r}")


class Timers:
    """Seconds for ``n`` calls of a collective, launched and (on CUDA) queued; counts starved queued repeats."""

    def __init__(self, torch: Any, cuda: bool, agree: Callable[[bool], bool] | None = None) -> None:
        # agree: every rank's "take it again?" made one answer (True if any rank says so); ranks that
        # decided alone would run different numbers of collectives and hang each other
        self.torch, self.cuda, self.agree = torch, cuda, agree or (lambda b: b)
        self.starved = 0  # queued repeats taken again because the host had not issued everything in time
        self.host_per_op = 0.0  # the host's seconds to issue one collective, as last measured
        if cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.sleep_hz = self._sleep_rate() if hasattr(torch.cuda, "_sleep") else 0.0

    def _sleep_rate(self) -> float:
        """Cycles per second of ``torch.cuda._sleep`` (it spins on the SM clock)."""
        cycles = 20_000_000
        self.torch.cuda._sleep(cycles // 10)  # warm: the first launch loads the kernel
        self.start.record()
        self.torch.cuda._sleep(cycles)
        self.end.record()
        self.end.synchronize()
        return cycles / max(self.start.elapsed_time(self.end) / 1e3, 1e-6)

    def launched(self, fn: Callable[[], Any], n: int) -> float:
        """``n`` calls issued back to back: CUDA events around them on the GPU, else a wall clock."""
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return time.perf_counter() - t0
        self.start.record()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        self.host_per_op = (time.perf_counter() - t0) / n
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3

    def queued(self, fn: Callable[[], Any], n: int, tries: int = 3) -> float:
        """``n`` calls run back to back on the GPU behind a sleep that outlasts their issue; events around them."""
        if not (self.cuda and self.sleep_hz):
            return self.launched(fn, n)
        margin = 2.0
        for _ in range(tries):
            sleep_s = min(MAX_SLEEP_S, margin * self.host_per_op * (n + 1) + 0.001)
            self.torch.cuda._sleep(int(self.sleep_hz * sleep_s))
            t0 = time.perf_counter()
            fn()  # lines the ranks up: it ends on every GPU at once
            self.start.record()
            for _ in range(n):
                fn()
            self.end.record()
            host = time.perf_counter() - t0
            self.end.synchronize()
            self.host_per_op = host / (n + 1)
            if not self.agree(host > STARVED_SHARE * sleep_s and sleep_s < MAX_SLEEP_S):
                break
            self.starved += 1
            margin *= 2
        return self.start.elapsed_time(self.end) / 1e3


def calls_per_repeat(est_s: float, target_s: float, most: int) -> int:
    """Collectives per timed repeat: about ``target_s`` of them, at least 2, at most ``most``."""
    return min(most, max(2, round(target_s / max(est_s, 1e-7))))


def pin_self() -> list[int] | None:
    """Bind this process to the CPUs in $GPUPERF_BENCH_CPUS (set per rank by the launcher); the CPUs, or None."""
    text = os.environ.get("GPUPERF_BENCH_CPUS", "")
    if not text:
        return None
    from gpuperf.affinity.plan import parse_cpu_list

    cpus = parse_cpu_list(text)
    os.sched_setaffinity(0, cpus)
    return cpus


def worker(args: argparse.Namespace) -> int:
    """Measure every collective and size; rank 0 writes per-op seconds (the slowest rank's) to ``args.out``."""
    pinned = pin_self()  # before torch starts its threads: they inherit it
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = args.device == "cuda"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
        dist.init_process_group(args.backend, rank=rank, world_size=world, device_id=dev)
    else:
        dist.init_process_group(args.backend, rank=rank, world_size=world)
    flag = torch.zeros(1, device=dev)

    def agree(mine: bool) -> bool:
        flag.fill_(1.0 if mine else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    tm = Timers(torch, cuda, agree)
    timings = [t for t in args.timing.split(",") if t] if cuda else ["launched"]
    size_list = [int(s) for s in args.sizes.split(",")]
    keys: list[tuple[str, int]] = []
    per_op: list[list[float]] = []
    for coll in [c for c in args.colls.split(",") if c]:
        for nbytes in size_list:
            fn = op(dist, coll, nbytes, world, dev, torch)
            warm = max(1, args.warmup)
            est = max(tm.launched(fn, warm) / warm, 1e-7)
            tm.launched(fn, warm)  # again: the first calls of a size set up NCCL's buffers for it
            est = min(est, max(tm.launched(fn, warm) / warm, 1e-7))
            n_t = torch.tensor([calls_per_repeat(est, args.target_s, args.most)], device=dev)
            dist.all_reduce(n_t, op=dist.ReduceOp.MAX)  # every rank must run the same count
            n = int(n_t.item())
            for timing in timings:
                t0, starved0 = time.perf_counter(), tm.starved
                timed, calls = (tm.queued, min(n, QUEUED_MOST)) if timing == "queued" else (tm.launched, n)
                dist.barrier()
                timed(fn, calls)  # an untimed repeat: clocks and queues settle for this size
                times = []
                for _ in range(args.repeats):
                    dist.barrier()
                    times.append(timed(fn, calls) / calls)
                keys.append((coll if timing == timings[0] else f"{coll}/{timing}", nbytes))
                per_op.append(times)
                # progress in the rank's log: what a hung or slow launch was doing
                print(f"{coll} {nbytes} {timing}: {calls} calls, {min(times) * 1e6:.1f} us/op, host "
                      f"{tm.host_per_op * 1e6:.1f} us/op, {tm.starved - starved0} again, "
                      f"{time.perf_counter() - t0:.2f} s", flush=True)
            del fn
    mat = torch.tensor(per_op, dtype=torch.float64, device=dev)
    dist.all_reduce(mat, op=dist.ReduceOp.MAX)  # the slowest rank is the collective's time
    starved = torch.tensor([float(tm.starved)], device=dev)
    dist.all_reduce(starved, op=dist.ReduceOp.MAX)  # the ranks agreed on each retry: every rank counted it
    if rank == 0:
        res: dict[str, dict[str, list[float]]] = {}
        for i, (key, nbytes) in enumerate(keys):
            res.setdefault(key, {})[str(nbytes)] = mat[i].tolist()
        with open(args.out, "w") as f:
            json.dump({"seconds_per_op": res, "timings": timings, "starved": int(starved.item()), "pinned": pinned,
                       "torch": torch.__version__, "nccl": nccl_version(torch) if cuda else None,
                       "gpu": torch.cuda.get_device_name(dev) if cuda else None}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def nccl_version(torch: Any) -> str:
    """torch's NCCL version as text."""
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)  # older torch: one int, 2xxyy


def main(argv: list[str] | None = None) -> int:
    """The worker's command line (the launcher builds it)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--colls", default="allreduce")
    ap.add_argument("--timing", default="launched", help="launched, queued, or both comma-separated (first = plain key)")
    ap.add_argument("--target-s", type=float, default=0.005, help="GPU seconds one timed repeat aims at")
    ap.add_argument("--most", type=int, default=500, help="most collectives in one repeat")
    ap.add_argument("--out", required=True)
    return worker(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
