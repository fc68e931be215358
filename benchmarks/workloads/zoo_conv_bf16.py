"""bf16 3x3 convolution, channels-last, N=64 C=K=256 56x56 (cuDNN), 2 N K C H W 9 FLOPs per call."""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "convolution", "framework": "torch", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "a bf16 convolution (ResNet-style 3x3 layer) on tensor cores"}

torch.backends.cudnn.benchmark = True
a = cli(__doc__, n=(int, 64, "batch"), c=(int, 256, "channels"), hw=(int, 56, "height = width"))
x = torch.randn(a.n, a.c, a.hw, a.hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
w = torch.randn(a.c, a.c, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
timed("zoo_conv_bf16", a.seconds, lambda: F.conv2d(x, w, padding=1), torch_sync,
      flops=2 * a.n * a.c * a.c * a.hw * a.hw * 9, batch=20, warm=3)
