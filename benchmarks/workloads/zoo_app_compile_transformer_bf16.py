"""A torch.compile'd training step of a small bf16 transformer whose compile dominates a short run: 4 pre-norm
blocks (hidden 2048, 16 heads, 4x GELU MLP, sdpa attention without mask), batch 8 x 1024 tokens, fused AdamW
outside the compiled model. Start-up: importing torch (~3 s), then the first step compiles forward and
backward with Inductor from a cold cache (Dynamo tracing, AOTAutograd, Triton kernels: ~20-45 s, ~45 s seen
for a tiny version on 2 CPU cores), most of a 5 s run; then --seconds of steps (t_switch: first timed step).

FLOPs per step (2 per multiply-add, x3 for forward and backward): per layer 6 x tokens x 12 hidden^2 (QKV,
output projection, MLP) plus attention 12 x B x S^2 x hidden (QK^T and PV, 4 B S^2 hidden forward, twice that
backward): 10.7 TFLOPs. LayerNorm, GELU, softmax and the optimizer are not counted.
"""

import time

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "transformer_training", "framework": "torch",
         "rate": "tflops", "exact": True, "startup": "torch.compile ~80%",
         "contradicts": ["dataloader", "torch_compile", "tf32", "bf16", "attention", "fused_optimizer"],
         "what": "a compiled transformer step: compiling is most of a short job and is start-up; its steps are "
                 "GEMM-bound"}

a = cli(__doc__, batch=(int, 8, "sequences"), seq=(int, 1024, "tokens"), d=(int, 2048, "hidden"),
        layers=(int, 4, "blocks"), heads=(int, 16, "heads"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(torch.nn.Module):
    """Pre-norm attention + MLP block."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(att)
        return x + self.down(F.gelu(self.up(self.n2(x))))


model = torch.nn.Sequential(*[Block(a.d, a.heads) for _ in range(a.layers)]).to("cuda", torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
cmodel = torch.compile(model)
x = torch.randn(a.batch, a.seq, a.d, device="cuda", dtype=torch.bfloat16)


def step():
    opt.zero_grad(set_to_none=True)
    loss = cmodel(x).float().square().mean()
    loss.backward()
    opt.step()
    return loss


t_compile = time.time()
step()                                   # the compile
torch_sync()
t_switch = time.time()
tokens = a.batch * a.seq
flops = a.layers * (6 * tokens * 12 * a.d * a.d + 12 * a.batch * a.seq**2 * a.d)
timed("zoo_app_compile_transformer_bf16", a.seconds, step, torch_sync, flops=flops, batch=10,
      compile_s=round(t_switch - t_compile, 1), t_switch=round(t_switch, 3))
