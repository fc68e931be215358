"""torchvision ViT-B/16 inference in fp16 (random weights, ``vit_b_16(weights=None)``), batch 256 of 224x224
images, eval mode under inference_mode (nn.MultiheadAttention's fused fast path); the input is channels-last
(only the 16x16 patch-embedding convolution reads it).

FLOPs per image, counted from the architecture (2 per multiply-add): the patch embedding 2 x 196 x 768 x 768,
12 encoder layers over 197 tokens of 2 x 197 x (4 x 768^2 + 2 x 768 x 3072) (QKV, output projection, MLP)
plus attention 4 x 197^2 x 768 (QK^T and PV), and the head 2 x 768 x 1000: 35.1 GFLOPs (torchvision lists
17.56 GMACs for it). LayerNorm, GELU and softmax are not counted.
Start-up: importing torchvision (~3 s) and building the model (~1 s).
"""

import torch
import torchvision

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp16", "kind": "vision_transformer", "framework": "torch",
         "rate": "tflops", "exact": True,
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs", "fused_optimizer"],
         "what": "ViT inference: tensor-core GEMMs; attention over 197 tokens is 4% of its FLOPs"}

a = cli(__doc__, batch=(int, 256, "images per step"))
model = torchvision.models.vit_b_16(weights=None).eval().to("cuda", torch.float16)
x = torch.randn(a.batch, 3, 224, 224, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)

T, D, M, L = 197, 768, 3072, 12
per_image = 2 * 196 * D * 768 + L * (2 * T * (4 * D * D + 2 * D * M) + 4 * T * T * D) + 2 * D * 1000


@torch.inference_mode()
def step():
    return model(x)


timed("zoo_app_vit_b16_fp16", a.seconds, step, torch_sync, flops=per_image * a.batch, batch=5,
      images_per_step=a.batch)
