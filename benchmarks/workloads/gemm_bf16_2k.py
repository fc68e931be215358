"""Compute-bound: bf16 matrix products, 2048^3 (small: tensor cores far from their peak)."""

from _common import args
from _gemm import run

a = args(__doc__, n=(int, 2048, "matrix size"))
run("gemm_bf16_2k", "bf16", a.n, a.seconds)
