"""Batched bf16 matrix products: 64 x (2048 x 2048 x 2048), 2 b n^3 FLOPs per call."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "batched bf16 matrix products (torch.bmm)"}

a = cli(__doc__, n=(int, 2048, "matrix size"), b=(int, 64, "batch"))
x = torch.randn(a.b, a.n, a.n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.b, a.n, a.n, device="cuda", dtype=torch.bfloat16)
timed("zoo_bmm_bf16", a.seconds, lambda: torch.bmm(x, y), torch_sync, flops=2 * a.b * a.n**3, batch=20)
