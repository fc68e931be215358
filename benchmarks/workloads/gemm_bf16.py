"""Compute-bound: bf16 matrix products, 8192^3 (tensor cores near their peak)."""

from _common import args
from _gemm import run

a = args(__doc__, n=(int, 8192, "matrix size"))
run("gemm_bf16", "bf16", a.n, a.seconds)
