"""A multi-phase job: CPU start-up (0.5 x --seconds: parsing and preparing data with NumPy on one core, no
GPU), then a streaming phase (0.67 x --seconds: out = x + y over 256 Mi bf16 elements, 6 bytes an element),
then a bf16 GEMM phase (--seconds: 8192^3 products, 2 n^3 FLOPs each). Working time splits 40 % memory-bound,
60 % compute-bound, so its longest working phase is the GEMM; start-up (with the imports) is 30-40 % of the
job at --seconds 5 to 15.

Reported: ``add_gbps`` (the streaming phase's own bytes over its own window, ``t_add``..``t_switch``),
``tflops`` over the GEMM phase (``t_switch``..``t_end``); ``t_start`` is the start of the working time
(the streaming phase). Start-up besides the CPU phase: importing torch, allocating (~3 s).
"""

import time

import numpy as np

from _zoo import T_PROC, cli
from _common import report, window

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "multi_phase", "framework": "torch", "rate": "tflops",
         "exact": True, "startup": "CPU start-up 30-40%", "phases": ["startup", "memory_bound", "compute_bound"],
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs", "fused_optimizer"],
         "what": "start-up, a memory-bound phase, then a longer compute-bound phase: phases, not one average"}

a = cli(__doc__, n=(int, 8192, "GEMM size"), elems=(int, 256 * 2**20, "streamed elements"))
rng = np.random.default_rng(0)
end = time.monotonic() + 0.5 * a.seconds
while time.monotonic() < end:                      # the job's own preparation: NumPy on the CPU
    np.sort(rng.standard_normal(1 << 18))
import torch  # noqa: E402

x = torch.randn(a.elems, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.elems, device="cuda", dtype=torch.bfloat16)
out = torch.empty_like(x)
w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
v = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()


def loop(seconds: float, fn, batch: int) -> tuple[int, float, float]:
    """Run ``fn`` in synced batches for ``seconds``: (calls, seconds taken, wall-clock start)."""
    w0, t0, n = time.time(), time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        n += batch
    return n, time.monotonic() - t0, w0


adds, add_s, t_add = loop(0.67 * a.seconds, lambda: torch.add(x, y, out=out), 50)
gemms, gemm_s, t_switch = loop(a.seconds, lambda: w @ v, 40)
t_end = time.time()
report("zoo_app_phases_gemm_add_bf16", tflops=round(2 * a.n**3 * gemms / gemm_s / 1e12, 3),
       add_gbps=round(6 * a.elems * adds / add_s / 1e9, 2), steps=gemms, adds=adds, t_add=round(t_add, 3),
       t_switch=round(t_switch, 3), **window(t_add, t_end), t_proc=round(T_PROC, 3))
