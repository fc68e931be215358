"""fp32 polynomial (1024 dependent FMAs per element) in a CuPy elementwise kernel over 64 Mi elements.

FP32 pipe work on CUDA cores with no matrix math: 2 x 1024 FLOPs per element, 8 bytes per element.
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "fp32", "kind": "elementwise", "framework": "cupy", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "fp8", "attention", "dataloader", "cuda_graphs", "fewer_bytes"],
         "what": "math-heavy elementwise fp32 (FP32 pipe): no matrix math, so TF32 advice has no evidence"}

ITERS = 1024
a = cli(__doc__, n=(int, 64 * 2**20, "elements"))
poly = cp.ElementwiseKernel("float32 x", "float32 y",
                            f"float acc = x; for (int i = 0; i < {ITERS}; ++i) acc = fmaf(acc, 0.9999f, 0.0001f); y = acc;",
                            "zoo_poly32")
x = cp.random.random(a.n, dtype=cp.float32)
y = cp.empty_like(x)
timed("zoo_cupy_poly_fp32", a.seconds, lambda: poly(x, y), cupy_sync, flops=2 * ITERS * a.n, nbytes=8 * a.n,
      batch=20)
