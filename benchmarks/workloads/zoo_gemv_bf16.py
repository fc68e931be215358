"""bf16 decode-style GEMM: 16 tokens x (8192 x 16384) weights; reads the weights once per product."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "math_roof"],
         "what": "a skinny matrix product (LLM decode): bound by reading the weights from DRAM"}

a = cli(__doc__, m=(int, 16, "tokens"), k=(int, 8192, "in features"), n=(int, 16384, "out features"))
w = torch.randn(a.k, a.n, device="cuda", dtype=torch.bfloat16)
x = torch.randn(a.m, a.k, device="cuda", dtype=torch.bfloat16)
timed("zoo_gemv_bf16", a.seconds, lambda: x @ w, torch_sync, flops=2 * a.m * a.k * a.n,
      nbytes=2 * (a.k * a.n + a.m * a.k + a.m * a.n), batch=400)
