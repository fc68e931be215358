"""Host-bound: each step prepares a 1024 x 1024 fp32 batch on the CPU with NumPy (sorting it by rows and by
columns, tens of ms), copies it to the GPU and runs four fp32 4096^3 GEMMs (a few ms each): the kernels fill
the GPU while they run, and the GPU waits for the host most of the time."""

import numpy as np
import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "input_bound", "dtype": "fp32", "kind": "host", "framework": "torch", "rate": None,
         "exact": True, "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "attention", "math_roof"],
         "what": "a GPU fed by slow host-side preparation: neither graphs nor precision help"}

torch.backends.cuda.matmul.allow_tf32 = False
a = cli(__doc__, n=(int, 1024, "host batch size"), m=(int, 4096, "GEMM size"))
rng = np.random.default_rng(0)
w = torch.randn(a.m, a.m, device="cuda")


def step():
    batch = np.sort(np.sort(rng.standard_normal((a.n, a.n), dtype=np.float32), axis=1), axis=0)
    x = torch.from_numpy(batch).to("cuda").repeat(a.m // a.n, a.m // a.n)
    for _ in range(4):
        x = x @ w
    return x


timed("zoo_host_numpy_fp32", a.seconds, step, torch_sync, flops=4 * 2 * a.m**3, pcie_bytes=4 * a.n * a.n, batch=1)
