"""Host-bound: each step prepares a 1024 x 1024 fp32 batch on the CPU with NumPy (sorting rows, ~tens of ms),
copies it to the GPU and runs one small fp32 GEMM (2 n^3 FLOPs): the GPU waits for the host."""

import numpy as np
import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "input_bound", "dtype": "fp32", "kind": "host", "framework": "torch", "rate": None,
         "exact": True, "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "attention", "math_roof"],
         "what": "a GPU fed by slow host-side preparation: neither graphs nor precision help"}

a = cli(__doc__, n=(int, 1024, "batch size"))
rng = np.random.default_rng(0)
w = torch.randn(a.n, a.n, device="cuda")


def step():
    batch = np.sort(rng.standard_normal((a.n, a.n), dtype=np.float32), axis=1)
    batch = np.sort(batch, axis=0)
    return torch.from_numpy(batch).to("cuda") @ w


timed("zoo_host_numpy_fp32", a.seconds, step, torch_sync, flops=2 * a.n**3, pcie_bytes=4 * a.n * a.n, batch=1)
