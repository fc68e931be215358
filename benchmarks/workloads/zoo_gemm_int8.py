"""int8 GEMM through torch._int_mm (IMMA tensor cores), int32 result, 8192^3, 2 n^3 integer ops per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "int8", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "bf16", "tf32", "attention", "dataloader", "cuda_graphs"],
         "what": "an int8 matrix product (quantised inference's kernel): no floating-point advice fits"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randint(-64, 64, (a.n, a.n), device="cuda", dtype=torch.int8)
y = torch.randint(-64, 64, (a.n, a.n), device="cuda", dtype=torch.int8).t()
try:
    torch._int_mm(x, y)
except RuntimeError:          # a build that wants both row-major
    y = y.contiguous()
timed("zoo_gemm_int8", a.seconds, lambda: torch._int_mm(x, y), torch_sync, flops=2 * a.n**3, batch=10)
