"""A training job's life in three working phases: bf16 MLP training steps (2 blocks of 4096 -> 16384 -> 4096,
GELU, 16384 tokens, fused AdamW) for --seconds; an evaluation pass (forward only under inference_mode on
held-out batches of the same size, each loss read back with .item()) for --seconds / 3; then a checkpoint:
model and optimizer state copied to the host (1.6 GB, pageable) and written with torch.save to a temporary
file (deleted after), the GPU idle but for the copies.

Reported ``tflops`` over the training phase alone (``t_switch``..``t_end``: 6 x tokens x weights a step, the
GEMMs; elementwise work not counted), ``eval_tflops`` (2 x tokens x weights a batch) over ``t_end``..``t_ckpt``,
the checkpoint's size and time (``t_ckpt``..``t_job_end``, the job's end).
Start-up: importing torch, building the model (~3 s).
"""

import os
import tempfile
import time

from _zoo import T_PROC, cli, torch_sync
from _common import report, window

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "multi_phase", "framework": "torch", "rate": "tflops",
         "exact": True, "phases": ["startup", "compute_bound (train)", "compute_bound (eval)", "checkpoint"],
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "fused_optimizer"],
         "what": "train, evaluate, checkpoint: GEMM-bound work, then a short GPU-idle checkpoint stretch"}

a = cli(__doc__, tokens=(int, 16384, "tokens per step"), d=(int, 4096, "model width"), blocks=(int, 2, "MLP blocks"))
import torch  # noqa: E402

layers = []
for _ in range(a.blocks):
    layers += [torch.nn.Linear(a.d, 4 * a.d), torch.nn.GELU(), torch.nn.Linear(4 * a.d, a.d)]
model = torch.nn.Sequential(*layers).to("cuda", torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(a.tokens, a.d, device="cuda", dtype=torch.bfloat16)
held_out = torch.randn(a.tokens, a.d, device="cuda", dtype=torch.bfloat16)


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    return loss


weights = a.blocks * 2 * a.d * 4 * a.d
for _ in range(2):
    train_step()
torch_sync()
t_switch, t0, steps = time.time(), time.monotonic(), 0
while time.monotonic() - t0 < a.seconds:
    for _ in range(5):
        train_step()
    torch_sync()
    steps += 5
train_s, t_end = time.monotonic() - t0, time.time()

t0, batches, total = time.monotonic(), 0, 0.0
with torch.inference_mode():
    while time.monotonic() - t0 < a.seconds / 3:
        total += model(held_out).float().square().mean().item()
        batches += 1
eval_s, t_ckpt = time.monotonic() - t0, time.time()

state = {"model": {k: v.cpu() for k, v in model.state_dict().items()},
         "opt": {k: ({n: (t.cpu() if torch.is_tensor(t) else t) for n, t in s.items()} if isinstance(s, dict) else s)
                 for k, s in opt.state_dict()["state"].items()}}
fd, path = tempfile.mkstemp(suffix=".pt")
os.close(fd)
try:
    torch.save(state, path)
    size = os.path.getsize(path)
finally:
    os.unlink(path)
t_job_end = time.time()
report("zoo_app_train_eval_ckpt_bf16", tflops=round(6 * a.tokens * weights * steps / train_s / 1e12, 3),
       eval_tflops=round(2 * a.tokens * weights * batches / eval_s / 1e12, 3), steps=steps, eval_batches=batches,
       ckpt_gb=round(size / 1e9, 2), ckpt_s=round(t_job_end - t_ckpt, 2), t_switch=round(t_switch, 3),
       t_ckpt=round(t_ckpt, 3), t_job_end=round(t_job_end, 3), **window(t_switch, t_end), t_proc=round(T_PROC, 3))
