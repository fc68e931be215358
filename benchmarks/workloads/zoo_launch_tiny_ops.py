"""Launch-bound: a Python loop of tiny elementwise ops on a 4096-element fp32 tensor (each kernel a few
microseconds; the launches, not the kernels, take the time)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "launch_bound", "dtype": "fp32", "kind": "elementwise", "framework": "torch", "rate": None,
         "exact": True, "contradicts": ["dataloader", "tf32", "fp8", "bf16", "attention", "math_roof"],
         "what": "thousands of tiny kernels back to back: launch overhead and gaps, the case for CUDA graphs"}

a = cli(__doc__, n=(int, 4096, "elements"))
x = torch.rand(a.n, device="cuda")


def step():
    y = x
    for _ in range(200):
        y = y * 1.0001 + 0.0001
    return y


timed("zoo_launch_tiny_ops", a.seconds, step, torch_sync, flops=200 * 2 * a.n, batch=20)
