"""Unfused attention in fp16: Q K^T, softmax over the S x S scores in DRAM, then P V. B=4 H=16 S=4096 D=64.

Counts the score matrix's DRAM traffic (written, read and written by softmax, read: 4 passes of
B H S^2 fp16) as its bytes, a lower bound; FLOPs 4 B H S^2 D.
"""

import torch

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "fp16", "kind": "attention", "framework": "torch", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "dataloader", "cuda_graphs", "math_roof"],
         "what": "attention written out by hand: the S x S scores go through DRAM; fused attention is the fix"}

a = cli(__doc__, b=(int, 4, "batch"), h=(int, 16, "heads"), s=(int, 4096, "sequence"), d=(int, 64, "head dim"))
q, k, v = (torch.randn(a.b, a.h, a.s, a.d, device="cuda", dtype=torch.float16) for _ in range(3))
scale = a.d ** -0.5


def step():
    p = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
    return p @ v


timed("zoo_attn_naive_fp16", a.seconds, step, torch_sync, flops=4 * a.b * a.h * a.s * a.s * a.d,
      nbytes=4 * 2 * a.b * a.h * a.s * a.s, batch=5)
