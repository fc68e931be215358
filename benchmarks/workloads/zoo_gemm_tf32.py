"""float32 GEMM with TF32 tensor cores allowed, 8192^3, 2 n^3 FLOPs per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "tf32", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs"],
         "what": "an fp32 matrix product that already runs on TF32 tensor cores"}

torch.backends.cuda.matmul.allow_tf32 = True
a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda")
y = torch.randn(a.n, a.n, device="cuda")
timed("zoo_gemm_tf32", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=20)
