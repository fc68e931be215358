"""Copies of 512 MiB from host to device over PCIe, pinned host memory, one after another (no compute)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "transfer_bound", "dtype": "none", "kind": "transfer_h2d_pinned", "framework": "torch",
         "rate": "pcie_gbps", "exact": True,
         "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "attention", "math_roof", "dataloader"],
         "what": "host to device copies from pinned memory: the PCIe link is the bound, the SMs idle"}

a = cli(__doc__, mib=(int, 512, "MiB per copy"))
n = a.mib * 2**20
host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
host.fill_(7)                                       # touch every page before timing
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
timed("zoo_h2d_pinned", a.seconds, lambda: dev.copy_(host), torch_sync, pcie_bytes=n, batch=4)
