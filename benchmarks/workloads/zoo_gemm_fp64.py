"""float64 GEMM through cuBLAS (DMMA tensor cores on Hopper), 8192^3, 2 n^3 FLOPs per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp64", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "bf16", "tf32", "attention", "dataloader", "cuda_graphs"],
         "what": "a float64 matrix product: FP64 tensor cores, no lower precision in use or asked for"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.float64)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.float64)
timed("zoo_gemm_fp64", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=4)
