"""Fused attention (scaled_dot_product_attention, flash backend), bf16, B=8 H=16 S=4096 D=128, 4 B H S^2 D FLOPs."""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "attention", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["attention", "tf32", "bf16", "dataloader", "cuda_graphs"],
         "what": "attention through the fused flash kernel already: FlashAttention advice contradicts it"}

a = cli(__doc__, b=(int, 8, "batch"), h=(int, 16, "heads"), s=(int, 4096, "sequence"), d=(int, 128, "head dim"))
q, k, v = (torch.randn(a.b, a.h, a.s, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
timed("zoo_attn_sdpa_bf16", a.seconds, lambda: F.scaled_dot_product_attention(q, k, v), torch_sync,
      flops=4 * a.b * a.h * a.s * a.s * a.d, batch=10)
