"""A bf16 GEMM loop (8192^3) for --seconds, then an idle tail as long again with the CUDA context and its
memory still held (a job that finished its work and waits: a checkpoint upload, a forgotten sleep)."""

import time

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "tail": "idle 50%",
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs"],
         "what": "compute-bound work followed by an idle tail: the tail is a phase, not the job's class"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
figs = timed("zoo_gemm_idle_tail_bf16", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=40)
time.sleep(a.seconds)
print(f"zoo_gemm_idle_tail_bf16_tail: t_idle_end={time.time():.3f}", flush=True)
