"""LayerNorm over 4096 features of 262144 bf16 rows (reads and writes 2 bytes per element)."""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "normalisation", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "LayerNorm: DRAM bandwidth; attention advice has no evidence here"}

a = cli(__doc__, rows=(int, 262144, "rows"), cols=(int, 4096, "features"))
x = torch.randn(a.rows, a.cols, device="cuda", dtype=torch.bfloat16)
w = torch.ones(a.cols, device="cuda", dtype=torch.bfloat16)
b = torch.zeros(a.cols, device="cuda", dtype=torch.bfloat16)
timed("zoo_layernorm_bf16", a.seconds, lambda: F.layer_norm(x, (a.cols,), w, b), torch_sync,
      nbytes=4 * a.rows * a.cols, batch=20)
