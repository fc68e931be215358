"""Launch-bound: a Python loop of tiny kernels; the GPU waits on kernel launches, most SMs idle."""

import time

import torch

from _common import args, report, until

a = args(__doc__, elems=(int, 1024, "elements per tensor (one or few thread blocks)"))
x = torch.ones(a.elems, device="cuda")
t0 = time.monotonic()
launches = 0
for i in until(a.seconds):
    for _ in range(1000):
        x.mul_(1.0001)
        x.add_(0.5)
    torch.cuda.synchronize()
    launches += 2000
dt = time.monotonic() - t0
report("tiny_kernels", elems=a.elems, launches_per_s=round(launches / dt))
