"""float32 GEMM with TF32 off (CUDA cores, FP32 pipe), 8192^3, 2 n^3 FLOPs per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp32", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["attention", "dataloader", "cuda_graphs", "fp8"],
         "what": "an fp32 matrix product on CUDA cores: TF32 (or bf16) advice fits, FP8 does not"}

torch.backends.cuda.matmul.allow_tf32 = False
a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda")
y = torch.randn(a.n, a.n, device="cuda")
timed("zoo_gemm_fp32", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=4)
