"""A fused Adam step (``torch.optim.Adam(fused=True)``) over 256 Mi fp32 parameters in 64 tensors of 4 Mi,
gradients set once (no forward or backward: the optimizer step alone, as in a large model's update).

Bytes per step, counted once each: the parameter read and written (8), its gradient read (4), both moments
read and written (16): 28 bytes per parameter, 7.5 GB a step. The per-tensor step counters are not counted.
Start-up: allocating and filling 4 GiB of tensors (~1 s); the first step creates the moments.
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "optimizer", "framework": "torch", "rate": "gbps",
         "exact": True,
         "contradicts": ["dataloader", "tf32", "attention", "cuda_graphs", "math_roof", "fused_optimizer",
                         "torch_compile"],
         "what": "a fused optimizer step: one streaming pass over parameters, gradients and moments "
                 "(DRAM activity ~65-75%, below a triad's): memory-bound, not scattered accesses"}

a = cli(__doc__, tensors=(int, 64, "parameter tensors"), size=(int, 4 * 2**20, "elements per tensor"))
params = [torch.nn.Parameter(torch.randn(a.size, device="cuda")) for _ in range(a.tensors)]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
opt = torch.optim.Adam(params, lr=1e-4, fused=True)
timed("zoo_app_adam_fused_fp32", a.seconds, opt.step, torch_sync, nbytes=28 * a.tensors * a.size, batch=20,
      params=a.tensors * a.size)
