"""float64 GEMM in CuPy (cuBLAS DGEMM), 8192^3, 2 n^3 FLOPs per product."""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "fp64", "kind": "gemm", "framework": "cupy", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "bf16", "tf32", "attention", "dataloader", "cuda_graphs"],
         "what": "a float64 matrix product from CuPy (scientific code): no lower-precision advice fits"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = cp.random.standard_normal((a.n, a.n), dtype=cp.float64)
y = cp.random.standard_normal((a.n, a.n), dtype=cp.float64)
timed("zoo_cupy_gemm_fp64", a.seconds, lambda: x @ y, cupy_sync, flops=2 * a.n**3, batch=4)
