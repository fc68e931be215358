"""float64 axpy in a CuPy elementwise kernel: y = a x + y over 256 Mi elements (24 bytes each)."""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "memory_bound", "dtype": "fp64", "kind": "elementwise", "framework": "cupy", "rate": "gbps",
         "exact": True, "contradicts": ["fp8", "tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a float64 axpy: DRAM bandwidth; precision advice does not fit a float64 code"}

a = cli(__doc__, n=(int, 256 * 2**20, "elements"))
axpy = cp.ElementwiseKernel("float64 x, float64 alpha", "float64 y", "y = alpha * x + y", "zoo_axpy")
x = cp.random.random(a.n, dtype=cp.float64)
y = cp.random.random(a.n, dtype=cp.float64)
timed("zoo_cupy_axpy_fp64", a.seconds, lambda: axpy(x, 0.999, y), cupy_sync, flops=2 * a.n, nbytes=24 * a.n,
      batch=20)
