"""Scatter-add with atomics: out.index_add_(0, idx, src), 64 Mi fp32 values into 1 Mi random slots.

Counts 20 bytes per element (8-byte index, 4-byte source, 8 bytes read-modify-write of the target).
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "latency_bound", "dtype": "fp32", "kind": "scatter", "framework": "torch", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a scatter-add: atomic updates to random slots (atomics and access pattern bound)"}

a = cli(__doc__, slots=(int, 2**20, "target slots"), n=(int, 64 * 2**20, "values"))
out = torch.zeros(a.slots, device="cuda")
idx = torch.randint(0, a.slots, (a.n,), device="cuda")
src = torch.rand(a.n, device="cuda")
timed("zoo_scatter_add_fp32", a.seconds, lambda: out.index_add_(0, idx, src), torch_sync, nbytes=20 * a.n, batch=5)
