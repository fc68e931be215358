"""A job whose first 40% is CPU start-up (parsing, data preparation on one core, no GPU), then a bf16 GEMM
loop near the tensor roof (8192^3, 2 n^3 FLOPs per product) for --seconds: t_switch marks the GEMM's start."""

import time

from _zoo import cli, cpu_busy, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "startup": "CPU start-up 40%",
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs"],
         "what": "a compute-bound GEMM job with a CPU start-up phase: start-up does not make it input-bound"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
cpu_busy(a.seconds * 2 / 3)            # 40% of the job's time: start-up before any GPU work
import torch  # noqa: E402  (the heavy import is part of the start-up)

x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
t_switch = time.time()
timed("zoo_startup_gemm_bf16", a.seconds, lambda: x @ y, torch_sync, flops=2 * a.n**3, batch=40,
      t_switch=round(t_switch, 3))
