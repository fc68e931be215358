"""Random gather: out = table[idx] for 64 Mi random indices into a 256 Mi fp32 table (torch.take).

Counts 16 bytes per element (8-byte index, 4-byte value read, 4-byte value written); each random
4-byte read pulls a whole 32-byte sector from DRAM.
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "latency_bound", "dtype": "fp32", "kind": "gather", "framework": "torch", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "random gathers: bound by scattered memory accesses, not by math or streaming bandwidth"}

a = cli(__doc__, table=(int, 256 * 2**20, "table elements"), n=(int, 64 * 2**20, "gathers"))
table = torch.rand(a.table, device="cuda")
idx = torch.randint(0, a.table, (a.n,), device="cuda")
timed("zoo_gather_random_fp32", a.seconds, lambda: torch.take(table, idx), torch_sync, nbytes=16 * a.n, batch=10)
