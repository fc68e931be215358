"""Compute-bound: fp32 matrix products with TF32 off, 8192^3 (FP32 pipe, tensor cores idle)."""

from _common import args
from _gemm import run

a = args(__doc__, n=(int, 8192, "matrix size"))
run("gemm_fp32", "fp32", a.n, a.seconds)
