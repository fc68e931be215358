"""Two phases: input-bound (short GPU steps behind a slow CPU loader) for half the time, then bf16 GEMMs."""

import random
import time

import torch

from _common import args, report, until, window

a = args(__doc__, load_ms=(float, 800.0, "mean CPU loader time per step in the first phase, ms"),
         step_ms=(float, 100.0, "GPU time per step in the first phase, ms"), n=(int, 8192, "matrix size"))
rng = random.Random(0)
w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
w0, gpu_s, steps = time.time(), 0.0, 0
t_in = time.monotonic()
for _ in until(a.seconds / 2):
    t = time.monotonic()
    batch = sum(j * j for j in range(100000))      # the loader's CPU work
    time.sleep(max(0.0, a.load_ms * rng.uniform(0.5, 1.5) / 1000 - (time.monotonic() - t)))
    g = time.monotonic()
    while time.monotonic() - g < a.step_ms / 1000:
        z = x @ w
        torch.cuda.synchronize()
    gpu_s += time.monotonic() - g
    steps += 1
busy_share = gpu_s / (time.monotonic() - t_in)
w_switch = time.time()
t0, done = time.monotonic(), 0
for _ in until(a.seconds / 2):
    for _ in range(10):
        z = x @ w
    torch.cuda.synchronize()
    done += 10
dt, w1 = time.monotonic() - t0, time.time()
report("phases", input_steps=steps, input_gpu_busy_share=round(busy_share, 3), t_switch=round(w_switch, 3),
       products=done, tflops=round(2 * a.n**3 * done / dt / 1e12, 2), **window(w0, w1))
