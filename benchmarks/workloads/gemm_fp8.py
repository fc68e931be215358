"""Compute-bound: fp8 e4m3 matrix products (torch._scaled_mm), 8192^3."""

from _common import args
from _gemm import run

a = args(__doc__, n=(int, 8192, "matrix size"))
run("gemm_fp8", "fp8", a.n, a.seconds)
