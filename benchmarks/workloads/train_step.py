"""A transformer training step (bf16 autocast, AdamW): FLOPs per step counted by torch's FlopCounterMode."""

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from _common import args, report, until, window

a = args(__doc__, layers=(int, 8, "encoder layers"), d=(int, 1024, "model width"),
         batch=(int, 8, "sequences per step"), seq=(int, 1024, "tokens per sequence"))
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(a.d, nhead=a.d // 64, dim_feedforward=4 * a.d, batch_first=True,
                                         norm_first=True, dropout=0.0)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False),
                            torch.nn.Linear(a.d, a.d)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(a.batch, a.seq, a.d, device="cuda")
y = torch.randn(a.batch, a.seq, a.d, device="cuda")


def step() -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


with FlopCounterMode(display=False) as fc:   # forward + backward matmuls and attention
    step()
flops = fc.get_total_flops()
for _ in range(2):
    step()
torch.cuda.synchronize()
t0, w0, steps = time.monotonic(), time.time(), 0
for _ in until(a.seconds):
    step()
    steps += 1
    if steps % 5 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
dt, w1 = time.monotonic() - t0, time.time()
report("train_step", layers=a.layers, d=a.d, batch=a.batch, seq=a.seq, steps=steps, flops_per_step=flops,
       step_ms=round(1000 * dt / steps, 1), tflops=round(flops * steps / dt / 1e12, 2), **window(w0, w1))
