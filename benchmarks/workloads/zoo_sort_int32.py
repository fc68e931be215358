"""torch.sort of 128 Mi random int32 keys (CUB radix sort), values and int64 indices out.

Counts 16 bytes per element (key in, key out, index out), a lower bound: radix sort makes several passes.
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "latency_bound", "dtype": "int32", "kind": "sort", "framework": "torch", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "a radix sort: scattered passes over memory, no math pipe"}

a = cli(__doc__, n=(int, 128 * 2**20, "keys"))
x = torch.randint(0, 2**31 - 1, (a.n,), device="cuda", dtype=torch.int32)
timed("zoo_sort_int32", a.seconds, lambda: torch.sort(x), torch_sync, nbytes=16 * a.n, batch=2)
