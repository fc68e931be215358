"""Two CUDA processes on one GPU (a job that starts a helper process, or two ranks on one device without MPS):
the script starts a copy of itself, and both run bf16 GEMMs (8192^3, 2 n^3 FLOPs a product) for --seconds
each; the GPU time-slices between their contexts.

Reported ``tflops``: the sum of both processes' own rates (each over its own timed window; the two windows
overlap but for each process's start-up, ~1-2 s); the window reported is this process's. The helper's own
figure is kept as ``child_tflops``.
Start-up: importing torch in both processes (~3 s, in parallel).
"""

import subprocess
import sys
import time

from _zoo import T_PROC, cli, torch_sync
from _common import report, window

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm_two_processes", "framework": "torch",
         "rate": "tflops", "exact": True,
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs"],
         "what": "two processes sharing one GPU, both GEMM-bound: the GPU is busy with tensor-core work"}

a = cli(__doc__, n=(int, 8192, "matrix size"), child=(int, 0, "1 in the helper process"))
child = None
if not a.child:
    child = subprocess.Popen([sys.executable, __file__, "--seconds", str(a.seconds), "--n", str(a.n), "--child", "1"],
                             stdout=subprocess.PIPE, text=True)
import torch  # noqa: E402

x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    x @ y
torch_sync()
w0, t0, n = time.time(), time.monotonic(), 0
while time.monotonic() - t0 < a.seconds:
    for _ in range(20):
        x @ y
    torch_sync()
    n += 20
rate = 2 * a.n**3 * n / (time.monotonic() - t0) / 1e12
w1 = time.time()
if a.child:
    print(f"{rate:.3f}", flush=True)
    sys.exit(0)
out, _ = child.communicate(timeout=a.seconds + 120)
theirs = float(out.strip().splitlines()[-1])
report("zoo_app_two_procs_gemm_bf16", tflops=round(rate + theirs, 3), own_tflops=round(rate, 3),
       child_tflops=round(theirs, 3), steps=n, **window(w0, w1), t_proc=round(T_PROC, 3))
