"""GELU over 1 Gi bf16 elements (reads and writes each: 4 bytes per element)."""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "elementwise", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "an activation function over a large bf16 tensor: DRAM bandwidth"}

a = cli(__doc__, n=(int, 2**30, "elements"))
x = torch.randn(a.n, device="cuda", dtype=torch.bfloat16)
timed("zoo_gelu_bf16", a.seconds, lambda: F.gelu(x), torch_sync, nbytes=4 * a.n, batch=20)
