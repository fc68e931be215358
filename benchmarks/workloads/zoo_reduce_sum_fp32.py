"""Full sum of 1 Gi fp32 elements (reads 4 bytes each)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "reduction", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a reduction over a large tensor: DRAM bandwidth"}

a = cli(__doc__, n=(int, 2**30, "elements"))
x = torch.rand(a.n, device="cuda")
timed("zoo_reduce_sum_fp32", a.seconds, lambda: x.sum(), torch_sync, nbytes=4 * a.n, flops=a.n, batch=20)
