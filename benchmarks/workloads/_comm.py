"""Shared part of the zoo's communication workloads (``zoo_comm_*.py``, issue 29): ranks, a timed loop, bus bandwidth.

Two ways to start, one code path: under ``srun`` with one task per GPU (``SLURM_NTASKS`` >= 2: the rank is
``SLURM_PROCID``, the GPU ``SLURM_LOCALID`` among those the task sees), or as one command that spawns a
process per GPU (``--gpus``; how ``record_workloads.py`` runs a workload). ``--device cpu`` runs the same
loop on the gloo backend with CPU tensors: the harness proven without a GPU.

Each rank prints what it is and where it runs (``rankN: pid= cpus= cvd= device= nccl=...``: its CPU mask,
``CUDA_VISIBLE_DEVICES``, the GPU it used and the NCCL variables it was given) and rank 0 prints the
workload's figures (``name: busbw_gbps= algbw_gbps= bytes= ...``) counted from the bytes it moved itself:
bus bandwidth as nccl-tests defines it (all-reduce: 2(n-1)/n x size / time per operation).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Callable, Mapping

from _common import window
from _zoo import T_PROC, cli

# never NVLink multicast (NVLS): on the lent machines it can put the host's shared GPUs out of service.
# Set by run(), not at import: a test that imports this module must not hand it to every later job.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# NCCL over TCP between two processes of one host: the network path of a multi-node job
SOCKET_PATH = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}


def comm_cli(doc: str, **extra: tuple[type, object, str]):
    """``--seconds`` plus ``--gpus`` (ranks when spawned), ``--device`` (cuda or cpu) and workload options."""
    return cli(doc, gpus=(int, 2, "ranks to spawn when not started by srun"),
               device=(str, "cuda", "cuda (NCCL) or cpu (gloo: the harness without a GPU)"), **extra)


def slurm_rank(environ: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """(rank, world, local rank) when srun started this process as one of >= 2 tasks, else None."""
    e = os.environ if environ is None else environ
    try:
        # srun sets SLURM_STEP_NUM_TASKS in each task; a batch script (SLURM_NTASKS alone) is no rank
        world = int(e.get("SLURM_STEP_NUM_TASKS") or 0)
        if world >= 2 and "SLURM_PROCID" in e:
            return int(e["SLURM_PROCID"]), world, int(e.get("SLURM_LOCALID", e["SLURM_PROCID"]))
    except ValueError:
        pass
    return None


def rendezvous(environ: Mapping[str, str] | None = None) -> str:
    """init_method for srun's tasks: MASTER_ADDR/MASTER_PORT if given, else loopback and a port from the job
    and step ids (both tasks compute the same one; the job's node is one host)."""
    e = os.environ if environ is None else environ
    addr = e.get("MASTER_ADDR", "127.0.0.1")
    port = e.get("MASTER_PORT") or str(20000 + (int(e.get("SLURM_JOB_ID", "0")) * 7 + int(e.get("SLURM_STEP_ID", "0"))) % 20000)
    return f"tcp://{addr}:{port}"


def wait_listening(init_method: str, timeout_s: float = 300.0, step_s: float = 0.01) -> float:
    """Seconds spent until rank 0's store accepts on ``init_method``'s port (a ``tcp://`` one; else 0).

    A rank that reaches PyTorch's TCPStore before rank 0 listens sleeps in the store's connect back-off, which
    puts a whole second or none into the job's start at random (seen as two modes of its wall time, about
    0.9 s apart, on the 2x H200); polling the port every 10 ms first keeps that coin flip out of a job's
    timing."""
    if not init_method.startswith("tcp://"):
        return 0.0
    host, _, port = init_method[len("tcp://"):].rpartition(":")
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                break
        except OSError:
            time.sleep(step_s)
    return time.monotonic() - t0


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpus_allowed() -> str:
    """This process's CPU mask as Linux lists it (Cpus_allowed_list)."""
    try:
        with open("/proc/self/status") as f:
            return next((l.split()[1] for l in f if l.startswith("Cpus_allowed_list")), "none")
    except OSError:
        return "none"


def say(name: str, **figures: object) -> None:
    """``_common.report``'s line in one write(2): the ranks share a pipe, and print() may write the text and
    its newline apart, so two ranks' lines would run together."""
    os.write(1, (f"{name}: " + " ".join(f"{k}={v}" for k, v in figures.items()) + "\n").encode())


def rank_line(rank: int, device: str) -> dict[str, object]:
    """What a rank says about itself: pid, CPU mask, CUDA_VISIBLE_DEVICES, device, the NCCL variables it has and
    PyTorch's allocator setting (both among what gpuperf's TaskProlog injects)."""
    nccl = ",".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") and v and " " not in v)
    return {"pid": os.getpid(), "cpus": cpus_allowed(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES") or "none",
            "device": device, "omp": os.environ.get("OMP_NUM_THREADS") or "none",
            "alloc": (os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "none").replace(" ", ""), "nccl": nccl or "none"}


def busbw(coll: str, nbytes: int, seconds_per_op: float, world: int) -> float:
    """Bus bandwidth in GB/s of one operation of ``nbytes`` (nccl-tests' factors)."""
    factor = {"allreduce": 2 * (world - 1) / world, "allgather": (world - 1) / world,
              "reducescatter": (world - 1) / world, "sendrecv": 1.0, "copy": 1.0}[coll]
    return factor * nbytes / seconds_per_op / 1e9


class Ctx:
    """One rank: its ids, torch, the device its tensors live on, and a sync that waits for them."""

    def __init__(self, rank: int, world: int, local: int, device: str, init_method: str):
        import torch
        import torch.distributed as dist

        self.rank, self.world, self.local, self.torch, self.dist = rank, world, local, torch, dist
        if device == "cuda":
            torch.cuda.set_device(local % max(1, torch.cuda.device_count()))
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        t_wait = wait_listening(init_method) if rank else 0.0
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=init_method,
                                rank=rank, world_size=world)
        dev = f"cuda:{self.device.index}" if device == "cuda" else "cpu"
        # when this rank started, how long it waited for rank 0's store, when it could communicate
        say(f"rank{rank}", **rank_line(rank, dev), t_proc=round(T_PROC, 3), t_wait=round(t_wait, 3),
            t_init=round(time.time(), 3))

    def sync(self, _: Any = None) -> None:
        """Wait for this rank's device."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


def timed_comm(ctx: Ctx, name: str, seconds: float, step: Callable[[], Any], *, coll: str, nbytes: int,
               batch: int = 10, warm: int = 2, flops: float = 0.0, **extra: Any) -> dict[str, object]:
    """Run ``step`` (one operation of ``nbytes``; ``flops``: the whole job's math per step) in batches for
    ``seconds``; rank 0 reports the bandwidth (and TFLOP/s).

    The ranks agree when to stop (rank 0's clock, broadcast each batch), so no rank waits in a
    collective the other never issues."""
    torch, dist = ctx.torch, ctx.dist
    for _ in range(warm):
        step()
    ctx.sync()
    flag = torch.zeros(1, device=ctx.device)
    t0, w0, n = time.monotonic(), time.time(), 0
    while True:
        for _ in range(batch):
            step()
        ctx.sync()
        n += batch
        flag.fill_(1.0 if time.monotonic() - t0 < seconds else 0.0)
        dist.broadcast(flag, 0)
        if flag.item() == 0.0:
            break
    dt, w1 = time.monotonic() - t0, time.time()
    figs: dict[str, object] = {"ranks": ctx.world, "ops": n, "bytes": nbytes,
                               "busbw_gbps": round(busbw(coll, nbytes, dt / n, ctx.world), 2),
                               "algbw_gbps": round(nbytes * n / dt / 1e9, 2), **extra, **window(w0, w1),
                               "t_proc": round(T_PROC, 3)}
    if flops:
        figs["tflops"] = float(f"{flops * n / dt / 1e12:.4g}")
    if ctx.rank == 0:
        say(name, **figs)
    return figs


def run(body: Callable[[Ctx, Any], None], a: Any) -> int:
    """Start the ranks (srun's tasks, or ``a.gpus`` spawned processes) and run ``body(ctx, a)`` in each."""
    os.environ.update(NO_MULTICAST)  # before torch is imported; spawned ranks inherit it
    if a.device not in ("cuda", "cpu"):
        print(f"--device must be cuda or cpu, not {a.device!r}", file=sys.stderr)
        return 2
    got = slurm_rank()
    if got:
        rank, world, local = got
        _rank_main(rank, world, local, a.device, rendezvous(), body, a)
        return 0
    import torch.multiprocessing as mp

    world = a.gpus
    if a.device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if have < world:
            print(f"{sys.argv[0]}: needs {world} GPUs, found {have}", file=sys.stderr)
            return 2
    if world < 2:
        print(f"{sys.argv[0]}: needs at least 2 ranks (--gpus)", file=sys.stderr)
        return 2
    init = f"tcp://127.0.0.1:{free_port()}"
    mp.spawn(_spawned, args=(world, a.device, init, body, a), nprocs=world, join=True)
    return 0


def _spawned(rank: int, world: int, device: str, init: str, body: Callable, a: Any) -> None:
    _rank_main(rank, world, rank, device, init, body, a)


def _rank_main(rank: int, world: int, local: int, device: str, init: str, body: Callable, a: Any) -> None:
    ctx = Ctx(rank, world, local, device, init)
    try:
        body(ctx, a)
    finally:
        ctx.dist.destroy_process_group()
