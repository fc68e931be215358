"""fp64 polynomial (512 dependent FMAs per element) in a CuPy elementwise kernel over 64 Mi elements.

FP64 pipe work (no tensor cores): 2 x 512 FLOPs per element, 16 bytes per element.
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "fp64", "kind": "elementwise", "framework": "cupy", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "bf16", "tf32", "attention", "dataloader", "cuda_graphs", "fewer_bytes"],
         "what": "math-heavy float64 elementwise on the FP64 pipe"}

ITERS = 512
a = cli(__doc__, n=(int, 64 * 2**20, "elements"))
poly = cp.ElementwiseKernel("float64 x", "float64 y",
                            f"double acc = x; for (int i = 0; i < {ITERS}; ++i) acc = fma(acc, 0.9999, 0.0001); y = acc;",
                            "zoo_poly64")
x = cp.random.random(a.n, dtype=cp.float64)
y = cp.empty_like(x)
timed("zoo_cupy_poly_fp64", a.seconds, lambda: poly(x, y), cupy_sync, flops=2 * ITERS * a.n, nbytes=16 * a.n,
      batch=10)
