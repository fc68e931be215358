"""Decode attention over a 32k-token KV cache, bf16: one new query token per sequence against the cached keys
and values (scaled_dot_product_attention, q of length 1), batch 4, 32 heads of 128, 32768 cached positions:
the attention of one generation step of a long-context model, without its GEMMs.

Bytes per step: K and V read once (2 x B x H x S x D x 2 bytes = 2.15 GB) plus q read and the output written
(negligible, counted). FLOPs (4 x B x H x S x D: 2.15 GFLOPs a step, 1 FLOP per byte) are not the limit.
Start-up: allocating the cache (~1 s).
"""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "attention_decode", "framework": "torch",
         "rate": "gbps", "exact": True,
         "contradicts": ["dataloader", "tf32", "attention", "cuda_graphs", "math_roof", "fp8", "fused_optimizer"],
         "what": "decode attention streams the KV cache once per token: DRAM bandwidth at ~1 FLOP/byte"}

a = cli(__doc__, b=(int, 4, "sequences"), h=(int, 32, "heads"), s=(int, 32768, "cached positions"),
        d=(int, 128, "head dim"))
q = torch.randn(a.b, a.h, 1, a.d, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(a.b, a.h, a.s, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
nbytes = 2 * (2 * a.b * a.h * a.s * a.d + 2 * a.b * a.h * a.d)
timed("zoo_app_decode_attn_kv32k_bf16", a.seconds, lambda: F.scaled_dot_product_attention(q, k, v), torch_sync,
      nbytes=nbytes, flops=4 * a.b * a.h * a.s * a.d, batch=50)
