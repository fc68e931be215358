"""Memory-bound: a loop of large device-to-device copies and elementwise adds (DRAM busy, tensor idle)."""

import time

import torch

from _common import args, report, until

a = args(__doc__, gib=(float, 4.0, "size of each buffer in GiB"))
n = int(a.gib * 2**30 / 4)
src = torch.ones(n, device="cuda", dtype=torch.float32)
dst = torch.empty_like(src)
t0 = time.monotonic()
moved = 0
for i in until(a.seconds):
    dst.copy_(src)
    dst.add_(src)             # reads two, writes one
    torch.cuda.synchronize()
    moved += 5 * n * 4
dt = time.monotonic() - t0
report("membound", gib=a.gib, gbps=round(moved / dt / 1e9, 1))
