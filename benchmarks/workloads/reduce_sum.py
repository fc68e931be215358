"""Memory-bound: sums of a large fp32 tensor (reads every byte once per sum; known bytes, no tensor cores)."""

import time

import torch

from _common import args, report, until, window

a = args(__doc__, gib=(float, 8.0, "tensor size, GiB"))
x = torch.ones(int(a.gib * 2**30 / 4), device="cuda", dtype=torch.float32)
x.sum()
torch.cuda.synchronize()
t0, w0, sums = time.monotonic(), time.time(), 0
for _ in until(a.seconds):
    for _ in range(10):
        x.sum()
    torch.cuda.synchronize()
    sums += 10
dt, w1 = time.monotonic() - t0, time.time()
report("reduce_sum", gib=a.gib, sums=sums, gbps=round(x.numel() * 4 * sums / dt / 1e9, 1), **window(w0, w1))
