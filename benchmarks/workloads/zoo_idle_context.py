"""Idle: creates a CUDA context, allocates 4 GiB, and launches nothing for --seconds."""

import time

import torch

from _zoo import T_PROC
from _common import args, report, window

LABEL = {"class": "idle", "dtype": "none", "kind": "idle", "framework": "torch", "rate": None, "exact": True,
         "contradicts": ["fp8", "tf32", "bf16", "attention", "cuda_graphs", "math_roof", "dataloader"],
         "what": "a job that holds a GPU and does nothing with it"}

a = args(__doc__)
buf = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
w0 = time.time()
time.sleep(a.seconds)
report("zoo_idle_context", **window(w0, time.time()), t_proc=round(T_PROC, 3))
