"""Cholesky factorisation of a 16384 x 16384 symmetric positive-definite fp64 matrix with cuSOLVER
(``cupy.linalg.cholesky``: potrf on a copy, then its info checked), one factorisation a step.

FLOPs per step: n^3 / 3 (the factorisation's leading term; the copy and lower-order terms not counted),
1.47 TFLOPs. cuSOLVER spends most of it in fp64 GEMM/SYRK updates of the trailing matrix (fp64 tensor cores).
Start-up: importing CuPy, building A = X X^T + n I (one fp64 GEMM, ~0.2 s), cuSOLVER's handle (~1 s).
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "fp64", "kind": "factorization", "framework": "cupy", "rate": "tflops",
         "exact": True,
         "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "torch_compile",
                         "fused_optimizer", "pytorch_only"],
         "what": "a dense fp64 factorisation in cuSOLVER: fp64 GEMM-bound; PyTorch advice does not apply"}

a = cli(__doc__, n=(int, 16384, "matrix size"))
x = cp.random.random((a.n, a.n), dtype=cp.float64)
spd = x @ x.T
spd += a.n * cp.eye(a.n, dtype=cp.float64)
del x
timed("zoo_app_cupy_cholesky_fp64", a.seconds, lambda: cp.linalg.cholesky(spd), cupy_sync, flops=a.n**3 / 3,
      batch=5)
