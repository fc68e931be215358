"""Input-bound: GPU steps that wait on a slow CPU "data loader" (CPU work + sleep), so the GPU idles in gaps."""

import random
import time

import torch

from _common import args, report, until

a = args(__doc__, load_ms=(float, 1200.0, "mean CPU loader time per step, ms (jittered +-50%)"),
         step_ms=(float, 300.0, "GPU time per step, ms"), n=(int, 8192, "matmul size"))
rng = random.Random(0)
w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
steps, gpu_s, t_start = 0, 0.0, time.monotonic()
for i in until(a.seconds):
    t = time.monotonic()
    batch = sum(j * j for j in range(200000))      # the loader's CPU work (decode, augment)
    time.sleep(max(0.0, a.load_ms * rng.uniform(0.5, 1.5) / 1000 - (time.monotonic() - t)))
    x = torch.full((a.n, a.n), float(batch % 7) / 7, device="cuda", dtype=torch.bfloat16)
    g = time.monotonic()
    while time.monotonic() - g < a.step_ms / 1000:
        x = torch.tanh(x @ w)
        torch.cuda.synchronize()
    gpu_s += time.monotonic() - g
    steps += 1
report("input_bound", steps=steps, load_ms=a.load_ms, step_ms=a.step_ms,
       gpu_busy_share=round(gpu_s / (time.monotonic() - t_start), 3))
