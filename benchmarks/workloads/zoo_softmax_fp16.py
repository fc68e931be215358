"""Softmax over the last dimension of a 65536 x 8192 fp16 tensor (reads and writes 2 bytes per element)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp16", "kind": "softmax", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a softmax on its own (no attention around it): DRAM bandwidth"}

a = cli(__doc__, rows=(int, 65536, "rows"), cols=(int, 8192, "columns"))
x = torch.randn(a.rows, a.cols, device="cuda", dtype=torch.float16)
timed("zoo_softmax_fp16", a.seconds, lambda: torch.softmax(x, dim=-1), torch_sync, nbytes=4 * a.rows * a.cols,
      batch=40)
