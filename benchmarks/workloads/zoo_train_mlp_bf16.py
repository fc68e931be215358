"""An eager bf16 MLP training step (4096 -> 16384 -> 4096, GELU, 16384 tokens, fused AdamW): 6 x tokens x
weights FLOPs per step (the GEMMs; elementwise work not counted)."""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["dataloader", "tf32", "bf16", "attention"],
         "what": "a bf16 training step dominated by its matrix products"}

a = cli(__doc__, tokens=(int, 16384, "tokens per step"), d=(int, 4096, "model width"))
model = torch.nn.Sequential(torch.nn.Linear(a.d, 4 * a.d), torch.nn.GELU(), torch.nn.Linear(4 * a.d, a.d))
model = model.to("cuda", torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(a.tokens, a.d, device="cuda", dtype=torch.bfloat16)


def step():
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    return loss


weights = 2 * a.d * 4 * a.d
timed("zoo_train_mlp_bf16", a.seconds, step, torch_sync, flops=6 * a.tokens * weights, batch=5)
