"""Compute-bound: a loop of bf16 matrix multiplies (tensor cores busy)."""

import time

import torch

from _common import args, report, until

a = args(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
t0 = time.monotonic()
done = 0
for i in until(a.seconds):
    for _ in range(10):
        z = x @ y
    torch.cuda.synchronize()
    done += 10
dt = time.monotonic() - t0
report("matmul_bf16", n=a.n, matmuls=done, tflops=round(2 * a.n**3 * done / dt / 1e12, 1))
