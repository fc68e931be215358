"""Batched complex64 FFTs (cuFFT): 64 transforms of 2^20 points; 5 N log2 N FLOPs each.

Counts 16 bytes per point (read once, written once), a lower bound: a 2^20-point FFT makes several passes.
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "fft", "framework": "torch", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "large FFTs: passes over memory, little math per byte"}

a = cli(__doc__, batch=(int, 64, "transforms"), log2n=(int, 20, "log2 of the points per transform"))
n = 2 ** a.log2n
x = torch.randn(a.batch, n, device="cuda", dtype=torch.complex64)
timed("zoo_fft_c64", a.seconds, lambda: torch.fft.fft(x), torch_sync, flops=5 * a.batch * n * a.log2n,
      nbytes=16 * a.batch * n, batch=10)
