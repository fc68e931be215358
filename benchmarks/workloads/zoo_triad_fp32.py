"""STREAM triad in fp32: a = b + s c over 256 Mi elements (reads two arrays, writes one: 12 bytes each)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "elementwise", "framework": "torch", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "an elementwise triad: DRAM bandwidth, no math to speak of"}

a = cli(__doc__, n=(int, 256 * 2**20, "elements"))
b = torch.rand(a.n, device="cuda")
c = torch.rand(a.n, device="cuda")
out = torch.empty_like(b)
timed("zoo_triad_fp32", a.seconds, lambda: torch.add(b, c, alpha=1.5, out=out), torch_sync,
      flops=2 * a.n, nbytes=12 * a.n, batch=50)
