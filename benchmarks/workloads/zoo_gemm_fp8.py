"""FP8 (e4m3) GEMM through torch._scaled_mm, 8192^3, 2 n^3 FLOPs per product, bf16 output."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp8", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "an FP8 matrix product: already in FP8, so FP8 advice contradicts it"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda").to(torch.float8_e4m3fn)
y = torch.randn(a.n, a.n, device="cuda").to(torch.float8_e4m3fn).t()   # column-major, as cuBLASLt wants
one = torch.ones((), device="cuda", dtype=torch.float32)
timed("zoo_gemm_fp8", a.seconds, lambda: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
      torch_sync, flops=2 * a.n**3, batch=80)
