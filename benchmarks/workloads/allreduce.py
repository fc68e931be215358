"""Communication-bound: an NCCL all-reduce loop on every local GPU, one process per GPU (NVLink busy).

NCCL_NVLS_ENABLE=0 is always set (NVLink SHARP reserves GPU memory; keep it off on shared machines).
"""

import os
import socket
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from _common import args, report, until, window  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, port: int, seconds: float, mib: float) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x = torch.ones(int(mib * 2**20 / 4), device="cuda")
    dist.all_reduce(x)  # warm-up: builds the communicator
    torch.cuda.synchronize()
    t0, w0 = time.monotonic(), time.time()
    n = 0
    for i in until(seconds):
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        n += 10
    dt, w1 = time.monotonic() - t0, time.time()
    size = x.numel() * 4
    if rank == 0:
        busbw = 2 * (world - 1) / world * size * n / dt / 1e9
        report("allreduce", gpus=world, mib=mib, iters=n, busbw_gbps=round(busbw, 1),
               algbw_gbps=round(size * n / dt / 1e9, 1), **window(w0, w1))
    dist.destroy_process_group()


if __name__ == "__main__":
    a = args(__doc__, mib=(float, 256.0, "all-reduce size, MiB"), gpus=(int, 0, "GPUs to use; 0: all local"))
    world = a.gpus or torch.cuda.device_count()
    if world < 2:
        print(f"allreduce: needs at least 2 GPUs, found {world}", file=sys.stderr)
        sys.exit(2)
    mp.spawn(worker, args=(world, free_port(), a.seconds, a.mib), nprocs=world, join=True)
