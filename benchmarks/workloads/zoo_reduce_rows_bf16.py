"""Row sums of a 65536 x 8192 bf16 matrix (reads 2 bytes per element)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "reduction", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a per-row reduction of a bf16 matrix: DRAM bandwidth"}

a = cli(__doc__, rows=(int, 65536, "rows"), cols=(int, 8192, "columns"))
x = torch.randn(a.rows, a.cols, device="cuda", dtype=torch.bfloat16)
timed("zoo_reduce_rows_bf16", a.seconds, lambda: x.sum(dim=-1), torch_sync, nbytes=2 * a.rows * a.cols + 2 * a.rows,
      batch=40)
