"""A GEMM loop of one precision on one GPU, reporting its achieved TFLOP/s (2 n^3 per product)."""

from __future__ import annotations

import time

import torch

from _common import report, until, window


def operands(dtype: str, n: int, device: str):
    """(A, B, matmul function) for bf16, fp32 (TF32 off: CUDA cores) or fp8 (e4m3, torch._scaled_mm)."""
    if dtype == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False   # the FP32 pipe, no tensor cores
        torch.backends.cudnn.allow_tf32 = False
        a = torch.randn(n, n, device=device, dtype=torch.float32)
        return a, torch.randn(n, n, device=device, dtype=torch.float32), torch.matmul
    if dtype == "fp8":
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        one = torch.ones((), device=device, dtype=torch.float32)
        return a, b, lambda x, y: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    return a, torch.randn(n, n, device=device, dtype=torch.bfloat16), torch.matmul


def run(name: str, dtype: str, n: int, seconds: float, device: str = "cuda:0") -> None:
    """Multiply for ``seconds`` after a warm-up and report TFLOP/s and the timed window."""
    torch.cuda.set_device(device)
    a, b, mm = operands(dtype, n, device)
    for _ in range(3):
        mm(a, b)
    torch.cuda.synchronize()
    t0, w0, done = time.monotonic(), time.time(), 0
    per = 10 if n >= 4096 else 100
    for _ in until(seconds):
        for _ in range(per):
            mm(a, b)
        torch.cuda.synchronize()
        done += per
    dt, w1 = time.monotonic() - t0, time.time()
    report(name, dtype=dtype, n=n, products=done, tflops=round(2 * n**3 * done / dt / 1e12, 2), **window(w0, w1))
