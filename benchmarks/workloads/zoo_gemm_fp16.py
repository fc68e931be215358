"""float16 GEMM (HMMA tensor cores), 8192^3, 2 n^3 FLOPs per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "a half-precision matrix product near the tensor roof"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.float16)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.float16)
timed("zoo_gemm_fp16", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=40)
