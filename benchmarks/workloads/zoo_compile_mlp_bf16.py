"""A torch.compile'd bf16 MLP training step (4096 -> 16384 -> 4096, GELU, 8192 tokens, SGD): the compile
is the job's start-up; then --seconds of steps, 6 x tokens x weights FLOPs each (t_switch: first timed step)."""

import time

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "startup": "torch.compile",
         "contradicts": ["dataloader", "torch_compile", "tf32", "bf16", "attention"],
         "what": "a compiled bf16 training step: compile time is start-up, the steps are GEMM-bound"}

a = cli(__doc__, tokens=(int, 8192, "tokens per step"), d=(int, 4096, "model width"))
model = torch.nn.Sequential(torch.nn.Linear(a.d, 4 * a.d), torch.nn.GELU(), torch.nn.Linear(4 * a.d, a.d))
model = model.to("cuda", torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
cmodel = torch.compile(model)
x = torch.randn(a.tokens, a.d, device="cuda", dtype=torch.bfloat16)


def step():
    opt.zero_grad(set_to_none=True)
    loss = cmodel(x).float().square().mean()
    loss.backward()
    opt.step()
    return loss


step()                                   # the compile
torch_sync()
t_switch = time.time()
weights = 2 * a.d * 4 * a.d
timed("zoo_compile_mlp_bf16", a.seconds, step, torch_sync, flops=6 * a.tokens * weights, batch=10,
      t_switch=round(t_switch, 3))
