"""Input-bound: small GPU steps waiting on a slow CPU "data loader" (CPU work + sleep between steps)."""

import time

import torch

from _common import args, report, until

a = args(__doc__, load_ms=(float, 150.0, "CPU loader time per step, ms"), n=(int, 4096, "matmul size of a GPU step"))
w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
steps = 0
gpu_s = 0.0
for i in until(a.seconds):
    t = time.monotonic()
    batch = sum(j * j for j in range(20000))      # the loader's CPU work (decode, augment)
    time.sleep(max(0.0, a.load_ms / 1000 - (time.monotonic() - t)))
    x = torch.full((a.n, a.n), float(batch % 7), device="cuda", dtype=torch.bfloat16)
    g = time.monotonic()
    for _ in range(4):
        x = torch.tanh(x @ w)
    torch.cuda.synchronize()
    gpu_s += time.monotonic() - g
    steps += 1
report("input_bound", steps=steps, load_ms=a.load_ms, gpu_busy_share=round(gpu_s / a.seconds, 3))
